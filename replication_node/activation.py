"""Moving the active role: activation after the active is lost (the seeds' failover), and
switchover from a running active (the seeds' scheduled outage, which loses nothing).

`mount_decision` is the policy (pure): may this copy be mounted, and how many logs would
be lost?  The lost logs are the closed generations the lost active announced
(LastLogGenerated in the cluster store) that the copy has not inspected; the copy replays
everything it inspected when it mounts.  AutoDatabaseMountDial bounds them: Lossless 0,
GoodAvailability 3, BestAvailability 6.  An operator may override the dial for one call.

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
from dataclasses import dataclass
from typing import Any

import aiohttp

from dag_common.auth import bearer
from dag_common.clock import Clock
from dag_common.config import ClusterConfig
from dag_common.model import (
    AutoDatabaseMountDial,
    CopyRole,
    CopyStatus,
    CopyStatusReport,
    NodeStatus,
)
from replication_node.cluster_store import ActiveRecord, ClusterStore
from replication_node.errors import BadRequest, Conflict, NotFound

logger = logging.getLogger(__name__)

# A copy in any other state has no consistent database to mount (seeding, failed) or was
# stopped by an operator for a reason (suspended): resume it first.
MOUNTABLE = frozenset({CopyStatus.HEALTHY, CopyStatus.DISCONNECTED_AND_HEALTHY})


@dataclass(frozen=True, slots=True)
class MountDecision:
    """Whether a copy may be mounted, with the logs it would lose and why."""

    allowed: bool
    lost_logs: int
    reason: str


def mount_decision(
    *,
    node: str,
    copy: CopyStatusReport | None,
    last_log_generated: int,
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
    lost = max(0, last_log_generated - copy.last_log_inspected)
    allowed = lost <= dial.max_lost_logs
    verdict = "within" if allowed else "more than"
    return MountDecision(
        allowed,
        lost,
        f"{lost} log(s) lost (LastLogGenerated {last_log_generated}, inspected "
        f"{copy.last_log_inspected} on {node}): {verdict} {dial} allows ({dial.max_lost_logs})",
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
    try:
        async with session.get(
            f"{url}/v1/status", headers=bearer(token), timeout=aiohttp.ClientTimeout(total=5)
        ) as resp:
            resp.raise_for_status()
            return NodeStatus.model_validate(await resp.json())
    except (aiohttp.ClientError, TimeoutError, ValueError):
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
    nodes = [c.node for c in config.database(database).copies]
    statuses = await asyncio.gather(
        *(node_status(session, config.node(n).url, token) for n in nodes)
    )
    reports = {n: copy_in(s, database) for n, s in zip(nodes, statuses, strict=True)}
    old_copy, copy = reports[record.node], reports[node]
    # The store's LastLogGenerated is published just after each roll and may miss the last
    # one; any copy that was told of a later generation by the active's notifications knows
    # better.  The higher figure counts: lost logs are never underestimated from what is known.
    generated = max(
        [record.last_log_generated] + [r.last_log_generated for r in reports.values() if r]
    )
    dial = dial_override or config.mount_dial_of(config.database(database))
    decision = mount_decision(
        node=node,
        copy=copy,
        last_log_generated=generated,
        dial=dial,
        active_reachable=old_copy is not None and old_copy.status is CopyStatus.MOUNTED,
        active_node=record.node,
    )
    if not decision.allowed:
        raise Conflict(f"cannot activate {database} on {node}: {decision.reason}")
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
        decision.reason,
    )

    await _reconcile_all(session, config, database, token)
    return {
        "database": database,
        "node": node,
        "epoch": won.epoch,
        "previous_node": record.node,
        "lost_logs": decision.lost_logs,
        "reason": decision.reason,
    }


async def _post(
    session: aiohttp.ClientSession, url: str, token: str, body: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """POST an admin call; its JSON answer, or None if the node cannot be reached or refuses."""
    try:
        async with session.post(
            url, json=body or {}, headers=bearer(token), timeout=aiohttp.ClientTimeout(total=30)
        ) as resp:
            if resp.status >= 300:
                logger.warning("POST %s: HTTP %d %s", url, resp.status, (await resp.text())[:300])
                return None
            return dict(await resp.json())
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        logger.warning("POST %s failed: %s", url, exc)
        return None


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
    }
