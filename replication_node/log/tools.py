"""An operator's view of a log file, like eseutil /ml: its header and records with
checksum verdicts (a database file's header: `storage/tools.py`).  Pure rendering."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from replication_node.errors import LogFormatError
from replication_node.log import logfile, spanning
from replication_node.log.logfile import OPEN_LOG_NAME, LogRecord, RecordType


def _detail(rec: LogRecord) -> str:
    """Where a record stands in a transaction spanning generations (`spanning.py`)."""
    try:
        if rec.type is RecordType.PART:
            blob, index, chunk = spanning.decode_part(rec)
            return f"body {blob} part {index} ({len(chunk)} bytes)" + (
                " begins" if index == 0 else ""
            )
        if rec.type is RecordType.ABORT:
            return f"body {spanning.decode_abort(rec)} aborted"
        if rec.type is RecordType.CARRIED:
            carried = spanning.decode_carried(rec)
            return "carries " + ", ".join(
                f"body {b} ({p.parts} parts, {p.size} bytes)" for b, p in sorted(carried.items())
            )
        if rec.type is RecordType.TRANSACTION:
            _, refs = spanning.decode_transaction(rec)
            return ", ".join(
                f"commits body {r.id} ({r.size} bytes, begun in generation {r.id.generation})"
                for r in refs
            )
    except LogFormatError as exc:
        return f"undecodable: {exc}"
    return ""


class LogHeaderDump(TypedDict):
    checksum: str
    format_version: int
    generation: int
    database_signature: str
    log_signature: str
    creation_time: str
    prev_creation_time: str | None
    log_file_size: int


class RecordLine(TypedDict):
    offset: int
    type: str
    size: int
    time: str
    operations: int
    detail: str


class LogRecordsDump(TypedDict):
    valid: int
    transactions: int
    operations: int
    bytes: int
    first_commit_time: str | None
    last_commit_time: str | None
    closed: bool
    close_time: str | None
    staged_bodies: dict[str, list[str]]  # carried, begun, committed, aborted, pending_at_end
    list: list[RecordLine]


class LogDump(TypedDict):
    """`dump-log --json`: one log file's header, records and verdict."""

    file: str
    header: LogHeaderDump
    records: LogRecordsDump
    file_size: int
    valid_end: int
    verdict: str  # "ok" or "damaged"
    problems: list[str]


def dump_log(path: Path) -> LogDump:
    """The header, the records and the verdicts of one log file. Raises LogFormatError if
    the header itself is unusable (then nothing else can be trusted)."""
    data = path.read_bytes()
    result = logfile.scan(data)
    header = result.header
    name_gen = logfile.parse_closed_log_name(path.name)
    problems: list[str] = []
    if result.tail_error:
        problems.append(result.tail_error)
    if name_gen is not None:
        if name_gen != header.generation:
            problems.append(
                f"file name says generation {name_gen}, header says {header.generation}"
            )
        if not result.closed and not result.tail_error:
            problems.append("closed generation has no CLOSE record (truncated?)")
    elif path.name != OPEN_LOG_NAME:
        problems.append("file name is neither E00.log nor a generation name")
    txns = result.transactions
    staged: dict[str, list[str]] = {}
    try:
        spans = spanning.track(result, None)
        staged = {
            "carried": [str(b) for b in sorted(spans.carried)],
            "begun": [str(b) for b in spans.begun],
            "committed": [str(r.id) for r in spans.committed],
            "aborted": [str(b) for b in spans.aborted],
            "pending_at_end": [str(b) for b in sorted(spans.pending)],
        }
    except LogFormatError as exc:
        problems.append(f"staged bodies: {exc}")
    return {
        "file": str(path),
        "header": {
            "checksum": "ok",
            "format_version": header.version,
            "generation": header.generation,
            "database_signature": str(header.database_signature),
            "log_signature": str(header.log_signature),
            "creation_time": header.creation_time.isoformat(),
            "prev_creation_time": (
                header.prev_creation_time.isoformat() if header.prev_creation_time else None
            ),
            "log_file_size": header.log_file_size,
        },
        "records": {
            "valid": len(result.records),
            "transactions": len(txns),
            "operations": sum(len(r.ops) for r in txns),
            "bytes": result.valid_end - logfile.HEADER_SIZE,
            "first_commit_time": txns[0].commit_time.isoformat() if txns else None,
            "last_commit_time": txns[-1].commit_time.isoformat() if txns else None,
            "closed": result.closed,
            "close_time": result.close_time.isoformat() if result.close_time else None,
            "staged_bodies": staged,
            "list": [
                {
                    "offset": r.offset,
                    "type": r.type.name,
                    "size": r.size,
                    "time": r.commit_time.isoformat(),
                    "operations": len(r.ops) if r.type is RecordType.TRANSACTION else 0,
                    "detail": _detail(r),
                }
                for r in result.records
            ],
        },
        "file_size": result.file_size,
        "valid_end": result.valid_end,
        "verdict": "damaged" if problems else "ok",
        "problems": problems,
    }


def render_log_dump(dump: LogDump, *, records: bool = False) -> str:
    h, r = dump["header"], dump["records"]
    lines = [
        f"Log file: {dump['file']}",
        f"  Generation:          {h['generation']} (0x{h['generation']:X})",
        f"  Header checksum:     {h['checksum']}",
        f"  Format version:      {h['format_version']}",
        f"  Database signature:  {h['database_signature']}",
        f"  Log signature:       {h['log_signature']}",
        f"  Creation time:       {h['creation_time']}",
        f"  Previous gen time:   {h['prev_creation_time'] or '-'}",
        f"  Log file size:       {h['log_file_size']}",
        f"  Records:             {r['valid']} valid ({r['transactions']} transactions, "
        f"{r['operations']} operations, {r['bytes']} bytes)",
        f"  Closed:              {'yes at ' + r['close_time'] if r['closed'] else 'no (open log)'}",
    ]
    staged = r.get("staged_bodies") or {}
    if any(staged.values()):
        lines.append(
            "  Staged bodies:       "
            + "; ".join(f"{k.replace('_', ' ')} {', '.join(v)}" for k, v in staged.items() if v)
        )
    lines.append(f"  Verdict:             {dump['verdict'].upper()}")
    lines += [f"    problem: {p}" for p in dump["problems"]]
    if records:
        lines.append("  offset      type         size  time                              ops")
        for rec in r["list"]:
            lines.append(
                f"  {rec['offset']:<10}  {rec['type']:<11}  {rec['size']:>5}  {rec['time']:<32}  "
                f"{rec['operations']}" + (f"  {rec['detail']}" if rec.get("detail") else "")
            )
    return "\n".join(lines)


__all__ = ["LogFormatError", "dump_log", "render_log_dump"]
