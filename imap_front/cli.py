"""`python -m imap_front`: run an IMAP front, make a user's password hash.

    python -m imap_front serve --config FILE [--name NAME] [--port N] [--credential-file F]
    python -m imap_front passwd            (the password read from stdin; its hash printed)

Exit codes: 0 ok, 1 failed, 2 bad input (a bad config or users file)."""

from __future__ import annotations

import argparse
import sys

from dag_common.cli import Lazy, add_commands, add_version, exit_now, run

COMMANDS = (
    Lazy("serve", "run one IMAP front until SIGTERM", "imap_front.serve_cli:build"),
    Lazy(
        "passwd",
        "an argon2id hash of a password read from stdin",
        "imap_front.serve_cli:build_passwd",
    ),
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="imap_front", description=__doc__.splitlines()[0])
    add_version(parser)
    add_commands(parser, "command", COMMANDS)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(_parser(), argv)


def entry() -> None:
    exit_now(lambda: main(sys.argv[1:]))


if __name__ == "__main__":
    entry()
