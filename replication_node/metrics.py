"""Prometheus metrics of a replication node, served at `GET /metrics` (no token).

Two kinds, kept apart so the commit path pays almost nothing:

- Events are counted where they happen, in a registry of this node's own (several nodes can
  live in one test process): the active's log writer observes once per group commit (never
  per record) and per fsync, the copier per generation, the replayer per batch.  Components
  get them as a keyword argument, bound to their database (`StreamMetrics`, `CopyMetrics`),
  and take None to count nothing.
- State that `Node.status()` already holds (the markers, queue lengths, copy status, role,
  epoch) is read at scrape time by `NodeStatusCollector`: nothing to keep in step.

Names use the DESIGN vocabulary (`replication_last_log_replayed`, `copy_queue_length`), with
`_total`, `_seconds` and `_bytes` suffixes, and pass `promtool check metrics`.  Every metric
of a database copy carries `database` and `node` (the replication node's name, as in the
guarantee service's metrics, so the two join without relabelling).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from dag_common.model import CopyMode, CopyRole, CopyStatus, NodeStatus, RollCause
from dag_common.route_roles import PUBLIC, add_route
from dag_common.scrape_collector import ScrapeCollector

CONTENT_TYPE = CONTENT_TYPE_LATEST

_COMMIT_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip
_FSYNC_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip
_GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_MIB = 1 << 20
_BLOCK_BUCKETS = tuple(n * _MIB for n in (0.0625, 0.25, 1, 2, 4, 8, 10, 16, 24, 32))
_REPLAY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

_COPY = ["database", "node"]


class StreamMetrics:
    """The active log writer's metrics for one database, children bound once (hot path)."""

    def __init__(self, metrics: NodeMetrics, database: str) -> None:
        labels = (database, metrics.node)
        self.commits = metrics.commits.labels(*labels)
        self.commit_latency = metrics.commit_latency.labels(*labels)
        self.group_commit_size = metrics.group_commit_size.labels(*labels)
        self.fsync = metrics.fsync_duration.labels(*labels)
        self.rolls = {cause: metrics.log_rolls.labels(*labels, str(cause)) for cause in RollCause}
        self.block_publish = metrics.block_publish_bytes.labels(*labels)

    def group_commit(self, records: int, oldest_wait: float) -> None:
        """One group commit answered: `records` commits, the first queued `oldest_wait` s ago."""
        self.commits.inc(records)
        self.group_commit_size.observe(records)
        self.commit_latency.observe(oldest_wait)

    def roll(self, cause: RollCause) -> None:
        self.rolls[cause].inc()

    def blocks_published(self, size: int) -> None:
        """`size` bytes of blocks published to the copies in block mode at once."""
        self.block_publish.observe(size)


class CopyMetrics:
    """A passive copy's pipeline metrics (copier, replayer, truncation) for one database."""

    def __init__(self, metrics: NodeMetrics, database: str) -> None:
        labels = (database, metrics.node)
        self.generations_copied = metrics.generations_copied.labels(*labels)
        self.copied_bytes = metrics.copied_bytes.labels(*labels)
        self.inspection_failures = metrics.inspection_failures.labels(*labels)
        self.recopies = metrics.recopies.labels(*labels)
        self.from_other_copies = metrics.from_other_copies.labels(*labels)
        self.generations_replayed = metrics.generations_replayed.labels(*labels)
        self.replay_batch = metrics.replay_batch_duration.labels(*labels)
        self.truncated = metrics.truncated_generations.labels(*labels)

    def copied(self, size: int) -> None:
        """One generation fetched from the active's log share (`size` bytes)."""
        self.generations_copied.inc()
        self.copied_bytes.inc(size)

    def inspection_failed(self, recopy: bool) -> None:
        """A generation failed inspection; `recopy`: it will be copied again (else the copy
        stops FailedAndSuspended)."""
        self.inspection_failures.inc()
        if recopy:
            self.recopies.inc()

    def from_other_copy(self) -> None:
        """A generation that failed inspection from the active, taken from another copy."""
        self.inspection_failures.inc()
        self.from_other_copies.inc()

    def replayed(self, generations: int, seconds: float) -> None:
        self.generations_replayed.inc(generations)
        self.replay_batch.observe(seconds)


class NodeMetrics:
    """Every metric a replication node exports, in its own registry."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # ---- the active copy's log stream ------------------------------------------------
        self.commits = Counter(
            "replication_commits_total",
            "Transactions committed (durable and acknowledged) by the active copy.",
            _COPY,
            registry=r,
        )
        self.commit_latency = Histogram(
            "replication_commit_duration_seconds",
            "Per group commit: time from the first commit queued to every commit of the group "
            "acknowledged (the slowest commit of the group).",
            _COPY,
            buckets=_COMMIT_BUCKETS,
            registry=r,
        )
        self.group_commit_size = Histogram(
            "replication_group_commit_size",
            "Commits written and acknowledged together by one group commit (one fsync).",
            _COPY,
            buckets=_GROUP_BUCKETS,
            registry=r,
        )
        self.fsync_duration = Histogram(
            "replication_log_fsync_duration_seconds",
            "Duration of each fsync of the active's log (commits and rolls).",
            _COPY,
            buckets=_FSYNC_BUCKETS,
            registry=r,
        )
        self.block_publish_bytes = Histogram(
            "replication_log_block_publish_bytes",
            "Bytes of the active's log published at once to the copies in block mode (a "
            "batch, or a span of a large body's generations held until durable); none is "
            "made while no copy follows.",
            _COPY,
            buckets=_BLOCK_BUCKETS,
            registry=r,
        )
        self.audit_events = Counter(
            "replication_audit_events_total",
            "Audited calls to this node (operator and mover actions, role changes between "
            "nodes, every refused call), by the role they needed and their result (done, "
            "refused, failed).",
            ["role", "result"],
            registry=r,
        )
        self.log_rolls = Counter(
            "replication_log_rolls_total",
            "Generations closed by the active, by cause (size, demand, idle, switchover, "
            "dismount).",
            [*_COPY, "cause"],
            registry=r,
        )
        self.truncated_generations = Counter(
            "replication_truncated_generations_total",
            "Closed generations deleted by log truncation on this copy (active or passive).",
            _COPY,
            registry=r,
        )
        self.llr_generations_mended = Counter(
            "replication_llr_generations_mended_total",
            "Generations of the active's LLR window damaged on its disk and taken whole from "
            "a copy (active/log_mend.py).",
            _COPY,
            registry=r,
        )
        # ---- a passive copy's pipeline ---------------------------------------------------
        self.generations_copied = Counter(
            "replication_generations_copied_total",
            "Generations fetched from the active's log share (recopies included).",
            _COPY,
            registry=r,
        )
        self.copied_bytes = Counter(
            "replication_copied_bytes_total",
            "Bytes of generations fetched from the active's log share.",
            _COPY,
            registry=r,
        )
        self.inspection_failures = Counter(
            "replication_inspection_failures_total",
            "Generations that failed inspection (each is set aside in IgnoredLogs).",
            _COPY,
            registry=r,
        )
        self.recopies = Counter(
            "replication_recopies_total",
            "Generations copied again after failing inspection.",
            _COPY,
            registry=r,
        )
        self.from_other_copies = Counter(
            "replication_generations_from_other_copies_total",
            "Generations that failed inspection from the active and were taken whole from "
            "another copy on the same epoch.",
            _COPY,
            registry=r,
        )
        self.generations_replayed = Counter(
            "replication_generations_replayed_total",
            "Generations replayed into the passive database copy.",
            _COPY,
            registry=r,
        )
        self.replay_batch_duration = Histogram(
            "replication_replay_batch_duration_seconds",
            "Time to read, verify and apply one replay batch (up to 16 generations, one "
            "database transaction).",
            _COPY,
            buckets=_REPLAY_BUCKETS,
            registry=r,
        )

        # ---- the change feed (`http/changes_routes.py`) -----------------------------------
        self.change_waiters = Gauge(
            "replication_change_waiters",
            "Requests waiting on a mailbox's change feed now (GET …/changes), at most the "
            "node's change_waiters.",
            registry=r,
        )
        self.change_waiters_refused = Counter(
            "replication_change_waiters_refused",
            "Change-feed requests refused (503, Retry-After) because the node had "
            "change_waiters waiting already.",
            registry=r,
        )

    def stream(self, database: str) -> StreamMetrics:
        return StreamMetrics(self, database)

    def copy(self, database: str) -> CopyMetrics:
        return CopyMetrics(self, database)

    def truncated(self, database: str) -> Counter:
        """The active's count of generations its log truncation deleted."""
        return self.truncated_generations.labels(database, self.node)

    def mended(self, database: str) -> Callable[[], None]:
        """Counts a generation of the active's LLR window taken whole from a copy."""
        return self.llr_generations_mended.labels(database, self.node).inc

    def watch(self, collector: Collector) -> None:
        """Read `collector` at every scrape (the node's status)."""
        self.registry.register(collector)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class NodeStatusCollector(ScrapeCollector):
    """Per-copy gauges read from `Node.status()` at scrape time: nothing on the hot paths.

    `status` is the node's status, `configured_copies` the number of copies the config gives
    each database this node holds, `unexpected_errors` the node's count of requests that
    failed on a bug."""

    def __init__(
        self,
        *,
        cluster: Callable[[], str],
        status: Callable[[], NodeStatus],
        configured_copies: Callable[[], dict[str, int]],
        unexpected_errors: Callable[[], int],
    ) -> None:
        self._cluster = cluster
        self._status = status
        self._configured = configured_copies
        self._unexpected = unexpected_errors

    def collect(self) -> Iterator[Metric]:
        status = self._status()

        def gauge(name: str, doc: str, labels: list[str] = _COPY) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

        info = gauge(
            "replication_node_info", "This replication node: name, site, cluster.",
            ["node", "site", "cluster"],
        )  # fmt: skip
        info.add_metric([status.node, status.site, self._cluster()], 1)
        yield info
        errors = CounterMetricFamily(
            "replication_unexpected_errors",
            "HTTP requests that failed on a bug (answered 500).",
            labels=["node"],
        )
        errors.add_metric([status.node], self._unexpected())
        yield errors
        copies = gauge(
            "replication_database_configured_copies",
            "Copies the cluster config gives a database this node holds a copy of.",
            ["database"],
        )
        for database, count in sorted(self._configured().items()):
            copies.add_metric([database], count)
        yield copies

        per_copy = {
            "copy_queue_length": (
                "replication_copy_queue_length",
                "Copy queue length (LastLogGenerated - LastLogInspected), in logs.",
            ),
            "replay_queue_length": (
                "replication_replay_queue_length",
                "Replay queue length (LastLogInspected - LastLogReplayed), in logs.",
            ),
            "last_log_generated": (
                "replication_last_log_generated",
                "LastLogGenerated: the last generation of the active's stream known to this "
                "copy, the open log counted once it holds an acknowledged commit.",
            ),
            "last_log_copy_notified": (
                "replication_last_log_copy_notified",
                "LastLogCopyNotified: the last generation the copy was told of.",
            ),
            "last_log_copied": (
                "replication_last_log_copied", "LastLogCopied: the last generation copied.",
            ),
            "last_log_inspected": (
                "replication_last_log_inspected",
                "LastLogInspected: the last generation that passed inspection.",
            ),
            "last_log_replayed": (
                "replication_last_log_replayed",
                "LastLogReplayed: the last generation replayed into the database copy.",
            ),
            "open_commits": (
                "replication_open_log_commits",
                "Acknowledged commits in the active's open log E00.log, as this copy knows.",
            ),
            "epoch": (
                "replication_epoch",
                "The stream incarnation (epoch) the copy serves (active) or follows (passive; "
                "0 until shown).",
            ),
            "activation_preference": (
                "replication_activation_preference", "The copy's activation preference.",
            ),
        }  # fmt: skip
        families = {field: gauge(name, doc) for field, (name, doc) in per_copy.items()}
        inspected_time = gauge(
            "replication_last_inspected_log_timestamp_seconds",
            "Close time of the last inspected generation (Unix time; absent until one is).",
        )
        replayed_time = gauge(
            "replication_last_replayed_log_timestamp_seconds",
            "Close time of the last replayed generation (Unix time; absent until one is).",
        )
        replay_lag = gauge(
            "replication_replay_lag_time_seconds", "The copy's configured ReplayLagTime."
        )
        truncation_lag = gauge(
            "replication_truncation_lag_time_seconds", "The copy's configured TruncationLagTime."
        )
        copy_status = gauge(
            "replication_copy_status",
            "Copy status: 1 for the copy's current status, 0 for every other one.",
            [*_COPY, "status"],
        )
        copy_mode = gauge(
            "replication_copy_mode",
            "How a passive copy receives the log: 1 for its current mode (Block or File), 0 "
            "for the other (an active copy: absent).",
            [*_COPY, "mode"],
        )
        role = gauge(
            "replication_copy_role",
            "The copy's role: 1 for its current role (Active or Passive), 0 for the other.",
            [*_COPY, "role"],
        )
        scrub_time = gauge(
            "replication_last_scrub_timestamp_seconds",
            "When the background scrub last finished a pass over the copy's file (Unix time; "
            "absent before the first pass).",
        )
        scrub_ok = gauge(
            "replication_last_scrub_ok",
            "1 if the last scrub pass found every page sound and the rows adding up to the "
            "content digest, 0 if it found damage (absent before the first pass).",
        )
        for c in status.copies:
            labels = [c.database, c.node]
            if c.last_scrub_time is not None:
                scrub_time.add_metric(labels, c.last_scrub_time.timestamp())
                scrub_ok.add_metric(
                    labels, 1 if (c.last_scrub_result or "").startswith("ok") else 0
                )
            for field, family in families.items():
                family.add_metric(labels, float(getattr(c, field)))
            # "Never" is no sample, not a 0 that a `time() - …` would call 56 years old.
            if c.last_inspected_log_time is not None:
                inspected_time.add_metric(labels, c.last_inspected_log_time.timestamp())
            if c.last_replayed_log_time is not None:
                replayed_time.add_metric(labels, c.last_replayed_log_time.timestamp())
            replay_lag.add_metric(labels, c.replay_lag_time.total_seconds())
            truncation_lag.add_metric(labels, c.truncation_lag_time.total_seconds())
            for s in CopyStatus:
                copy_status.add_metric([*labels, s.value], 1 if c.status is s else 0)
            for r in CopyRole:
                role.add_metric([*labels, r.value], 1 if c.role is r else 0)
            if c.role is CopyRole.PASSIVE:
                for mode in CopyMode:
                    copy_mode.add_metric([*labels, mode.value], 1 if c.copy_mode is mode else 0)
        yield from families.values()
        yield from (inspected_time, replayed_time, replay_lag, truncation_lag, copy_status, role)
        yield copy_mode
        yield from (scrub_time, scrub_ok)


METRICS: web.AppKey[NodeMetrics] = web.AppKey("metrics", NodeMetrics)


async def metrics_handler(request: web.Request) -> web.Response:
    """`GET /metrics`: the Prometheus text format (no token: see httpauth.OPEN_PATHS)."""
    return web.Response(body=request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE})


def add_metrics_route(app: web.Application, metrics: NodeMetrics) -> None:
    app[METRICS] = metrics
    add_route(app, "GET", "/metrics", metrics_handler, PUBLIC)
