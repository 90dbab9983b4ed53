"""Pushed progress: one `GET /v1/status/watch` per node (`dag_common.status_watch`), kept
open, every line applied to the live view as it arrives.

A live stream (its snapshot received) that closes, sends a line that does not decode whole
(or a copy of another node), or says nothing for `silence` seconds (it heartbeats every
`heartbeat`) ends, and the node then counts as unreachable, exactly as after an unanswered
poll, until the poller (which polls a node only while its stream is not live) or a new
stream hears from it: nothing it sent is trusted past its end.  A stream that fails before
its snapshot was never relied on: the poll alone speaks for that node meanwhile.  Streams
are opened again after 0.2 s, doubling to 5 s while they keep failing.
"""

from __future__ import annotations

import logging
from contextlib import aclosing

import aiohttp

from dag_common.backoff import Backoff
from dag_common.clock import Clock
from dag_common.config import NodeConfig
from dag_common.status_watch import Changed, Snapshot
from dag_common.watch_reader import WatchLost, watch_events
from guarantee_api.metrics import Metrics
from guarantee_api.view import LiveView

logger = logging.getLogger(__name__)

FIRST_RETRY, MAX_RETRY = 0.2, 5.0


class NodeWatcher:
    """Keeps one node's status stream open and applies it to the view."""

    def __init__(
        self,
        *,
        node: NodeConfig,
        view: LiveView,
        session: aiohttp.ClientSession,
        clock: Clock,
        token: str,
        heartbeat: float,
        silence: float,
        metrics: Metrics | None = None,
    ) -> None:
        self._node = node
        self._view = view
        self._session = session
        self._clock = clock
        self._token = token
        self._heartbeat = heartbeat
        self._silence = silence
        self._metrics = metrics

    async def run(self) -> None:
        """Watch until cancelled, opening the stream again after each end."""
        backoff = Backoff(FIRST_RETRY, MAX_RETRY)
        name = self._node.name
        while True:
            live, why = await self.watch_once()
            if live:
                self._view.stream_ended(name, why)
                if self._metrics:
                    self._metrics.node_up.labels(name).set(0)
            else:
                logger.debug("status stream of %s not opened: %s", name, why)
            if self._metrics:
                self._metrics.stream_up.labels(name).set(0)
                self._metrics.stream_ends.labels(name).inc()
            if live:
                backoff.reset()
            await self._clock.sleep(backoff.next())

    async def watch_once(self) -> tuple[bool, str]:
        """One stream, until it ends: (whether it was live: its snapshot came; why it
        ended)."""
        name, url = self._node.name, self._node.url
        started = False
        events = watch_events(
            self._session,
            url,
            self._token,
            node=name,
            heartbeat=self._heartbeat,
            silence=self._silence,
        )
        try:
            async with aclosing(events):
                async for event in events:
                    now = self._clock.monotonic()
                    if isinstance(event, Snapshot):
                        self._view.stream_started(name, event.status, now)
                        if not started and self._metrics:
                            self._metrics.stream_up.labels(name).set(1)
                            self._metrics.node_up.labels(name).set(1)
                        started = True
                    elif isinstance(event, Changed):
                        self._view.copies_reported(name, event.copies, now)
                        if self._metrics:
                            self._metrics.stream_events.labels(name).inc(len(event.copies))
                    else:
                        self._view.stream_heard(name, now)
        except WatchLost as exc:
            return started, str(exc)
        return started, "status stream ended"
