"""What a person sees of a move: a bar redrawn in place on a TTY, plain lines otherwise."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from mrs_client.policy import MoveStep
from mrs_client.progress import Progress
from mrs_client.requests_store import MoveRecord

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def record(**kw):
    return MoveRecord(
        id="abc",
        mailboxes=("alice",),
        source_db="DB1",
        target_db="DB2",
        created=NOW,
        updated=NOW,
        **kw,
    )


def test_tty_draws_one_bar_in_place_with_items_bytes_step_and_stall():
    out = io.StringIO()
    progress = Progress(out, tty=True)
    rec = record(step=MoveStep.INITIAL_SYNC, items_copied=120, bytes_copied=2_500_000)
    progress(rec, "step 3: initial sync")
    progress(record(step=MoveStep.INITIAL_SYNC, stall_reason="NotSatisfied: mbx3 Suspended"), "")
    progress.close()
    text = out.getvalue()
    assert "\r\033[K" in text and text.endswith("\n")
    assert "step 3: initial sync\n" in text
    assert "[###-------] step 3/10" in text and "120 items 2.5 MB" in text
    assert "stalled: NotSatisfied: mbx3 Suspended" in text


def test_plain_lines_when_not_a_tty():
    out = io.StringIO()
    progress = Progress(out, tty=False)
    progress(record(step=MoveStep.LOCK_SOURCE), "step 5: lock source")
    progress(record(step=MoveStep.LOCK_SOURCE), "")  # bar updates print nothing
    progress.close()
    assert out.getvalue() == "abc step 5: lock source\n"
