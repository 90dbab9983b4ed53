"""What a person sees of a move: a rich display redrawn in place on a terminal (percent,
items, MB, rate, ETA; "stalled" while it waits), the plain `"{id} {line}"` lines anywhere
else (scripts and bench/move.py parse them) and never a bar in a pipe."""

from __future__ import annotations

import io
import os
import re
from datetime import UTC, datetime

from rich.console import Console

from mrs_client.move_store.interface import MoveRecord
from mrs_client.policy import MoveState, MoveStep
from mrs_client.progress import Progress

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


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


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, force_interactive=True, width=120)
    return console, out


def frames(out: io.StringIO) -> list[str]:
    """The screen's lines as drawn, one per redraw, escape codes taken out."""
    text = ANSI.sub("", out.getvalue())
    return [f for f in re.split(r"[\r\n]", text) if f.strip()]


def test_a_terminal_shows_the_step_percent_items_mb_rate_and_eta():
    console, out = terminal()
    clock = FakeTime()
    progress = Progress(console=console, get_time=clock, auto_refresh=False)
    progress(record(step=MoveStep.INITIAL_SYNC), "step 3: initial sync")
    for done in range(10, 70, 10):  # 10 items a second, of 120
        clock.now += 1
        progress(
            record(
                step=MoveStep.INITIAL_SYNC,
                items_total=120,
                items_copied=done,
                bytes_copied=done * 40_000,
            ),
            "",
        )
    progress.close()
    drawn = frames(out)
    assert "step 3: initial sync" in drawn  # the mover's line, as it is, above the bar
    last = drawn[-1]
    assert last.startswith("step 3/10 initial sync"), last
    assert " 50% 60/120 items 2.4 MB 10 items/s  ETA 0:00:06" in last, last
    assert "\x1b[" in out.getvalue()  # drawn in place, in colour


def test_an_unknown_total_shows_no_percent_nor_eta():
    console, out = terminal()
    clock = FakeTime()
    progress = Progress(console=console, get_time=clock, auto_refresh=False)
    for done in (0, 10, 20):
        clock.now += 1
        progress(record(step=MoveStep.INITIAL_SYNC, items_copied=done), "")
    progress.close()
    last = frames(out)[-1]
    assert "20 items" in last and "%" not in last and "ETA" not in last, last
    assert "10 items/s" in last


def test_a_stalled_move_says_why_above_and_stalled_in_place_of_the_eta():
    console, out = terminal()
    clock = FakeTime()
    progress = Progress(console=console, get_time=clock, auto_refresh=False)
    progress(record(step=MoveStep.INITIAL_SYNC, items_total=100, items_copied=10), "")
    clock.now += 1
    progress(record(step=MoveStep.INITIAL_SYNC, items_total=100, items_copied=40), "")
    waiting = "waiting for healthy copies of DB2: DB2\\mbx3 Suspended"
    stalled = record(
        step=MoveStep.INITIAL_SYNC,
        items_total=100,
        items_copied=40,
        state=MoveState.STALLED,
        stall_reason="NotSatisfied: DB2\\mbx3 Suspended (and much more)",
    )
    progress(stalled, waiting)
    drawn = frames(out)
    assert waiting in drawn
    assert drawn[-1].endswith(" 40% 40/100 items 0.0 MB stalled"), drawn[-1]
    progress(record(step=MoveStep.INITIAL_SYNC, items_total=100, items_copied=50), "")
    progress.close()
    assert "stalled" not in frames(out)[-1]


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    progress = Progress(out)
    progress(record(step=MoveStep.LOCK_SOURCE), "step 5: lock source")
    progress(record(step=MoveStep.LOCK_SOURCE, items_total=9, items_copied=3), "")  # nothing
    stalled = record(step=MoveStep.LOCK_SOURCE, state=MoveState.STALLED, stall_reason="x")
    progress(stalled, "waiting for healthy copies of DB2: DB2\\mbx3 Suspended")
    progress.close()
    assert not progress.live
    assert out.getvalue() == (
        "abc step 5: lock source\nabc waiting for healthy copies of DB2: DB2\\mbx3 Suspended\n"
    )


def test_no_bar_in_a_pipe_even_when_colour_is_forced(monkeypatch):
    # rich itself would call a pipe a terminal under FORCE_COLOR or TTY_COMPATIBLE=1
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    read, write = os.pipe()
    with os.fdopen(write, "w") as stream:
        progress = Progress(stream)
        progress(record(step=MoveStep.INITIAL_SYNC, items_total=9, items_copied=3), "")
        progress(record(step=MoveStep.INITIAL_SYNC), "step 3: initial sync")
        progress.close()
        assert not progress.live
    with os.fdopen(read) as pipe:
        assert pipe.read() == "abc step 3: initial sync\n"


def test_log_records_go_above_the_display_while_it_is_drawn_and_back_after():
    """A warning written straight to the terminal would tear the bar in two: while the
    display is drawn it goes through its console; after it, logging is as it was."""
    import logging

    console, out = terminal()
    elsewhere = io.StringIO()
    root = logging.getLogger()
    before = root.handlers[:]
    mine = logging.StreamHandler(elsewhere)
    root.handlers = [mine]
    try:
        progress = Progress(console=console, get_time=FakeTime(), auto_refresh=False)
        progress(record(step=MoveStep.INITIAL_SYNC), "step 3: initial sync")
        logging.getLogger("mrs_client.test").warning("node mbx2 answers slowly")
        progress(record(step=MoveStep.INITIAL_SYNC, items_copied=10), "")
        progress.close()
        assert "node mbx2 answers slowly" in ANSI.sub("", out.getvalue())
        assert elsewhere.getvalue() == ""
        assert root.handlers == [mine]
        logging.getLogger("mrs_client.test").warning("after the move")
        assert "after the move" in elsewhere.getvalue()
    finally:
        root.handlers = before
