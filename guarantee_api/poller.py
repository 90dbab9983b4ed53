"""The poll loop: `GET /v1/status` of every node every `interval`, into the live view.

One aiohttp `ClientSession` (owned by the caller), an explicit `ClientTimeout` per call, and
the injected clock for pacing, so tests drive rounds with `ManualClock.advance`.  Each round
also reads every database's stream history (its epochs) from the cluster store, when given
one (`history_source`), concurrently with the nodes. A node that
does not answer in time, answers with an error, or answers with a body that is not a
`NodeStatus` is recorded as unreachable for that round: its copies are not healthy until it
answers again.  A node whose status stream is live (`watcher.py`) is not polled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import aiohttp

from dag_common.clock import Clock
from dag_common.config import NodeConfig
from dag_common.incarnation import EpochRecord
from dag_common.node_status import StatusUnavailable, fetch_node_status
from guarantee_api.metrics import Metrics
from guarantee_api.view import LiveView

logger = logging.getLogger(__name__)


class Poller:
    """Polls every node's status into a `LiveView`, round after round."""

    def __init__(
        self,
        *,
        nodes: list[NodeConfig],
        view: LiveView,
        session: aiohttp.ClientSession,
        clock: Clock,
        interval: float,
        token: str,
        timeout: float | None = None,
        metrics: Metrics | None = None,
        on_round: Callable[[], Awaitable[None]] | None = None,
        history_source: Callable[[str], Awaitable[list[EpochRecord]]] | None = None,
    ) -> None:
        self._nodes = nodes
        self._history_source = history_source
        self._view = view
        self._session = session
        self._clock = clock
        self._interval = interval
        self._token = token
        # A poll slower than the interval is as good as lost: the next round is due.
        self._timeout = timeout or max(0.5, interval)
        self._metrics = metrics
        self._on_round = on_round
        self._round_done = asyncio.Condition()
        self.rounds_started = 0  # by `run` (a round under way has started, not completed)

    async def _poll_node(self, node: NodeConfig) -> None:
        if self._view.streaming(node.name):
            return  # its changes come pushed (watcher.py); a poll could only set them back
        try:
            status = await fetch_node_status(
                self._session,
                node.url,
                self._token,
                timeout=self._timeout,
                expect_node=node.name,
            )
        except StatusUnavailable as exc:
            self._view.node_failed(node.name, str(exc))
            if self._metrics:
                self._metrics.poll_errors.labels(node.name).inc()
                self._metrics.node_up.labels(node.name).set(0)
            return
        self._view.node_polled(node.name, status, self._clock.monotonic())
        if self._metrics:
            self._metrics.node_up.labels(node.name).set(1)

    async def _read_history(self, database: str) -> None:
        assert self._history_source is not None
        try:
            records = await asyncio.wait_for(self._history_source(database), self._timeout)
        except Exception as exc:  # any store failure: the history is unknown this round
            self._view.history_failed(database, str(exc) or type(exc).__name__)
            if self._metrics:
                self._metrics.poll_errors.labels("cluster-store").inc()
            return
        self._view.history_read(database, records)

    async def poll_once(self) -> None:
        """One round: every node and every database's stream history, concurrently; then
        the round listeners."""
        histories = (
            [self._read_history(db) for db in self._view.databases]
            if self._history_source is not None
            else []
        )
        await asyncio.gather(*(self._poll_node(n) for n in self._nodes), *histories)
        self._view.round_completed()
        if self._metrics:
            self._metrics.poll_rounds.inc()
        if self._on_round:
            await self._on_round()
        async with self._round_done:
            self._round_done.notify_all()

    async def run(self) -> None:
        """Poll until cancelled; an unexpected error is counted and the loop goes on."""
        while True:
            started = self._clock.monotonic()
            self.rounds_started += 1
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("unexpected error in the poll loop")
                if self._metrics:
                    self._metrics.unexpected.labels("poll").inc()
            elapsed = self._clock.monotonic() - started
            await self._clock.sleep(max(0.0, self._interval - elapsed))

    async def wait_rounds(self, count: int) -> None:
        """Wait until at least `count` rounds have completed since start."""
        async with self._round_done:
            await self._round_done.wait_for(lambda: self._view.rounds_completed >= count)
