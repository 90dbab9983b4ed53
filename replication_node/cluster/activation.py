"""Activation: making a passive copy active after its active is lost (the seeds' failover).
`switchover.py` moves the role away from a running active instead.

The policy is pure and lives in `mount_policy.py` (what is at risk, what a copy would lose,
whether it may mount, with the invariant); what is asked of the other nodes goes through a
`Peers` (`peers.py`); waits are on the injected clock.

`Activation.activate` checks the old active is really gone and the copy is fit, waits out
the old active's lease, has the copy first copy the old active's last logs where its node
answers (Attempt Copy Last Logs) and keep its block-mode buffer, moves the active role in the
cluster store with a compare-and-set on the epoch (two activations can never both win), and
asks the database's nodes to reconcile at once instead of at their next config refresh.  A
running active is not taken over by an activation.  Every refusal changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dag_common.clock import Clock
from dag_common.cluster_store.interface import ActivationCause, ActiveRecord, ClusterStore
from dag_common.config import ClusterConfig
from dag_common.model import AutoDatabaseMountDial, CopyStatus, CopyStatusReport, Position
from replication_node.admin_api import ActivationAnswer
from replication_node.cluster.mount_policy import (
    activation_suspended_reason,
    assess_activation,
    buffered,
    last_logs_to_copy,
)
from replication_node.cluster.peers import BlockBufferKept, LastLogsCopied, Peers
from replication_node.errors import BadRequest, Conflict, LeaseHeld, MountRefused, NotFound

logger = logging.getLogger(__name__)


async def active_elsewhere(
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


async def take_role(
    cluster_store: ClusterStore, record: ActiveRecord, node: str, **began: Any
) -> ActiveRecord:
    """Make the copy on `node` active in place of `record` (`ClusterStore.set_active`, with
    how its stream `began`), and answer the record that won; Conflict, nothing done, if the
    role changed meanwhile."""
    won = await cluster_store.set_active(
        record.database, node, expected_epoch=record.epoch, **began
    )
    if won is None:
        raise Conflict(f"the active copy of {record.database} changed meanwhile; nothing was done")
    return won


async def wait_out_lease(
    cluster_store: ClusterStore, database: str, node: str, clock: Clock, *, longest: float
) -> bool:
    """Return once no node but `node` holds a live lease on the active role of `database`
    (True if that took a wait); LeaseHeld if one still does after `longest` seconds (a dead
    active's lease ends within its TTL; one still renewed belongs to an active that is
    alive)."""
    deadline = clock.monotonic() + longest
    waited = False
    while True:
        lease = await cluster_store.lease(database)
        if lease is None or lease.node == node:
            return waited
        left = deadline - clock.monotonic()
        if left <= 0:
            raise LeaseHeld(database, lease.node, lease.expires_in)
        logger.info(
            "%s: activation on %s waits %.1fs for the lease of %s to end",
            database,
            node,
            lease.expires_in,
            lease.node,
        )
        await clock.sleep(min(lease.expires_in + 0.05, left))
        waited = True


def last_logs_said(copied: LastLogsCopied) -> str:
    """What came of copying the last logs, in a sentence (a failure is said, and the loss
    is then counted without them)."""
    if copied.failure is not None:
        return f"copying the last logs failed ({copied.failure})"
    what = (
        f"last logs copied from {copied.source}: closed generations through {copied.closed_through}"
    )
    if copied.open_log_generation is not None:
        return what + f", and the open log E00.log as generation {copied.open_log_generation}"
    return what + " (its open log held no transaction)"


def buffer_kept_said(kept: BlockBufferKept) -> str:
    """What came of keeping the block-mode buffer, in a sentence."""
    if kept.failure is not None:
        return f"keeping the block-mode buffer failed ({kept.failure})"
    if kept.generation is None:
        return "its block-mode buffer held no transaction"
    return (
        f"its block-mode buffer kept as generation {kept.generation} "
        f"through byte {kept.kept_through}"
    )


@dataclass(frozen=True, kw_only=True, eq=False)
class Activation:
    """Makes the copy of a database on a node active after its active is lost; Conflict
    (nothing changed) if it may not, MountRefused if it would lose more than the dial allows,
    LeaseHeld while the old active's lease stays live."""

    config: Callable[[], ClusterConfig]  # the running config (it is reloaded)
    cluster_store: ClusterStore
    peers: Peers
    clock: Clock

    async def activate(
        self,
        database: str,
        node: str,
        *,
        dial_override: AutoDatabaseMountDial | None = None,
        reports: dict[str, CopyStatusReport | None] | None = None,
        lease_wait: float = 0.0,
        cause: ActivationCause = ActivationCause.MANUAL_ACTIVATION,
    ) -> ActivationAnswer:
        """Make the copy of `database` on `node` active.

        `reports`: every copy's status, just gathered by the caller (the failover monitor),
        used instead of asking each node again (the epoch's compare-and-set still decides).
        While the old active's lease is live, wait up to `lease_wait` seconds for it to end
        (an operator's activate after a crash), then LeaseHeld: the old active may still
        acknowledge.  `cause`: who asked (an operator, or the failover monitor: refused while
        automatic failover is paused), recorded in the epoch's history with the dial and the
        logs lost."""
        config = self.config()
        record = await active_elsewhere(config, self.cluster_store, database, node)
        if reports is None:
            reports = await self.peers.copy_reports(database)
        target = reports[node]
        if target is not None and target.activation_suspended:
            # Refused before anything is asked of the old active (its last logs held for
            # this copy): Exchange, too, activates such a copy only once resumed.
            raise Conflict(
                f"cannot activate {database} on {node}: {activation_suspended_reason(target)}"
            )
        running = reports[record.node]
        # A running active is refused below (use switchover); any other's lease is waited out.
        mounted = running is not None and running.status is CopyStatus.MOUNTED
        if not mounted and await wait_out_lease(
            self.cluster_store, database, node, self.clock, longest=lease_wait
        ):
            reports = await self.peers.copy_reports(database)
        last_logs = ""
        if last_logs_to_copy(reports[record.node], reports[node]):
            # Attempt Copy Last Logs: the old active's node answers, its copy is not mounted
            # (failed, dismounted, or back after a crash): whatever logs it still has, the
            # closed ones and the open one, are copied before the loss is counted.
            last_logs = last_logs_said(await self.peers.copy_last_logs(node, database))
            reports = await self.peers.copy_reports(database)
        db = config.database(database)
        dial = dial_override or config.mount_dial_of(db)
        assessment = assess_activation(
            node=node,
            old=record,
            reports=reports,
            dial=dial,
            synchronous_copies=config.synchronous_copies_of(db),
        )
        decision = assessment.decision
        reason = "; ".join(part for part in (last_logs, assessment.held, decision.reason) if part)
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
        copy = reports[node]
        assert copy is not None  # mount_decision refuses an unreachable copy
        kept_open_log = None
        if buffered(copy):
            # Block mode: what the copy holds of the open log is kept as that generation
            # (also when the dial allows losing it: less is then lost than counted).  A
            # prefix of what the old active wrote: the epoch records where it ends, so that
            # a write past it is known lost (CheckReplicationFlush).
            generation = copy.block.generation
            kept = await self.peers.keep_block_buffer(node, database)
            said = buffer_kept_said(kept)
            reason = f"{said}; {reason}"
            last_logs = f"{last_logs}; {said}" if last_logs else said
            if kept.kept_through is not None:
                kept_open_log = Position(generation, kept.kept_through)
            copy = await self.peers.copy_report(node, database)
            if copy is None or (
                assessment.covered and copy.last_log_inspected < assessment.at_risk.generated
            ):
                raise Conflict(
                    f"cannot activate {database} on {node}: the open log its block-mode "
                    f"buffer holds was counted as kept, and was not ({said}); nothing was done"
                )
        # The new stream forks from the old one after the last generation the copy inspected:
        # it mounts with exactly those, and writes its own from the next one on.
        won = await take_role(
            self.cluster_store,
            record,
            node,
            start_generation=copy.last_log_inspected + 1,
            kept_through=kept_open_log.offset if kept_open_log else None,
            cause=cause,
            mount_dial=dial,
            lost_logs=decision.lost_logs,
        )
        logger.warning(
            "%s: activated on %s at epoch %d (was %s): %s",
            database,
            node,
            won.epoch,
            record.node,
            reason,
        )
        await self.peers.reconcile_all(database)
        return ActivationAnswer.between(
            record,
            won,
            cause=cause,
            lost_logs=decision.lost_logs,
            lost_open_log=decision.lost_open_log,
            lost_commits_at_least=decision.lost_commits,
            kept_open_log=kept_open_log,
            last_logs=last_logs or None,
            reason=reason,
        )
