"""`mrs show` and `mrs list --state` as a person reads them (no Python reprs)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from dag_common.model import Position
from mrs_client.cli import main
from mrs_client.item_limits import SkippedItem, SkipReason
from mrs_client.policy import GuaranteeAnswer, GuaranteeStatus, MoveState, MoveStep
from tests.cluster_harness import cluster_config, write_cluster_config
from tests.mrs_client.fakes import SyncMoves

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def setup(tmp_path):
    config = write_cluster_config(
        tmp_path / "cluster.yaml",
        cluster_config(
            [("mbx1", "redmond", "http://127.0.0.1:7101")],
            [{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]},
             {"name": "DB2", "copies": [{"node": "mbx1", "activation_preference": 2}]}],
        ),
    )  # fmt: skip
    store = SyncMoves(tmp_path / "var" / "cluster.db")
    stalled = store.create(mailboxes=("alice",), source_db="DB1", target_db="DB2", now=NOW)
    store.save(
        replace(
            stalled,
            state=MoveState.STALLED,
            step=MoveStep.FINAL_SYNC_AND_FLUSH,
            steps_done=5,
            items_copied=1200,
            bytes_copied=2_400_000,
            sync_cursor={"alice": 1234},
            final_position=Position(7, 4095),
            time_stalled=75.4,
            stall_reason="waiting for the flush",
        ),
        NOW,
    )
    done = store.create(mailboxes=("bob",), source_db="DB1", target_db="DB2", now=NOW)
    store.save(replace(done, state=MoveState.COMPLETED, completed=NOW), NOW)
    return config, tmp_path / "var" / "cluster.db", stalled.id


def test_stats_of_a_stalled_move_say_when_its_condition_is_expected_to_clear(tmp_path, capsys):
    config, db, move_id = setup(tmp_path)
    store = SyncMoves(db)
    answer = GuaranteeAnswer(
        GuaranteeStatus.NOT_SATISFIED,
        timedelta(seconds=30),
        "CheckReplicationHealth … average copy queue 81.67 logs …",
        expected_in=timedelta(seconds=150),
    )
    step = MoveStep.FINAL_SYNC_AND_FLUSH
    store.add_answer(move_id, step=step, method="CheckReplicationHealth", answer=answer, now=NOW)
    store.close()
    args = ["stats", move_id, "--config", str(config)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "expected_clear_at 2026-11-23T12:02:30+00:00" in out, out
    assert main([*args, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["guarantee_answers"][-1]["expected_in"] == "0:02:30"


def test_show_reads_as_words(tmp_path, capsys):
    config, _, move_id = setup(tmp_path)
    assert main(["show", move_id, "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "Step                  6/10 final sync and flush (5 done)" in out, out
    assert "Final flush point     generation 7 through byte 4095" in out
    assert "Unlock flush point    -" in out
    assert "Time stalled          0:01:15" in out
    assert "Items copied          1,200 (total not known yet) (2.4 MB of bodies)" in out
    assert "Sync cursors          alice at 1234" in out
    assert "Created               2026-11-23 12:00:00 UTC" in out
    assert "None" not in out and "{" not in out


def test_list_by_state(tmp_path, capsys):
    config, _, move_id = setup(tmp_path)
    args = ["--config", str(config)]
    assert main(["list", "--state", "Stalled", *args]) == 0
    out = capsys.readouterr().out
    assert move_id in out and "bob" not in out
    assert main(["list", "--state", "Sleeping", *args]) == 2


def test_show_says_how_many_items_the_sync_has_to_copy(tmp_path, capsys):
    config, db, move_id = setup(tmp_path)
    store = SyncMoves(db)
    store.save(replace(store.get(move_id), items_copied=60, items_total=120), NOW)
    assert main(["show", move_id, "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "Items copied          60 of 120 (2.4 MB of bodies)" in out, out


def test_show_and_stats_list_the_skipped_items(tmp_path, capsys):
    config, db, move_id = setup(tmp_path)
    store = SyncMoves(db)
    skipped = (
        SkippedItem(
            "alice", "m7", 42, SkipReason.LARGE, 70_000, 65_536,
            "70,000 bytes, over the target's max_item_size of 65,536", "0f" * 32,
        ),
        SkippedItem(
            "alice", "", 57, SkipReason.BAD, None, None,
            "the source answered HTTP 500 reading it: internal error",
        ),
    )  # fmt: skip
    store.save(replace(store.get(move_id), skipped=skipped, large_item_limit=2), NOW)
    store.close()
    args = [move_id, "--config", str(config)]
    assert main(["show", *args]) == 0
    out = capsys.readouterr().out
    assert "Item limits           1 large skipped (limit 2), 1 bad skipped (limit 0)" in out, out
    lines = out.splitlines()
    at = lines.index("Skipped items:")
    assert lines[at + 2].split()[:6] == ["alice", "m7", "42", "70,000", "large", "70,000"]
    assert lines[at + 3].split()[:5] == ["alice", "?", "57", "?", "bad"]
    assert "HTTP 500" in lines[at + 3]

    assert main(["stats", *args]) == 0
    out = capsys.readouterr().out
    assert "large_skipped     1" in out and "bad_skipped       1" in out, out
    assert "skipped items:" in out and "max_item_size of 65,536" in out
    assert main(["stats", *args, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["large_item_limit"], stats["large_skipped"], stats["bad_skipped"]) == (2, 1, 1)
    assert stats["skipped_items"][0] == {
        "mailbox": "alice",
        "item_id": "m7",
        "change_number": 42,
        "reason": "large",
        "size": 70_000,
        "limit": 65_536,
        "detail": "70,000 bytes, over the target's max_item_size of 65,536",
    }
    assert stats["skipped_items"][1]["size"] is None
    assert main(["show", *args, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [s["item_id"] for s in shown["skipped"]] == ["m7", ""]


def test_an_item_limit_that_is_not_a_count_is_bad_input(tmp_path, capsys):
    config, _, move_id = setup(tmp_path)
    args = ["--config", str(config)]
    assert main(["resume", move_id, "--large-item-limit", "-1", *args]) == 2
    assert "not a whole number of items" in capsys.readouterr().err
    assert main(["move", "--mailbox", "a", "--to", "DB2", "--bad-item-limit", "x", *args]) == 2
