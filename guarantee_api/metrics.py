"""Prometheus metrics of the Data Guarantee service, in a registry of its own (so that
several services can live in one test process), served on `http_listen` at /metrics.

Names use the DESIGN vocabulary and pass `promtool check metrics`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from dag_common.guarantee.values import CopySnapshot
from dag_common.model import CopyStatus

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)  # fmt: skip


class Metrics:
    """Every metric the service exports."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "dataguarantee_requests_total",
            "Data Guarantee calls, by method, gRPC code (OK: answered; UNAUTHENTICATED and "
            "PERMISSION_DENIED: refused before it was read) and answer status (empty unless "
            "the code is OK).",
            ["method", "code", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "dataguarantee_request_duration_seconds",
            "Time to answer a Data Guarantee request, by method.",
            ["method"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.copy_queue = Gauge(
            "dataguarantee_copy_queue_length",
            "Copy queue length (LastLogGenerated - LastLogInspected) of a database copy, in logs.",
            ["database", "node"],
            registry=r,
        )
        self.replay_queue = Gauge(
            "dataguarantee_replay_queue_length",
            "Replay queue length (LastLogInspected - LastLogReplayed) of a database copy, in logs.",
            ["database", "node"],
            registry=r,
        )
        self.copy_healthy = Gauge(
            "dataguarantee_copy_healthy",
            "1 if a database copy is fresh and Healthy (passive) or Mounted (active), else 0.",
            ["database", "node"],
            registry=r,
        )
        self.node_up = Gauge(
            "dataguarantee_node_up",
            "1 if the node's status stream is live or its last status poll succeeded.", ["node"],
            registry=r,
        )  # fmt: skip
        self.stream_up = Gauge(
            "dataguarantee_node_stream_up",
            "1 while the node's status stream (GET /v1/status/watch) is live.",
            ["node"],
            registry=r,
        )
        self.stream_events = Counter(
            "dataguarantee_stream_events_total",
            "Copy status changes pushed by the node's stream (one per copy).",
            ["node"],
            registry=r,
        )
        self.stream_ends = Counter(
            "dataguarantee_stream_ends_total",
            "Status streams that ended or could not be opened, by node.",
            ["node"],
            registry=r,
        )
        self.poll_errors = Counter(
            "dataguarantee_poll_errors_total", "Failed status polls, by node.", ["node"],
            registry=r,
        )  # fmt: skip
        self.poll_rounds = Counter(
            "dataguarantee_poll_rounds_total", "Completed poll rounds over every node.",
            registry=r,
        )  # fmt: skip
        self.serving = Gauge(
            "dataguarantee_serving", "1 once the first poll round is done, until shutdown.",
            registry=r,
        )  # fmt: skip
        self.history_samples = Counter(
            "dataguarantee_history_samples_total", "Copy samples written to Parquet history.",
            registry=r,
        )  # fmt: skip
        self.history_errors = Counter(
            "dataguarantee_history_write_errors_total", "History files that failed to write.",
            registry=r,
        )  # fmt: skip
        self.http_refused = Counter(
            "dataguarantee_http_calls_refused_total",
            "Calls to the HTTP side (the status page) refused: 401 without a known credential, "
            "403 without the role the page needs.",
            ["role", "code"],
            registry=r,
        )
        self.unexpected = Counter(
            "dataguarantee_unexpected_errors_total", "Unexpected exceptions, by loop.", ["loop"],
            registry=r,
        )  # fmt: skip
        self._request_children: dict[tuple[str, str, str], Counter] = {}
        self._latency_children: dict[str, Histogram] = {}

    def _count(self, method: str, code: str, status: str) -> None:
        key = (method, code, status)
        counter = self._request_children.get(key)
        if counter is None:
            counter = self._request_children[key] = self.requests.labels(*key)
        counter.inc()

    def observe_request(self, method: str, code: str, seconds: float, status: str = "") -> None:
        """Count one call the servicer ended, with gRPC `code` (OK: answered `status`), and its
        latency (children cached: this is the hot path)."""
        self._count(method, code, status)
        hist = self._latency_children.get(method)
        if hist is None:
            hist = self._latency_children[method] = self.latency.labels(method)
        hist.observe(seconds)

    def refused(self, method: str, code: str) -> None:
        """Count one call refused before the servicer saw it (no credential, or no role)."""
        self._count(method, code, "")

    def observe_copies(self, copies: list[CopySnapshot]) -> None:
        """Publish the queue lengths and health of every configured copy after a poll."""
        for c in copies:
            r = c.report
            self.copy_queue.labels(c.database, c.node).set(r.copy_queue_length if r else 0)
            self.replay_queue.labels(c.database, c.node).set(r.replay_queue_length if r else 0)
            good = (
                c.fresh and r is not None and r.status in (CopyStatus.HEALTHY, CopyStatus.MOUNTED)
            )
            self.copy_healthy.labels(c.database, c.node).set(1 if good else 0)

    def render(self) -> bytes:
        return generate_latest(self.registry)
