"""A process's memory for Prometheus: prometheus_client's process metrics
(`process_resident_memory_bytes`), its peak, its cgroup's limit and its memory budget
(`dag_common.memory`).  Apart from `memory.py` so that a command line that only sets the
allocator does not import prometheus_client."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from dag_common.memory import MemoryBudget, memory_limit, resident_memory
from dag_common.scrape_collector import ScrapeCollector


class MemoryCollector(ScrapeCollector):
    """The process's memory for Prometheus, beside `prometheus_client`'s ProcessCollector
    (which gives `process_resident_memory_bytes`): its peak resident memory, its cgroup's
    limit when it has one, and the budget's size, use and refusals."""

    def __init__(self, budget: MemoryBudget | None = None) -> None:
        self.budget = budget

    def collect(self) -> Iterator[Metric]:
        try:
            peak = resident_memory().peak
        except OSError:
            peak = None
        if peak is not None:
            yield GaugeMetricFamily(
                "process_resident_memory_peak_bytes",
                "The most resident memory the process has held since it started (VmHWM).",
                value=peak,
            )
        limit = memory_limit()
        if limit is not None:
            yield GaugeMetricFamily(
                "process_memory_limit_bytes",
                "The memory limit of the process's cgroup (the pod's limit).",
                value=limit,
            )
        if self.budget is not None:
            yield GaugeMetricFamily(
                "memory_budget_bytes",
                "Bytes of bodies the process holds in flight at most (its memory budget).",
                value=self.budget.limit,
            )
            yield GaugeMetricFamily(
                "memory_budget_in_use_bytes",
                "Bytes of bodies in flight now, taken from the memory budget.",
                value=self.budget.in_use,
            )
            refused = CounterMetricFamily(
                "memory_budget_refused",
                "Requests refused (503) because the memory budget had no room in time.",
            )
            refused.add_metric([], self.budget.refused)
            yield refused


def watch_memory(registry: CollectorRegistry, budget: MemoryBudget | None = None) -> None:
    """Register the process's memory metrics in `registry`: prometheus_client's process
    metrics and `MemoryCollector`'s."""
    ProcessCollector(registry=registry)
    registry.register(MemoryCollector(budget))
