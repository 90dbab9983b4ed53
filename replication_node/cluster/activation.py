"""Moving the active role: activation after the active is lost (the seeds' failover), and
switchover from a running active (the seeds' scheduled outage, which loses nothing).

The policy is pure and lives in `mount_policy.py` (what is at risk, what a copy would lose,
whether it may mount, with the invariant); the calls to the nodes are in `peers.py`.

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

import logging
from typing import Any

import aiohttp

from dag_common.clock import Clock
from dag_common.cluster_store import ActivationCause, ActiveRecord, ClusterStore
from dag_common.config import ClusterConfig
from dag_common.model import AutoDatabaseMountDial, CopyRole, CopyStatus, CopyStatusReport
from dag_common.node_status import post_admin
from replication_node.cluster.mount_policy import (
    MOUNTABLE,
    activation_suspended_reason,
    buffered,
    generations_at_risk,
    last_logs_to_copy,
    mount_decision,
    synchronously_held,
)
from replication_node.cluster.peers import (
    copy_in,
    copy_reports,
    node_status,
    post_logged,
    reconcile_all,
)
from replication_node.errors import BadRequest, Conflict, LeaseHeld, MountRefused, NotFound

logger = logging.getLogger(__name__)

# A switchover's target silent this long (its status calls failing: PEER_STATUS_TIMEOUT
# each) is taken for lost, and the switchover abandoned so the old active takes writes again.
TARGET_SILENT_ABANDON = 5.0


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
    reports: dict[str, CopyStatusReport | None] | None = None,
    clock: Clock | None = None,
    lease_wait: float = 0.0,
    cause: ActivationCause = ActivationCause.MANUAL_ACTIVATION,
) -> dict[str, Any]:
    """Make the copy of `database` on `node` active; Conflict (nothing changed) if it may not.

    `reports`: every copy's status, just gathered by the caller (the failover monitor), used
    instead of asking each node again (the epoch's compare-and-set still decides).  While the
    old active's lease is live, wait up to `lease_wait` seconds on `clock` for it to end (an
    operator's activate after a crash), then LeaseHeld: the old active may still acknowledge.
    `cause`: who asked (an operator, or the failover monitor: refused while automatic
    failover is paused), recorded in the epoch's history with the dial and the logs lost."""
    record = await _active_elsewhere(config, cluster_store, database, node)
    if reports is None:
        reports = await copy_reports(session, config, token, database)
    target = reports[node]
    if target is not None and target.activation_suspended:
        # Refused before anything is asked of the old active (its last logs held for this
        # copy): Exchange, too, activates such a copy only once resumed.
        raise Conflict(
            f"cannot activate {database} on {node}: {activation_suspended_reason(target)}"
        )
    running = reports[record.node]
    # A running active is refused below (use switchover); any other's lease is waited out.
    mounted = running is not None and running.status is CopyStatus.MOUNTED
    if not mounted and await wait_out_lease(
        cluster_store, database, node, clock, longest=lease_wait
    ):
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
    # Synchronous copies: every commit the lost active acknowledged was held by that many
    # copies in block mode; if this copy's buffer must hold them all, it counts as the open
    # generation held (kept below, before the role moves).
    covered, held = (
        synchronously_held(
            copy=copy,
            reports=reports,
            old_active=record.node,
            synchronous_copies=config.synchronous_copies_of(config.database(database)),
            open_generation=at_risk.generated,
        )
        if copy is not None
        else (False, "")
    )
    decision = mount_decision(
        node=node,
        copy=copy.model_copy(update={"last_log_inspected": at_risk.generated}) if covered else copy,
        at_risk=at_risk,
        dial=dial,
        active_reachable=old_copy is not None and old_copy.status is CopyStatus.MOUNTED,
        active_node=record.node,
    )
    reason = "; ".join(part for part in (last_logs, held, decision.reason) if part)
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
    kept_through = None
    kept_generation = copy.block_generation
    if buffered(copy):
        # Block mode: what the copy holds of the open log is kept as that generation (also
        # when the dial allows losing it: less is then lost than counted).  A prefix of
        # what the old active wrote: the epoch records where it ends, so that a write past
        # it is known lost (CheckReplicationFlush).
        kept, kept_through = await _keep_block_buffer(
            session, config.node(node).url, token, database
        )
        reason = f"{kept}; {reason}"
        last_logs = f"{last_logs}; {kept}" if last_logs else kept
        copy = (await copy_reports(session, config, token, database))[node]
        if copy is None or (covered and copy.last_log_inspected < at_risk.generated):
            raise Conflict(
                f"cannot activate {database} on {node}: the open log its block-mode buffer "
                f"holds was counted as kept, and was not ({kept}); nothing was done"
            )
    # The new stream forks from the old one after the last generation the copy inspected:
    # it mounts with exactly those, and writes its own from the next one on.
    won = await cluster_store.set_active(
        database,
        node,
        expected_epoch=record.epoch,
        start_generation=copy.last_log_inspected + 1,
        kept_through=kept_through,
        cause=cause,
        mount_dial=dial,
        lost_logs=decision.lost_logs,
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

    await reconcile_all(session, config, database, token)
    return {
        "database": database,
        "node": node,
        "epoch": won.epoch,
        "previous_node": record.node,
        "cause": cause,
        "lost_logs": decision.lost_logs,
        "lost_open_log": decision.lost_open_log,
        "lost_commits_at_least": decision.lost_commits,
        # The open log kept from the copy's block-mode buffer: a write at or below this byte
        # of this generation survived even where the open log is counted lost.
        "kept_open_log": (
            {"generation": kept_generation, "through_byte": kept_through}
            if kept_through is not None
            else None
        ),
        "last_logs": last_logs or None,
        "reason": reason,
    }


async def wait_out_lease(
    cluster_store: ClusterStore,
    database: str,
    node: str,
    clock: Clock | None,
    *,
    longest: float,
) -> bool:
    """Return once no node but `node` holds a live lease on the active role of `database`
    (True if that took a wait); LeaseHeld if one still does after `longest` seconds (a dead
    active's lease ends within its TTL; one still renewed belongs to an active that is
    alive)."""
    deadline = clock.monotonic() + longest if clock is not None else 0.0
    waited = False
    while True:
        lease = await cluster_store.lease(database)
        if lease is None or lease.node == node:
            return waited
        left = deadline - clock.monotonic() if clock is not None else 0.0
        if left <= 0:
            raise LeaseHeld(database, lease.node, lease.expires_in)
        assert clock is not None
        logger.info(
            "%s: activation on %s waits %.1fs for the lease of %s to end",
            database,
            node,
            lease.expires_in,
            lease.node,
        )
        await clock.sleep(min(lease.expires_in + 0.05, left))
        waited = True


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


async def _keep_block_buffer(
    session: aiohttp.ClientSession, url: str, token: str, database: str
) -> tuple[str, int | None]:
    """Ask the node of the copy taking over to keep its block-mode buffer: what came of it,
    and the byte it kept the generation through (None: nothing kept)."""
    status, answer = await post_admin(
        session, f"{url}/v1/databases/{database}/keep-block-buffer", token, timeout=45
    )
    if status != 200:
        return (
            f"keeping the block-mode buffer failed (HTTP {status}: {answer.get('error')})",
            None,
        )
    kept = answer.get("kept")
    if not kept:
        return "its block-mode buffer held no transaction", None
    return (
        f"its block-mode buffer kept as generation {kept['generation']} "
        f"through byte {kept['kept_through']}",
        int(kept["kept_through"]),
    )


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
    if copy.activation_suspended:
        raise Conflict(
            f"cannot switch {database} over to {node}: {activation_suspended_reason(copy)}"
        )
    active_url = f"{config.node(record.node).url}/v1/databases/{database}"
    quiesced = await post_logged(session, f"{active_url}/quiesce", token, {"target": node})
    if quiesced is None:
        raise Conflict(
            f"the active copy on {record.node} did not stop its writes; if it is lost, activate"
        )
    generation = int(quiesced["last_log_generated"])
    try:
        now = clock.monotonic()
        deadline, heard = now + timeout, now
        while True:
            copy = await target_copy()
            now = clock.monotonic()
            if copy is not None:
                heard = now
                if copy.last_log_replayed >= generation:
                    break
            # The old active refuses writes until this ends: a target that stopped
            # answering (killed, cut off) ends it at once, not at the catch-up deadline.
            gone = now - heard > TARGET_SILENT_ABANDON
            if now > deadline or gone or (copy is not None and copy.status not in MOUNTABLE):
                where = (
                    f"{copy.status}, replayed {copy.last_log_replayed}"
                    if copy
                    else f"not answering for {now - heard:.0f}s"
                )
                raise Conflict(
                    f"switchover of {database} abandoned: {node} did not replay generation "
                    f"{generation} ({where}); {record.node} takes writes again"
                )
            await clock.sleep(0.1)
        # The target replayed every generation the old active closed: the new epoch's
        # stream goes on from the next one, and no write is lost.
        won = await cluster_store.set_active(
            database,
            node,
            expected_epoch=record.epoch,
            start_generation=generation + 1,
            cause=ActivationCause.SWITCHOVER,
            lost_logs=0,
        )
        if won is None:
            raise Conflict(f"the active copy of {database} changed meanwhile; nothing was done")
    except BaseException:
        await post_logged(session, f"{active_url}/unquiesce", token)
        raise
    logger.info(
        "%s: switched over from %s to %s at generation %d (epoch %d)",
        database,
        record.node,
        node,
        generation,
        won.epoch,
    )
    await reconcile_all(session, config, database, token)
    return {
        "database": database,
        "node": node,
        "epoch": won.epoch,
        "previous_node": record.node,
        "last_log_generated": generation,
        "lost_logs": 0,
        "lost_open_log": False,
    }
