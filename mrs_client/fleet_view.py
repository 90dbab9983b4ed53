"""What a worker shows of the fleet: Prometheus metrics and a status page of the batches
(`mrs serve --http-listen HOST:PORT`: `/metrics`, `/` and `/batches` as JSON).

`FleetSnapshot` is a frozen count of the move store (every batch's moves by state, their MB
and time stalled by reason), taken by the worker every `refresh` seconds rather than per
scrape: the store may hold thousands of moves, and a scrape must not read them all.  The
worker's own counters (moves it runs, ended, leases lost, retries) are read live.  Every
value on the page goes through `html.escape` (batch names, reasons and mailboxes come from
operators), and the page refreshes itself like the guarantee service's.
"""

from __future__ import annotations

import html
import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from dag_common.memory import MemoryBudget
from dag_common.memory_metrics import watch_memory
from dag_common.route_roles import PUBLIC, add_route
from dag_common.scrape_collector import ScrapeCollector
from mrs_client.move_store.interface import BatchRecord, MoveRecord
from mrs_client.policy import MoveState

if TYPE_CHECKING:
    from mrs_client.worker import Worker

NO_BATCH = ""  # the label of moves not in a batch (`mrs move`)
REFRESH_SECONDS = 5


@dataclass(frozen=True)
class BatchCounts:
    """One batch's moves, counted."""

    name: str
    status: str
    by_state: dict[str, int]
    bytes_copied: int
    stalled_by: dict[str, float]
    cap_mb_per_s: float | None = None


@dataclass(frozen=True)
class FleetSnapshot:
    """The move store counted at `taken` (module docstring)."""

    taken: datetime
    batches: tuple[BatchCounts, ...] = ()
    running: tuple[tuple[str, str, str], ...] = ()  # (move id, mailboxes, who holds it)

    @classmethod
    def of(
        cls,
        records: list[MoveRecord],
        batches: list[BatchRecord],
        holders: dict[str, str],
        taken: datetime,
    ) -> FleetSnapshot:
        by_state: dict[str, Counter[str]] = defaultdict(Counter)
        copied: Counter[str] = Counter()
        stalled: dict[str, Counter[str]] = defaultdict(Counter)
        for r in records:
            name = r.batch or NO_BATCH
            by_state[name][str(r.state)] += 1
            copied[name] += r.bytes_copied
            stalled[name].update(r.stalled_by)
        known = {b.name: b for b in batches}
        rows = []
        for name in sorted(set(by_state) | set(known)):
            b = known.get(name)
            rows.append(
                BatchCounts(
                    name=name,
                    status=_status(b),
                    by_state={str(s): by_state[name].get(str(s), 0) for s in MoveState},
                    bytes_copied=copied[name],
                    stalled_by=dict(stalled[name]),
                    cap_mb_per_s=b.settings.max_mb_per_s if b else None,
                )
            )
        names = {r.id: ",".join(r.mailboxes) for r in records}
        running = tuple(sorted((i, names.get(i, "?"), w) for i, w in holders.items()))
        return cls(taken, tuple(rows), running)


def _status(batch: BatchRecord | None) -> str:
    if batch is None:
        return "-"
    if batch.cancelled:
        return "Cancelled"
    if batch.suspended:
        return "Suspended"
    return "Completing" if batch.complete_requested else "Active"


class FleetCollector(ScrapeCollector):
    """`mrs_*` metrics from the worker's last snapshot and its counters."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    def collect(self) -> Iterator[Metric]:
        c = self._worker.stats
        running = len(self._worker.running)
        yield _gauge("mrs_worker_moves_running", "Moves this worker runs now.", running)
        ended = CounterMetricFamily(
            "mrs_worker_moves_ended", "Moves this worker ran to an end, by state.", labels=["state"]
        )
        for state, n in sorted(c.ended.items()):
            ended.add_metric([state], n)
        yield ended
        for name, doc, value in (
            ("mrs_worker_leases_lost", "Moves stopped because their lease was lost.", c.lost),
            ("mrs_worker_store_cut_off", "Moves stopped: the move store unreachable.", c.cut_off),
            ("mrs_worker_moves_busy", "Moves another worker started first.", c.busy),
            ("mrs_worker_retries", "Failed moves a batch queued again.", c.retried),
        ):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], value)
            yield family
        snap = self._worker.snapshot
        if snap is None:
            return
        moves = GaugeMetricFamily(
            "mrs_batch_moves",
            "Moves of each batch by state ('' : not in a batch).",
            labels=["batch", "state"],
        )
        copied = CounterMetricFamily(
            "mrs_batch_copied_bytes",
            "Bytes of item bodies the batch's moves copied.",
            labels=["batch"],
        )
        stalled = CounterMetricFamily(
            "mrs_batch_stalled_seconds",
            "Seconds the batch's moves were stalled, by reason (Exchange's status names).",
            labels=["batch", "reason"],
        )
        cap = GaugeMetricFamily(
            "mrs_batch_cap_bytes_per_second",
            "The batch's throughput cap (absent: none).",
            labels=["batch"],
        )
        for b in snap.batches:
            for state, n in b.by_state.items():
                moves.add_metric([b.name, state], n)
            copied.add_metric([b.name], b.bytes_copied)
            for reason, seconds in sorted(b.stalled_by.items()):
                stalled.add_metric([b.name, reason], seconds)
            if b.cap_mb_per_s is not None:
                cap.add_metric([b.name], b.cap_mb_per_s * 1e6)
        yield from (moves, copied, stalled, cap)
        yield _gauge(
            "mrs_snapshot_timestamp_seconds",
            "When the move store was last counted.",
            snap.taken.timestamp(),
        )


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc)
    family.add_metric([], value)
    return family


# ---- the page ---------------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 2em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
"""
_SHOWN = ("Queued", "InProgress", "Stalled", "Synced", "Suspended", "Failed", "Completed")


def render(worker: Worker) -> str:
    """The status page: the batches counted, the moves running anywhere."""
    e = html.escape
    snap, counters, me = worker.snapshot, worker.stats, worker.me
    head = (
        f"<!doctype html><html><head><meta charset='utf-8'>"
        f"<meta http-equiv='refresh' content='{REFRESH_SECONDS}'>"
        f"<title>mrs worker {e(me)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>mrs worker {e(me)}</h1><p>running {len(worker.running)} move(s) here; "
        f"ended {sum(counters.ended.values())}, leases lost {counters.lost}, "
        f"retried {counters.retried}</p>"
    )
    if snap is None:
        return head + "<p>the move store has not been counted yet</p></body></html>"
    rows = []
    for b in snap.batches:
        cells = "".join(f"<td class='num'>{b.by_state.get(s, 0)}</td>" for s in _SHOWN)
        stalled = ", ".join(f"{e(k)} {v:.0f} s" for k, v in sorted(b.stalled_by.items()))
        cap = "-" if b.cap_mb_per_s is None else f"{b.cap_mb_per_s:g} MB/s"
        rows.append(
            f"<tr><td>{e(b.name or '(single moves)')}</td><td>{e(b.status)}</td>{cells}"
            f"<td class='num'>{b.bytes_copied / 1e6:,.1f}</td><td>{e(cap)}</td>"
            f"<td>{stalled or '-'}</td></tr>"
        )
    header = "".join(f"<th>{s}</th>" for s in _SHOWN)
    running = "".join(
        f"<tr><td>{e(i)}</td><td>{e(m)}</td><td>{e(w)}</td></tr>" for i, m, w in snap.running
    )
    return (
        head
        + f"<h2>Batches (counted {e(snap.taken.isoformat(timespec='seconds'))})</h2><table>"
        + f"<tr><th>Batch</th><th>Status</th>{header}<th>MB</th><th>Cap</th>"
        + "<th>Stalled, by reason</th></tr>"
        + "".join(rows)
        + "</table><h2>Moves running (any worker)</h2><table><tr><th>Move</th>"
        + f"<th>Mailboxes</th><th>Worker</th></tr>{running}</table></body></html>"
    )


def as_json(snap: FleetSnapshot | None) -> list[dict[str, object]]:
    if snap is None:
        return []
    return [
        {
            "name": b.name,
            "status": b.status,
            "by_state": b.by_state,
            "megabytes": round(b.bytes_copied / 1e6, 3),
            "stalled_by": b.stalled_by,
            "cap_mb_per_s": b.cap_mb_per_s,
        }
        for b in snap.batches
    ]


def app(worker: Worker, budget: MemoryBudget | None = None) -> web.Application:
    """/metrics, / (the page) and /batches (JSON); the process's memory and the movers'
    `budget` among the metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(worker))
    watch_memory(registry, budget)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), content_type="text/plain")

    async def page(_: web.Request) -> web.Response:
        return web.Response(text=render(worker), content_type="text/html")

    async def batches(_: web.Request) -> web.Response:
        body = json.dumps(as_json(worker.snapshot), indent=2)
        return web.Response(text=body, content_type="application/json")

    # Public by design, as the guarantee service's status page and every /metrics: read by
    # Prometheus and a browser, which present no credential; keep the port on the cluster's
    # own network (the chart's NetworkPolicy does).
    application = web.Application()
    add_route(application, "GET", "/metrics", metrics, PUBLIC)
    add_route(application, "GET", "/", page, PUBLIC)
    add_route(application, "GET", "/batches", batches, PUBLIC)
    return application
