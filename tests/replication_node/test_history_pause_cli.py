"""`db history`'s table from a node's answer, and `cluster pause|resume` over a real embedded
cluster store file, in process (the end-to-end run over node processes is in
test_failover_pause_e2e.py)."""

from __future__ import annotations

import asyncio
import json

from dag_common.cluster_store.embedded import EmbeddedClusterStore
from replication_node.admin_api import History
from replication_node.cli.admin import history_lines
from replication_node.cli.main import main
from tests.cluster_harness import cluster_config, write_cluster_config

ANSWER = {
    "database": "DB1",
    "epochs": [
        # recorded before causes were kept: only where its stream began is known
        {"epoch": 3, "node": "mbx1", "began": None, "cause": None, "mount_dial": None,
         "start_generation": 12, "kept_through": None, "lost_logs": None},
        {"epoch": 4, "node": "mbx2", "began": "2026-11-23T09:30:05+00:00",
         "cause": "ManualActivation", "mount_dial": "GoodAvailability",
         "start_generation": 30, "kept_through": 4096, "lost_logs": 1},
        {"epoch": 5, "node": "mbx1", "began": "2026-11-23T11:30:05+02:00",
         "cause": "Switchover", "mount_dial": None,
         "start_generation": 41, "kept_through": None, "lost_logs": 0},
    ],
}  # fmt: skip


def test_the_history_table_says_each_epoch_and_what_is_unknown():
    lines = history_lines(History.model_validate(ANSWER))
    assert lines[0] == "DB1: 3 epoch(s); mbx1 active since epoch 5"
    assert lines[1].split() == ["Epoch", "Active", "Began", "(UTC)", "Cause", "Stream", "from",
                                "LostLogs"]  # fmt: skip
    assert lines[2].split() == ["3", "mbx1", "unknown", "unknown", "generation", "12", "unknown"]
    assert "manual activation (db activate) under GoodAvailability" in lines[3]
    assert "generation 30 (29 kept through byte 4096)" in lines[3]
    assert lines[3].endswith("  1")
    assert "2026-11-23 09:30:05  switchover" in lines[4], "began, in UTC"
    cause = lines[1].index("Cause")  # aligned: every cause starts under its heading
    assert [line[cause:].split("  ")[0] for line in lines[2:]] == [
        "unknown",
        "manual activation (db activate) under GoodAvailability",
        "switchover",
    ]
    assert history_lines(History(database="DB2")) == [
        "DB2: no active chosen yet (no epoch recorded)"
    ]


def _config(tmp_path):
    config = cluster_config(
        [("mbx1", "redmond", "http://127.0.0.1:1")],
        [{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]}],
        cluster_store={"kind": "embedded", "path": "cluster.db"},
    )
    return str(write_cluster_config(tmp_path / "cluster.yaml", config))


def _stored_pause(tmp_path):
    store = EmbeddedClusterStore(tmp_path / "cluster.db")
    try:
        return asyncio.run(store.failover_pause())
    finally:
        store.close()


def test_pause_and_resume_write_the_cluster_store(tmp_path, capsys):
    config = _config(tmp_path)
    assert main(["cluster", "pause", "--reason", "patching", "--config", config]) == 0
    out = capsys.readouterr().out
    assert out.startswith("automatic failover paused since ") and out.endswith(": patching\n")
    stored = _stored_pause(tmp_path)
    assert (stored.reason, stored.by.count("@")) == ("patching", 1)

    assert main(["cluster", "pause", "--config", config]) == 1
    said = capsys.readouterr()
    assert said.out == "" and said.err.startswith("error: already paused: automatic failover")
    assert _stored_pause(tmp_path) == stored, "the first pause stands"

    assert main(["cluster", "resume", "--json", "--config", config]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["paused"] is False and answer["pause"]["reason"] == "patching"
    assert _stored_pause(tmp_path) is None
    assert main(["cluster", "resume", "--config", config]) == 1
    assert capsys.readouterr().err == "error: automatic failover is not paused\n"

    assert main(["cluster", "pause", "--json", "--config", config]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["paused"] is True and answer["pause"]["reason"] == ""


def test_a_missing_config_is_bad_input(tmp_path, capsys):
    assert main(["cluster", "pause", "--config", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.splitlines()) == 1
