"""The cluster store's interface: the abstract store (`ClusterStore`) and the records it
keeps, apart from the package's `open_cluster_store`, so that an engine (`embedded.py`,
`etcd.py`) imports what it implements without importing the package that chooses it (the
whole story: the package's docstring)."""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import TypeVar

from dag_common.incarnation import ActivationCause, EpochRecord
from dag_common.model import AutoDatabaseMountDial, FailoverPause

# The move store's layout (mrs_client.move_store: embedded.py, etcd.py), read here as a
# contract, never written: the cluster store does not import the mover, so what it reads of
# the mover's records is named here, and only here.  A test creates a real move through the
# move store and reads it back through `mailbox_entry` (tests/replication_node/
# test_cluster_store.py), so a change of the move store's layout fails there.
MOVE_CLAIMS_TABLE = "move_mailboxes"  # SQLite: (mailbox PRIMARY KEY, move_id) of unfinished moves
MOVE_REQUESTS_TABLE = "move_requests"  # SQLite: (id PRIMARY KEY, …, body: the MoveRecord JSON)
MOVE_CLAIMS_KEY = "moves/mailbox/"  # etcd, under /dag/<cluster>/: + mailbox -> the move id
MOVE_REQUESTS_KEY = "moves/req/"  # etcd: + move id -> the MoveRecord JSON
MOVE_TARGET_FIELD = "target_db"  # the MoveRecord JSON's target database

_E = TypeVar("_E", bound=StrEnum)


def known_member(kind: type[_E], value: str | None) -> _E | None:
    """A stored `value` as a member of `kind`; None for a value not recorded (a record from
    before it was kept), or one this version does not know (written by a newer node)."""
    try:
        return kind(value) if value is not None else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """A live lease on the active role of `database`: held by `node` at `epoch`, for
    `expires_in` more seconds by the store's clock when it was read."""

    database: str
    node: str
    epoch: int
    expires_in: float


@dataclass(frozen=True, slots=True)
class ActiveRecord:
    """Which node holds the active copy of a database, since which epoch.

    `last_log_generated` is the last closed generation the active announced.  `open_generation`
    is the generation of the active's open log once it holds an acknowledged commit (0: none
    announced at this epoch): the active writes it before it acknowledges the first commit of
    each generation, so a copy can count the open log as lost after the active is gone.
    `change_number_ceiling` bounds every change number the active may have handed out (it is
    announced with `open_generation`); a new active numbers above it, so no change number is
    ever used twice across a failover.
    """

    database: str
    node: str
    epoch: int
    last_log_generated: int
    updated: datetime
    open_generation: int = 0
    change_number_ceiling: int = 0

    @property
    def generated_at_risk(self) -> int:
        """The highest generation holding acknowledged commits that the active announced:
        LastLogGenerated counting the open log once it holds an acknowledged commit."""
        return max(self.last_log_generated, self.open_generation)


@dataclass(frozen=True, slots=True)
class SetActive:
    """A `set_active` call as an engine writes it: `node` made active at `epoch` if the
    database is still at the epoch before, with the new epoch's `EpochRecord` (its start,
    how the generation before it was kept, why, under which dial, losing how many logs)."""

    database: str
    node: str
    epoch: int
    start_generation: int | None
    kept_through: int | None
    cause: ActivationCause | None
    mount_dial: AutoDatabaseMountDial | None
    lost_logs: int | None

    def follows(self, current: ActiveRecord | None) -> bool:
        """Whether `current` (None: never set, epoch 0) is the epoch this one follows."""
        return (current.epoch if current else 0) == self.epoch - 1

    @property
    def automatic(self) -> bool:
        """An automatic failover: refused while automatic failover is paused."""
        return self.cause is ActivationCause.AUTOMATIC_FAILOVER

    @property
    def recorded_start(self) -> int:
        """The start the history records: 1 when it is not known (the safe side)."""
        return self.start_generation or 1

    def last_log_generated(self, current: ActiveRecord | None) -> int:
        """The new record's LastLogGenerated: the generation before a known start, else
        where `current` stood."""
        if self.start_generation is not None:
            return self.start_generation - 1
        return current.last_log_generated if current else 0


@dataclass(frozen=True, slots=True)
class MoveHold:
    """The unfinished move that claimed a mailbox, and the database it moves it to (None: its
    request was not found)."""

    move_id: str
    target_database: str | None


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    """A mailbox of the mailbox directory: the database its users reach it in, and the move
    holding it (None: none)."""

    mailbox: str
    database: str
    moving: MoveHold | None


def move_hold(move_id: str | None, request: str | None) -> MoveHold | None:
    """The move holding a mailbox, from the move store's claim (`move_id`, None: no claim) and
    that move's request (its MoveRecord JSON, None: not found)."""
    if move_id is None:
        return None
    target = json.loads(request).get(MOVE_TARGET_FIELD) if request is not None else None
    return MoveHold(move_id, target)


class RedeliveryEnd(StrEnum):
    """Why a redelivery request stopped being required."""

    SUCCESS = "Success"  # every transport answered Success for the whole window
    EXPIRED = "Expired"  # given up


@dataclass(frozen=True, slots=True)
class RedeliveryRecord:
    """The transport dumpster's redelivery request of `database` (Exchange's
    DumpsterRedeliveryRequired, -Servers, -StartTime, -EndTime): every transport of `servers`
    is to resubmit what it delivered to the database from `start` to `end` (UTC) and answer
    Success, which moves it to `answered`.

    `epochs`: the lossy activations the window covers (a second one before every transport
    answered widens the window, and every transport is asked again); `requested`: when the
    first of them required it; `ended`: None while required, else why it ended
    (RedeliveryEnd).  Tuples are sorted, so that two records saying the same are equal."""

    database: str
    epochs: tuple[int, ...]
    start: datetime
    end: datetime
    servers: tuple[str, ...]
    answered: tuple[str, ...]
    requested: datetime
    ended: str | None = None

    @property
    def required(self) -> bool:
        """Still to be answered (DumpsterRedeliveryRequired)."""
        return self.ended is None

    def describe(self) -> str:
        """One line for the status and the history: what is asked of whom, or how it ended."""
        window = f"{self.start:%Y-%m-%d %H:%M} to {self.end:%Y-%m-%d %H:%M} UTC"
        epochs = ", ".join(str(e) for e in self.epochs)
        if self.required:
            answered = f"; answered: {', '.join(self.answered)}" if self.answered else ""
            return (
                f"dumpster redelivery of {window} (epochs {epochs}) pending from "
                f"{', '.join(self.servers)}{answered}"
            )
        return f"dumpster redelivery of {window} (epochs {epochs}): {self.ended}"

    def to_json(self) -> str:
        """The record as the engines keep it (its database is the key's)."""
        return json.dumps(
            {
                "epochs": list(self.epochs),
                "start": self.start.isoformat(),
                "end": self.end.isoformat(),
                "servers": list(self.servers),
                "answered": list(self.answered),
                "requested": self.requested.isoformat(),
                "ended": self.ended,
            }
        )

    @classmethod
    def from_json(cls, database: str, text: str) -> RedeliveryRecord:
        """The record of `database` as `to_json` wrote it."""
        data = json.loads(text)
        return cls(
            database,
            tuple(int(e) for e in data["epochs"]),
            datetime.fromisoformat(data["start"]),
            datetime.fromisoformat(data["end"]),
            tuple(data["servers"]),
            tuple(data["answered"]),
            datetime.fromisoformat(data["requested"]),
            data.get("ended"),
        )


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError(f"{moment.isoformat()}: a time without its zone (UTC expected)")
    return moment.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class RedeliveryNeed:
    """What a lossy activation asks of the transports: the activation of `epoch` lost what
    they delivered from `start` to `end`, which every one of `servers` is to resubmit;
    asked at `now` (the record's `requested`, when it makes a new one)."""

    epoch: int
    start: datetime
    end: datetime
    servers: tuple[str, ...]
    now: datetime


def redelivery_required(
    current: RedeliveryRecord | None, database: str, need: RedeliveryNeed
) -> RedeliveryRecord:
    """`current` once `need` required redelivery: unchanged if it covers its epoch already
    (the new active asks at every mount); a new record if there was none or it ended; else
    widened to cover both windows, every server asked again (an answer for the narrower
    window does not cover the wider one).  A record with no server to ask ends Success at
    once."""
    epoch = need.epoch
    if current is not None and epoch in current.epochs:
        return current
    everyone = tuple(sorted(set(need.servers)))
    start, end = _utc(need.start), _utc(need.end)
    if current is None or not current.required:
        record = RedeliveryRecord(database, (epoch,), start, end, everyone, (), _utc(need.now))
    else:
        record = replace(
            current,
            epochs=tuple(sorted({*current.epochs, epoch})),
            start=min(current.start, start),
            end=max(current.end, end),
            servers=everyone,
            answered=(),
        )
    return record if everyone else replace(record, ended=RedeliveryEnd.SUCCESS.value)


def redelivery_answered(
    current: RedeliveryRecord | None, server: str, epochs: Iterable[int]
) -> RedeliveryRecord | None:
    """`current` once `server` answered Success for the window of `epochs`: counted only while
    required and for that same window; Success once every server answered."""
    if (
        current is None
        or not current.required
        or current.epochs != tuple(sorted(epochs))
        or server not in current.servers
    ):
        return current
    left = tuple(s for s in current.servers if s != server)
    return replace(
        current,
        servers=left,
        answered=tuple(sorted({*current.answered, server})),
        ended=None if left else RedeliveryEnd.SUCCESS.value,
    )


def redelivery_ended(
    current: RedeliveryRecord | None, epochs: Iterable[int], reason: str
) -> RedeliveryRecord | None:
    """`current` ended for `reason`, only while required and still for the window of
    `epochs` (a window widened meanwhile is not given up by a decision about the narrower)."""
    if current is None or not current.required or current.epochs != tuple(sorted(epochs)):
        return current
    return replace(current, ended=reason)


RedeliveryChange = Callable[[RedeliveryRecord | None], RedeliveryRecord | None]


class ClusterStore(abc.ABC):
    """The shared state of the cluster; every method is safe to call from several processes."""

    @abc.abstractmethod
    async def active(self, database: str) -> ActiveRecord | None:
        """The active copy of `database`, or None if none was ever chosen."""

    async def set_active(
        self,
        database: str,
        node: str,
        *,
        expected_epoch: int,
        start_generation: int | None = None,
        kept_through: int | None = None,
        cause: ActivationCause | None = None,
        mount_dial: AutoDatabaseMountDial | None = None,
        lost_logs: int | None = None,
    ) -> ActiveRecord | None:
        """Make `node` active if the epoch is still `expected_epoch` (0: never set).

        In the same atomic step, the new epoch's `EpochRecord` is added to the history: its
        stream begins at `start_generation` (None: not known, recorded as 1, so that no write
        of an earlier epoch is ever taken for surviving).  A known start also begins the new
        record's LastLogGenerated at `start_generation - 1`; the open log at risk starts
        empty; the change-number ceiling carries over.  `kept_through`: the generation
        before the start was kept only through this byte (a block-mode buffer).  `cause`,
        `mount_dial` and `lost_logs` are recorded with it as said (None: unknown), and the
        store's time as its `began`.  Returns the new record, or None if someone else
        changed it first.  LeaseHeld (nothing changed) while a node other than `node` holds
        a live lease on the role; FailoverPaused (nothing changed) for an automatic
        failover while automatic failover is paused."""
        return await self._activate(
            SetActive(
                database,
                node,
                expected_epoch + 1,
                start_generation,
                kept_through,
                cause,
                mount_dial,
                lost_logs,
            )
        )

    @abc.abstractmethod
    async def _activate(self, new: SetActive) -> ActiveRecord | None:
        """`set_active` in the engine's one atomic step."""

    @abc.abstractmethod
    async def renew_lease(self, database: str, node: str, epoch: int, ttl: float) -> bool:
        """Grant or extend `node`'s lease on the active role of `database` for `ttl` seconds
        from now, only if `node` is the active at `epoch` and no other node holds a live
        lease; False otherwise (the caller must stop acknowledging)."""

    @abc.abstractmethod
    async def release_lease(self, database: str, node: str, epoch: int) -> None:
        """End `node`'s lease at `epoch` now (a switchover, a clean dismount); nothing if it
        holds none."""

    @abc.abstractmethod
    async def lease(self, database: str) -> LeaseRecord | None:
        """The live lease on the active role of `database`, or None."""

    @abc.abstractmethod
    async def history(self, database: str) -> list[EpochRecord]:
        """Every epoch of `database` recorded by `set_active`, oldest first."""

    @abc.abstractmethod
    async def publish_last_log_generated(
        self, database: str, node: str, epoch: int, generation: int
    ) -> bool:
        """Record LastLogGenerated, only if `node` is still active at `epoch`."""

    @abc.abstractmethod
    async def publish_open_generation(
        self, database: str, node: str, epoch: int, generation: int, change_number_ceiling: int
    ) -> bool:
        """Announce that the open log `generation` holds an acknowledged commit, with the
        change-number ceiling, only if `node` is still active at `epoch`; never lowers either.
        False if `node` is not the active at `epoch` (it must not acknowledge)."""

    @abc.abstractmethod
    async def failover_pause(self) -> FailoverPause | None:
        """The pause of automatic failover in force, or None."""

    @abc.abstractmethod
    async def pause_failover(self, pause: FailoverPause) -> bool:
        """Pause automatic failover as `pause` says; False (nothing changed) if it is
        paused already."""

    @abc.abstractmethod
    async def resume_failover(self) -> FailoverPause | None:
        """End the pause of automatic failover: the pause ended, or None if there was none."""

    @abc.abstractmethod
    async def mailbox_database(self, mailbox: str) -> str | None:
        """The database holding `mailbox` in the mailbox directory."""

    @abc.abstractmethod
    async def set_mailbox_database(
        self, mailbox: str, database: str, *, expected: str | None
    ) -> bool:
        """Point `mailbox` at `database` if it still points at `expected` (None: absent)."""

    @abc.abstractmethod
    async def mailboxes(self) -> dict[str, str]:
        """The whole mailbox directory."""

    @abc.abstractmethod
    async def mailbox_entry(self, mailbox: str) -> DirectoryEntry | None:
        """`mailbox` in the mailbox directory, with the unfinished move that claimed it (read
        from the move store, which may never have run); None if the directory has no such
        mailbox."""

    @abc.abstractmethod
    async def redelivery(self, database: str) -> RedeliveryRecord | None:
        """The dumpster redelivery record of `database`, required or ended; None if none."""

    @abc.abstractmethod
    async def _change_redelivery(
        self, database: str, change: RedeliveryChange
    ) -> RedeliveryRecord | None:
        """In one atomic step: read the redelivery record of `database`, store what `change`
        makes of it (nothing if the same), and return that.  `change` is pure: an engine may
        call it again on a fresher read."""

    async def require_redelivery(self, database: str, need: RedeliveryNeed) -> RedeliveryRecord:
        """Require redelivery of `database` for a lossy activation (`redelivery_required`);
        the record as stored."""
        record = await self._change_redelivery(
            database, lambda current: redelivery_required(current, database, need)
        )
        assert record is not None  # redelivery_required always makes one
        return record

    async def redelivered(
        self, database: str, server: str, *, epochs: tuple[int, ...]
    ) -> RedeliveryRecord | None:
        """`server` answered Success for the window of `epochs` (`redelivery_answered`); the
        record as stored (None if none)."""
        return await self._change_redelivery(
            database, lambda current: redelivery_answered(current, server, epochs)
        )

    async def end_redelivery(
        self, database: str, *, epochs: tuple[int, ...], reason: str
    ) -> RedeliveryRecord | None:
        """Stop requiring redelivery for the window of `epochs`, for `reason`
        (`redelivery_ended`); the record as stored (None if none)."""
        return await self._change_redelivery(
            database, lambda current: redelivery_ended(current, epochs, reason)
        )

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store."""

    async def aclose(self) -> None:
        """Release the store from async code, waiting for what close() can only schedule
        (etcd's HTTP session)."""
        self.close()
