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

import aiohttp

from dag_common.auth import bearer
from dag_common.clock import Clock
from dag_common.config import NodeConfig
from dag_common.status_watch import (
    MAX_LINE,
    Changed,
    Heartbeat,
    Snapshot,
    WatchProtocolError,
    decode,
)
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
        delay = FIRST_RETRY
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
            delay = FIRST_RETRY if live else min(MAX_RETRY, delay * 2)
            await self._clock.sleep(delay)

    async def watch_once(self) -> tuple[bool, str]:
        """One stream, until it ends: (whether it was live: its snapshot came; why it
        ended)."""
        name, url = self._node.name, self._node.url
        started = False
        try:
            async with self._session.get(
                f"{url}/v1/status/watch",
                params={"heartbeat": f"{self._heartbeat:g}"},
                headers=bearer(self._token),
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=self._silence, sock_read=self._silence
                ),
                read_bufsize=MAX_LINE,
            ) as resp:
                if resp.status != 200:
                    why = "the token is refused" if resp.status == 401 else "no status stream"
                    return False, f"status stream: HTTP {resp.status} ({why})"
                while True:
                    line = await resp.content.readline()
                    if not line:
                        return started, "status stream closed by the node"
                    if not line.endswith(b"\n"):
                        return started, "status stream cut in the middle of a line"
                    event = decode(line)
                    now = self._clock.monotonic()
                    if isinstance(event, Snapshot):
                        if event.status.node != name:
                            raise WatchProtocolError(f"a snapshot of node {event.status.node!r}")
                        self._view.stream_started(name, event.status, now)
                        if not started and self._metrics:
                            self._metrics.stream_up.labels(name).set(1)
                            self._metrics.node_up.labels(name).set(1)
                        started = True
                    elif not started:
                        raise WatchProtocolError("a first line that is not the snapshot")
                    elif isinstance(event, Changed):
                        if any(c.node != name for c in event.copies):
                            raise WatchProtocolError("a copy of another node")
                        self._view.copies_reported(name, event.copies, now)
                        if self._metrics:
                            self._metrics.stream_events.labels(name).inc(len(event.copies))
                    else:
                        assert isinstance(event, Heartbeat)
                        self._view.stream_heard(name, now)
        except WatchProtocolError as exc:
            return started, f"status stream sent {exc}"
        except ValueError as exc:  # aiohttp: a line longer than the buffer
            return started, f"status stream sent a line too long ({exc})"
        except TimeoutError:
            return started, f"status stream silent for {self._silence:g}s"
        except (aiohttp.ClientError, OSError) as exc:
            return started, f"status stream: {exc.__class__.__name__}: {exc}"
