"""`replication-node log dump` and `db header`: a log file's header, records and checksum
verdicts, and a database file's header, read from the files themselves (no node, no config).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dag_common.cli import ExitCode, add_json
from dag_common.errors import BadInput
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


def build_log_dump(dump: argparse.ArgumentParser) -> None:
    """`log dump`."""
    dump.add_argument("file", help="a log file (E00.log, or a closed E<generation>.log)")
    add_json(dump, "print the header, records and verdicts as JSON")
    dump.add_argument("--records", action="store_true", help="list every record")
    dump.set_defaults(func=cmd_log_dump)


def build_db_header(header: argparse.ArgumentParser) -> None:
    """`db header`."""
    header.add_argument("file", help="a database file (<database>.sqlite in a copy's directory)")
    add_json(header, "print the header as JSON")
    header.set_defaults(func=cmd_db_header)
