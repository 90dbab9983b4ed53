"""The alert rules: promtool's unit tests (input series, expected alerts), and every metric
they name is one the code exports (a renamed metric would silence an alert for ever)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from dag_common.model import NodeStatus
from guarantee_api.metrics import Metrics
from mrs_client.metrics import MoveMetricsFile
from replication_node.metrics import NodeMetrics, NodeStatusCollector
from tests.mrs_client.test_metrics import record

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts" / "dag-replication" / "files" / "alerts.yaml"
RULE_TESTS = ROOT / "tests" / "deploy" / "alerts_test.yaml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: install Debian's 'prometheus' (make system-deps does)"
    return subprocess.run([binary, *args], capture_output=True, text=True, check=False, cwd=ROOT)


def test_rules_are_valid_and_pass_their_unit_tests():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def exported_names(tmp_path: Path) -> set[str]:
    from dag_common.clock import ManualClock

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
    texts = [node, guarantee, (tmp_path / "m.prom").read_text()]
    names = {m for text in texts for m in re.findall(r"^# TYPE (\S+)", text, re.M)}
    return names


def test_every_metric_a_rule_names_is_exported(tmp_path):
    used = set(re.findall(r"\b((?:replication|dataguarantee|mrs)_[a-z_]+)", RULES.read_text()))
    assert used, "the rules name no metric of ours?"
    missing = used - exported_names(tmp_path)
    assert not missing, f"rules name metrics nothing exports: {sorted(missing)}"
