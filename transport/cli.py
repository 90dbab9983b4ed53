"""`transport`: run a transport, give it a message, see its queue.

    transport serve --config FILE --name HUB [--listen-host H]
    transport submit --config FILE --via HUB --to MAILBOX [--to …] --message-id ID
                     [--subject S] [--body B | --body-file F] [--folder F]
    transport status --config FILE --via HUB [--json]
    transport poison --config FILE --via HUB [--json]

Exit codes: 0 ok, 1 the transport cannot be reached or failed, 2 bad input (a refused
message, an unknown transport, a bad config)."""

from __future__ import annotations

from dag_common.cli import Lazy, Script

# Each command's module is imported only when it is chosen (`dag_common.cli.Lazy`).
COMMANDS = (
    Lazy("serve", "run one transport until SIGTERM", "transport.serve_cli:build"),
    Lazy("submit", "give a transport one message", "transport.client_cli:build_submit"),
    Lazy("status", "a transport's queue and dumpsters", "transport.client_cli:build_status"),
    Lazy("poison", "a transport's poison queue", "transport.client_cli:build_poison"),
)


SCRIPT = Script("transport", COMMANDS, description=__doc__.splitlines()[0])
_parser, main, entry = SCRIPT.parser, SCRIPT.main, SCRIPT.entry


if __name__ == "__main__":
    entry()
