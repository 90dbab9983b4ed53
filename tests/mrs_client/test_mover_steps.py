"""The mover's step logic in process, over in-memory fakes and a ManualClock: the stall limit
of the health gate, the flush limit, an answer's wait time, a crash (kill -9) at each of the
ten steps and the resume after it, two clients for one move.  Hours of waiting run in
milliseconds; a few end-to-end runs over real processes stay in test_move_e2e.py."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from mrs_client.errors import MoveFailed, MoveRejected, NodeCallError
from mrs_client.policy import GuaranteeAnswer, GuaranteeStatus, MoveState, StallStatus
from tests.mrs_client.fakes import MOVER_SETTINGS, Crash, MoverEnv

LIMITED = replace(
    MOVER_SETTINGS,
    stall_retry_interval=timedelta(seconds=30),
    stall_limit=timedelta(minutes=15),
    flush_retry_interval=timedelta(seconds=10),
    flush_limit=timedelta(minutes=30),
)

UNHEALTHY = GuaranteeAnswer(GuaranteeStatus.NOT_SATISFIED, timedelta(0), "DB2\\mbx3: Suspended")


def unhealthy_target(env: MoverEnv) -> dict[str, bool]:
    """DB2's copies unhealthy until the returned switch's "healthy" is set."""
    switch = {"healthy": False}
    env.guarantee.on_health = lambda db: None if switch["healthy"] or db != "DB2" else UNHEALTHY
    return switch


def assert_nothing_moved(env: MoverEnv) -> None:
    assert "alice" not in env.nodes.dbs["DB2"].boxes
    box = env.nodes.dbs["DB1"].boxes["alice"]
    assert not box.locked and not box.soft_deleted and env.source()
    assert env.directory.entries["alice"] == "DB1"


async def test_a_move_stalls_on_unhealthy_copies_and_fails_at_the_stall_limit(tmp_path):
    env = MoverEnv(tmp_path)
    unhealthy_target(env)
    started = env.clock.now()
    record = await env.move(LIMITED)
    assert record.state is MoveState.FAILED and record.step == 1
    assert "stalled for 900s (limit 900s)" in record.failure, record.failure
    assert "Suspended" in record.failure
    waited = env.clock.now() - started
    assert LIMITED.stall_limit <= waited < LIMITED.stall_limit + LIMITED.stall_retry_interval
    asked = env.guarantee.health_asked
    assert len(asked) == 1 + 900 // 30  # every stall_retry_interval, and once at the limit
    answers = env.stored.answers(record.id)
    assert answers and all(a.status != GuaranteeStatus.SATISFIED for a in answers)
    assert record.time_stalled == pytest.approx(900)
    # Exchange's names: why it waited, and that it failed by the stall limit (a batch
    # queues such a move again later).
    assert record.stalled_by == {"StalledDueToTarget_MdbReplication": pytest.approx(900)}
    assert record.failed_stalled is StallStatus.TARGET_REPLICATION
    assert_nothing_moved(env)


async def test_a_resumed_failed_move_stalls_afresh_then_goes_on_once_satisfied(tmp_path):
    env = MoverEnv(tmp_path)
    switch = unhealthy_target(env)
    failed = await env.move(LIMITED)
    assert failed.state is MoveState.FAILED
    # An operator's resume starts the stall limit afresh: still unhealthy, it stalls (it does
    # not fail at once), and stays stalled short of a new limit...
    task = await env.start(LIMITED, move_id=failed.id)
    resumed_at = env.clock.now()
    await env.drive(task, until=lambda: env.clock.now() - resumed_at > timedelta(minutes=14))
    assert not task.done()
    stored = env.stored.get(failed.id)
    assert stored.state is MoveState.STALLED and "Suspended" in stored.stall_reason
    assert stored.stall_status == "StalledDueToTarget_MdbReplication"
    assert stored.failed_stalled is None  # the resume forgot the failure
    # ...a second client is refused the same move while this one holds it...
    with pytest.raises(MoveRejected, match="being run by another"):
        await env.mover(LIMITED).run(failed.id)
    # ...and once the copies are healthy it goes on by itself and completes.
    switch["healthy"] = True
    await env.drive(task)
    env.assert_completed_equal(task.result())


async def test_a_retry_answer_is_asked_again_after_its_wait_time(tmp_path):
    env = MoverEnv(tmp_path)
    retry = GuaranteeAnswer(GuaranteeStatus.RETRY, timedelta(seconds=75), "no status yet")
    answers = iter([retry])
    env.guarantee.on_health = lambda db: next(answers, None)
    record = await env.move(LIMITED)
    env.assert_completed_equal(record)
    first, second = env.guarantee.health_asked[:2]
    assert second - first == timedelta(seconds=75)  # the answer's wait, above the 30s retry


async def test_a_flush_never_satisfied_fails_at_the_flush_limit_and_keeps_the_source(tmp_path):
    env = MoverEnv(tmp_path, knows_epochs=True)
    env.guarantee.on_flush = lambda db, generation, epoch: GuaranteeAnswer(
        GuaranteeStatus.NOT_SATISFIED, timedelta(0), "DB2\\mbx3: ReplayQueue 7", epoch=epoch
    )
    record = await env.move(LIMITED)
    assert record.state is MoveState.FAILED and record.step == 6
    assert "not satisfied after 1800s (limit 1800s)" in record.failure, record.failure
    flushes = len(env.guarantee.flushes)
    assert 1800 // 10 <= flushes <= 1800 // 10 + 2  # every flush_retry_interval
    # Never Completed on an unsatisfied flush: the source keeps its data and its directory
    # entry; nothing was soft-deleted.
    assert env.directory.entries["alice"] == "DB1"
    assert not env.nodes.dbs["DB1"].boxes["alice"].soft_deleted and env.source()
    assert not [e for e in env.nodes.trace if e[0] == "soft-delete"]


@pytest.mark.parametrize("step", range(1, 11))
async def test_a_crash_at_each_step_then_resume_completes(tmp_path, step):
    env = MoverEnv(tmp_path, items=200)

    def crash():
        raise Crash()  # kill -9: nothing after this line of progress happens

    env.at_step(step, crash)
    with pytest.raises(Crash):
        await env.move()
    (stored,) = env.stored.list()
    assert stored.state is not MoveState.COMPLETED and stored.step == step
    assert stored.steps_done == step - 1
    source = env.nodes.dbs["DB1"].boxes["alice"]
    assert not source.soft_deleted and env.source(), "the source stays whole until step 10"
    env.on_line.clear()
    record = await env.move(move_id=stored.id)
    env.assert_completed_equal(record)
    assert record.reconciles == 0


@pytest.mark.parametrize("waits", [True, False])
async def test_a_stalled_move_goes_on_as_soon_as_a_waiting_service_says_satisfied(tmp_path, waits):
    """A service that honours `wait` answers the moment the copies recover, and the move
    goes on within a step of the clock; one that does not is asked again only at the next
    stall_retry_interval (30 s) bucket."""
    env = MoverEnv(tmp_path)
    env.guarantee.waits = waits
    switch = unhealthy_target(env)
    task = await env.start(LIMITED)
    started = env.clock.now()
    stalled = started + timedelta(seconds=1)  # asked at once; unhealthy from the start
    await env.drive(task, until=lambda: env.clock.now() - stalled >= timedelta(seconds=100))
    switch["healthy"] = True
    healthy_at = env.clock.now()
    record = None

    def went_on() -> bool:
        nonlocal record
        (record,) = env.stored.list()
        return record.steps_done >= 1

    await env.drive(task, until=went_on)
    late = env.clock.now() - healthy_at
    if waits:
        assert late <= timedelta(seconds=1), late
        assert LIMITED.stall_retry_interval in env.guarantee.waits_asked
    else:
        assert late > timedelta(seconds=1), late  # the rest of a 30 s bucket
    await env.drive(task)
    env.assert_completed_equal(task.result())
    # The time the service waited is time the move stalled, counted either way.
    assert task.result().time_stalled >= 100


async def test_a_flush_waits_on_the_service_instead_of_sleeping_between_answers(tmp_path):
    env = MoverEnv(tmp_path, knows_epochs=True)
    env.guarantee.waits = True
    db = env.nodes.dbs["DB2"]
    rolled = {}

    def on_flush(database, generation, epoch):
        # The copies replay each rolled generation 3.3 s after its roll.
        if env.clock.now() < rolled[generation] + timedelta(seconds=3.3):
            return GuaranteeAnswer(
                GuaranteeStatus.NOT_SATISFIED, timedelta(0), "replaying", epoch=db.epoch
            )
        return None

    env.guarantee.on_flush = on_flush

    def at_roll(line):
        if "target log rolled" in line:
            rolled[int(line.split("generation ")[1].split()[0])] = env.clock.now()

    env.on_line.append(at_roll)
    record = await env.move(LIMITED)
    env.assert_completed_equal(record)
    # Step 6's first question waited a second (the move then shows Stalled), its second the
    # whole retry interval, answered Satisfied the moment the copies replayed: 3.3 s after
    # the roll, no 10 s bucket slept out.
    flush_answers = [
        a
        for a in env.stored.answers(record.id)
        if a.method == "CheckReplicationFlush" and a.step == 6
    ]
    assert [a.status for a in flush_answers] == ["NotSatisfied", "Satisfied"], flush_answers
    satisfied_at = datetime.fromisoformat(flush_answers[1].time)
    roll = rolled[min(rolled)]  # the final sync's roll
    assert satisfied_at - roll == timedelta(seconds=3.3), satisfied_at - roll
    assert LIMITED.flush_retry_interval in env.guarantee.waits_asked


async def test_the_source_is_read_in_pages_and_a_failed_read_ahead_is_asked_again(tmp_path):
    """The source is read a page at a time, the next page asked while the current one is
    written; a read-ahead that fails is asked again (through the stall path), nothing skipped."""
    env = MoverEnv(tmp_path, items=120)
    failed = []

    def fail_second_read(method, database, n):
        if (method, database, n) == ("items", "DB1", 2):
            failed.append(n)
            raise NodeCallError("items DB1: connection refused", status=None)

    env.nodes.before.append(fail_second_read)
    record = await env.move()
    assert record.state is MoveState.COMPLETED, record.failure
    assert failed == [2]
    assert env.target() == env.source()
    reads = sum(1 for m, d in env.nodes.calls if (m, d) == ("items", "DB1"))
    # 120 changes in pages of 17: 8 pages, one read again; the verification reads none
    assert reads >= 120 // MOVER_SETTINGS.sync_page + 1 + 1


@pytest.mark.parametrize(
    ("database", "status", "stalled"),
    [
        ("DB2", 503, StallStatus.TARGET_AVAILABILITY),
        ("DB1", None, StallStatus.SOURCE_AVAILABILITY),
        ("DB2", 423, StallStatus.MAILBOX_LOCK),
    ],
)
async def test_a_node_call_that_fails_stalls_the_move_under_the_name_of_its_end(
    tmp_path, database, status, stalled
):
    """A write to the target (or a mailbox read of the source) that fails stalls the move
    under Exchange's name for why, as `mrs show` and a batch report show it; the time is
    counted under that name and the move goes on once the call succeeds."""
    env = MoverEnv(tmp_path)
    method = "put_items" if database == "DB2" else "mailbox"

    def fail_twice(m, db, n):
        if (m, db) == (method, database) and n in (2, 3):
            raise NodeCallError(f"{m} {db}: refused", status=status)

    env.nodes.before.append(fail_twice)
    settings = replace(MOVER_SETTINGS, stall_retry_interval=timedelta(seconds=7))
    record = await env.move(settings)
    env.assert_completed_equal(record)
    assert record.stalled_by == {stalled: pytest.approx(14)}
    assert record.time_stalled == pytest.approx(14)
    # while it waited, `mrs show` said why by that name
    assert any(r.stall_status is stalled for r in env.records), [
        r.stall_status for r in env.records
    ]
    assert record.stall_status is None


async def test_each_sync_pass_knows_how_many_items_it_copies_before_its_first(tmp_path):
    # What `mrs move` shows a percent of: alice's 115 live items (120 written, 5 deleted) and
    # her archive's 30, both listed before the first is copied; then the 7 items written
    # during the incremental sync.
    env = MoverEnv(tmp_path)
    env.nodes.fill("DB1", "alice.archive", 30)
    env.directory.entries["alice.archive"] = "DB1"
    env.at_step(4, lambda: env.nodes.fill("DB1", "alice", 7, first=500))
    mover = env.mover()
    move_id = (await mover.submit(await mover.request("alice", "DB2", with_archive=True))).id
    task = asyncio.create_task(mover.run(move_id))
    await env.drive(task)
    env.assert_completed_equal(task.result())
    shown = [(r.step, r.items_copied, r.items_total) for r in env.records]
    initial = [(copied, total) for step, copied, total in shown if step == 3 and total]
    assert initial[0] == (0, 145) and {total for _, total in initial} == {145}, initial
    assert all(copied <= total for _, copied, total in shown if total), shown
    final = env.stored.get(move_id)
    assert final.items_copied == final.items_total == 152


@pytest.mark.parametrize(
    ("status", "raised"), [(None, "MoveFailed"), (503, "MoveFailed"), (400, "MoveRejected")]
)
async def test_a_source_that_cannot_answer_at_submit_is_a_failure_not_bad_input(
    tmp_path, status, raised
):
    """A node down when a move is asked for says nothing about the request: the move fails
    (exit 1, ask again), it is not refused as bad input (exit 2); a refusal is."""
    env = MoverEnv(tmp_path)

    def down(method, database, n):
        if (method, database) == ("mailbox", "DB1"):
            raise NodeCallError("GET DB1/mailboxes/alice: connection refused", status=status)

    env.nodes.before.append(down)
    with pytest.raises(MoveRejected if raised == "MoveRejected" else MoveFailed) as caught:
        await env.mover().request("alice", "DB2")
    assert type(caught.value).__name__ == raised
    assert "cannot check 'alice'" in str(caught.value)
    assert env.stored.list() == []


def _answers_waited(env: MoverEnv, waited: timedelta) -> None:
    """Every answer says the service waited `waited` for it, as a real service does when
    asked with a wait (a Satisfied at once waited a fraction of a millisecond)."""
    health, flush = env.guarantee.check_health, env.guarantee.check_flush

    async def check_health(*args, **kwargs):
        return replace(await health(*args, **kwargs), waited=waited)

    async def check_flush(*args, **kwargs):
        return replace(await flush(*args, **kwargs), waited=waited)

    env.guarantee.check_health, env.guarantee.check_flush = check_health, check_flush


async def test_an_answer_the_service_waited_for_is_counted_stalled_with_the_next_save(tmp_path):
    commits = {}
    for waited in (timedelta(0), timedelta(milliseconds=5)):
        env = MoverEnv(tmp_path / f"w{waited.microseconds}", knows_epochs=True)
        _answers_waited(env, waited)
        record = await env.move(LIMITED)
        env.assert_completed_equal(record)
        commits[waited] = env.requests.commits
        gates = len(env.stored.answers(record.id))
    # no save of its own for a gate the service waited on: as many commits either way
    assert commits[timedelta(milliseconds=5)] == commits[timedelta(0)]
    assert record.time_stalled == pytest.approx(gates * 0.005)
    assert env.stored.get(record.id).time_stalled == record.time_stalled


async def test_a_flush_failed_at_its_limit_keeps_the_time_the_service_waited(tmp_path):
    env = MoverEnv(tmp_path, knows_epochs=True)
    env.guarantee.waits = True
    env.guarantee.on_flush = lambda db, generation, epoch: GuaranteeAnswer(
        GuaranteeStatus.NOT_SATISFIED, timedelta(0), "DB2\\mbx3: ReplayQueue 7", epoch=epoch
    )
    record = await env.move(LIMITED)
    assert record.state is MoveState.FAILED and record.step == 6
    # The service waited out the flush limit but the block-mode flush's first 30 s and
    # the first bucket; its last answer's wait (10 s) is counted too: the record is saved
    # before the move is failed from the store's copy.
    slack = LIMITED.block_flush_wait + LIMITED.flush_retry_interval
    assert record.time_stalled >= (LIMITED.flush_limit - slack).total_seconds()


@pytest.mark.parametrize("crash", [False, True])
async def test_a_move_back_replaces_the_soft_deleted_copy_its_first_move_left(tmp_path, crash):
    """DB1 -> DB2, written to in DB2, then back to DB1: the request and step 2 say that the
    soft-deleted copy in DB1 is replaced, the target holds what DB2 held (not what DB1 kept),
    and a crash right after the replacement resumes to the same end."""
    env = MoverEnv(tmp_path)
    env.assert_completed_equal(await env.move())
    env.nodes.fill("DB2", "alice", 15, first=500, body="written in DB2")
    in_db2 = env.target()
    mover = env.mover()
    record = await mover.submit(await mover.request("alice", "DB1"))
    assert record.replaces_soft_deleted == ("alice",)
    assert "DB1 holds a soft-deleted copy of alice (an earlier move's source): " in env.lines[-1]
    if crash:

        def kill(line):
            if line.startswith("replaced the soft-deleted copy"):
                raise Crash()

        env.on_line.append(kill)
        killed = asyncio.create_task(mover.run(record.id))
        await env.drive(killed)
        with pytest.raises(Crash):
            killed.result()
        env.on_line.clear()
        box = env.nodes.dbs["DB1"].boxes["alice"]
        assert box.locked and not box.soft_deleted and not box.items
    task = asyncio.create_task(env.mover().run(record.id))
    await env.drive(task)
    back = task.result()
    assert back.state is MoveState.COMPLETED, back.failure
    assert env.nodes.dbs["DB1"].live("alice") == in_db2
    assert env.directory.entries["alice"] == "DB1"
    assert env.nodes.dbs["DB2"].boxes["alice"].soft_deleted
    assert env.lines.count("replaced the soft-deleted copy of alice in DB1") == 1
    assert back.replaces_soft_deleted == ("alice",)


async def test_a_move_to_a_database_holding_the_mailbox_live_is_still_refused(tmp_path):
    env = MoverEnv(tmp_path)
    env.nodes.fill("DB2", "alice", 1)
    with pytest.raises(MoveRejected, match="DB2 already holds a mailbox 'alice'"):
        await env.mover().request("alice", "DB2")


async def test_a_replacement_lost_to_a_lossy_failover_of_the_target_is_made_again(tmp_path):
    """The move back's step 2 replaced DB1's soft-deleted copy; DB1 fails over losing that
    transaction, so its new active holds the soft-deleted copy again: the reconcile the new
    epoch calls for replaces it again, and the move completes."""
    env = MoverEnv(tmp_path, knows_epochs=True)
    env.assert_completed_equal(await env.move())
    in_db2 = env.target()
    db1 = env.nodes.dbs["DB1"]
    env.at_step(3, lambda: db1.failover(lose=2))  # the fake logs each op: drop, create
    mover = env.mover()
    record = await mover.submit(await mover.request("alice", "DB1"))
    task = asyncio.create_task(mover.run(record.id))
    await env.drive(task)
    back = task.result()
    assert back.state is MoveState.COMPLETED, back.failure
    assert back.reconciles >= 1
    assert db1.live("alice") == in_db2 and not db1.boxes["alice"].soft_deleted
    assert env.directory.entries["alice"] == "DB1"
