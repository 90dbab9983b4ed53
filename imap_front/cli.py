"""`python -m imap_front`: run an IMAP front, make a user's password hash.

    python -m imap_front serve --config FILE [--name NAME] [--port N] [--credential-file F]
    python -m imap_front passwd            (the password read from stdin; its hash printed)

Exit codes: 0 ok, 1 failed, 2 bad input (a bad config or users file)."""

from __future__ import annotations

from dag_common.cli import Lazy, Script

COMMANDS = (
    Lazy("serve", "run one IMAP front until SIGTERM", "imap_front.serve_cli:build"),
    Lazy(
        "passwd",
        "an argon2id hash of a password read from stdin",
        "imap_front.serve_cli:build_passwd",
    ),
)


SCRIPT = Script("imap_front", COMMANDS, description=__doc__.splitlines()[0])
_parser, main, entry = SCRIPT.parser, SCRIPT.main, SCRIPT.entry


if __name__ == "__main__":
    entry()
