"""Migration batches: many move requests created, held, completed and reported together
(Exchange's New-MigrationBatch and its Start/Stop/Complete/Remove verbs): `mrs batch …`.

**Create.** A batch names its mailboxes in a CSV (`mailbox,target_database[,priority]
[,archive]`, a header line first; Exchange's `EmailAddress` and `TargetDatabase` headers are
taken too) or on the command line.  The whole batch is validated before anything is written,
and refused whole with every bad line named: a mailbox unknown or locked, named twice (also
as the archive of another line), already in an unfinished move, an unknown database, a bad
priority or archive flag.  Then every request and the batch are created in one store
operation, all or nothing (`MoveStore.create`).

**Operate.** The batch's settings are read by the workers at each poll:
- suspend: no move of it starts; each of its unfinished moves is asked to stop at its next
  safe point (`mrs suspend` for each).  Resume: the batch runs again, and its moves saved
  Suspended are queued again (`requeue`);
- complete: its synced moves (`--suspend-when-ready-to-complete`, `--complete-after`)
  complete at once instead of at their next incremental sync;
- cancel: no move of it starts; each unfinished move is cancelled as `mrs cancel` does
  (those past step 8 can only go forward, and complete);
- set: the throughput cap changes while it runs.

**Retry.** A move that failed by the seed's 15-minute stall limit (its copies behind, a node
down) is not left failed while the copies catch up: the worker queues it again after
`stall_retry_after`, at most `stall_retries` times (`retry_due`).
"""

from __future__ import annotations

import asyncio
import csv
import io
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TypedDict

from dag_common.clock import Clock
from dag_common.echo import quoted
from dag_common.json_object import JsonObject
from mrs_client.errors import MoveFailed, MoveRejected, NodeCallError
from mrs_client.lease import worker_id
from mrs_client.move_store.interface import BatchRecord, MoveRecord, MoveStore
from mrs_client.move_store.records import BatchSettings, MoveHeadline, headline
from mrs_client.mover import ARCHIVE_SUFFIX, Mover
from mrs_client.policy import FINISHED, MovePriority, MoveState, StallStatus, StopRequest

# Names a batch may have: they appear in keys, metrics labels and file names.
BATCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# How many requests are validated at once (each asks the source and the target's nodes).
_VALIDATING = 16

_COLUMNS = {
    "mailbox": "mailbox",
    "emailaddress": "mailbox",
    "target_database": "target_db",
    "targetdatabase": "target_db",
    "priority": "priority",
    "archive": "archive",
    "with_archive": "archive",
}
_YES = {"yes", "true", "1", "y"}
_NO = {"no", "false", "0", "n", ""}


class BatchRejected(MoveRejected):
    """A batch refused whole: every bad line is named, nothing was queued."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(
            f"batch refused, nothing queued ({len(problems)} problem(s)):\n  "
            + "\n  ".join(problems)
        )
        self.problems = problems


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One mailbox of a batch, as its CSV line (or the command line) names it."""

    line: int  # 1-based, counting the header (0: from the command line)
    mailbox: str
    target_db: str
    priority: MovePriority | None = None
    with_archive: bool = False

    @property
    def where(self) -> str:
        return f"line {self.line}" if self.line else f"mailbox {self.mailbox!r}"


def parse_csv(text: str) -> list[BatchLine]:
    """The lines of a batch CSV; BatchRejected naming each line that cannot be read."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise BatchRejected(["the CSV is empty (a header line, then one line per mailbox)"])
    header = [_COLUMNS.get(h.strip().lower().replace(" ", "_")) for h in rows[0]]
    unknown = [h for h, c in zip(rows[0], header, strict=True) if c is None]
    problems = [f"line 1: unknown column {quoted(h)}" for h in unknown]
    for needed in ("mailbox", "target_db"):
        if needed not in header:
            problems.append(f"line 1: no {needed.replace('_db', '_database')} column")
    if problems:
        raise BatchRejected(problems)
    lines: list[BatchLine] = []
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            problems.append(f"line {number}: {len(row)} fields, the header has {len(header)}")
            continue
        cells = {c: v.strip() for c, v in zip(header, row, strict=True) if c}
        try:
            lines.append(_line(number, cells))
        except ValueError as exc:
            problems.append(f"line {number}: {exc}")
    if problems:
        raise BatchRejected(problems)
    if not lines:
        raise BatchRejected(["the CSV names no mailbox"])
    return lines


def _line(number: int, cells: dict[str, str]) -> BatchLine:
    if not cells["mailbox"]:
        raise ValueError("no mailbox")
    if not cells["target_db"]:
        raise ValueError("no target database")
    priority = MovePriority.parse(cells["priority"]) if cells.get("priority") else None
    archive = cells.get("archive", "").lower()
    if archive not in _YES | _NO:
        raise ValueError(f"archive must be yes or no, not {quoted(cells['archive'])}")
    return BatchLine(number, cells["mailbox"], cells["target_db"], priority, archive in _YES)


def batch_name(text: str) -> str:
    """A valid batch name, or MoveRejected saying what one is."""
    if not BATCH_NAME.fullmatch(text):
        raise MoveRejected(
            f"bad batch name {quoted(text)}: 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return text


async def create(
    store: MoveStore,
    mover: Mover,
    name: str,
    lines: list[BatchLine],
    settings: BatchSettings,
    *,
    now: datetime,
) -> tuple[BatchRecord, list[MoveRecord]]:
    """Validate every line (BatchRejected naming each bad one, nothing written), then
    create the batch and its requests at once (BatchExists: the name is taken)."""
    batch_name(name)
    if await store.batch(name) is not None:
        raise MoveRejected(f"a batch named {name!r} exists already")
    problems: list[tuple[int, str]] = []
    bad: set[int] = set()  # id() of the lines found bad before their request is asked

    def refuse(line: BatchLine, why: str) -> None:
        problems.append((line.line, f"{line.where}: {why}"))
        bad.add(id(line))

    seen: dict[str, BatchLine] = {}
    for line in lines:
        for mailbox in _mailboxes(line):
            first = seen.setdefault(mailbox, line)
            if first is not line:
                refuse(line, f"{mailbox!r} is named twice (also {first.where})")
    moving = {
        mailbox: record.id
        for record in await store.list(states=set(MoveState) - FINISHED)
        for mailbox in record.mailboxes
    }
    for line in lines:
        for mailbox in _mailboxes(line):
            if mailbox in moving:
                refuse(line, f"{mailbox!r} is already moving (move {moving[mailbox]})")
    gate = asyncio.Semaphore(_VALIDATING)

    async def request(line: BatchLine) -> MoveRecord | None:
        async with gate:
            try:
                return await mover.request(
                    line.mailbox,
                    line.target_db,
                    with_archive=line.with_archive,
                    large_item_limit=settings.large_item_limit,
                    bad_item_limit=settings.bad_item_limit,
                    batch=name,
                    priority=line.priority if line.priority is not None else settings.priority,
                )
            except MoveFailed:
                raise  # a node cannot say now: nothing is bad input, nothing recorded
            except MoveRejected as exc:
                cause = exc.__cause__
                if isinstance(cause, NodeCallError) and cause.status in (401, 403):
                    raise  # the token, not the line: said once, not for every line
                refuse(line, str(exc))
                return None

    records = await asyncio.gather(*(request(line) for line in lines if id(line) not in bad))
    if problems:
        raise BatchRejected([why for _, why in sorted(problems, key=lambda p: p[0])])
    made = [r for r in records if r is not None]
    batch = BatchRecord(name, now, settings, moves=tuple(r.id for r in made))
    await store.create(made, batch)
    return batch, made


def _mailboxes(line: BatchLine) -> list[str]:
    return [line.mailbox] + ([line.mailbox + ARCHIVE_SUFFIX] if line.with_archive else [])


async def get(store: MoveStore, name: str) -> BatchRecord:
    batch = await store.batch(name)
    if batch is None:
        raise MoveRejected(f"no batch {quoted(name)}")
    return batch


async def _operable(store: MoveStore, name: str) -> tuple[BatchRecord, list[MoveRecord]]:
    """The batch (not cancelled) and its unfinished moves."""
    batch = await get(store, name)
    if batch.cancelled:
        raise MoveRejected(f"batch {name} is cancelled")
    return batch, [r for r in await store.list(batch=name) if r.state not in FINISHED]


async def suspend(store: MoveStore, name: str, *, clock: Clock) -> str:
    """No move of the batch starts; each unfinished one stops at its next safe point."""
    batch, unfinished = await _operable(store, name)
    await store.save_batch(replace(batch, suspended=True))
    for r in unfinished:
        if r.state is not MoveState.SUSPENDED:
            await store.request_stop(r.id, StopRequest.SUSPEND, clock.now())
    return f"batch {name} suspended: its running moves stop at their next safe point"


async def resume(store: MoveStore, name: str, *, clock: Clock) -> str:
    """The batch runs again: suspends not carried out yet are forgotten, and the moves
    saved Suspended are queued again."""
    batch, unfinished = await _operable(store, name)
    await store.save_batch(replace(batch, suspended=False))
    me, queued = worker_id("mrs-batch"), 0
    for r in unfinished:
        if await store.stop_requested(r.id) is StopRequest.SUSPEND:
            await store.clear_stop(r.id)
        again = await requeue(store, r, worker=me, clock=clock, from_states={MoveState.SUSPENDED})
        queued += again is not None
    return f"batch {name} resumed ({queued} suspended move(s) queued again)"


async def complete(store: MoveStore, name: str, *, clock: Clock) -> str:
    """The batch's synced moves complete now (and those still syncing once synced)."""
    batch, unfinished = await _operable(store, name)
    await store.save_batch(replace(batch, complete_requested=clock.now()))
    synced = sum(r.state is MoveState.SYNCED for r in unfinished)
    return f"batch {name}: completing ({synced} synced move(s) complete now)"


async def change(store: MoveStore, name: str, *, max_mb_per_s: float | None) -> str:
    """Change the throughput cap of a running batch (None: no cap); the workers take it at
    their next poll."""
    batch, _ = await _operable(store, name)
    settings = replace(batch.settings, max_mb_per_s=max_mb_per_s)
    await store.save_batch(replace(batch, settings=settings))
    return (
        f"batch {name}: throughput cap {'none' if max_mb_per_s is None else f'{max_mb_per_s} MB/s'}"
    )


async def requeue(
    store: MoveStore,
    record: MoveRecord,
    *,
    worker: str,
    clock: Clock,
    from_states: Iterable[MoveState],
    retries: int | None = None,
    not_before: datetime | None = None,
) -> MoveRecord | None:
    """Queue a stopped move again (a suspended one, a failed one retried), as an operator's
    resume does: the stall and flush limits start afresh.  Under the move's lease: None if
    someone runs it, or it is no longer in `from_states`."""
    lease = await store.claim(record.id, worker, 30.0)
    if lease is None:
        return None
    try:
        current = await store.get(record.id)
        if current is None or current.state not in set(from_states):
            return None
        now = clock.now()
        queued = current.unstalled(
            state=MoveState.QUEUED,
            failure=None,
            failed_stalled=None,
            flush_started=now if current.flush_started else None,
            retries=current.retries if retries is None else retries,
            not_before=current.not_before if not_before is None else not_before,
        )
        return await store.save(queued, now, lease=lease)
    finally:
        await store.release(lease)


def retry_due(record: MoveRecord, batch: BatchRecord | None) -> datetime | None:
    """When a failed move of `batch` is queued again (None: it stays failed): it failed by a
    stall limit and has retries left; it then runs after `stall_retry_after`."""
    if (
        batch is None
        or batch.cancelled
        or record.state is not MoveState.FAILED
        or record.failed_stalled is None
        or record.retries >= batch.settings.stall_retries
    ):
        return None
    return record.updated + timedelta(seconds=batch.settings.stall_retry_after)


def counts(records: Iterable[MoveRecord]) -> dict[str, int]:
    """Moves by state, every state named (0 for none)."""
    n = Counter(str(r.state) for r in records)
    return {str(s): n.get(str(s), 0) for s in MoveState}


class MoveReport(MoveHeadline):
    """One move of a batch report (`move_report`), as `--json` prints it."""

    priority: str
    created: str | None
    started: str | None
    updated: str | None
    completed: str | None
    megabytes: float
    items: int
    stalled_seconds: float
    stalled_by: dict[str, float]
    stall_status: StallStatus | None
    expected_clear_at: str | None
    retries: int
    failure: str | None
    worker: str | None


class HeldBack(TypedDict):
    """A reason guarantee answers held a batch back, and how many said it."""

    reason: str
    answers: int


class BatchReport(TypedDict):
    """A batch report (`report`), as `--json` prints it; `settings` as the batch saves them."""

    name: str
    created: str | None
    suspended: bool
    cancelled: bool
    complete_requested: str | None
    settings: JsonObject
    moves: int
    by_state: dict[str, int]
    megabytes: float
    seconds: float | None
    mb_per_s: float | None
    stalled_seconds_by_reason: dict[str, float]
    held_back_by: list[HeldBack]
    move_reports: list[MoveReport]


def move_report(record: MoveRecord, clears: str | None = None) -> MoveReport:
    """One move of a batch report: state, timeline, MB, items, time stalled by reason, and
    for a stalled move when the guarantee service expected its condition to clear."""
    return {
        **headline(record),
        "priority": record.priority.name.capitalize(),
        "created": _iso(record.created),
        "started": _iso(record.started),
        "updated": _iso(record.updated),
        "completed": _iso(record.completed),
        "megabytes": round(record.bytes_copied / 1e6, 3),
        "items": record.items_copied,
        "stalled_seconds": round(record.time_stalled, 1),
        "stalled_by": {k: round(v, 1) for k, v in sorted(record.stalled_by.items())},
        "stall_status": record.stall_status,
        "expected_clear_at": clears if record.state is MoveState.STALLED else None,
        "retries": record.retries,
        "failure": record.failure,
        "worker": record.worker,
    }


def report(
    batch: BatchRecord,
    records: list[MoveRecord],
    held_back: Counter[str],
    now: datetime,
    clears: dict[str, str | None] | None = None,
) -> BatchReport:
    """A batch report (`mrs batch report`): counts by state, MB moved, throughput, the time
    its moves stalled by reason, which copies held it back (`held_back`: the reasons of its
    guarantee answers that were not Satisfied, counted), and every move (`clears`: when the
    service expected a stalled one's condition to clear, by move id)."""
    started = [r.started for r in records if r.started]
    ended = [r.completed for r in records if r.completed]
    done = all(r.state in FINISHED for r in records)
    span = None
    if started:
        last = max(ended) if done and ended else now
        span = max((last - min(started)).total_seconds(), 1e-9)
    megabytes = sum(r.bytes_copied for r in records) / 1e6
    stalled: Counter[str] = Counter()
    for r in records:
        stalled.update(r.stalled_by)
    return {
        "name": batch.name,
        "created": _iso(batch.created),
        "suspended": batch.suspended,
        "cancelled": batch.cancelled,
        "complete_requested": _iso(batch.complete_requested),
        "settings": batch.as_dict()["settings"],
        "moves": len(records),
        "by_state": counts(records),
        "megabytes": round(megabytes, 3),
        "seconds": None if span is None else round(span, 1),
        "mb_per_s": None if span is None else round(megabytes / span, 3),
        "stalled_seconds_by_reason": {k: round(v, 1) for k, v in sorted(stalled.items())},
        "held_back_by": [HeldBack(reason=why, answers=n) for why, n in held_back.most_common(10)],
        "move_reports": [move_report(r, (clears or {}).get(r.id)) for r in records],
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat(timespec="seconds") if value else None
