"""`transport`: run a transport, give it a message, see its queue.

    transport serve --config FILE --name HUB [--listen-host H]
    transport submit --config FILE --via HUB --to MAILBOX [--to …] --message-id ID
                     [--subject S] [--body B | --body-file F] [--folder F]
    transport status --config FILE --via HUB [--json]
    transport poison --config FILE --via HUB [--json]

Exit codes: 0 ok, 1 the transport cannot be reached or failed, 2 bad input (a refused
message, an unknown transport, a bad config)."""

from __future__ import annotations

import argparse
import sys

from dag_common.cli import Lazy, add_commands, add_version, exit_now, run

# Each command's module is imported only when it is chosen (`dag_common.cli.Lazy`).
COMMANDS = (
    Lazy("serve", "run one transport until SIGTERM", "transport.serve_cli:build"),
    Lazy("submit", "give a transport one message", "transport.client_cli:build_submit"),
    Lazy("status", "a transport's queue and dumpsters", "transport.client_cli:build_status"),
    Lazy("poison", "a transport's poison queue", "transport.client_cli:build_poison"),
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="transport", description=__doc__.splitlines()[0])
    add_version(parser)
    add_commands(parser, "command", COMMANDS)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(_parser(), argv)


def entry() -> None:
    exit_now(lambda: main(sys.argv[1:]))


if __name__ == "__main__":
    entry()
