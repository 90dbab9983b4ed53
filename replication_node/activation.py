"""Activating a passive copy when the active copy is lost (the seeds' failover).

`mount_decision` is the policy (pure): may this copy be mounted, and how many logs would
be lost?  The lost logs are the closed generations the lost active announced
(LastLogGenerated in the cluster store) that the copy has not inspected; the copy replays
everything it inspected when it mounts.  AutoDatabaseMountDial bounds them: Lossless 0,
GoodAvailability 3, BestAvailability 6.  An operator may override the dial for one call.

`activate_copy` does it: checks the old active is really gone and the copy is fit, moves the
active role in the cluster store with a compare-and-set on the epoch (two activations can
never both win), and asks the database's nodes to reconcile at once instead of at their next
config refresh.  A running active is not taken over here: moving the role away from a live
active is a switchover, which closes its log first and loses nothing.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import aiohttp

from dag_common.auth import bearer
from dag_common.config import ClusterConfig
from dag_common.model import (
    AutoDatabaseMountDial,
    CopyRole,
    CopyStatus,
    CopyStatusReport,
    NodeStatus,
)
from replication_node.cluster_store import ClusterStore
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


async def _node_status(session: aiohttp.ClientSession, url: str, token: str) -> NodeStatus | None:
    try:
        async with session.get(
            f"{url}/v1/status", headers=bearer(token), timeout=aiohttp.ClientTimeout(total=5)
        ) as resp:
            resp.raise_for_status()
            return NodeStatus.model_validate(await resp.json())
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


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
    old, new = await asyncio.gather(
        _node_status(session, config.node(record.node).url, token),
        _node_status(session, config.node(node).url, token),
    )
    old_copy = next((c for c in old.copies if c.database == database), None) if old else None
    copy = next((c for c in new.copies if c.database == database), None) if new else None
    dial = dial_override or config.mount_dial_of(db)
    decision = mount_decision(
        node=node,
        copy=copy,
        last_log_generated=record.last_log_generated,
        dial=dial,
        active_reachable=old_copy is not None and old_copy.status is CopyStatus.MOUNTED,
        active_node=record.node,
    )
    if not decision.allowed:
        raise Conflict(f"cannot activate {database} on {node}: {decision.reason}")
    won = await cluster_store.set_active(database, node, expected_epoch=record.epoch)
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

    async def reconcile(url: str) -> None:
        try:
            async with session.post(
                f"{url}/v1/reconcile",
                headers=bearer(token),
                timeout=aiohttp.ClientTimeout(total=30),
            ) as resp:
                resp.raise_for_status()
        except (aiohttp.ClientError, TimeoutError):
            pass  # a node that cannot be told now learns it at its next config refresh

    await asyncio.gather(*(reconcile(config.node(c.node).url) for c in db.copies))
    return {
        "database": database,
        "node": node,
        "epoch": won.epoch,
        "previous_node": record.node,
        "lost_logs": decision.lost_logs,
        "reason": decision.reason,
    }
