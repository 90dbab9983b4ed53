"""A move's counters as a node_exporter textfile (`mrs move|resume --metrics-textfile F`).

Why a textfile and not an HTTP port: `mrs` runs one move and exits, and what an operator
must see is how it ended (Completed or Failed, items copied, time stalled).  A scrape
endpoint disappears with the process, so a move that fails between two scrapes is never
seen, and every concurrent `mrs` would need a port and a scrape target of its own.  The
textfile outlives the process (node_exporter serves it until it is deleted) and carries the
time of its last update, so a move that hangs shows as a stale file.

The file is written whole and renamed into place (`write_to_textfile`), so node_exporter
never reads half of it; it is rewritten on the mover's progress (every step, sync batch and
stall), at most once a second unless the state or step changed, and once more at the end.
Everything in it is read from the move request (persistent across `mrs resume`), so the
counters only grow for a given move id.  One file per move: node_exporter reads every
`*.prom` in its directory, and two processes writing one file would replace each other.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from dag_common.clock import Clock
from dag_common.scrape_collector import ScrapeCollector
from mrs_client.item_limits import counts
from mrs_client.move_store.interface import AnswerRow, MoveRecord
from mrs_client.policy import MoveState

logger = logging.getLogger(__name__)


class _MoveCollector(ScrapeCollector):
    def __init__(self, file: MoveMetricsFile) -> None:
        self._file = file

    def collect(self) -> Iterator[Metric]:
        record = self._file.record
        if record is None:
            return
        move = [record.id]

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=["move_id"])
            family.add_metric(move, value)
            return family

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=["move_id"])
            family.add_metric(move, value)
            return family

        info = GaugeMetricFamily(
            "mrs_move_info",
            "A move request: its mailboxes and databases.",
            labels=["move_id", "mailboxes", "source_database", "target_database"],
        )
        info.add_metric([record.id, ",".join(record.mailboxes), record.source_db,
                         record.target_db], 1)  # fmt: skip
        yield info
        state = GaugeMetricFamily(
            "mrs_move_state", "1 for the move's state, 0 for every other one.",
            labels=["move_id", "state"],
        )  # fmt: skip
        for s in MoveState:
            state.add_metric([record.id, s.value], 1 if record.state is s else 0)
        yield state
        yield gauge("mrs_move_step", "The step in progress (1-10), or the one that failed.",
                    int(record.step))  # fmt: skip
        yield gauge("mrs_move_steps_done", "The last step completed (0-10).", record.steps_done)
        yield gauge("mrs_move_stalled", "1 while the move is stalled (waiting on the guarantee "
                    "or a node).", 1 if record.stall_reason else 0)  # fmt: skip
        yield counter("mrs_move_items_copied", "Items written to the target.", record.items_copied)
        yield counter("mrs_move_copied_bytes", "Bytes of items written to the target.",
                      record.bytes_copied)  # fmt: skip
        yield counter("mrs_move_stalled_seconds", "Time the move spent stalled.",
                      record.time_stalled)  # fmt: skip
        yield counter("mrs_move_reconciles", "Reconciles by content (after a change of epoch, "
                      "a lost flush or a difference found).", record.reconciles)  # fmt: skip
        yield counter("mrs_move_items_repaired", "Target items put or deleted by reconciles.",
                      record.items_repaired)  # fmt: skip
        # A gauge: an item written again small enough, or deleted, is skipped no more.
        skipped = GaugeMetricFamily(
            "mrs_move_items_skipped",
            "Source items the move skips, by reason: large (over the target's "
            "max_item_size) or bad (the source cannot read them).",
            labels=["move_id", "reason"],
        )
        for reason, count in counts(record.skipped).items():
            skipped.add_metric([record.id, reason.value], count)
        yield skipped
        answers = CounterMetricFamily(
            "mrs_guarantee_answers",
            "Data Guarantee answers the move got, by method and status.",
            labels=["move_id", "method", "status"],
        )
        for (method, status), count in sorted(self._file.answer_counts().items()):
            answers.add_metric([record.id, method, status], count)
        yield answers
        yield gauge("mrs_move_last_update_timestamp_seconds",
                    "When mrs last wrote this file (Unix time): a running move whose file "
                    "stops changing is hung.", self._file.written_at)  # fmt: skip


class MoveMetricsFile:
    """Progress listener `(record, line)` that keeps a move's textfile up to date."""

    def __init__(
        self,
        path: Path,
        *,
        answers: Callable[[str], list[AnswerRow]],
        clock: Clock,
        min_interval: float = 1.0,
    ) -> None:
        self.path = path
        self._answers = answers
        self._clock = clock
        self._min_interval = min_interval
        self.record: MoveRecord | None = None
        self.written_at = 0.0
        self._last_write = float("-inf")
        self._written_key: tuple[object, ...] | None = None
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_MoveCollector(self))

    def answer_counts(self) -> dict[tuple[str, str], int]:
        assert self.record is not None
        return dict(Tally((a.method, a.status) for a in self._answers(self.record.id)))

    def __call__(self, record: MoveRecord, line: str) -> None:
        self.record = record
        key = (record.id, record.state, record.step, record.stall_reason is None)
        if key != self._written_key or (
            self._clock.monotonic() - self._last_write >= self._min_interval
        ):
            self.write()

    def write(self, record: MoveRecord | None = None) -> None:
        """Write the file now (atomically), from `record` or the last one seen."""
        if record is not None:
            self.record = record
        if self.record is None:
            return
        self.written_at = self._clock.now().timestamp()
        self._last_write = self._clock.monotonic()
        try:
            write_to_textfile(str(self.path), self._registry)
        except OSError as exc:  # metrics must never stop a move
            logger.warning("cannot write the metrics textfile %s: %s", self.path, exc)
        r = self.record
        self._written_key = (r.id, r.state, r.step, r.stall_reason is None)
