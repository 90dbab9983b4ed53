"""Moving the active role: activation after the active is lost (the seeds' failover), and
switchover from a running active (the seeds' scheduled outage, which loses nothing).

The policy is pure:

- `generations_at_risk` gathers what is known of the lost active's stream: the highest
  generation holding acknowledged commits, from the cluster store (LastLogGenerated and the
  open generation the active announced before acknowledging its first commit) and from every
  reachable copy's report (what it last heard from the active), and whether that generation
  is the open log E00.log, with the count of its acknowledged commits where a copy heard it.
- `assess_loss` counts the logs a copy would lose (those generations above its
  LastLogInspected, the open log included once it holds an acknowledged commit; an open log
  holding only its header holds nothing to lose), checks them against AutoDatabaseMountDial
  (Lossless 0, GoodAvailability 3, BestAvailability 6; an operator may override the dial for
  one call) and says in one sentence exactly what is lost.
- `mount_decision`: may this copy be mounted at all (the old active gone, the copy fit), and
  then `assess_loss`.

Invariant: a copy never mounts over more lost logs than the dial allows, counting the open
log; under Lossless no copy mounts over an acknowledged write.  Under Lossless with the old
active's node unreachable, nothing mounts: when that node returns it is still the active in
the cluster store, its crash recovery keeps every acknowledged record of its E00.log, and its
copies catch up from it (README: "Lossless").

`activate_copy` does it: checks the old active is really gone and the copy is fit, moves the
active role in the cluster store with a compare-and-set on the epoch (two activations can
never both win), and asks the database's nodes to reconcile at once instead of at their next
config refresh.  A running active is not taken over by an activation.

`switchover_copy` moves the role away from a running active: the active stops taking writes
and closes its open log (generation G); once the target copy has replayed G, the role moves
(compare-and-set), every node reconciles, the old active dismounts cleanly and follows the new
one as a passive copy.  If the target does not catch up in time, or the role changed
meanwhile, the active takes writes again and nothing else changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp

from dag_common.clock import Clock
from dag_common.config import ClusterConfig
from dag_common.model import (
    AutoDatabaseMountDial,
    CopyRole,
    CopyStatus,
    CopyStatusReport,
    NodeStatus,
)
from dag_common.node_status import StatusUnavailable, fetch_node_status, post_admin
from replication_node.cluster.store import ActiveRecord, ClusterStore
from replication_node.errors import BadRequest, Conflict, MountRefused, NotFound

logger = logging.getLogger(__name__)

# A copy in any other state has no consistent database to mount (seeding, failed) or was
# stopped by an operator for a reason (suspended): resume it first.
MOUNTABLE = frozenset({CopyStatus.HEALTHY, CopyStatus.DISCONNECTED_AND_HEALTHY})


@dataclass(frozen=True, slots=True)
class OpenLog:
    """The lost active's open log E00.log, known to hold acknowledged commits."""

    generation: int
    commits: int | None  # at least this many acknowledged commits (None: count unknown)


@dataclass(frozen=True, slots=True)
class AtRisk:
    """The highest generation known to hold acknowledged commits (closed or open), and the
    open log when that generation is it."""

    generated: int
    open_log: OpenLog | None = None


@dataclass(frozen=True, slots=True)
class LossAssessment:
    """The logs a copy would lose by mounting, within the dial or not, in one sentence."""

    allowed: bool
    lost_logs: int
    lost_open_log: bool
    lost_commits: int | None  # at least this many acknowledged commits of the open log
    sentence: str


@dataclass(frozen=True, slots=True)
class MountDecision:
    """Whether a copy may be mounted, with the logs it would lose and why."""

    allowed: bool
    lost_logs: int
    reason: str
    lost_open_log: bool = False
    lost_commits: int | None = None


def generations_at_risk(
    *, last_log_generated: int, open_generation: int, reports: Iterable[CopyStatusReport]
) -> AtRisk:
    """What is known to hold acknowledged commits, from the cluster store's record (its
    LastLogGenerated and announced open generation) and the copies' reports.

    A report whose `open_commits` > 0 names the open log as its `last_log_generated` (and so
    the generation below it as closed); the store's open generation counts as the open log
    only while no one knows it closed.  Counts heard by copies are lower bounds: the largest
    heard for that generation is taken."""
    closed = last_log_generated
    heard: dict[int, int | None] = {}
    if open_generation > 0:
        heard[open_generation] = None
    for r in reports:
        if r.open_commits > 0:
            closed = max(closed, r.last_log_generated - 1)
            heard[r.last_log_generated] = max(heard.get(r.last_log_generated) or 0, r.open_commits)
        else:
            closed = max(closed, r.last_log_generated)
    newest = max(heard, default=0)
    if newest > closed:
        return AtRisk(newest, OpenLog(newest, heard[newest]))
    return AtRisk(closed)


def assess_loss(
    *,
    at_risk: AtRisk,
    last_log_inspected: int,
    dial: AutoDatabaseMountDial,
    node: str,
    active_node: str,
) -> LossAssessment:
    """The logs the copy on `node` loses by mounting now: every generation holding
    acknowledged commits above its LastLogInspected, the open log included."""
    inspected = last_log_inspected
    lost = max(0, at_risk.generated - inspected)
    allowed = lost <= dial.max_lost_logs
    open_log = at_risk.open_log
    open_lost = lost > 0 and open_log is not None and open_log.generation > inspected
    commits = open_log.commits if open_lost and open_log is not None else None
    if lost == 0:
        what = (
            f"0 log(s) lost ({node} has inspected through generation {inspected}; the highest "
            f"holding acknowledged commits is {at_risk.generated})"
        )
    else:
        first, last = inspected + 1, at_risk.generated
        span = f"generation {last}" if first == last else f"generations {first}-{last}"
        if open_lost:
            count = (
                f"at least {commits} acknowledged commit(s)"
                if commits
                else f"acknowledged commits (count unknown: {active_node} is unreachable)"
            )
            being = "the open log" if first == last else f"{last} being the open log"
            span += f", {being} E00.log with {count}"
        what = f"{lost} log(s) lost: {span} (inspected through {inspected} on {node})"
    if allowed:
        verdict = f"within the {dial.max_lost_logs} {dial} allows"
    else:
        verdict = (
            f"more than {dial} allows ({dial.max_lost_logs}); the copy stays passive until "
            f"{active_node} returns with its logs, unless an operator accepts the loss "
            "(--mount-dial)"
        )
    return LossAssessment(allowed, lost, open_lost, commits, f"{what}: {verdict}")


def mount_decision(
    *,
    node: str,
    copy: CopyStatusReport | None,
    at_risk: AtRisk,
    dial: AutoDatabaseMountDial,
    active_reachable: bool,
    active_node: str,
) -> MountDecision:
    """May the copy on `node` become active?  Refusals change nothing."""
    if active_reachable:
        return MountDecision(
            False, 0, f"the active copy on {active_node} is running; move it with a switchover"
        )
    if copy is None:
        return MountDecision(False, 0, f"the copy on {node} cannot be reached")
    if copy.role is CopyRole.ACTIVE:
        return MountDecision(False, 0, f"the copy on {node} is already active")
    if copy.status not in MOUNTABLE:
        why = f": {copy.error}" if copy.error else ""
        return MountDecision(False, 0, f"the copy on {node} is {copy.status}{why}")
    loss = assess_loss(
        at_risk=at_risk,
        last_log_inspected=copy.last_log_inspected,
        dial=dial,
        node=node,
        active_node=active_node,
    )
    return MountDecision(
        loss.allowed, loss.lost_logs, loss.sentence, loss.lost_open_log, loss.lost_commits
    )


def best_copy(copies: list[CopyStatusReport]) -> tuple[str | None, str]:
    """Which passive copy an automatic failover mounts: of the copies that can be mounted,
    the one that has inspected the most (fewest logs lost), then the lowest activation
    preference.  The mount dial is checked on it by `mount_decision` afterwards."""
    eligible = [c for c in copies if c.role is CopyRole.PASSIVE and c.status in MOUNTABLE]
    if not eligible:
        return None, "no passive copy is Healthy or DisconnectedAndHealthy"
    best = min(eligible, key=lambda c: (-c.last_log_inspected, c.activation_preference))
    return best.node, (
        f"{best.node} has inspected through generation {best.last_log_inspected} "
        f"(activation preference {best.activation_preference}) of "
        f"{', '.join(c.node for c in eligible)}"
    )


async def node_status(session: aiohttp.ClientSession, url: str, token: str) -> NodeStatus | None:
    """The node's status, or None if it cannot be had (it counts as unreachable)."""
    try:
        return await fetch_node_status(session, url, token)
    except StatusUnavailable:
        return None


def copy_in(status: NodeStatus | None, database: str) -> CopyStatusReport | None:
    if status is None:
        return None
    return next((c for c in status.copies if c.database == database), None)


async def _active_elsewhere(
    config: ClusterConfig, cluster_store: ClusterStore, database: str, node: str
) -> ActiveRecord:
    """The active record of `database`, checked to be on another node than `node`, which
    must hold a copy."""
    try:
        db = config.database(database)
    except KeyError:
        raise NotFound(f"no database {database!r}") from None
    if db.copy_on(node) is None:
        raise BadRequest(f"{database} has no copy on {node!r}")
    record = await cluster_store.active(database)
    if record is None:
        raise Conflict(f"{database} has never been mounted")
    if record.node == node:
        raise Conflict(f"the copy on {node} is already active")
    return record


async def activate_copy(
    *,
    config: ClusterConfig,
    cluster_store: ClusterStore,
    session: aiohttp.ClientSession,
    token: str,
    database: str,
    node: str,
    dial_override: AutoDatabaseMountDial | None = None,
) -> dict[str, Any]:
    """Make the copy of `database` on `node` active; Conflict (nothing changed) if it may not."""
    record = await _active_elsewhere(config, cluster_store, database, node)
    reports = await copy_reports(session, config, token, database)
    old_copy, copy = reports[record.node], reports[node]
    last_logs = ""
    if last_logs_to_copy(old_copy, copy):
        # Attempt Copy Last Logs: the old active's node answers, its copy is not mounted
        # (failed, dismounted, or back after a crash): whatever logs it still has, the
        # closed ones and the open one, are copied before the loss is counted.
        last_logs = await _copy_last_logs(session, config.node(node).url, token, database)
        reports = await copy_reports(session, config, token, database)
        old_copy, copy = reports[record.node], reports[node]
    # The store's LastLogGenerated is published just after each roll and may miss the last
    # one; any copy that was told of a later generation by the active's notifications knows
    # better.  The higher figure counts: lost logs are never underestimated from what is known.
    # The store's open generation was written before the open log's first acknowledgement.
    at_risk = generations_at_risk(
        last_log_generated=record.last_log_generated,
        open_generation=record.open_generation,
        reports=[r for r in reports.values() if r is not None],
    )
    dial = dial_override or config.mount_dial_of(config.database(database))
    decision = mount_decision(
        node=node,
        copy=copy,
        at_risk=at_risk,
        dial=dial,
        active_reachable=old_copy is not None and old_copy.status is CopyStatus.MOUNTED,
        active_node=record.node,
    )
    reason = f"{last_logs}; {decision.reason}" if last_logs else decision.reason
    if not decision.allowed:
        message = f"cannot activate {database} on {node}: {reason}"
        if decision.lost_logs:
            raise MountRefused(
                message,
                {
                    "lost_logs": decision.lost_logs,
                    "lost_open_log": decision.lost_open_log,
                    "lost_commits_at_least": decision.lost_commits,
                    "mount_dial": str(dial),
                },
            )
        raise Conflict(message)
    assert copy is not None  # mount_decision refuses an unreachable copy
    # The new stream forks from the old one after the last generation the copy inspected:
    # it mounts with exactly those, and writes its own from the next one on.
    won = await cluster_store.set_active(
        database, node, expected_epoch=record.epoch, start_generation=copy.last_log_inspected + 1
    )
    if won is None:
        raise Conflict(f"the active copy of {database} changed meanwhile; nothing was done")
    logger.warning(
        "%s: activated on %s at epoch %d (was %s): %s",
        database,
        node,
        won.epoch,
        record.node,
        reason,
    )

    await _reconcile_all(session, config, database, token)
    return {
        "database": database,
        "node": node,
        "epoch": won.epoch,
        "previous_node": record.node,
        "lost_logs": decision.lost_logs,
        "lost_open_log": decision.lost_open_log,
        "lost_commits_at_least": decision.lost_commits,
        "last_logs": last_logs or None,
        "reason": reason,
    }


def last_logs_to_copy(old: CopyStatusReport | None, copy: CopyStatusReport | None) -> bool:
    """Whether the copy taking over should first copy the old active's last logs: the old
    active's node answers, its copy is not mounted, and the copy could be mounted."""
    return (
        old is not None
        and old.role is CopyRole.ACTIVE
        and old.status is not CopyStatus.MOUNTED
        and copy is not None
        and copy.role is CopyRole.PASSIVE
        and copy.status in MOUNTABLE
    )


async def copy_reports(
    session: aiohttp.ClientSession, config: ClusterConfig, token: str, database: str
) -> dict[str, CopyStatusReport | None]:
    """Every copy of `database` as its node reports it now (None: no answer)."""
    nodes = [c.node for c in config.database(database).copies]
    statuses = await asyncio.gather(
        *(node_status(session, config.node(n).url, token) for n in nodes)
    )
    return {n: copy_in(s, database) for n, s in zip(nodes, statuses, strict=True)}


async def _copy_last_logs(
    session: aiohttp.ClientSession, url: str, token: str, database: str
) -> str:
    """Ask the node of the copy taking over to copy the old active's last logs; what came
    of it, in a sentence (a failure is said, and the loss is then counted without them)."""
    status, answer = await post_admin(
        session, f"{url}/v1/databases/{database}/copy-last-logs", token, timeout=45
    )
    if status != 200:
        return f"copying the last logs failed (HTTP {status}: {answer.get('error')})"
    kept = answer.get("open_log")
    what = (
        f"last logs copied from {answer.get('from')}: closed generations through "
        f"{answer.get('closed_through')}"
    )
    if kept:
        return what + f", and the open log E00.log as generation {kept['generation']}"
    return what + " (its open log held no transaction)"


async def _post(
    session: aiohttp.ClientSession, url: str, token: str, body: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """POST an admin call; its JSON answer, or None if the node cannot be reached or refuses
    (said in the log)."""
    code, answer = await post_admin(session, url, token, body)
    if code >= 300:
        logger.warning("POST %s: HTTP %d %s", url, code, str(answer.get("error"))[:300])
        return None
    return answer


async def _reconcile_all(
    session: aiohttp.ClientSession, config: ClusterConfig, database: str, token: str
) -> None:
    """Ask every node of `database` to re-read who is active now; a node that cannot be told
    now learns it at its next config refresh."""
    urls = [config.node(c.node).url for c in config.database(database).copies]
    await asyncio.gather(*(_post(session, f"{url}/v1/reconcile", token) for url in urls))


async def switchover_copy(
    *,
    config: ClusterConfig,
    cluster_store: ClusterStore,
    session: aiohttp.ClientSession,
    token: str,
    clock: Clock,
    database: str,
    node: str,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Move the active role of `database` to the copy on `node` without losing a log."""
    record = await _active_elsewhere(config, cluster_store, database, node)

    async def target_copy() -> CopyStatusReport | None:
        return copy_in(await node_status(session, config.node(node).url, token), database)

    copy = await target_copy()
    if copy is None or copy.role is not CopyRole.PASSIVE or copy.status is not CopyStatus.HEALTHY:
        state = f"{copy.role} {copy.status}" if copy else "unreachable"
        raise Conflict(f"cannot switch {database} over to {node}: its copy is {state}")
    active_url = f"{config.node(record.node).url}/v1/databases/{database}"
    quiesced = await _post(session, f"{active_url}/quiesce", token, {"target": node})
    if quiesced is None:
        raise Conflict(
            f"the active copy on {record.node} did not stop its writes; if it is lost, activate"
        )
    generation = int(quiesced["last_log_generated"])
    try:
        deadline = clock.monotonic() + timeout
        while True:
            copy = await target_copy()
            if copy is not None and copy.last_log_replayed >= generation:
                break
            if clock.monotonic() > deadline or (copy is not None and copy.status not in MOUNTABLE):
                where = f"{copy.status}, replayed {copy.last_log_replayed}" if copy else "gone"
                raise Conflict(
                    f"switchover of {database} abandoned: {node} did not replay generation "
                    f"{generation} ({where}); {record.node} takes writes again"
                )
            await clock.sleep(0.1)
        # The target replayed every generation the old active closed: the new epoch's
        # stream goes on from the next one, and no write is lost.
        won = await cluster_store.set_active(
            database, node, expected_epoch=record.epoch, start_generation=generation + 1
        )
        if won is None:
            raise Conflict(f"the active copy of {database} changed meanwhile; nothing was done")
    except BaseException:
        await _post(session, f"{active_url}/unquiesce", token)
        raise
    logger.info(
        "%s: switched over from %s to %s at generation %d (epoch %d)",
        database,
        record.node,
        node,
        generation,
        won.epoch,
    )
    await _reconcile_all(session, config, database, token)
    return {
        "database": database,
        "node": node,
        "epoch": won.epoch,
        "previous_node": record.node,
        "last_log_generated": generation,
        "lost_logs": 0,
        "lost_open_log": False,
    }
