"""What `make demo` says of its copies and its stop: the passive copies it waited for and
what is left of them when it gives up (it used to give up in silence, DB2\\mbx3 left at
CopyQueue 1), and each active copy's header after the stop, with an error line for one not
in Clean Shutdown (it used to print the live file's header, Dirty Shutdown by nature)."""

from __future__ import annotations

import uuid

import pytest

from demo.copies import copies_behind, last_generated, not_clean
from replication_node.storage.database import Database


def copy(database, node, role="Passive", status="Healthy", generated=1, replayed=1, **kw):
    return {
        "database": database, "node": node, "role": role, "status": status,
        "last_log_generated": generated, "last_log_replayed": replayed,
        "copy_queue_length": kw.get("copy_queue", generated - replayed),
        "replay_queue_length": kw.get("replay_queue", 0), "error": kw.get("error"),
    }  # fmt: skip


ACTIVES = [
    copy("DB1", "mbx1", role="Active", status="Mounted", generated=111, replayed=0),
    copy("DB2", "mbx2", role="Active", status="Mounted", generated=1, replayed=0),
]


@pytest.mark.parametrize(
    ("passives", "left"),
    [
        ([copy("DB1", "mbx2", generated=111, replayed=111),
          copy("DB2", "mbx3", generated=1, replayed=1)], []),
        # The issue's: DB2's open log holds bob's creation, which no roll had closed.
        ([copy("DB1", "mbx2", generated=111, replayed=111),
          copy("DB2", "mbx3", generated=0, replayed=0, copy_queue=1)],
         ["DB2\\mbx3: Healthy, replayed 0 of 1 (CopyQueue 1, ReplayQueue 0)"]),
        ([copy("DB1", "mbx3", generated=110, replayed=104, replay_queue=6),
          copy("DB1", "mbx2", status="Failed", generated=111, replayed=111,
               error="inspection failed")],
         ["DB1\\mbx2: Failed, replayed 111 of 111 (CopyQueue 0, ReplayQueue 0): "
          "inspection failed",
          "DB1\\mbx3: Healthy, replayed 104 of 111 (CopyQueue 6, ReplayQueue 6)"]),
    ],
    ids=["caught up", "an open log not rolled", "behind and failed"],
)  # fmt: skip
def test_the_copies_left_behind_are_said_with_where_they_are(passives, left):
    copies = ACTIVES + passives
    assert copies_behind(copies) == left
    assert last_generated(copies) == {"DB1": 111, "DB2": 1}


def test_a_stopped_active_not_in_clean_shutdown_is_an_error_naming_its_log(tmp_path, capsys):
    for database, node, clean in (("DB1", "mbx1", True), ("DB2", "mbx3", False)):
        path = tmp_path / node / database / f"{database}.sqlite"
        db = Database.create(path, database_signature=uuid.uuid4(), log_signature=uuid.uuid4())
        db.mark_dirty()
        db.close(clean=clean)
    dirty = not_clean(tmp_path, {"DB1": "mbx1", "DB2": "mbx3"})
    assert dirty == [
        f"error: DB2\\mbx3 is in Dirty Shutdown after its stop, not Clean Shutdown: "
        f"see {tmp_path / 'mbx3.log'}"
    ]
    printed = capsys.readouterr().out
    assert "State:               Clean Shutdown" in printed
    assert "State:               Dirty Shutdown" in printed
