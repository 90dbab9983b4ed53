"""`replication-node status`: every copy of the cluster as its node reports it; the lease on
each database's active role as the cluster store holds it (holder, epoch, expiry); for a
database no node reports mounted, what mounting its best copy now would lose; and, above
the table, whether an operator paused automatic failover (`cluster pause`).

On a terminal the table is drawn by rich, in colour; anywhere else it is the plain aligned
text scripts rely on (`status_table`); `--json` for scripts that want every field.

The nodes are asked with the blocking client (`dag_common.blocking_http`), one thread per
node, all at once: a read this short has no use for aiohttp and asyncio, which would be a
third of its start (issue 48, item 15).  The cluster store is read as its engine reads it:
the embedded store's sqlite without aiohttp, etcd's gateway with it."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dag_common.blocking_http import fetch_node_status
from dag_common.cli import ExitCode, add_config, add_json, add_timeout, database_named
from dag_common.cluster_store import open_cluster_store
from dag_common.cluster_store.interface import ActiveRecord, LeaseRecord
from dag_common.config import ClusterConfig, NodeConfig, load_config, load_token
from dag_common.echo import quoted
from dag_common.errors import ConfigError, TokenRefused
from dag_common.http_client import client_ssl
from dag_common.model import CopyStatus, FailoverPause, NodeStatus
from dag_common.node_answer import AUTH_FAILED, StatusUnavailable
from replication_node.cli.status_table import plain_table, rich_table, status_row
from replication_node.cluster.mount_policy import assess_loss, best_copy, generations_at_risk

if TYPE_CHECKING:
    from rich.console import Console

STATUS_TIMEOUT = 5.0  # seconds: how long a node's status is waited for, by default


def read_statuses(
    config: ClusterConfig, token: str, *, timeout: float = STATUS_TIMEOUT
) -> dict[str, NodeStatus | StatusUnavailable]:
    """Every node's /v1/status, or what kept us from it (each asked at once, for up to
    `timeout` seconds), in the config's order."""
    context = client_ssl(config)

    def one(node: NodeConfig) -> NodeStatus | StatusUnavailable:
        try:
            return fetch_node_status(
                node.url, token, timeout=timeout, ssl_context=context, expect_node=node.name
            )
        except StatusUnavailable as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(len(config.nodes), 1)) as pool:
        return dict(zip([n.name for n in config.nodes], pool.map(one, config.nodes), strict=True))


async def fetch_statuses(
    config: ClusterConfig, token: str, *, timeout: float = STATUS_TIMEOUT
) -> dict[str, NodeStatus | StatusUnavailable]:
    """`read_statuses` for a command already in its event loop (`db activate`, `rebalance`)."""
    return await asyncio.to_thread(read_statuses, config, token, timeout=timeout)


def describe(problem: StatusUnavailable) -> str:
    """Why a node's status is missing, in the words of the status table."""
    return str(problem) if problem.status else f"unreachable: {problem}"


def token_refused(statuses: dict[str, NodeStatus | StatusUnavailable]) -> bool:
    """Whether the nodes that answered all refused the credential (and one did): 401, not
    known, or 403, known without the `monitor` role."""
    answered = [s for s in statuses.values() if not isinstance(s, StatusUnavailable) or s.status]
    return bool(answered) and all(
        isinstance(s, StatusUnavailable) and s.status in (401, 403) for s in answered
    )


def refusal(statuses: dict[str, NodeStatus | StatusUnavailable]) -> str:
    """The error line for a credential the nodes refused: a node's 403 (the role it needs,
    the credential's roles), else that the credential is not known."""
    forbidden = (
        s for s in statuses.values() if isinstance(s, StatusUnavailable) and s.status == 403
    )
    return str(next(forbidden, AUTH_FAILED))


def terminal_console() -> Console | None:
    """A rich console on stdout if stdout is a terminal rich can draw on, else None (a pipe
    gets the plain table whatever FORCE_COLOR says)."""
    if not sys.stdout.isatty():
        return None
    from rich.console import Console  # only to draw on a terminal, as `status_table` does

    console = Console()
    return console if console.is_terminal else None


def cmd_status(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    token = load_token(config)
    if args.database:
        database_named(config, args.database, args.config)
    if args.node and args.node not in {n.name for n in config.nodes}:
        raise ConfigError(f"no node {quoted(args.node)} in {args.config}")
    statuses = read_statuses(config, token, timeout=args.timeout.total_seconds())
    if token_refused(statuses):
        raise TokenRefused(refusal(statuses))
    every = []  # every copy: a database's notes need all of them, whatever is shown
    for db in config.databases:
        if args.database and db.name != args.database:
            continue
        for copy in sorted(db.copies, key=lambda c: c.activation_preference):
            st = statuses.get(copy.node)
            report = None
            if isinstance(st, NodeStatus):
                report = next((c for c in st.copies if c.database == db.name), None)
            every.append(
                (
                    db.name,
                    copy.node,
                    report,
                    describe(st) if isinstance(st, StatusUnavailable) else None,
                )
            )
    rows = [r for r in every if not args.node or r[1] == args.node]
    shown = [db.name for db in config.databases if db.name in {r[0] for r in rows}]
    view = asyncio.run(_store_view(config, [] if args.json else shown))
    pause = failover_pause(view, statuses)
    if args.json:
        # A list of copies, as it always was; the cluster's pause rides on each row, so
        # that scripts reading the rows keep working.
        paused = pause.model_dump(mode="json") if pause else None
        print(
            json.dumps(
                [
                    (
                        r.model_dump(mode="json")
                        if r
                        else {"database": d, "node": n, "error": e or "no status"}
                    )
                    | {"failover_paused": paused}
                    for d, n, r, e in rows
                ],
                indent=2,
            )
        )
    else:
        prefs = {
            (db.name, c.node): c.activation_preference for db in config.databases for c in db.copies
        }
        table = [status_row(d, n, prefs[(d, n)], r, e) for d, n, r, e in rows]
        console = terminal_console()
        say = (
            print
            if console is None
            else functools.partial(console.print, markup=False, highlight=False)
        )
        say(f"as of {datetime.now().astimezone().strftime('%Y-%m-%d %H:%M:%S %Z')}")
        if pause is not None:
            say(pause.sentence())
        if console is None:
            print("\n".join(plain_table(table)))
        else:
            console.print(rich_table(table))
        for name in shown:
            say(lease_line(name, view))
        for note in _unmounted_notes(config, [r for r in every if r[0] in shown], view):
            say(note)
    return (
        ExitCode.OK
        if all(isinstance(v, NodeStatus) for v in statuses.values())
        else ExitCode.FAILED
    )


@dataclass(frozen=True, slots=True)
class StoreView:
    """What the cluster store says of each database: its active record and live lease."""

    records: dict[str, ActiveRecord | None]
    leases: dict[str, LeaseRecord | None]
    pause: FailoverPause | None = None


def failover_pause(
    view: StoreView | None, statuses: dict[str, NodeStatus | StatusUnavailable]
) -> FailoverPause | None:
    """The pause of automatic failover: as the cluster store says it, or, when the store
    cannot be read here, as the nodes last read it (the first that reports one)."""
    if view is not None:
        return view.pause
    reported = (s.failover_paused for s in statuses.values() if isinstance(s, NodeStatus))
    return next((p for p in reported if p is not None), None)


def lease_line(database: str, view: StoreView | None) -> str:
    """One sentence on the lease of `database`'s active role."""
    if view is None:
        return f"{database}: lease unknown (the cluster store could not be read)"
    lease, record = view.leases.get(database), view.records.get(database)
    if lease is not None:
        return (
            f"{database}: lease held by {lease.node} at epoch {lease.epoch}, "
            f"expires in {lease.expires_in:.1f}s unless renewed"
        )
    if record is None:
        return f"{database}: no active chosen yet, no lease"
    return (
        f"{database}: no live lease: {record.node} (active at epoch {record.epoch}) "
        "acknowledges no write until it takes one"
    )


def _unmounted_notes(config: ClusterConfig, rows: list[Any], view: StoreView | None) -> list[str]:
    """For each database no node reports mounted: what mounting its best copy now would
    lose, counting the open log (the same computation as an activation)."""
    reports: dict[str, list[Any]] = {}
    for db, _, report, _ in rows:
        reports.setdefault(db, []).append(report)
    lost = [
        db
        for db, rs in reports.items()
        if not any(r is not None and r.status is CopyStatus.MOUNTED for r in rs)
    ]
    if not lost:
        return []
    records = view.records if view is not None else {}
    notes = []
    for db in lost:
        known = [r for r in reports[db] if r is not None]
        record = records.get(db)
        at_risk = generations_at_risk(
            last_log_generated=record.last_log_generated if record else 0,
            open_generation=record.open_generation if record else 0,
            reports=known,
        )
        chosen, _ = best_copy(known)
        if chosen is None:
            notes.append(f"{db}: no copy is mounted, and no passive copy can be")
            continue
        copy = next(r for r in known if r.node == chosen)
        loss = assess_loss(
            at_risk=at_risk,
            last_log_inspected=copy.last_log_inspected,
            dial=config.mount_dial_of(config.database(db)),
            node=chosen,
            active_node=record.node if record else "the active",
        )
        unknown = "" if record else " (the cluster store could not be read)"
        notes.append(f"{db}: no copy is mounted; mounting {chosen} now: {loss.sentence}{unknown}")
    return notes


async def _store_view(config: ClusterConfig, databases: list[str]) -> StoreView | None:
    """The cluster store's records and leases of `databases`; None if it cannot be read."""
    try:
        store = open_cluster_store(config)
    except Exception:
        return None
    try:
        return StoreView(
            records={db: await store.active(db) for db in databases},
            leases={db: await store.lease(db) for db in databases},
            pause=await store.failover_pause(),
        )
    except Exception:
        return None
    finally:
        await store.aclose()


def register(status: argparse.ArgumentParser) -> None:
    """`status`."""
    add_config(status)
    status.add_argument("--database", default=None, help="only this database's copies")
    status.add_argument("--node", default=None, help="only the copies on this node")
    add_json(status, "print every copy's status report as JSON instead of the table")
    add_timeout(status, f"{STATUS_TIMEOUT:g}s", waits="each node's status")
    status.set_defaults(func=cmd_status)
