"""`replication-node db backup` and `db restore`.

`db backup DB --from NODE --to DIR [--incremental]` asks NODE (the node hosting the copy to
back up; DIR is a directory on its host) and returns when the backup is complete or failed:
one line (kind, generations, bytes, seconds), `--json` the manifest.  Exit 0 done, 1 failed
or refused by the cluster's state (a copy not Healthy/Mounted, a backup already running,
the active not mounted), 2 bad input (an unknown database or node, a destination not
empty, an incremental without a full backup or with circular logging on).

`db restore DIR [DIR …] --to DIR [--until-generation N]` runs here, on the sets' host: a full
backup then incrementals in order become `<database>.sqlite` in Clean Shutdown.  Exit 0
restored, 2 a set that is incomplete, damaged or out of order (the file and reason named)
or a destination not empty, 1 a failure while writing (a full disk)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from dag_common.cli import ExitCode, add_config, add_json, add_timeout, database_named
from dag_common.clock import SystemClock
from dag_common.command_calls import Calls, Change
from dag_common.config import ClusterConfig, load_config
from dag_common.echo import quoted
from dag_common.errors import BadInput, CommandFailed, TokenRefused, failure
from dag_common.json_object import JsonObject
from dag_common.node_status import AUTH_FAILED
from replication_node.backup.backup import BackupAnswer
from replication_node.backup.manifest import MANIFEST_NAME
from replication_node.backup.restore import restore
from replication_node.cli.admin import DATABASE, exit_code
from replication_node.errors import BackupError

# A backup is answered when it is complete: as long as copying the database file takes.
BACKUP_TIMEOUT = "24h"


async def _post(
    config: ClusterConfig, timeout: float, database: str, *, node: str, to: str, incremental: bool
) -> tuple[int, JsonObject]:
    """Ask `node` to back its copy of `database` up to `to` on its host: (status, answer)."""
    change = Change(
        f"the backup of {database}\\{node} to {to}",
        f"{to} on {node}'s host holds {MANIFEST_NAME} once it is complete",
    )
    path = f"/v1/databases/{database}/backup"
    body = {"from": node, "to": to, "incremental": incremental}
    async with Calls(config, timeout=timeout) as calls:
        return await calls.post(calls.node(node), path, body, change=change)


def backup_summary(answer: BackupAnswer) -> str:
    """One line saying what a backup holds, from its manifest."""
    first, last = answer.after_generation + 1, answer.last_generation
    logs = f"generations {first}-{last}" if last >= first else "no log generations"
    held = (
        f"the database file (waypoint {answer.after_generation}) and "
        if answer.database_file
        else ""
    )
    return (
        f"{answer.database}: {answer.kind} backup from {answer.source_node} "
        f"({answer.source_role}): {held}{logs}; {answer.total_bytes} bytes in "
        f"{answer.seconds:.1f}s (id {answer.backup_id})"
    )


def cmd_backup(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    db = database_named(config, args.database, args.config)
    if db.copy_on(args.from_node) is None:
        raise BadInput(f"{db.name} has no copy on {quoted(args.from_node)}")
    code, answer = asyncio.run(_post(
        config, args.timeout.total_seconds(), db.name,
        node=args.from_node, to=args.to, incremental=args.incremental,
    ))  # fmt: skip
    result = exit_code(code)
    if result is ExitCode.OK:
        if args.json:
            print(json.dumps(answer, indent=2))
        else:
            print(backup_summary(BackupAnswer.model_validate(answer, strict=False)))
        return result
    if code == 401:
        raise TokenRefused(AUTH_FAILED)
    raise failure(result, answer.get("error") or f"HTTP {code}")


def cmd_restore(args: argparse.Namespace) -> int:
    try:
        result = restore(
            [Path(d) for d in args.dirs],
            to=Path(args.to),
            clock=SystemClock(),
            until_generation=args.until_generation,
        )
    except BackupError as exc:
        raise BadInput(str(exc)) from None
    except OSError as exc:
        raise CommandFailed(f"restore failed writing {args.to}: {exc}") from None
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        h = result.header
        print(
            f"{result.database}: restored to {result.path} through generation {h.waypoint} "
            f"({h.state}); {result.sets} set(s), {result.generations} generation(s) replayed, "
            f"{result.bytes} bytes verified in {result.seconds:.1f}s"
        )
    return ExitCode.OK


def build_backup(b: argparse.ArgumentParser) -> None:
    """`db backup`."""
    b.add_argument("database", help=DATABASE)
    b.add_argument(
        "--from", dest="from_node", required=True, help="the node of the copy to back up"
    )
    b.add_argument("--to", required=True, help="an empty or new directory on that node's host")
    b.add_argument(
        "--incremental",
        action="store_true",
        help="only the logs since the last backup (needs a full backup, circular_logging off)",
    )
    add_config(b)
    add_timeout(b, BACKUP_TIMEOUT, waits="the backup to complete (it is answered then)")
    add_json(b, "print the backup's manifest as JSON")
    b.set_defaults(func=cmd_backup)


def build_restore(r: argparse.ArgumentParser) -> None:
    """`db restore`."""
    r.add_argument("dirs", nargs="+", metavar="DIR", help="a full backup set, then incrementals")
    r.add_argument("--to", required=True, help="an empty or new directory for <database>.sqlite")
    r.add_argument(
        "--until-generation",
        type=int,
        default=None,
        metavar="N",
        help="replay generations through N only (default: all the sets hold)",
    )
    r.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="accepted as by every command; a restore needs no cluster (it runs on the files)",
    )
    add_json(r, "print what was restored as JSON")
    r.set_defaults(func=cmd_restore)
