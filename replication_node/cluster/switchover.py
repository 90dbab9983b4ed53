"""Switchover: moving the active role away from a running active (the seeds' scheduled
outage, which loses nothing).  `activation.py` takes over from a lost one instead.

The active stops taking writes and closes its open log (generation G); once the target copy
has replayed G, the role moves (compare-and-set on the epoch), every node reconciles, the old
active dismounts cleanly and follows the new one as a passive copy.  If the target does not
catch up in time, stops answering, stops being mountable, or the role changed meanwhile, the
active takes writes again and nothing else changed.  What is asked of the nodes goes through
a `Peers`; the waits are on the injected clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from dag_common.clock import Clock
from dag_common.cluster_store.interface import ActivationCause, ClusterStore
from dag_common.config import ClusterConfig
from dag_common.model import CopyRole, CopyStatus
from replication_node.admin_api import SwitchoverAnswer
from replication_node.cluster.activation import active_elsewhere, take_role
from replication_node.cluster.mount_policy import MOUNTABLE, activation_suspended_reason
from replication_node.cluster.peers import Peers
from replication_node.errors import Conflict

logger = logging.getLogger(__name__)

# A switchover's target silent this long (its status calls failing: PEER_STATUS_TIMEOUT
# each) is taken for lost, and the switchover abandoned so the old active takes writes again.
TARGET_SILENT_ABANDON = 5.0

CATCH_UP_TIMEOUT = 60.0
"""Seconds the target has to replay the old active's last generation."""

POLL_INTERVAL = 0.1
"""Seconds between two questions to the target while it catches up."""


@dataclass(frozen=True, kw_only=True, eq=False)
class Switchover:
    """Moves the active role of a database to a passive copy without losing a log;
    Conflict (the old active takes writes again, nothing else changed) if it cannot."""

    config: Callable[[], ClusterConfig]  # the running config (it is reloaded)
    cluster_store: ClusterStore
    peers: Peers
    clock: Clock
    timeout: float = CATCH_UP_TIMEOUT

    async def switch(self, database: str, node: str) -> SwitchoverAnswer:
        """Move the active role of `database` to the copy on `node`."""
        record = await active_elsewhere(self.config(), self.cluster_store, database, node)
        copy = await self.peers.copy_report(node, database)
        if (
            copy is None
            or copy.role is not CopyRole.PASSIVE
            or copy.status is not CopyStatus.HEALTHY
        ):
            state = f"{copy.role} {copy.status}" if copy else "unreachable"
            raise Conflict(f"cannot switch {database} over to {node}: its copy is {state}")
        if copy.activation_suspended:
            raise Conflict(
                f"cannot switch {database} over to {node}: {activation_suspended_reason(copy)}"
            )
        generation = await self.peers.quiesce(record.node, database, node)
        if generation is None:
            raise Conflict(
                f"the active copy on {record.node} did not stop its writes; if it is lost, activate"
            )
        try:
            await self._catch_up(database, node, generation, previous=record.node)
            # The target replayed every generation the old active closed: the new epoch's
            # stream goes on from the next one, and no write is lost.
            won = await take_role(
                self.cluster_store,
                record,
                node,
                start_generation=generation + 1,
                cause=ActivationCause.SWITCHOVER,
                lost_logs=0,
            )
        except BaseException:
            await self.peers.unquiesce(record.node, database)
            raise
        logger.info(
            "%s: switched over from %s to %s at generation %d (epoch %d)",
            database,
            record.node,
            node,
            generation,
            won.epoch,
        )
        await self.peers.reconcile_all(database)
        return SwitchoverAnswer.between(record, won, last_log_generated=generation)

    async def _catch_up(self, database: str, node: str, generation: int, previous: str) -> None:
        """Return once the copy on `node` has replayed `generation`; Conflict if it does not
        within the timeout, stops being mountable, or stops answering."""
        now = self.clock.monotonic()
        deadline, heard = now + self.timeout, now
        while True:
            copy = await self.peers.copy_report(node, database)
            now = self.clock.monotonic()
            if copy is not None:
                heard = now
                if copy.last_log_replayed >= generation:
                    return
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
                    f"{generation} ({where}); {previous} takes writes again"
                )
            await self.clock.sleep(POLL_INTERVAL)
