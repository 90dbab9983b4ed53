"""`replication-node`: serve a node, run a local cluster, show status, inspect files.

Exit codes: 0 ok, 1 operation failed, 2 bad input or config.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import NoReturn

from dag_common.cli import add_json, add_version, exit_now, run
from dag_common.errors import BadInput
from dag_common.model import ExitCode
from replication_node.cli import admin as cli_admin
from replication_node.cli import audit as cli_audit
from replication_node.cli import backup as cli_backup
from replication_node.cli import mailbox as cli_mailbox
from replication_node.cli import pause as cli_pause
from replication_node.cli import rebalance as cli_rebalance
from replication_node.cli import serve as cli_serve
from replication_node.cli import status as cli_status
from replication_node.errors import DatabaseError, LogFormatError
from replication_node.log import tools
from replication_node.storage import tools as db_tools


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=2, default=str))


def cmd_log_dump(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        dump = tools.dump_log(path)
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    except LogFormatError as exc:
        if args.json:
            _print_json({"file": str(path), "verdict": "damaged", "problems": [str(exc)]})
        else:
            print(f"Log file: {path}\n  Verdict: DAMAGED\n    problem: {exc}")
        return ExitCode.FAILED
    if args.json:
        _print_json(dump)
    else:
        print(tools.render_log_dump(dump, records=args.records))
    return ExitCode.OK if dump["verdict"] == "ok" else ExitCode.FAILED


def cmd_db_header(args: argparse.Namespace) -> int:
    try:
        info = db_tools.db_header(Path(args.file))
    except DatabaseError as exc:
        raise BadInput(str(exc)) from None
    if args.json:
        _print_json(info)
    else:
        print(db_tools.render_db_header(info))
    return ExitCode.OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="replication-node", description=__doc__)
    add_version(parser)
    sub = parser.add_subparsers(dest="command", required=True)

    log = sub.add_parser("log", help="log file tools").add_subparsers(dest="log_cmd", required=True)
    dump = log.add_parser("dump", help="header, records and checksum verdicts of a log file")
    dump.add_argument("file", help="a log file (E00.log, or a closed E<generation>.log)")
    add_json(dump, "print the header, records and verdicts as JSON")
    dump.add_argument("--records", action="store_true", help="list every record")
    dump.set_defaults(func=cmd_log_dump)

    db = sub.add_parser("db", help="database file tools").add_subparsers(
        dest="db_cmd", required=True
    )
    header = db.add_parser("header", help="the database header (state, checkpoint, waypoint)")
    header.add_argument("file", help="a database file (<database>.sqlite in a copy's directory)")
    add_json(header, "print the header as JSON")
    header.set_defaults(func=cmd_db_header)
    cli_admin.register_db(db)
    cli_backup.register_backup(db)
    cli_rebalance.register_db(db)
    cli_pause.register(cli_serve.register(sub))
    cli_mailbox.register(sub)
    cli_status.register(sub)
    cli_audit.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), argv)


def entry() -> NoReturn:
    """The `replication-node` console script."""
    exit_now(main)


if __name__ == "__main__":
    entry()
