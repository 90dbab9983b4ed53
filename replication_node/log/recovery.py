"""Crash recovery of an active copy: what the log holds beyond the database's waypoint.

On start, every closed generation above the waypoint is read and verified whole, then the
valid records of E00.log.  A torn or corrupt tail of E00.log is cut at the last valid record
(it was never acknowledged: a commit is answered only after its fsync) and reported.  A
defect inside a closed generation, a gap, or a log of another stream stops recovery with
RecoveryError: a log is never skipped.

An E00.log that still carries the header of a prepared file (`logfile.PreparedHeader`: a
power loss cut the roll that installed it before its real header reached the disk) was never
fsync'd after that roll, so nothing in it was acknowledged.  It is accepted only if it was
prepared for the generation after the last one in the log, of this stream; then it is
dropped (with a note) and a new E00.log opened as after a roll.  Anything else stops
recovery with RecoveryError.

Staged bodies (`spanning.py`): the log is read from the database's Logs Required (the first
generation holding a part of a body pending at its waypoint), so a commit above the waypoint
reads its body back whole; a body still pending at the end of the log was never committed,
so never acknowledged: it is in `pending`, and the stream aborts it before taking writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from replication_node.errors import LogFormatError, LogRecordError, RecoveryError
from replication_node.log import logfile
from replication_node.log.events import Transaction
from replication_node.log.logdir import list_closed_generations
from replication_node.log.logfile import (
    HEADER_SIZE,
    OPEN_LOG_NAME,
    LogHeader,
    LogRecord,
    PreparedHeader,
    RecordType,
    ScanResult,
)
from replication_node.log.operations import (
    MalformedOperation,
    Operation,
    decode_payload,
    decode_record_ops,
)
from replication_node.log.spanning import (
    BLOBS_KEY,
    BlobId,
    BodyReader,
    PendingBlob,
    decode_transaction,
    required_from,
    track,
)

logger = logging.getLogger(__name__)


class Consistency(Protocol):
    """Where a database file stands, as recovery needs it (its header: `storage.header`)."""

    @property
    def waypoint(self) -> int: ...
    @property
    def required_from(self) -> int: ...
    @property
    def log_signature(self) -> object: ...


@dataclass(frozen=True)
class RecoveryPlan:
    """The transactions to bring back, in log order, and what recovery found."""

    transactions: tuple[Transaction, ...]
    close_times: dict[int, datetime]
    open_scan: ScanResult | None
    last_closed: int
    notes: tuple[str, ...] = field(default=())
    # Staged bodies pending at the end of the log: never committed, to be aborted.
    pending: dict[BlobId, PendingBlob] = field(default_factory=dict)
    # Logs Required after each closed generation above the waypoint (`spanning.py`).
    required_after: dict[int, int] = field(default_factory=dict)


def check_chain(prev: LogHeader | None, header: LogHeader, log_signature: object) -> None:
    """The seeds' sequence checks between consecutive generations; RecoveryError if broken."""
    problem = logfile.chain_problem(prev, header, log_signature)
    if problem:
        raise RecoveryError(problem)


def plan_recovery(log_dir: Path, db: Consistency) -> RecoveryPlan:
    """Read the log above the database's waypoint (from its Logs Required, for the staged
    bodies a commit above it names); raise RecoveryError if it is unusable."""
    closed = list_closed_generations(log_dir) if log_dir.exists() else []
    needed = [g for g in closed if g > db.waypoint]
    expected = list(range(db.waypoint + 1, db.waypoint + 1 + len(needed)))
    if needed != expected:
        missing = sorted(
            set(range(db.waypoint + 1, (needed or [db.waypoint])[-1] + 1)) - set(needed)
        )
        raise RecoveryError(
            f"log generations {missing} required for recovery are missing "
            f"(database waypoint {db.waypoint})"
        )
    first = db.required_from or db.waypoint + 1
    required = [g for g in range(first, db.waypoint + 1)]
    if not set(required) <= set(closed):
        raise RecoveryError(
            f"log generations {sorted(set(required) - set(closed))} required for recovery are "
            f"missing (the database's Logs Required begin at {first}: a staged body begun "
            "there is committed above its waypoint)"
        )
    txns: list[Transaction] = []
    close_times: dict[int, datetime] = {}
    notes: list[str] = []
    prev: LogHeader | None = None
    anchor = first - 1
    if anchor in closed:
        try:
            prev = logfile.read_header(log_dir / logfile.closed_log_name(anchor))
        except LogFormatError as exc:
            raise RecoveryError(f"generation {anchor}: {exc}") from exc
    open_scan = None
    prepared: PreparedHeader | None = None
    open_path = log_dir / OPEN_LOG_NAME
    if open_path.exists():
        data = open_path.read_bytes()
        try:
            prepared = PreparedHeader.decode(data)
            if prepared is None:
                open_scan = logfile.scan(data)
        except LogFormatError as exc:
            raise RecoveryError(f"E00.log is unusable: {exc}") from exc
        if prepared is not None:
            notes.append(_prepared_open_log(prepared, len(data), closed, db))
    reader = BodyReader(_loader(log_dir, open_scan))
    pending: dict[BlobId, PendingBlob] | None = None
    required_after: dict[int, int] = {}
    for gen in required + needed:
        path = log_dir / logfile.closed_log_name(gen)
        try:
            result = logfile.verify_closed(path.read_bytes(), gen)
        except LogFormatError as exc:
            raise RecoveryError(f"closed generation {gen} is corrupt: {exc}") from exc
        check_chain(prev, result.header, db.log_signature)
        prev = result.header
        pending = _track(result, pending)
        if gen > db.waypoint:
            txns.extend(_transactions(result, reader))
            required_after[gen] = required_from(pending)
            if result.close_time:
                close_times[gen] = result.close_time
    if open_scan is not None:
        if open_scan.header.generation <= db.waypoint:
            raise RecoveryError(
                f"E00.log is generation {open_scan.header.generation}, at or below the "
                f"database waypoint {db.waypoint}"
            )
        check_chain(prev, open_scan.header, db.log_signature)
        if open_scan.closed:
            raise RecoveryError("E00.log carries a CLOSE record but was never renamed")
        if open_scan.tail_error:
            note = (
                f"E00.log (generation {open_scan.header.generation}): {open_scan.tail_error}; "
                f"cut at offset {open_scan.valid_end} "
                f"({open_scan.file_size - open_scan.valid_end} bytes dropped, never acknowledged)"
            )
            logger.warning("recovery: %s", note)
            notes.append(note)
        pending = _track(open_scan, pending)
        txns.extend(_transactions(open_scan, reader))
    pending = pending or {}
    if pending:
        note = (
            f"staged bodies never committed ({', '.join(str(b) for b in sorted(pending))}): "
            "aborted, nothing of them visible"
        )
        logger.warning("recovery: %s", note)
        notes.append(note)
    return RecoveryPlan(
        transactions=tuple(txns),
        close_times=close_times,
        open_scan=open_scan,
        last_closed=needed[-1] if needed else max([g for g in closed], default=0),
        notes=tuple(notes),
        pending=pending,
        required_after=required_after,
    )


def _prepared_open_log(
    prepared: PreparedHeader, size: int, closed: list[int], db: Consistency
) -> str:
    """Why an E00.log that is still a prepared file may be dropped (its note), or
    RecoveryError if it does not stand where the roll that installed it would have put it:
    the generation after the last closed one (the waypoint's next when none is above it),
    of this log stream."""
    last = max(closed[-1] if closed else 0, db.waypoint)
    if prepared.log_signature != db.log_signature:
        raise RecoveryError(
            f"E00.log is a file prepared for log stream {prepared.log_signature}, "
            f"not {db.log_signature}"
        )
    if prepared.generation != last + 1:
        raise RecoveryError(
            f"E00.log is a file prepared for generation {prepared.generation}, but the log "
            f"ends at generation {last}: a generation is missing or misplaced"
        )
    note = (
        f"E00.log (generation {prepared.generation}) was installed by a roll and its header "
        "never reached the disk: no fsync of it finished, so nothing in it was acknowledged "
        f"({size - HEADER_SIZE} bytes after the prepared header dropped); a new E00.log "
        "replaces it"
    )
    logger.warning("recovery: %s", note)
    return note


def _loader(log_dir: Path, open_scan: ScanResult | None) -> Callable[[int], ScanResult]:
    """Loads a generation for `BodyReader`: a closed one from its file, the open one from
    recovery's scan of E00.log."""

    def load(gen: int) -> ScanResult:
        if open_scan is not None and gen == open_scan.header.generation:
            return open_scan
        return logfile.verify_closed((log_dir / logfile.closed_log_name(gen)).read_bytes(), gen)

    return load


def _track(
    result: ScanResult, before: dict[BlobId, PendingBlob] | None
) -> dict[BlobId, PendingBlob]:
    try:
        return dict(track(result, before).pending)
    except LogRecordError as exc:
        raise RecoveryError(str(exc)) from exc


def transactions_of(result: ScanResult, reader: BodyReader | None = None) -> list[Transaction]:
    """The committed transactions a scanned log holds, in log order, their operations typed
    (decoded here, once) and each staged body read back whole through `reader`.
    LogRecordError if one cannot be decoded (its checksum held, so the writer wrote garbage
    or the record is forged: never skipped), or if a body cannot be read back."""
    out = []
    for rec in result.records:
        if rec.type is RecordType.TRANSACTION:
            try:
                try:  # nearly every record: one pass, typed
                    ops = decode_payload(rec.payload)
                except MalformedOperation:
                    # One that commits staged bodies has fields the one pass refuses (its
                    # "blobs", its puts' "body_blob"): read the slow way; any other stays
                    # refused, by the slow way's own checks.
                    if not rec.has(BLOBS_KEY):
                        raise
                    ops = _staged_ops(rec, reader)
            except MalformedOperation as exc:
                raise LogRecordError(
                    f"generation {rec.generation} offset {rec.offset}: malformed operation: {exc}"
                ) from exc
            out.append(Transaction(rec.position, rec.commit_time, ops))
    return out


def _staged_ops(rec: LogRecord, reader: BodyReader | None) -> tuple[Operation, ...]:
    """The operations of a record that commits staged bodies, each body read back whole."""
    raw, refs = decode_transaction(rec)
    bodies: list[str] = []
    if refs:
        if reader is None:
            raise LogRecordError(
                f"generation {rec.generation} offset {rec.offset}: commits a staged "
                "body, read without the log it was staged in"
            )
        bodies = reader.bodies(refs, rec.generation)
    return decode_record_ops(raw, bodies)


def _transactions(result: ScanResult, reader: BodyReader) -> list[Transaction]:
    try:
        return transactions_of(result, reader)
    except (LogFormatError, OSError) as exc:
        raise RecoveryError(str(exc)) from exc
