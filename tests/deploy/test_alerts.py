"""The alert rules: promtool's unit tests (input series, expected alerts), and every metric
they name is one the code exports (a renamed metric would silence an alert for ever)."""

from __future__ import annotations

from tests.cluster_harness import ROOT
from tests.prometheus import OURS, exported_names, promtool

RULES = ROOT / "charts" / "dag-replication" / "files" / "alerts.yaml"
RULE_TESTS = ROOT / "tests" / "deploy" / "alerts_test.yaml"


def test_rules_are_valid_and_pass_their_unit_tests():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_metric_a_rule_names_is_exported(tmp_path):
    used = set(OURS.findall(RULES.read_text()))
    assert used, "the rules name no metric of ours?"
    assert {"transport_poison_total", "transport_queue_length"} <= used, "the transport's"
    missing = used - exported_names(tmp_path)
    assert not missing, f"rules name metrics nothing exports: {sorted(missing)}"
