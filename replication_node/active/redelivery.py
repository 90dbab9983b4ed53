"""Transport dumpster redelivery after a lossy activation, as the seeds lay it out.

An activation that lost logs (its epoch record's `lost_logs` > 0) leaves the database
needing redelivery: the new active records it in the cluster store (DumpsterRedeliveryRequired,
the transports to ask, the loss window), then asks each transport to redeliver that window
from its dumpster, every `redelivery_interval` (30 s), until each has answered Success or
MaxDumpsterTime has passed since it was first required.  A transport that answered is
removed from those to ask (DumpsterRedeliveryServers).  A second lossy activation widens the
window and asks every transport again (`ClusterStore.require_redelivery`).

The loss window (seeds): from the time of the last log the new active's copy had inspected,
to now, padded 12 hours back and 4 hours forward, "since the transport dumpster is based on
message delivery times" (and a transport's clock is not the node's).

Whoever is active asks: the record is in the cluster store, so a switchover or another
failover before every transport answered hands the asking to the next active.  A lossy
activation of a copy with a replay lag (the seeds' SCR target) never asks: its database is
behind by design, and what its lag held back is not in any transport's window.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime, timedelta

import aiohttp
from pydantic import ValidationError

from dag_common.auth import bearer
from dag_common.backoff import Backoff
from dag_common.clock import Clock
from dag_common.cluster_store.interface import ClusterStore, RedeliveryNeed, RedeliveryRecord
from dag_common.config import ClusterConfig
from dag_common.model import RedeliveryAnswer

logger = logging.getLogger(__name__)

PAD_BACK = timedelta(hours=12)
PAD_FORWARD = timedelta(hours=4)
ASK_TIMEOUT = 60.0  # a transport queues a window's messages again, then answers


def loss_window(last_log_time: datetime, now: datetime) -> tuple[datetime, datetime]:
    """The seeds' loss window: LastLogInspected's time to now, 12 h back, 4 h forward."""
    return min(last_log_time, now) - PAD_BACK, now + PAD_FORWARD


class DumpsterRedelivery:
    """The asking of the transports for one database, by its active copy."""

    def __init__(
        self,
        *,
        config: ClusterConfig,
        database: str,
        node: str,
        epoch: int,
        cluster_store: ClusterStore,
        clock: Clock,
        token: str,
        session: aiohttp.ClientSession,
    ) -> None:
        self._config = config
        self._database = database
        self._node = node
        self._epoch = epoch
        self._store = cluster_store
        self._clock = clock
        self._token = token
        self._session = session
        self.record: RedeliveryRecord | None = None  # as last read: the status shows it

    def _lagged(self) -> bool:
        copy = self._config.database(self._database).copy_on(self._node)
        return copy is not None and copy.replay_lag_time > timedelta(0)

    async def require_if_lossy(self, last_log_time: datetime | None) -> None:
        """Record that this epoch needs redelivery, if its activation lost logs."""
        history = {r.epoch: r for r in await self._store.history(self._database)}
        mine = history.get(self._epoch)
        if mine is None or not mine.lost_logs or not self._config.transports:
            return
        if self._lagged():
            logger.warning(
                "%s: activated on %s losing %d logs; a copy with a replay lag does not ask "
                "the transports to redeliver (the seeds' SCR target)",
                self._database, self._node, mine.lost_logs,
            )  # fmt: skip
            return
        now = self._clock.now()
        start, end = loss_window(last_log_time or mine.began or now, now)
        servers = tuple(t.name for t in self._config.transports)
        self.record = await self._store.require_redelivery(
            self._database, RedeliveryNeed(self._epoch, start, end, servers, now)
        )
        logger.warning(
            "%s: activated on %s losing %d logs: transport dumpster redelivery of %s to %s "
            "required from %s",
            self._database, self._node, mine.lost_logs, self.record.start.isoformat(),
            self.record.end.isoformat(), ", ".join(self.record.servers) or "no transport",
        )  # fmt: skip

    async def run(self, last_log_time: datetime | None) -> None:
        """Require redelivery if this epoch lost logs; then ask, every interval, while any
        redelivery of this database is required (until cancelled: the copy stops being
        active)."""
        interval = self._config.transport.redelivery_interval.total_seconds()
        retry = Backoff.fixed(interval)
        required = False
        while not required:
            try:
                await self.require_if_lossy(last_log_time)
                required = True
            except Exception as exc:  # the store unreachable: the record must be made
                wait = retry.next()
                if retry.worth_saying():
                    logger.warning("%s: recording the redelivery failed (%s, %d tries); "
                                   "again in %gs", self._database, exc, retry.failures,
                                   wait)  # fmt: skip
                await self._clock.sleep(wait)
        while True:
            try:
                await self.ask_once()
            except Exception as exc:
                logger.warning("%s: transport dumpster redelivery: %s", self._database, exc)
            await self._clock.sleep(interval)

    async def ask_once(self) -> RedeliveryRecord | None:
        """One round: every transport still to answer asked once; the record as it is after."""
        record = await self._store.redelivery(self._database)
        self.record = record
        if record is None or not record.required:
            return record
        waited = self._clock.now() - record.requested
        if waited > self._config.transport.max_dumpster_time:
            self.record = await self._store.end_redelivery(
                self._database, epochs=record.epochs, reason="Expired"
            )
            logger.error(
                "%s: transport dumpster redelivery given up after MaxDumpsterTime; %s never "
                "answered", self._database, ", ".join(record.servers),
            )  # fmt: skip
            return self.record
        for server in record.servers:
            answer = await self._ask(server, record)
            if answer is None:
                continue
            updated = await self._store.redelivered(self._database, server, epochs=record.epochs)
            if updated is not None:
                self.record = updated
            logger.warning(
                "%s: transport %s redelivered %s messages of %s to %s",
                self._database, server, answer.messages, record.start.isoformat(),
                record.end.isoformat(),
            )  # fmt: skip
        return self.record

    async def _ask(self, server: str, record: RedeliveryRecord) -> RedeliveryAnswer | None:
        """The transport's Success answer, or None (unreachable, another answer: asked again
        next round)."""
        try:
            hub = self._config.transport_node(server)
        except KeyError:  # gone from the config: nobody to ask; it cannot answer
            return None
        body = {
            "database": self._database,
            "start": record.start.isoformat(),
            "end": record.end.isoformat(),
        }
        try:
            async with self._session.post(
                f"{hub.url}/v1/redeliver",
                json=body,
                headers=bearer(self._token),
                timeout=aiohttp.ClientTimeout(total=ASK_TIMEOUT),
            ) as resp:
                answer = await resp.json(content_type=None)
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            logger.info("%s: transport %s not reached for redelivery: %s",
                        self._database, server, exc or type(exc).__name__)  # fmt: skip
            return None
        success = None
        if status == 200:
            with contextlib.suppress(ValidationError):
                success = RedeliveryAnswer.model_validate(answer)
        if success is None:
            logger.warning("%s: transport %s answered the redelivery with HTTP %d: %s",
                           self._database, server, status, answer)  # fmt: skip
        return success
