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
from dataclasses import dataclass, field

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


@dataclass(frozen=True, kw_only=True, eq=False)
class NodeWatcher:
    """Keeps one node's status stream open and applies it to the view."""

    node: NodeConfig
    view: LiveView
    session: aiohttp.ClientSession
    clock: Clock
    token: str = field(repr=False)
    heartbeat: float
    silence: float
    metrics: Metrics | None = None

    async def run(self) -> None:
        """Watch until cancelled, opening the stream again after each end."""
        backoff = Backoff(FIRST_RETRY, MAX_RETRY)
        name = self.node.name
        while True:
            live, why = await self.watch_once()
            if live:
                self.view.stream_ended(name, why)
                if self.metrics:
                    self.metrics.node_up.labels(name).set(0)
            else:
                logger.debug("status stream of %s not opened: %s", name, why)
            if self.metrics:
                self.metrics.stream_up.labels(name).set(0)
                self.metrics.stream_ends.labels(name).inc()
            if live:
                backoff.reset()
            await self.clock.sleep(backoff.next())

    async def watch_once(self) -> tuple[bool, str]:
        """One stream, until it ends: (whether it was live: its snapshot came; why it
        ended)."""
        name, url = self.node.name, self.node.url
        started = False
        events = watch_events(
            self.session,
            url,
            self.token,
            node=name,
            heartbeat=self.heartbeat,
            silence=self.silence,
        )
        try:
            async with aclosing(events):
                async for event in events:
                    now = self.clock.monotonic()
                    if isinstance(event, Snapshot):
                        self.view.stream_started(name, event.status, now)
                        if not started and self.metrics:
                            self.metrics.stream_up.labels(name).set(1)
                            self.metrics.node_up.labels(name).set(1)
                        started = True
                    elif isinstance(event, Changed):
                        self.view.copies_reported(name, event.copies, now)
                        if self.metrics:
                            self.metrics.stream_events.labels(name).inc(len(event.copies))
                    else:
                        self.view.stream_heard(name, now)
        except WatchLost as exc:
            return started, str(exc)
        return started, "status stream ended"
