"""The live view: the latest status of every configured database copy, when it was seen,
and how fast it is moving.

The poller and the watchers (pushed progress, `watcher.py`) write it; requests read frozen
`DatabaseView` snapshots of it, and a request that waits (`wait_change`) wakes at every
change. Nothing here waits on a node.  While a node's status stream is live its changes
arrive as they happen and its heartbeats keep what it sent fresh; the poller leaves such a
node alone (a poll answered after a newer pushed change would set the view back).

Freshness rule: a copy's status is trusted only while its node's last poll
succeeded and the status is at most `stale_after` seconds old (by default 3 poll intervals:
one slow or lost poll is tolerated, a dead node is noticed within seconds). A configured
copy that its node does not report, or whose node cannot be reached, stays in the view with
the reason, so the rules count it as not healthy instead of dropping it.

Stream history: each database's epochs as the cluster store records them, read every poll
round; a flush by an LSN with an epoch is judged against it.  Until it is read, or after a
round failed to read it, it is unknown (None) and such a flush is Retry.

Rates (for predicting when a draining copy will meet the conditions) are taken between the
oldest and newest poll within `rate_window` seconds (default 5 s): short enough that a queue
that grew and now drains is seen draining, long enough to smooth one poll's jitter.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from dag_common.clock import Clock
from dag_common.config import ClusterConfig
from dag_common.guarantee.values import CopyRates, CopySnapshot, DatabaseView
from dag_common.incarnation import EpochRecord
from dag_common.model import CopyStatusReport, NodeStatus
from dag_common.tasks import cancel_and_wait

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Sample:
    at: float  # monotonic seconds
    copy_queue: int
    replayed: int
    replayed_log_time: float | None  # POSIX seconds


@dataclass(frozen=True, slots=True)
class CopyState:
    """What the view holds for one copy: its last report, when seen, its rates."""

    report: CopyStatusReport
    seen: float
    rates: CopyRates


class LiveView:
    """Latest status per configured copy, updated by the poller, read by requests."""

    def __init__(
        self, config: ClusterConfig, *, stale_after: float, rate_window: float = 5.0
    ) -> None:
        self._stale_after = stale_after
        self._rate_window = rate_window
        self._sites = {n.name: n.site for n in config.nodes}
        self._copies: dict[str, tuple[str, ...]] = {
            db.name: tuple(c.node for c in db.copies) for db in config.databases
        }
        self._wanted = {(db, node) for db, nodes in self._copies.items() for node in nodes}
        self._states: dict[tuple[str, str], CopyState] = {}
        self._history: dict[tuple[str, str], deque[_Sample]] = {}
        self._node_error: dict[str, str | None] = {}  # absent: never polled
        self._has_status: set[str] = set()
        self._stream_history: dict[str, tuple[EpochRecord, ...] | None] = {}
        self._streaming: set[str] = set()  # nodes whose status stream is live
        self._heard: dict[str, float] = {}  # a live stream's last line, monotonic
        self._on_node: dict[str, tuple[str, ...]] = {
            node: tuple(db for db, nodes in self._copies.items() if node in nodes)
            for node in self._sites
        }
        self.rounds_completed = 0
        # Each database's version, bumped by every change of what its answers read (its
        # copies, their nodes' reachability, its stream history): answers may be cached by
        # it, and a waiting request wakes only when its own database changes.
        self._versions: dict[str, int] = dict.fromkeys(self._copies, 0)
        self._changed: dict[str, asyncio.Event] = {}

    def version(self, database: str) -> int:
        return self._versions[database]

    def _bump(self, databases: Iterable[str]) -> None:
        for db in databases:
            self._versions[db] += 1
            event = self._changed.pop(db, None)
            if event is not None:
                event.set()

    async def wait_change(self, database: str, version: int, until: float, clock: Clock) -> bool:
        """Wait until `clock`'s monotonic time `until` for `database` to change from
        `version`; whether it did.  The end is a time, not a length: the timer counts what
        is left when it starts, so time that passed since the caller looked (a task's first
        step comes a loop turn later) is not waited again."""
        if self._versions[database] != version:
            return True
        event = self._changed.setdefault(database, asyncio.Event())
        changed = asyncio.ensure_future(event.wait())
        timer = asyncio.ensure_future(_sleep_until(clock, until))
        try:
            await asyncio.wait({changed, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel_and_wait([changed, timer])
        return self._versions[database] != version

    @property
    def databases(self) -> tuple[str, ...]:
        return tuple(self._copies)

    def knows(self, database: str) -> bool:
        """Whether `database` is in the cluster config."""
        return database in self._copies

    def node_polled(self, node: str, status: NodeStatus, now: float) -> None:
        """Record `node`'s whole status, polled (or a stream's snapshot) at monotonic `now`."""
        self.copies_reported(node, status.copies, now)

    def copies_reported(self, node: str, reports: Iterable[CopyStatusReport], now: float) -> None:
        """Record statuses `node` gave at monotonic time `now` (all, or those that changed)."""
        # A node heard from again changes every one of its databases' answers.
        changed = set() if self._node_error.get(node, "") is None else set(self._dbs_of(node))
        self._node_error[node] = None
        for report in reports:
            key = (report.database, node)
            if report.node != node or key not in self._wanted:
                logger.debug("ignoring unconfigured copy %s on %s", report.database, node)
                continue
            self._has_status.add(report.database)
            self._states[key] = CopyState(report, now, self._rates(key, report, now))
            changed.add(report.database)
        if node in self._streaming:
            self._heard[node] = now
        self._bump(changed)

    def _dbs_of(self, node: str) -> tuple[str, ...]:
        return self._on_node.get(node, ())

    def node_failed(self, node: str, error: str) -> None:
        """Record that `node` could not be polled: its copies are not healthy for now."""
        if self._node_error.get(node) != error:
            logger.warning("node %s unreachable: %s", node, error)
        self._node_error[node] = error
        self._bump(self._dbs_of(node))

    def stream_started(self, node: str, status: NodeStatus, now: float) -> None:
        """`node`'s status stream is live, with its snapshot: its changes come pushed."""
        self._streaming.add(node)
        self.node_polled(node, status, now)

    def stream_heard(self, node: str, now: float) -> None:
        """A heartbeat: the node stands by every status its stream sent."""
        if node in self._streaming:
            self._heard[node] = now

    def stream_ended(self, node: str, why: str) -> None:
        """The stream ended (closed, garbage, silent past its limit): the node counts as
        unreachable until a poll or a new stream says otherwise."""
        self._streaming.discard(node)
        self._heard.pop(node, None)
        self.node_failed(node, why)

    def streaming(self, node: str) -> bool:
        return node in self._streaming

    def history_read(self, database: str, records: list[EpochRecord]) -> None:
        """Record the stream history of `database` as just read from the cluster store."""
        history = tuple(sorted(records, key=lambda r: r.epoch))
        if self._stream_history.get(database) != history:
            self._stream_history[database] = history
            self._bump([database])

    def history_failed(self, database: str, error: str) -> None:
        """The stream history of `database` could not be read: unknown until it can."""
        if self._stream_history.get(database, ()) is not None:
            logger.warning("stream history of %s unknown: %s", database, error)
            self._stream_history[database] = None
            self._bump([database])
        else:
            self._stream_history[database] = None

    @property
    def reachable_nodes(self) -> int:
        """How many nodes answered their last poll."""
        return sum(1 for error in self._node_error.values() if error is None)

    def round_completed(self) -> None:
        self.rounds_completed += 1

    def _rates(self, key: tuple[str, str], r: CopyStatusReport, now: float) -> CopyRates:
        t = r.last_replayed_log_time.timestamp() if r.last_replayed_log_time else None
        sample = _Sample(now, r.copy_queue_length, r.last_log_replayed, t)
        hist = self._history.setdefault(key, deque(maxlen=64))
        if hist and (sample.replayed < hist[-1].replayed or now <= hist[-1].at):
            hist.clear()  # reseeded or restarted: old progress says nothing about new
        hist.append(sample)
        while len(hist) > 2 and now - hist[0].at > self._rate_window:
            hist.popleft()
        if len(hist) < 2:
            return CopyRates()
        first, dt = hist[0], now - hist[0].at
        time_rate = None
        if first.replayed_log_time is not None and sample.replayed_log_time is not None:
            time_rate = (sample.replayed_log_time - first.replayed_log_time) / dt
        return CopyRates(
            copy_queue_per_s=(sample.copy_queue - first.copy_queue) / dt,
            replayed_per_s=(sample.replayed - first.replayed) / dt,
            replayed_log_time_per_s=time_rate,
        )

    def copy_state(self, database: str, node: str) -> CopyState | None:
        return self._states.get((database, node))

    def problem(self, database: str, node: str, now: float) -> str | None:
        """Why the copy's status cannot be trusted at monotonic time `now`, or None."""
        if node not in self._node_error:
            return f"no status from node {node} yet"
        error = self._node_error[node]
        if error is not None:
            return f"node {node} unreachable: {error}"
        state = self._states.get((database, node))
        if state is None:
            return f"node {node} does not report a copy of {database}"
        age = now - max(state.seen, self._heard.get(node, state.seen))
        if age > self._stale_after:
            return f"status stale: last seen {age:.1f}s ago (limit {self._stale_after:g}s)"
        return None

    def snapshot(self, database: str, now: float) -> DatabaseView:
        """Every configured copy of `database` as of monotonic time `now`; KeyError if unknown."""
        copies = []
        for node in self._copies[database]:
            state = self._states.get((database, node))
            report = state.report if state else None
            copies.append(
                CopySnapshot(
                    database=database,
                    node=node,
                    site=report.site if report else self._sites[node],
                    report=report,
                    problem=self.problem(database, node, now),
                    rates=state.rates if state else CopyRates(),
                )
            )
        return DatabaseView(
            database,
            tuple(copies),
            has_status=database in self._has_status,
            history=self._stream_history.get(database),
        )


async def _sleep_until(clock: Clock, until: float) -> None:
    await clock.sleep(max(0.0, until - clock.monotonic()))
