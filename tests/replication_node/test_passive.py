"""A passive copy's pipeline in one process: a real active instance, its log share on a real
aiohttp server on port 0, and a PassiveCopy pulling from it over HTTP."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from dag_common.clock import ManualClock
from dag_common.model import CopyStatus
from replication_node.errors import LogShareError
from replication_node.log.logdir import list_closed_generations
from tests.cluster_harness import wait_until
from tests.replication_node.helpers import (
    CorruptingWire,
    damage_middle_pages,
    held_for,
    items_as_read,
    passive,
    replayed_through,
)
from tests.replication_node.share import start_share


async def test_seeds_copies_inspects_replays_and_serves_reads(share, tmp_path):
    await share.write(0, 40)
    copy = passive(share, tmp_path)
    await copy.start()
    await share.write(40, 60)
    last = await share.roll()
    await wait_until("replay", replayed_through(copy, last))
    status = copy.status()
    assert status.status is CopyStatus.HEALTHY and status.error is None
    assert status.last_log_copied == status.last_log_inspected == last
    assert status.copy_queue_length == status.replay_queue_length == 0
    assert status.last_replayed_log_time is not None
    assert copy.reader().items("m") == items_as_read(share.active.copy, "m")
    assert len(copy.reader().items("m")) == 100
    await copy.stop()


async def test_corrupt_generation_is_recopied_three_times_then_the_copy_fails(share, tmp_path):
    copy = passive(share, tmp_path)
    await share.write(0, 10)
    first = await share.roll()
    await copy.start()
    await wait_until("first replay", replayed_through(copy, first))
    await copy.suspend("test")
    await share.write(10, 10)
    bad = await share.roll()
    path = share.closed_file(bad)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    await copy.resume()
    await wait_until(
        "FailedAndSuspended", lambda: copy.status().status is CopyStatus.FAILED_AND_SUSPENDED
    )
    status = copy.status()
    assert f"generation {bad} failed inspection 3 times" in status.error
    assert status.last_log_replayed == first and status.last_log_inspected == first
    set_aside = list((copy.paths.ignored / "InspectionFailed").iterdir())
    assert len(set_aside) == 3
    assert not (copy.paths.logs / path.name).exists(), "a failed file never reaches the log dir"
    assert {i.item_id for i in copy.reader().items("m")} == {f"i{i}" for i in range(10)}
    await copy.stop()

    # the failure is kept across a restart of the node
    again = passive(share, tmp_path)
    await again.start()
    assert again.status().status is CopyStatus.FAILED_AND_SUSPENDED
    assert again.status().last_log_replayed == first
    state = json.loads((copy.paths.root / "copy-state.json").read_text())
    assert state["failed"] and str(bad) in state["reason"]
    # the operator repairs the active's file and resumes: the copy catches up
    path.write_bytes(
        bytes(data[: len(data) // 2])
        + bytes([data[len(data) // 2] ^ 0x40])
        + bytes(data[len(data) // 2 + 1 :])
    )
    await again.resume()
    await wait_until("catch up", replayed_through(again, bad))
    assert again.status().status is CopyStatus.HEALTHY
    await again.stop()


async def test_suspension_survives_a_restart_and_resume_catches_up(share, tmp_path):
    copy = passive(share, tmp_path)
    await copy.start()
    await share.write(0, 10)
    first = await share.roll()
    await wait_until("replay", replayed_through(copy, first))
    await copy.suspend("disk maintenance")
    await copy.stop()
    await share.write(10, 30)
    last = await share.roll()
    again = passive(share, tmp_path)
    await again.start()
    await wait_until("the restarted copy to say", lambda: again.status().error is not None)
    status = again.status()
    assert status.status is CopyStatus.SUSPENDED and status.error == "disk maintenance"
    assert status.last_log_replayed == first
    await again.resume()
    await wait_until("catch up", replayed_through(again, last))
    assert len(again.reader().items("m")) == 40
    await again.stop()


async def test_lagged_copy_inspects_at_once_and_replays_after_its_lag(share, tmp_path):
    clock = ManualClock(start=datetime.now(UTC))
    copy = passive(share, tmp_path, clock=clock, lag=timedelta(hours=1))
    await copy.start()
    await share.write(0, 20)
    last = await share.roll()
    await wait_until("inspection", lambda: copy.status().last_log_inspected >= last)
    await wait_until("the replay held for its lag", lambda: held_for(clock, 3600))
    status = copy.status()
    assert status.last_log_replayed == 0 and status.replay_queue_length == last
    assert status.replay_lag_time == timedelta(hours=1)
    await clock.advance(3600 + 60)
    await wait_until("replay after the lag", replayed_through(copy, last))
    await copy.stop()


async def test_a_generation_damaged_after_inspection_stops_replay_after_the_batch_before_it(
    share, tmp_path
):
    """Replay reads its next batch while the last one commits: a generation of that batch
    damaged on this copy's disk after inspection stops the copy, naming it, once the batch
    before it is in (nothing of its own batch is)."""
    clock = ManualClock(start=datetime.now(UTC))
    copy = passive(share, tmp_path, clock=clock, lag=timedelta(hours=1))
    await copy.start()
    for i in range(20):  # more than one replay batch (16 generations)
        await share.write(i * 5, 5)
        last = await share.roll()
    await wait_until("inspection", lambda: copy.status().last_log_inspected >= last)
    await wait_until("the replay held for its lag", lambda: held_for(clock, 3600))
    bad = last - 2  # in the second batch
    path = copy.paths.logs / share.closed_file(bad).name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    await clock.advance(3600 + 60)
    await wait_until(
        "FailedAndSuspended", lambda: copy.status().status is CopyStatus.FAILED_AND_SUSPENDED
    )
    status = copy.status()
    assert f"generation {bad}" in (status.error or "")
    assert status.last_log_replayed == 16, "the first batch is in, nothing after it"
    assert len(copy.reader().items("m")) == 16 * 5
    await copy.stop()


@pytest.mark.parametrize("skew_hours", [2, -2], ids=["copy clock 2h ahead", "2h behind"])
async def test_the_replay_lag_counts_on_the_copys_own_clock(share, tmp_path, skew_hours):
    # The active's clock is the real one; this copy's is hours off.  The lag is counted from
    # when the copy got each log, by its own clock, so the skew neither skips nor doubles it.
    clock = ManualClock(start=datetime.now(UTC) + timedelta(hours=skew_hours))
    copy = passive(share, tmp_path, clock=clock, lag=timedelta(hours=1))
    await copy.start()
    await share.write(0, 20)
    last = await share.roll()
    await wait_until("inspection", lambda: copy.status().last_log_inspected >= last)
    await wait_until("the replay held for its lag", lambda: held_for(clock, 3600))
    await clock.advance(3600 - 60)
    assert held_for(clock, 60), "a minute of the lag left, on the copy's own clock"
    assert copy.status().last_log_replayed == 0, "held for its lag"
    await clock.advance(120)
    await wait_until("replay after the lag", replayed_through(copy, last))
    await copy.stop()
    # A restart counts the lag from the file's copy time, on the copy's clock, too.
    mtime = (copy.paths.logs / "E00000001.log").stat().st_mtime
    assert abs(mtime - (clock.now() - timedelta(seconds=3660)).timestamp()) < 5


class JumpingClock(ManualClock):
    """This node's wall clock, which an operator (or NTP) moves while monotonic time goes on."""

    jump = timedelta(0)

    def now(self) -> datetime:
        return super().now() + self.jump


@pytest.mark.parametrize(
    ("during", "after"),
    [(timedelta(minutes=5), timedelta(0)), (timedelta(0), timedelta(hours=1))],
    ids=["wall clock +5m while it inspects, then back", "wall clock +1h while it waits"],
)
async def test_the_replay_lag_runs_on_the_monotonic_clock(share, tmp_path, during, after):
    """The wall clock jumping neither holds a replay back (the stamp of a log inspected while
    it was 5 min ahead held a copy's replay for those 5 min once it came back: a passive
    Healthy, no error, behind the active with acknowledged writes missing) nor lets it go
    early (a jump forward shortened the lag by the jump)."""
    clock = JumpingClock(start=datetime.now(UTC))
    copy = passive(share, tmp_path, clock=clock, lag=timedelta(minutes=1))
    await copy.start()
    clock.jump = during
    await share.write(0, 20)
    last = await share.roll()
    await wait_until("inspection", lambda: copy.status().last_log_inspected >= last)
    await wait_until("the replay held for its lag", lambda: held_for(clock, 60))
    clock.jump = after
    await clock.advance(30)
    await share.write(20, 5)  # a new generation wakes the replayer: it looks again
    newer = await share.roll()
    await wait_until("inspection", lambda: copy.status().last_log_inspected >= newer)
    await wait_until("the replayer's next look", lambda: held_for(clock, 30))
    assert copy.status().last_log_replayed == 0, "held for the rest of its lag"
    await clock.advance(31)
    await wait_until("replay once its lag passed", replayed_through(copy, last))
    await copy.stop()


async def test_passive_truncates_only_what_the_active_deleted(share, tmp_path):
    copy = passive(share, tmp_path)
    await copy.start()
    for i in range(4):
        await share.write(i * 10, 10)
        await share.roll()
    last = share.active.last_log_generated
    await wait_until("replay", replayed_through(copy, last))
    assert list_closed_generations(copy.paths.logs) == list(range(1, last + 1))
    # the active deletes through 2 (as its truncation would once every copy replayed it)
    from replication_node.log.truncation import delete_through

    delete_through(share.active.paths.logs, 2)
    await share.write(100, 5)
    newest = await share.roll()
    await wait_until("replay", replayed_through(copy, newest))
    assert list_closed_generations(copy.paths.logs)[0] == 3
    await copy.stop()


async def test_a_generation_gone_from_the_active_fails_the_copy_asking_for_reseed(share, tmp_path):
    copy = passive(share, tmp_path)
    await copy.start()
    await share.write(0, 10)
    first = await share.roll()
    await wait_until("replay", replayed_through(copy, first))
    await copy.suspend("offline")
    for i in range(3):
        await share.write(10 + i * 10, 10)
        await share.roll()
    from replication_node.log.truncation import delete_through

    delete_through(share.active.paths.logs, first + 1)
    await copy.resume()
    await wait_until("failure", lambda: copy.status().status is CopyStatus.FAILED_AND_SUSPENDED)
    assert "reseed" in copy.status().error
    await copy.reseed()
    last = share.active.last_log_generated
    await wait_until("reseeded and caught up", replayed_through(copy, last))
    assert copy.status().status is CopyStatus.HEALTHY
    assert copy.reader().items("m") == items_as_read(share.active.copy, "m")
    await copy.stop()


async def test_unreachable_active_is_disconnected_and_healthy_not_failed(tmp_path):
    s = await start_share(tmp_path)
    copy = passive(s, tmp_path)
    await copy.start()
    await s.write(0, 5)
    first = await s.roll()
    await wait_until("replay", replayed_through(copy, first))
    await s.runner.cleanup()  # the active's node goes away
    await wait_until(
        "disconnected", lambda: copy.status().status is CopyStatus.DISCONNECTED_AND_HEALTHY
    )
    assert copy.status().last_log_replayed == first
    await copy.stop()
    await s.session.close()
    await s.active.stop()
    s.store.close()


async def test_a_generation_damaged_on_the_wire_is_set_aside_and_copied_again(share, tmp_path):
    wire = CorruptingWire(share.source(), 2)
    copy = passive(share, tmp_path, source=wire)
    await copy.start()
    for i in range(3):
        await share.write(i * 10, 10)
        await share.roll()
    last = share.active.last_log_generated
    await wait_until("replay", replayed_through(copy, last))
    assert wire.damaged == 1
    assert copy.status().status is CopyStatus.HEALTHY and copy.status().error is None
    assert [p.name for p in (copy.paths.ignored / "InspectionFailed").iterdir()] == [
        "E00000002.log.1"
    ]
    assert len(copy.reader().items("m")) == 30
    await copy.stop()


class OutageWire:
    """The real HTTP source, failing the first transfer of one generation (a cut)."""

    def __init__(self, source, generation: int) -> None:
        self._source = source
        self._generation = generation
        self.fetched: list[int] = []

    def __getattr__(self, name):
        return getattr(self._source, name)

    async def fetch(self, generation: int) -> bytes:
        self.fetched.append(generation)
        if generation == self._generation and self.fetched.count(generation) == 1:
            raise LogShareError(f"transfer of generation {generation} cut")
        return await self._source.fetch(generation)


async def copy_stopped_behind(share, tmp_path, generations: int) -> tuple[int, int]:
    """A copy seeded and replayed through the first generation (10 items), then stopped
    while `generations` more of 10 items each are written and rolled: (first, last)."""
    await share.write(0, 10)
    first = await share.roll()
    seeded = passive(share, tmp_path)
    await seeded.start()
    await wait_until("replay", replayed_through(seeded, first))
    await seeded.stop()
    for i in range(1, generations + 1):
        await share.write(i * 10, 10)
        await share.roll()
    return first, share.active.last_log_generated


async def test_a_cut_in_the_middle_of_a_window_leaves_nothing_behind_in_inspector(share, tmp_path):
    """The copier fetches a window ahead of inspection: the generations fetched and written
    past a transfer that failed are dropped with it (copied again after the retry), and
    none of their files stays in Inspector."""
    _, last = await copy_stopped_behind(share, tmp_path, 7)  # one pass copies them all
    wire = OutageWire(share.source(), last - 3)
    copy = passive(share, tmp_path, source=wire)
    await copy.start()
    await wait_until("replay", replayed_through(copy, last))
    cut = wire.fetched.index(last - 3)
    assert last - 2 in wire.fetched[cut:], f"no fetch ahead of the cut: {wire.fetched}"
    assert wire.fetched.count(last - 3) == 2
    assert copy.status().status is CopyStatus.HEALTHY
    assert list(copy.paths.inspector.iterdir()) == []
    assert len(copy.reader().items("m")) == 80
    await copy.stop()


async def test_a_generation_damaged_in_a_later_window_is_copied_again_after_the_moves_before(
    share, tmp_path
):
    """Catching up, the copier inspects a window while the one before is moved into the log
    directory: a generation that fails inspection there is fetched again only once every
    generation before it is in; none is skipped, none is left in Inspector."""
    first, last = await copy_stopped_behind(share, tmp_path, 20)  # three windows of eight
    bad = first + 12  # the second window's fourth
    wire = CorruptingWire(share.source(), bad)
    copy = passive(share, tmp_path, source=wire)
    await copy.start()
    await wait_until("replay", replayed_through(copy, last))
    assert wire.damaged == 1
    status = copy.status()
    assert status.status is CopyStatus.HEALTHY
    assert status.last_log_inspected == status.last_log_replayed == last
    assert list_closed_generations(copy.paths.logs) == list(range(first, last + 1))
    assert list(copy.paths.inspector.iterdir()) == []
    failed = [p.name for p in (copy.paths.ignored / "InspectionFailed").iterdir()]
    assert len(failed) == 1 and failed[0].startswith(share.closed_file(bad).name)
    assert len(copy.reader().items("m")) == 210
    await copy.stop()


async def test_a_switchover_that_never_finishes_gives_the_active_its_writes_back(tmp_path):
    clock = ManualClock(start=datetime.now(UTC))
    s = await start_share(tmp_path, clock=clock)
    try:
        await s.write(0, 5)
        last = await s.active.quiesce("mbx2", hold=60)
        assert last == s.active.last_log_generated == 1, "the open log was closed"
        assert s.active.switching_to == "mbx2"
        await clock.advance(30)
        assert s.active.switching_to == "mbx2"
        await clock.advance(31)
        assert s.active.switching_to is None, "writes resume once the hold runs out"
        # a switchover abandoned by its coordinator and a new one: the first one's timer
        # does not cut the second one short
        await s.active.quiesce("mbx2", hold=60)
        await clock.advance(10)
        s.active.unquiesce()
        await s.active.quiesce("mbx3", hold=60)
        await clock.advance(55)  # the first timer fires here
        assert s.active.switching_to == "mbx3"
        await clock.advance(10)
        assert s.active.switching_to is None
    finally:
        await s.close()


async def test_a_copy_claims_the_actives_epoch_only_on_the_same_stream(share, tmp_path):
    from dataclasses import replace

    from replication_node.log.logfile import HEADER_SIZE, closed_log_name, read_header, scan

    await share.write(0, 10)
    last = await share.roll()
    copy = passive(share, tmp_path)
    await copy.start()
    await wait_until("replay", replayed_through(copy, last))
    assert copy.status().epoch == share.active.epoch == 1
    await copy.stop()
    # Started again, the copy holds nothing new to inspect: it proves its stream by its last
    # generation, which is the active's byte for byte.
    again = passive(share, tmp_path)
    assert again.status().epoch == 0
    await again.start()
    await wait_until("the epoch claimed", lambda: again.status().epoch == 1)
    assert again.status().status is CopyStatus.HEALTHY
    await again.stop()
    # Its last generation now one of another incarnation of the stream (same number, another
    # creation time: what a copy that inspected past a failover's fork point holds).
    ours = tmp_path / "passive" / "DB1" / "logs" / closed_log_name(last)
    data = ours.read_bytes()
    header = read_header(ours)
    forked = replace(header, creation_time=header.creation_time + timedelta(seconds=1))
    body = bytearray(data)
    for rec in scan(data).records:  # its records salted with its own header (`logfile.py`)
        crc = int.from_bytes(body[rec.offset + 4 : rec.offset + 8], "big")
        body[rec.offset + 4 : rec.offset + 8] = (crc ^ header.salt ^ forked.salt).to_bytes(4, "big")
    ours.write_bytes(forked.encode() + body[HEADER_SIZE:])
    forked_copy = passive(share, tmp_path)
    await forked_copy.start()
    await wait_until(
        "the copy to stop",
        lambda: forked_copy.status().status is CopyStatus.FAILED_AND_SUSPENDED,
    )
    status = forked_copy.status()
    assert status.epoch == 0, "never claims a stream it is not on"
    assert f"generation {last} is not the active's" in (status.error or "")
    await forked_copy.stop()


async def test_a_copy_damaged_while_stopped_is_never_healthy_and_a_reseed_repairs_it(
    share, tmp_path
):
    for first in range(0, 300, 50):
        await share.write(first, 50)
    last = await share.roll()
    copy = passive(share, tmp_path)
    await copy.start()
    await wait_until("replay", replayed_through(copy, last))
    await copy.stop()
    # A few bytes changed in b-tree pages in the middle of the stopped copy's file.
    path = copy.paths.database
    assert damage_middle_pages(path) > 8
    damaged = passive(share, tmp_path)
    await damaged.start()
    await wait_until(
        "the check on open", lambda: damaged.status().status is CopyStatus.FAILED_AND_SUSPENDED
    )
    assert "corrupt" in (damaged.status().error or "")
    assert damaged.reader() is None, "no reads from a corrupt file"
    await damaged.stop()
    # A node restart does not make it readable or healthy again.
    restarted = passive(share, tmp_path)
    await restarted.start()
    assert restarted.status().status is CopyStatus.FAILED_AND_SUSPENDED
    assert restarted.reader() is None
    await restarted.reseed()
    await wait_until("the reseed", replayed_through(restarted, last))
    assert restarted.status().status is CopyStatus.HEALTHY
    assert len(restarted.reader().items("m")) == 300
    await restarted.stop()


async def test_the_copy_queue_counts_the_open_log_once_it_holds_a_commit(tmp_path):
    # heartbeats far apart: what the copy learns, it learns from the announcement's push
    share = await start_share(tmp_path, heartbeat=60)
    try:
        await share.write(0, 10)
        first = await share.roll()
        copy = passive(share, tmp_path)
        await copy.start()
        await wait_until("replay", replayed_through(copy, first))
        assert copy.status().copy_queue_length == 0, "an open log holding only its header"
        await share.write(10, 5)  # the open log's first commit is announced
        await share.write(15, 5)

        def queued():
            s = copy.status()
            return s.copy_queue_length == 1 and s.last_log_generated == first + 1

        await wait_until("the open log in the copy queue", queued)
        assert share.active.status().last_log_generated == first + 1
        assert share.active.status().open_commits == 2
        assert 1 <= copy.status().open_commits <= 2, "what the copy heard: a lower bound"
        last = await share.roll()
        await wait_until("replay", replayed_through(copy, last))
        status = copy.status()
        assert (status.copy_queue_length, status.open_commits, status.last_log_generated) == (
            0,
            0,
            last,
        )
        await copy.stop()
    finally:
        await share.close()


async def test_the_background_scrub_finds_a_file_damaged_under_a_running_copy(share, tmp_path):
    clock = ManualClock(start=datetime.now(UTC))
    for first in range(0, 300, 50):
        await share.write(first, 50)
    last = await share.roll()
    copy = passive(share, tmp_path, clock=clock, scrub=timedelta(hours=24))
    await copy.start()
    await wait_until("replay", replayed_through(copy, last))
    await clock.advance(24 * 3600)
    await wait_until("a first pass", lambda: copy.status().last_scrub_result is not None)
    status = copy.status()
    assert status.last_scrub_result.startswith("ok") and status.status is CopyStatus.HEALTHY
    # Bytes changed in b-tree pages in the middle of the file while the copy runs (every
    # page checkpointed into the file first: a newer one in the WAL would hide the damage).
    import sqlite3

    conn = sqlite3.connect(copy.paths.database, timeout=30)
    assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    conn.close()
    damage_middle_pages(copy.paths.database)
    await clock.advance(24 * 3600)
    await wait_until(
        "the next pass to find it",
        lambda: copy.status().status is CopyStatus.FAILED_AND_SUSPENDED,
    )
    status = copy.status()
    assert "background scrub found" in status.error and "damaged" in status.error
    assert copy.reader() is None
    await copy.stop()


async def test_a_reseed_whose_state_cannot_be_saved_still_seeds_the_copy(
    share, tmp_path, monkeypatch
):
    """A full disk at the reseed's state save (found by the resilience suite's
    disk-full-seed): the request fails with the reason, and the copy is not left halted
    while its status still says Healthy: it seeds and catches up once the disk takes it."""
    from replication_node.passive import copy_state

    copy = passive(share, tmp_path)
    await copy.start()
    await share.write(0, 10)
    first = await share.roll()
    await wait_until("replay", replayed_through(copy, first))
    save = copy_state.CopyState.save

    def full(self, root):  # the disk full for this one save
        monkeypatch.setattr(copy_state.CopyState, "save", save)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(copy_state.CopyState, "save", full)
    with pytest.raises(OSError, match="No space"):
        await copy.reseed()
    await share.write(10, 10)
    last = await share.roll()
    await wait_until("reseeded and caught up", replayed_through(copy, last))
    assert copy.status().status is CopyStatus.HEALTHY
    assert copy.reader().items("m") == items_as_read(share.active.copy, "m")
    await copy.stop()
