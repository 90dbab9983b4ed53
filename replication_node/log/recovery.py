"""Crash recovery of an active copy: what the log holds beyond the database's waypoint.

On start, every closed generation above the waypoint is read and verified whole, then the
valid records of E00.log.  A torn or corrupt tail of E00.log is cut at the last valid record
(it was never acknowledged: a commit is answered only after its fsync) and reported.  A
defect inside a closed generation, a gap, or a log of another stream stops recovery with
RecoveryError: a log is never skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from replication_node.errors import LogFormatError, LogRecordError, RecoveryError
from replication_node.log import logfile
from replication_node.log.logdir import list_closed_generations
from replication_node.log.logfile import OPEN_LOG_NAME, LogHeader, RecordType, ScanResult
from replication_node.storage.database import Transaction
from replication_node.storage.header import DatabaseHeader

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecoveryPlan:
    """The transactions to bring back, in log order, and what recovery found."""

    transactions: tuple[Transaction, ...]
    close_times: dict[int, datetime]
    open_scan: ScanResult | None
    last_closed: int
    notes: tuple[str, ...] = field(default=())


def check_chain(prev: LogHeader | None, header: LogHeader, log_signature: object) -> None:
    """The seeds' sequence checks between consecutive generations; RecoveryError if broken."""
    problem = logfile.chain_problem(prev, header, log_signature)
    if problem:
        raise RecoveryError(problem)


def plan_recovery(log_dir: Path, db: DatabaseHeader) -> RecoveryPlan:
    """Read the log above the database's waypoint; raise RecoveryError if it is unusable."""
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
    txns: list[Transaction] = []
    close_times: dict[int, datetime] = {}
    notes: list[str] = []
    prev: LogHeader | None = None
    if db.waypoint in closed:
        try:
            prev = logfile.read_header(log_dir / logfile.closed_log_name(db.waypoint))
        except LogFormatError as exc:
            raise RecoveryError(f"generation {db.waypoint}: {exc}") from exc
    for gen in needed:
        path = log_dir / logfile.closed_log_name(gen)
        try:
            result = logfile.verify_closed(path.read_bytes(), gen)
        except LogFormatError as exc:
            raise RecoveryError(f"closed generation {gen} is corrupt: {exc}") from exc
        check_chain(prev, result.header, db.log_signature)
        prev = result.header
        txns.extend(_transactions(result))
        if result.close_time:
            close_times[gen] = result.close_time
    open_scan = None
    open_path = log_dir / OPEN_LOG_NAME
    if open_path.exists():
        try:
            open_scan = logfile.scan(open_path.read_bytes())
        except LogFormatError as exc:
            raise RecoveryError(f"E00.log is unusable: {exc}") from exc
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
        txns.extend(_transactions(open_scan))
    return RecoveryPlan(
        transactions=tuple(txns),
        close_times=close_times,
        open_scan=open_scan,
        last_closed=needed[-1] if needed else max([g for g in closed], default=0),
        notes=tuple(notes),
    )


def transactions_of(result: ScanResult) -> list[Transaction]:
    """The committed transactions a scanned log holds, in log order (LogRecordError if one
    cannot be decoded: its checksum held, so the writer wrote garbage)."""
    out = []
    for rec in result.records:
        if rec.type is RecordType.TRANSACTION:
            try:
                ops = rec.ops
            except ValueError as exc:
                raise LogRecordError(
                    f"generation {rec.generation} offset {rec.offset}: undecodable record"
                ) from exc
            out.append(Transaction(rec.generation, rec.offset, rec.commit_time, ops))
    return out


def _transactions(result: ScanResult) -> list[Transaction]:
    try:
        return transactions_of(result)
    except LogRecordError as exc:
        raise RecoveryError(str(exc)) from exc
