"""The active mends a generation of its LLR window damaged on its own disk (issue 52,
`active/log_mend.py`): a copy's bytes are taken only if they pass a passive's inspection and
agree with what the active's own file and memory vouch for; none sound after its rounds, it
steps down.  Real log files of a real log stream; the copies' log share by a stand-in that
gives the bytes it was given (the HTTP path is the one the copies use among themselves,
`shipping/copy_share.py`, run over real nodes in test_llr_damage_e2e.py)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from dag_common.clock import ManualClock, SystemClock
from dag_common.store_api import ItemIn
from replication_node.active.copy import ActiveCopy
from replication_node.active.log_mend import LogMend, _local_view, check_replacement
from replication_node.active.mailbox_store import MailboxStore
from replication_node.errors import Conflict, InspectionFailed, LogRecordError, LogShareError
from replication_node.log import logfile
from replication_node.log.logfile import closed_log_name
from tests.cluster_harness import wait_until
from tests.replication_node.helpers import mount

SIZE = 64 * 1024


def _body(size: int, seed: str) -> str:
    line = f"{seed} é line of a large item\r\n"
    return (line * (size // len(line) + 1))[:size]


def flipped(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0xFF
    return bytes(out)


class Given:
    """A copy's log share that gives what it was given for each generation (bytes), or
    refuses (an error), counting the questions."""

    def __init__(self, node: str, answers: dict[int, bytes | Exception]) -> None:
        self.node, self.answers, self.asked = node, answers, 0

    async def fetch(self, generation: int, epoch: int) -> bytes:
        self.asked += 1
        answer = self.answers.get(generation, LogShareError(f"{self.node}: HTTP 404"))
        if isinstance(answer, Exception):
            raise answer
        return answer


async def damaged_copy(tmp_path, clock=None) -> tuple[ActiveCopy, str, int, bytes]:
    """An active holding a 300 KB body in its log (about five 64 KiB generations), one of
    them then damaged on its disk: the copy, the body, that generation, its bytes whole."""
    copy = await mount(tmp_path, log_file_size=SIZE, llr_depth=50, clock=clock or SystemClock())
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    big = _body(300_000, "mend")
    await store.put_items("m", [ItemIn(item_id="big", body=big)])
    await store.put_items("m", [ItemIn(item_id="small", body="after it")])
    await copy.roll()
    gen = copy.overlay.logged_body("m", "big").ref.id.generation + 2
    path = copy.paths.logs / closed_log_name(gen)
    whole = path.read_bytes()
    path.write_bytes(flipped(whole, len(whole) // 2))
    return copy, big, gen, whole


async def test_a_copy_s_bytes_are_taken_only_as_the_active_s_own_vouch_for_them(tmp_path):
    copy, _, gen, whole = await damaged_copy(tmp_path)
    path = copy.paths.logs / closed_log_name(gen)
    view = await _local_view(copy, gen, path)
    assert view.prev is not None and view.next is not None
    assert check_replacement(whole, view).generation == gen

    other = (copy.paths.logs / closed_log_name(gen + 1)).read_bytes()
    header_damaged = replace(view, local=flipped(whole, 40))
    cases = [
        # what the copy gives, the active's view, why refused
        (view.local, view, "the same as the active's own|checksum"),
        (flipped(whole, len(whole) // 3), view, "checksum"),  # damaged there too
        (whole[: len(whole) // 2], view, "generation"),  # cut short
        (other, view, f"generation {gen + 1}|file name says {gen}"),
        (whole, replace(view, next=view.prev), "next generation"),
        (whole, replace(view, prev=view.next), "does not follow|chain"),
        (whole, replace(view, commits=((logfile.HEADER_SIZE, view.prev.creation_time),)),
         "commits"),
        (whole, replace(view, local=whole + b"\0"), "bytes on the active"),
        (whole, replace(view, highest_known=gen - 1), "higher than the highest"),
    ]  # fmt: skip
    for data, seen, why in cases:
        with pytest.raises(InspectionFailed, match=why):
            check_replacement(data, seen)
    # Its header damaged, every record still vouches: taken.
    assert check_replacement(whole, header_damaged).generation == gen
    # A record the active's own checksum vouches for differs from the copy's: refused, though
    # the copy's bytes pass inspection (the active wrote another CLOSE record there, say).
    close = logfile.scan(whole).records[-1]
    salt = logfile.LogHeader.decode(whole).salt
    other_close = logfile.encode_record(
        logfile.RecordType.CLOSE, view.prev.creation_time, salt=salt
    )
    assert len(other_close) == close.size
    mine = replace(view, local=whole[: close.offset] + other_close)
    with pytest.raises(InspectionFailed, match="which its checksum vouches for"):
        check_replacement(whole, mine)
    await copy.crash_close()


async def test_nothing_vouching_for_a_copy_refuses_it(tmp_path):
    copy, _, gen, whole = await damaged_copy(tmp_path)
    view = await _local_view(copy, gen, copy.paths.logs / closed_log_name(gen))
    # The active's file cut to its header alone, its header damaged: nothing of it speaks.
    bare = replace(view, local=flipped(whole[: logfile.HEADER_SIZE], 40))
    with pytest.raises(InspectionFailed, match="vouches"):
        check_replacement(whole, bare)
    await copy.crash_close()


async def test_the_active_takes_a_damaged_generation_whole_from_the_copy_that_has_it(tmp_path):
    copy, big, gen, whole = await damaged_copy(tmp_path)
    logged = copy.overlay.logged_body("m", "big")
    with pytest.raises(LogRecordError, match=f"generation {gen} of the log is damaged"):
        copy.bodies.text(logged)
    gone = Given("mbx2", {})
    damaged_too = Given("mbx3", {gen: flipped(whole, 700)})
    sound = Given("mbx4", {gen: whole})
    stepped = []

    async def step_down() -> str:
        stepped.append(True)
        return "mbx2"

    mend = LogMend(
        database="DB1", epoch=1, copies=[gone, damaged_too, sound], clock=SystemClock(),
        step_down=step_down,
    )  # fmt: skip
    task = asyncio.create_task(mend.run(copy))
    try:
        await wait_until("the generation mended", lambda: mend.mended == 1, timeout=10)
        assert not copy.bodies.damaged
        assert (copy.paths.logs / closed_log_name(gen)).read_bytes() == whole
        assert copy.bodies.text(logged) == big
        assert copy.bodies.damage_note() is None and mend.note is None
        assert (gone.asked, damaged_too.asked, sound.asked) == (1, 1, 1) and not stepped
        assert not list(copy.paths.logs.glob(".*tmp"))  # written through a temp file
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await copy.crash_close()


async def test_with_no_copy_giving_it_sound_the_active_steps_down_and_says_so(tmp_path):
    clock = ManualClock()
    copy, _, gen, whole = await damaged_copy(tmp_path, clock)
    logged = copy.overlay.logged_body("m", "big")
    damaged_too = Given("mbx2", {gen: flipped(whole, 700)})
    refusals = []

    async def step_down() -> str:
        refusals.append(True)
        raise Conflict("mbx2: cannot switch DB1 over to mbx2: its copy is unreachable")

    mend = LogMend(
        database="DB1", epoch=1, copies=[damaged_too], clock=clock, step_down=step_down, rounds=2
    )
    task = asyncio.create_task(mend.run(copy))
    try:
        with pytest.raises(LogRecordError):
            copy.bodies.text(logged)  # found: the mend is woken

        await wait_until(  # the first round's pause
            "the mend paused", lambda: bool(clock.pending_sleeps()), timeout=10
        )
        assert damaged_too.asked == 1 and not refusals
        assert "no copy gave it sound (mbx2: " in (mend.note or "")
        await clock.advance(clock.pending_sleeps()[0])
        await wait_until(
            "a note of a copy taking over", lambda: "take over" in (mend.note or ""), timeout=10
        )
        assert refusals == [True] and damaged_too.asked == 2
        assert "no copy could take over either: mbx2: cannot switch" in (mend.note or "")
        assert gen in copy.bodies.damaged  # still refused, never served
        with pytest.raises(LogRecordError):
            copy.bodies.text(logged)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await copy.crash_close()
