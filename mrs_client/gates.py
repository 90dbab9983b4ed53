"""Where a move waits, and the record of its waiting: the Data Guarantee's answers (steps 1-4
and 7 ask CheckReplicationHealth, steps 6 and 9 CheckReplicationFlush) and store calls to a
node that cannot answer.  Every wait is a stall saved in the move request (why, since when,
for how long, and every answer), so `mrs stats` shows it; the rules come from `policy`.

No answer here is ever turned into progress unless `policy` says CONTINUE: a Retry or
NotSatisfied waits, a flush answered for another epoch or lost in a failover raises
`NeedsReconcile`, a limit passed raises `MoveFailed`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from dag_common.clock import Clock
from dag_common.model import Lsn
from mrs_client.errors import (
    MoveFailed,
    MoveReleased,
    MoveStopped,
    NeedsReconcile,
    NodeCallError,
)
from mrs_client.lease import seconds_left
from mrs_client.move_store.interface import (
    AnswerRow,
    LeaseLost,
    MoveLease,
    MoveRecord,
    MoveStore,
    answer_row,
)
from mrs_client.policy import (
    Decision,
    GuaranteeAnswer,
    MoveSettings,
    MoveState,
    StallStatus,
    StopRequest,
    Verdict,
    flush_gate,
    gate,
    health_check_due,
)
from mrs_client.throttle import Throttle

# A gate's first question waits at most this long: a move still not Satisfied is then marked
# Stalled (what `mrs list` shows while the service waits), and its next questions wait the
# whole retry interval.
FIRST_WAIT = timedelta(seconds=1)


def wait_for(record: MoveRecord, interval: timedelta) -> timedelta:
    """The wait a question asks for: the retry interval once the move is stalled."""
    return interval if record.state is MoveState.STALLED else min(FIRST_WAIT, interval)


def node_stall(record: MoveRecord, exc: NodeCallError) -> StallStatus:
    """Why a move waits on a node call that failed: the mailbox locked, or the active copy
    of the end the call went to (the target when the error does not say) unreachable."""
    if exc.status in (409, 423):
        return StallStatus.MAILBOX_LOCK
    if exc.database is not None and exc.database == record.source_db:
        return StallStatus.SOURCE_AVAILABILITY
    return StallStatus.TARGET_AVAILABILITY


def _stalled_for(record: MoveRecord, status: StallStatus, seconds: float) -> MoveRecord:
    """`record` with `seconds` more stalled, counted under `status` too."""
    by = dict(record.stalled_by)
    by[status] = by.get(status, 0.0) + seconds
    return replace(record, time_stalled=record.time_stalled + seconds, stalled_by=by)


def _stalled_at_least(record: MoveRecord, stored: MoveRecord) -> MoveRecord:
    """The time stalled only grows: a step that stalled inside a node call (`node_call`
    saves the stall) and then saves the record it held from before must not undo it."""
    by = {k: max(v, record.stalled_by.get(k, 0.0)) for k, v in stored.stalled_by.items()}
    return replace(
        record,
        time_stalled=max(stored.time_stalled, record.time_stalled),
        stalled_by={**record.stalled_by, **by},
    )


class GuaranteeClient(Protocol):
    """The two questions a mover asks the Data Guarantee API."""

    async def check_health(
        self, database: str, caller_id: str, wait: timedelta | None = None
    ) -> GuaranteeAnswer: ...

    async def check_flush(
        self,
        database: str,
        caller_id: str,
        lsn: Lsn,
        commit_time: datetime,
        wait: timedelta | None = None,
    ) -> GuaranteeAnswer:
        """By the LSN (its generation of the stream of its epoch, or the record at its
        offset: `Lsn.record_offset`) when the service offers it, by `commit_time` otherwise;
        with `wait`, answered as soon as Satisfied or at the wait's end."""
        ...


class Gates:
    """The waits of one mover, saved in its move request store."""

    def __init__(
        self,
        *,
        requests: MoveStore,
        guarantee: GuaranteeClient,
        clock: Clock,
        settings: MoveSettings,
        caller_id: str,
        progress: Callable[[MoveRecord, str], None],
    ) -> None:
        self.requests = requests
        self.guarantee = guarantee
        self.clock = clock
        self.settings = settings
        self.caller_id = caller_id
        self._progress = progress
        self._last_check: datetime | None = None
        self._last_said = ""  # the last waiting line printed: not repeated while it holds
        self.lease: MoveLease | None = None  # the lease the move runs under (Mover.run)
        self.release = asyncio.Event()  # set: the worker stops; give the move back
        # Told of each guarantee answer as it is kept (a move's metrics textfile counts them).
        self.on_answer: Callable[[str, AnswerRow], None] | None = None
        self._saved: tuple[MoveLease, MoveRecord] | None = None  # the last save, its lease
        # Answers given since the last save, kept with the next one (one round trip: a
        # step's answers are kept with the save that ends it, or with the stall's).
        self._answers: list[AnswerRow] = []
        # What an operator asked of the move as the last save found it (move id, request),
        # for the safe point that follows the save; read at most once.
        self._looked: tuple[str, StopRequest | None] | None = None
        # The batch's throughput cap, shared with its other moves in this worker (None: none).
        self.throttle: Throttle | None = None

    async def pace(self, size: int) -> None:
        """Before a write of `size` bytes to the target: wait for the batch's cap."""
        if self.throttle is not None:
            await self.throttle.take(size)

    async def save(self, record: MoveRecord, *, durable: bool = True) -> MoveRecord:
        """Persist `record` and return it as saved; `durable=False`: see
        `MoveStore.save`.  Only under the move's lease (`lease`), which the
        store checks: LeaseLost if it is over."""
        if self.lease is None:
            raise RuntimeError(f"move {record.id} saved without its lease")
        # Under the lease nobody else saves the record: the last one this mover saved is
        # the stored one (read from the store only at the first save under a lease).
        saved = self._saved
        if saved is None or saved[0] != self.lease or saved[1].id != record.id:
            stored = await self.requests.get(record.id)
        else:
            stored = saved[1]
        if stored is not None:
            record = _stalled_at_least(record, stored)
        lease = self.lease
        answers, self._answers = self._answers, []
        record, stop = await self.requests.save_and_look(
            record, self.clock.now(), lease=lease, durable=durable, answers=answers
        )
        self._saved = (lease, record)
        self._looked = (record.id, stop)
        return record

    def stored(self, record: MoveRecord) -> None:
        """`record` is the move as the store holds it, read under the move's lease: the
        first save need not read it again."""
        if self.lease is not None:
            self._saved = (self.lease, record)

    def check_lease(self, record: MoveRecord) -> None:
        """LeaseLost if the move's lease may be over by this process's own count (a pause
        the keeper has not seen yet: `lease.seconds_left`)."""
        left = seconds_left(self.lease) if self.lease is not None else None
        if left is not None and left <= 0:
            raise LeaseLost(f"move {record.id}: its lease ran out ({-left:.1f} s ago); stopped")

    async def checkpoint(self, record: MoveRecord) -> None:
        """A safe point (everything done so far is saved): MoveStopped if an operator asked
        the move to stop (`mrs suspend`, `mrs cancel`).  Every safe point follows a save,
        which read the stop requests in its own transaction: that answer is taken (once),
        else the store is asked."""
        looked, self._looked = self._looked, None
        if looked is not None and looked[0] == record.id:
            action = looked[1]
        else:
            action = await self.requests.stop_requested(record.id)
        if action is not None:
            raise MoveStopped(action)
        if self.release.is_set():
            raise MoveReleased(f"move {record.id} given back by its worker")

    @staticmethod
    def _waited(
        record: MoveRecord, answer: GuaranteeAnswer, asked: datetime
    ) -> tuple[MoveRecord, datetime | None]:
        """After an answer the service waited for: the time it waited counted as stalled,
        and when the stall began (when a question it waited on was asked).  Not saved here:
        every path from an answer saves the record it is given (as the answer itself is
        kept: `_record_answer`), and the paths that raise save it first.  (A save here cost
        every gate a durable commit of its own: six of a one-item move's 24.)"""
        if answer.waited is None or answer.waited <= timedelta(0):
            return record, record.stalled_since
        record = _stalled_for(record, StallStatus.TARGET_REPLICATION, answer.waited.total_seconds())
        return record, record.stalled_since or asked

    @staticmethod
    def _ask_again(decision: Decision, answer: GuaranteeAnswer, wait: timedelta) -> Decision:
        """A service that waited did the mover's waiting: ask again once the wait asked for
        has passed (at once, unless it answered early), not after another bucket."""
        if answer.waited is None:
            return decision
        return replace(decision, wait=max(timedelta(0), min(decision.wait, wait - answer.waited)))

    async def wait(self, record: MoveRecord, decision: Decision, say: str = "") -> MoveRecord:
        """Stall: record why (the full reason), say so in one short line (`say`, else the
        reason; not again while it holds), sleep, and count the time stalled."""
        record = await self.save(
            replace(
                record,
                state=MoveState.STALLED,
                stalled_since=decision.stalled_since,
                stall_reason=decision.reason,
                stall_status=decision.status,
            )
        )
        line = say or f"stalled: {decision.reason}"
        if line != self._last_said:
            self._last_said = line
            self._progress(record, line)
        await self.checkpoint(record)  # a stalled move stops before it waits again
        await self.clock.sleep(decision.wait.total_seconds())
        return await self.save(_stalled_for(record, decision.status, decision.wait.total_seconds()))

    @staticmethod
    def waiting_line(what: str, database: str, answer: GuaranteeAnswer) -> str:
        """One short line while a move waits on the guarantee."""
        why = answer.short or f"{answer.status}: {answer.reason}"
        return f"waiting for {what} of {database}: {why}{answer.clears}"

    async def unstall(self, record: MoveRecord) -> MoveRecord:
        self._last_said = ""
        if record.state is MoveState.IN_PROGRESS:
            return record
        return await self.save(record.unstalled(state=MoveState.IN_PROGRESS))

    def _record_answer(self, record: MoveRecord, method: str, answer: GuaranteeAnswer) -> None:
        """Keep an answer with the move's next save (every path from an answer saves: the
        step's end, a stall, a failure, a reconcile; a move killed before keeps neither the
        answer nor what it allowed)."""
        row = answer_row(record.step, method, answer, self.clock.now())
        self._answers.append(row)
        if self.on_answer is not None:
            self.on_answer(record.id, row)

    async def health(self, record: MoveRecord) -> MoveRecord:
        """Ask CheckReplicationHealth until Satisfied (stalling) or fail past the limit."""
        while True:
            wait = wait_for(record, self.settings.stall_retry_interval)
            asked = self.clock.now()
            answer = await self.guarantee.check_health(record.target_db, self.caller_id, wait)
            self._record_answer(record, "CheckReplicationHealth", answer)
            self._last_check = self.clock.now()
            record, since = self._waited(record, answer, asked)
            decision = gate(
                answer,
                now=self.clock.now(),
                stalled_since=since,
                settings=self.settings,
            )
            if decision.verdict is Verdict.CONTINUE:
                return await self.unstall(record)
            if decision.verdict is Verdict.FAIL:
                await self.save(record)  # the mover fails the record as stored
                raise MoveFailed(decision.reason, stalled=decision.status)
            record = await self.wait(
                record,
                self._ask_again(decision, answer, wait),
                self.waiting_line("healthy copies", record.target_db, answer),
            )

    async def periodic_health(self, record: MoveRecord) -> MoveRecord:
        """During the syncs: the health gate every `health_check_interval`."""
        if health_check_due(self._last_check, self.clock.now(), self.settings):
            return await self.health(record)
        return record

    async def node_call(self, record: MoveRecord, what: str, fn: Callable[[], Any]) -> Any:
        """A store call; a node that cannot answer stalls the move (same limit as the API).
        Never once the move's lease may be over by this process's count (LeaseLost)."""
        stalled_since = None
        while True:
            self.check_lease(record)
            try:
                result = await fn()
                if stalled_since is not None:
                    await self.unstall(record)
                return result
            except NodeCallError as exc:
                if exc.status is not None and exc.status < 500 and exc.status not in (409, 423):
                    raise MoveFailed(f"{what}: {exc}") from exc
                now = self.clock.now()
                stalled_since = stalled_since or now
                status = node_stall(record, exc)
                if now - stalled_since >= self.settings.stall_limit:
                    raise MoveFailed(
                        f"{what}: stalled {self.settings.stall_limit}: {exc}", stalled=status
                    ) from exc
                record = await self.wait(
                    record,
                    Decision(
                        Verdict.WAIT,
                        wait=self.settings.stall_retry_interval,
                        reason=f"{what}: {exc}",
                        stalled_since=stalled_since,
                        status=status,
                    ),
                )

    async def flush(
        self,
        record: MoveRecord,
        point: Lsn,
        *,
        between: Callable[[MoveRecord], Awaitable[MoveRecord]],
        give_up_after: timedelta | None = None,
    ) -> tuple[MoveRecord, GuaranteeAnswer | None]:
        """Ask CheckReplicationFlush for `point` of the target's stream (in the epoch it
        names, the move's saved one) until Satisfied for that epoch; NeedsReconcile if it was
        lost; fail at the limit.  With `give_up_after`: None once that long passed since the
        flush started without Satisfied (the caller then flushes another way).  `between` runs
        before each wait (the mover checks the target's epoch: a flush of a lost generation
        would otherwise wait out its whole limit)."""
        assert record.flush_started is not None
        s = self.settings
        give_up = record.flush_started + give_up_after if give_up_after is not None else None
        first = record.flush_started + min(s.flush_first_check_after, s.flush_retry_interval)
        if self.clock.now() < first:
            await self.clock.sleep((first - self.clock.now()).total_seconds())
        while True:
            wait = wait_for(record, s.flush_retry_interval)
            if give_up is not None:
                wait = max(timedelta(0), min(wait, give_up - self.clock.now()))
            # The roll closed the generation just before flush_started: that is the commit
            # time the seed's check compares the copies' last replayed log time with.
            asked = self.clock.now()
            answer = await self.guarantee.check_flush(
                record.target_db, self.caller_id, point, record.flush_started, wait
            )
            self._record_answer(record, "CheckReplicationFlush", answer)
            record, _ = self._waited(record, answer, asked)
            decision = flush_gate(
                answer,
                now=self.clock.now(),
                flush_started=record.flush_started,
                settings=self.settings,
                epoch=point.epoch,
            )
            if decision.verdict is Verdict.CONTINUE:
                return await self.unstall(record), answer
            if decision.verdict in (Verdict.RECONCILE, Verdict.FAIL):
                await self.save(record)  # the mover goes on from the record as stored
            if decision.verdict is Verdict.RECONCILE:
                raise NeedsReconcile(decision.reason, target_changed=True)
            if decision.verdict is Verdict.FAIL:
                raise MoveFailed(decision.reason, stalled=decision.status)
            if give_up is not None:
                if self.clock.now() >= give_up:
                    return record, None
                decision = replace(decision, wait=min(decision.wait, give_up - self.clock.now()))
            record = await between(await self.save(record))  # `between` may raise
            record = await self.wait(
                record,
                self._ask_again(decision, answer, wait),
                self.waiting_line("the flush", record.target_db, answer),
            )
