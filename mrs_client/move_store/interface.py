"""The move store's interface: the abstract store (`MoveStore`), its leases and the rows
it keeps, apart from the package's `open_move_store`, so that an engine (`embedded.py`,
`etcd.py`) imports what it implements without importing the package that chooses it (the
whole story: the package's docstring)."""

from __future__ import annotations

import abc
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from mrs_client.errors import MoveError, MoveRejected
from mrs_client.move_store.records import BatchRecord, MoveRecord
from mrs_client.policy import GuaranteeAnswer, MoveState, MoveStep, StopRequest

# The guarantee answers kept per move (the newest): `mrs stats` shows the last ones, and a
# move stalled for hours asks every 30 s.
ANSWERS_KEPT = 500


def new_move_id() -> str:
    """A new move request's id: 12 hex digits."""
    return uuid.uuid4().hex[:12]


class LeaseLost(MoveError):
    """The move's lease is not (or no longer) the caller's: nothing was written."""

    @classmethod
    def saving(cls, move_id: str, worker: str, holder: str | None) -> LeaseLost:
        """A save by `worker` refused; `holder`: another holding the move now (None: none)."""
        now = f" ({holder} holds the move now)" if holder else ""
        return cls(f"move {move_id}: the lease of {worker} is over{now}; nothing saved")


@dataclass(frozen=True, slots=True)
class MoveLease:
    """The right to run one move: held by `worker`, proved by `token` (a new one per claim)."""

    move_id: str
    worker: str
    token: str


@dataclass(frozen=True, slots=True)
class MoveHolder:
    """Who holds a move's live lease, and for how many more seconds by the store's clock."""

    worker: str
    expires_in: float


class AnswerRow(BaseModel):
    """One guarantee answer as the store keeps it (JSON) and `mrs stats` shows it."""

    model_config = ConfigDict(frozen=True)

    time: str  # when it was answered, ISO 8601
    step: int
    method: str  # CheckReplicationHealth | CheckReplicationFlush
    status: str  # a GuaranteeStatus
    retry_after: float  # seconds
    reason: str
    epoch: int = 0
    lost: bool = False
    expected_in: float | None = None  # seconds until the condition was expected to clear


def answer_row(step: MoveStep, method: str, answer: GuaranteeAnswer, now: datetime) -> AnswerRow:
    """One guarantee answer as the store keeps it (and `mrs stats` shows it)."""
    return AnswerRow(
        time=now.isoformat(),
        step=int(step),
        method=method,
        status=str(answer.status),
        retry_after=answer.retry_after.total_seconds(),
        reason=answer.reason,
        epoch=answer.epoch,
        lost=answer.lost,
        expected_in=answer.expected_in.total_seconds() if answer.expected_in else None,
    )


class MoveStore(abc.ABC):
    """Move requests, their leases, stop requests, guarantee answers and batches."""

    # ---- requests ---------------------------------------------------------------------

    @abc.abstractmethod
    async def create(self, records: list[MoveRecord], batch: BatchRecord | None = None) -> None:
        """Record new requests (and their batch), claiming every mailbox they move: all or
        nothing.  MoveRejected naming every mailbox already in an unfinished move (and
        BatchExists for a batch name taken)."""

    @abc.abstractmethod
    async def get(self, move_id: str) -> MoveRecord | None:
        """One move request, or None."""

    @abc.abstractmethod
    async def list(
        self, *, states: Iterable[MoveState] | None = None, batch: str | None = None
    ) -> list[MoveRecord]:
        """Move requests, oldest first: all, or those in `states` and/or of `batch`."""

    @abc.abstractmethod
    async def save(
        self, record: MoveRecord, now: datetime, *, lease: MoveLease, durable: bool = True
    ) -> MoveRecord:
        """Persist `record` (stamped `updated=now`) and return it as saved, only while
        `lease` is the move's live lease: LeaseLost (nothing written) otherwise.  A record
        saved Completed or Cancelled releases its mailboxes and any stop request; one saved
        Suspended, a suspend request.  `durable=False` (progress within a step): safe from a
        crash of this process, and ordered with every other save, but an engine may lose it
        to a power cut until the next durable save."""

    async def save_and_look(
        self,
        record: MoveRecord,
        now: datetime,
        *,
        lease: MoveLease,
        durable: bool = True,
        answers: Sequence[AnswerRow] = (),
    ) -> tuple[MoveRecord, StopRequest | None]:
        """`save`, keeping with it the guarantee answers given since the last save
        (`keep_answer`; a save refused keeps none), and what an operator asks of the move as
        of the save (`stop_requested`): the running mover's save and its look at the safe
        point after it.  One round trip where an engine can; this is the three calls."""
        saved = await self.save(record, now, lease=lease, durable=durable)
        for row in answers:
            await self.keep_answer(record.id, row)
        return saved, await self.stop_requested(record.id)

    # ---- leases -----------------------------------------------------------------------

    @abc.abstractmethod
    async def claim(self, move_id: str, worker: str, ttl: float) -> MoveLease | None:
        """Take the move's lease for `ttl` seconds; None if another live lease holds it
        (also one of the same worker: a lease is never taken twice)."""

    @abc.abstractmethod
    async def renew(self, lease: MoveLease, ttl: float) -> bool:
        """Extend `lease` for `ttl` seconds from now; False if it is no longer live (the
        holder must stop the move at once)."""

    @abc.abstractmethod
    async def release(self, lease: MoveLease) -> None:
        """End `lease` now; nothing if it is no longer live."""

    @abc.abstractmethod
    async def holder(self, move_id: str) -> MoveHolder | None:
        """The live lease on the move, or None."""

    @abc.abstractmethod
    async def holders(self) -> dict[str, MoveHolder]:
        """Every live move lease, by move id."""

    # ---- stop requests ------------------------------------------------------------------

    @abc.abstractmethod
    async def request_stop(self, move_id: str, action: StopRequest, now: datetime) -> None:
        """Ask the move to stop (durably); a cancel asked before is not turned into a
        suspend."""

    @abc.abstractmethod
    async def stop_requested(self, move_id: str) -> StopRequest | None:
        """What an operator asked of the move that it has not done yet (None: nothing)."""

    @abc.abstractmethod
    async def clear_stop(self, move_id: str) -> None:
        """Forget a request to stop (a resume overrides a suspend nobody carried out)."""

    # ---- guarantee answers ----------------------------------------------------------------

    async def add_answer(
        self, move_id: str, *, step: MoveStep, method: str, answer: GuaranteeAnswer, now: datetime
    ) -> None:
        """Keep one answer of the guarantee service (the newest ANSWERS_KEPT are kept)."""
        await self.keep_answer(move_id, answer_row(step, method, answer, now))

    @abc.abstractmethod
    async def keep_answer(self, move_id: str, row: AnswerRow) -> None:
        """Keep one answer as `answer_row` made it (the newest ANSWERS_KEPT are kept)."""

    @abc.abstractmethod
    async def answers(self, move_id: str) -> list[AnswerRow]:
        """The answers kept, oldest first, as `answer_row` makes them."""

    # ---- batches ------------------------------------------------------------------------

    @abc.abstractmethod
    async def batch(self, name: str) -> BatchRecord | None:
        """One batch, or None."""

    @abc.abstractmethod
    async def batches(self) -> list[BatchRecord]:
        """Every batch, oldest first."""

    @abc.abstractmethod
    async def save_batch(self, batch: BatchRecord) -> None:
        """Replace a batch's record (an operator's suspend, resume, complete, settings)."""

    # ---- closing --------------------------------------------------------------------------

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release the store."""


class BatchExists(MoveRejected):
    """A batch of that name exists already."""

    @classmethod
    def named(cls, name: str) -> BatchExists:
        return cls(f"a batch named {name!r} exists already")
