"""The log directory on disk: which closed generations it holds, and the durable file steps
of the log stream.

A new E00.log is written as a temp file with its header, fsync'd, renamed and the directory
fsync'd; every write is written whole or raises; a roll a crash cut between its CLOSE record
and the rename is finished before recovery looks.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

from dag_common.durable import fsync_dir
from replication_node.log import logfile
from replication_node.log.logfile import (
    HEADER_SIZE,
    OPEN_LOG_NAME,
    LogHeader,
    LogRecord,
    closed_log_name,
)

logger = logging.getLogger(__name__)


def list_closed_generations(log_dir: Path) -> list[int]:
    """The generations of the closed log files in `log_dir`, ascending."""
    gens = []
    for entry in os.scandir(log_dir):
        gen = logfile.parse_closed_log_name(entry.name)
        if gen is not None and entry.is_file():
            gens.append(gen)
    return sorted(gens)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` or raise.  `os.write` may write less than asked without
    an error (a nearly full filesystem does): the rest is written again, and a disk that
    takes nothing more raises ENOSPC then.  Ignoring a short write once acknowledged a record
    that was only partly on disk, and crash recovery cut it as a torn tail."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, f"write of {len(view)} bytes made no progress")
        view = view[written:]


def finish_interrupted_roll(log_dir: Path) -> int | None:
    """Complete a roll that a crash cut between its CLOSE record and the rename.

    An E00.log that ends with a whole CLOSE record was closed durably: rename it to its
    generation's name (durably) so recovery sees a closed generation.  Returns that
    generation, or None if there was nothing to finish.
    """
    path = log_dir / OPEN_LOG_NAME
    if not path.exists():
        return None
    result = logfile.scan(path.read_bytes())
    if not result.closed or result.tail_error:
        return None
    target = log_dir / closed_log_name(result.header.generation)
    if target.exists():
        return None  # never overwrite a closed generation; recovery will report the conflict
    os.replace(path, target)
    fsync_dir(log_dir)
    logger.warning(
        "E00.log held closed generation %d (a crash cut its roll); renamed",
        result.header.generation,
    )
    return result.header.generation


def create_open_log(log_dir: Path, header: LogHeader, first: bytes = b"") -> int:
    """Write a new E00.log holding `header` and the record `first` (the CARRIED record, when
    staged bodies are pending), durably; return a write fd at its end."""
    tmp = log_dir / f".{OPEN_LOG_NAME}.tmp"
    with open(tmp, "wb") as f:
        f.write(header.encode() + first)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, log_dir / OPEN_LOG_NAME)
    fsync_dir(log_dir)
    fd = os.open(log_dir / OPEN_LOG_NAME, os.O_WRONLY)
    os.lseek(fd, HEADER_SIZE + len(first), os.SEEK_SET)
    return fd


def read_records(path: Path) -> list[LogRecord]:
    """All records of a closed generation, verified whole (raises on any defect)."""
    data = path.read_bytes()
    return list(logfile.verify_closed(data, logfile.parse_closed_log_name(path.name)).records)
