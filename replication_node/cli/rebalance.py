"""`replication-node db rebalance`: switch each database's active back to its most preferred
healthy copy, one database at a time, each switchover's answer awaited before the next.

The plan is `replication_node.rebalance.plan_rebalance` over every node's status; this module
only fetches the statuses, asks the target nodes for the switchovers and says what happened:
one line per database, then a summary.  `--dry-run` prints the plan and changes nothing.
Exit codes: 0 every planned switchover succeeded (skips are not failures), 1 one failed (the
others are still tried), 2 bad input (an unknown database, a refused token)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dag_common.cli import ExitCode, add_config, add_timeout, database_named, error
from dag_common.command_calls import CallFailed, Change
from dag_common.config import ClusterConfig, load_config, load_token
from dag_common.errors import TokenRefused
from dag_common.model import NodeStatus
from dag_common.node_status import AUTH_FAILED
from replication_node.admin_api import SwitchoverAnswer
from replication_node.cli.admin import DATABASE, admin_call, status_check
from replication_node.cli.status import describe, fetch_statuses, refusal, token_refused
from replication_node.rebalance import Move, MoveKind, NodeView, plan_rebalance


async def _plan(config: ClusterConfig, database: str | None) -> list[Move]:
    statuses = await fetch_statuses(config, load_token(config))
    if token_refused(statuses):
        raise TokenRefused(refusal(statuses))
    views: dict[str, NodeView] = {
        n: s if isinstance(s, NodeStatus) else describe(s) for n, s in statuses.items()
    }
    chosen = [db for db in config.databases if database in (None, db.name)]
    return plan_rebalance(chosen, views)


class Done(BaseModel):
    """What `db rebalance --json` says of one database: the planned move and how it went."""

    model_config = ConfigDict(populate_by_name=True)

    database: str
    action: str
    source: str | None = Field(alias="from")
    to: str | None
    reason: str
    result: SwitchoverAnswer | None = None  # only when it was switched over
    error: str | None = None  # only when the switchover failed


def _switched(move: Move, answer: SwitchoverAnswer) -> str:
    return (
        f"{move.database}: switched over from {answer.previous_node} to {answer.node} at "
        f"epoch {answer.epoch}; {answer.lost_logs} log(s) lost"
    )


def _summary(moves: list[Move], failed: int, *, dry_run: bool) -> str:
    switches = sum(m.kind is MoveKind.SWITCH for m in moves)
    skipped = sum(m.kind is MoveKind.SKIP for m in moves)
    if not switches:
        if not skipped:
            return "nothing to do: every database is on its preferred copy"
        return f"nothing to switch over; {skipped} database(s) skipped"
    if dry_run:
        return f"{switches} switchover(s) planned, {skipped} skipped (dry run: nothing was done)"
    return f"{switches - failed} switched over, {failed} failed, {skipped} skipped"


def cmd_rebalance(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.database:
        database_named(config, args.database, args.config)
    moves = asyncio.run(_plan(config, args.database))
    records: list[Done] = []
    failed = 0
    for move in moves:
        record = Done(
            database=move.database,
            action=str(move.kind),
            source=move.source,
            to=move.target,
            reason=move.reason,
        )
        records.append(record)
        if move.kind is not MoveKind.SWITCH or args.dry_run:
            if not args.json:
                print(move.line(dry_run=args.dry_run), flush=True)
            continue
        assert move.target is not None
        try:
            code, answer = asyncio.run(
                admin_call(
                    config,
                    args.timeout.total_seconds(),
                    move.target,
                    f"/v1/databases/{move.database}/switchover",
                    {"target": move.target},
                    Change(
                        f"the switchover of {move.database} to {move.target}",
                        status_check(move.database),
                    ),
                )
            )
        except CallFailed as exc:  # no answer: the others are still tried
            code, answer = None, {"error": str(exc)}
        if code == 401:
            raise TokenRefused(AUTH_FAILED)
        why = answer.get("error") or f"HTTP {code}"
        if code is not None and code < 300:
            try:
                record.result = SwitchoverAnswer.model_validate(answer)
            except ValidationError as exc:
                why = f"its answer is malformed ({exc.error_count()} errors)"
            else:
                if not args.json:
                    print(_switched(move, record.result), flush=True)
                continue
        failed += 1
        record.error = why
        error(f"{move.database}: switchover from {move.source} to {move.target} failed: {why}")
        sys.stderr.flush()
    if args.json:
        rows = [r.model_dump(mode="json", by_alias=True, exclude_unset=True) for r in records]
        print(json.dumps(rows, indent=2))
    else:
        print(_summary(moves, failed, dry_run=args.dry_run))
    return ExitCode.FAILED if failed else ExitCode.OK


def build_rebalance(p: argparse.ArgumentParser) -> None:
    """`db rebalance`."""
    p.add_argument("--database", default=None, help=f"only this database ({DATABASE})")
    p.add_argument(
        "--dry-run", action="store_true", help="print the plan (one line per database) only"
    )
    add_config(p)
    add_timeout(p, "2m", waits="each switchover's answer")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the plan and each switchover's answer as JSON",
    )
    p.set_defaults(func=cmd_rebalance)
