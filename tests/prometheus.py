"""Reading what the code exports for Prometheus (tests): promtool on a text or a rule file,
a scrape's samples, one sample's value, and the metric names every component exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dag_common.clock import ManualClock
from dag_common.model import NodeStatus
from guarantee_api.metrics import Metrics
from imap_front.metrics import FrontMetrics
from mrs_client.fleet_view import FleetCollector, FleetSnapshot
from mrs_client.metrics import MoveMetricsFile
from mrs_client.move_store.interface import BatchRecord
from mrs_client.move_store.records import BatchSettings
from mrs_client.worker import WorkerStats
from replication_node.metrics import NodeMetrics, NodeStatusCollector
from tests.cluster_harness import ROOT
from tests.mrs_client.fakes import record
from transport.metrics import TransportMetrics

T0 = datetime(2026, 1, 1, tzinfo=UTC)
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def promtool(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `promtool ARGS` (Debian's 'prometheus' package) from the checkout's root."""
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: install Debian's 'prometheus' (make system-deps does)"
    return subprocess.run(
        [binary, *args], input=input, capture_output=True, text=True, check=False, cwd=ROOT
    )


def promtool_check(text: str) -> None:
    """`promtool check metrics` accepts `text` (a scrape or a textfile)."""
    result = promtool("check", "metrics", input=text)
    assert result.returncode == 0, result.stdout + result.stderr


def samples(text: str) -> Samples:
    """Every sample of a scrape: (name, labels) -> value."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text_or_samples: str | Samples, name: str, **labels: str) -> float:
    """The value of the sample `name` with exactly `labels`; fails if it is not exported."""
    found = text_or_samples if isinstance(text_or_samples, dict) else samples(text_or_samples)
    key = (name, frozenset(labels.items()))
    assert key in found, f"{name}{labels} not exported"
    return found[key]


# A metric of ours, as a rule or a dashboard panel names it.
OURS = re.compile(r"\b((?:replication|dataguarantee|mrs|transport|imap_front)_[a-z_]+)")


def exported_names(tmp_path: Path) -> set[str]:
    """Every metric name the node, the guarantee service, the mover's textfile, the worker
    (`mrs serve`), the transport and the IMAP front export (counters with their `_total`)."""
    metrics = NodeMetrics("n")
    metrics.watch(
        NodeStatusCollector(
            cluster=lambda: "c",
            status=lambda: NodeStatus(node="n", site="s", copies=[]),
            configured_copies=dict,
            unexpected_errors=lambda: 0,
        )
    )
    node = metrics.render().decode()
    guarantee = Metrics().render().decode()
    move = MoveMetricsFile(tmp_path / "m.prom", answers=lambda _: [], clock=ManualClock())
    move(record(), "")
    worker = SimpleNamespace(
        stats=WorkerStats(ended={"Completed": 1}),
        running={},
        snapshot=FleetSnapshot.of(
            [record(batch="b", stalled_by={"StalledDueToTarget_MdbReplication": 1.0})],
            [BatchRecord("b", T0, BatchSettings(max_mb_per_s=1))],
            {},
            T0,
        ),
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(worker))  # type: ignore[arg-type]
    fleet = generate_latest(registry).decode()
    transport = generate_latest(TransportMetrics().registry).decode()
    front = generate_latest(FrontMetrics().registry).decode()
    texts = [node, guarantee, (tmp_path / "m.prom").read_text(), fleet, transport, front]
    names = {m for text in texts for m in re.findall(r"^# TYPE (\S+)", text, re.M)}
    return names
