"""The log directory on disk: which closed generations it holds, and the durable file steps
of the log stream.

The first E00.log of a stream (and the one recovery replaces) is written as a temp file with
its header, fsync'd, renamed and the directory fsync'd (`create_open_log`).  At a roll the
next one is a file prepared ahead of time (`prepare_open_log`, off the commit path: created
with a `PreparedHeader`, fsync'd) and installed by `install_prepared`: its real header
written over the prepared one, the closed generation renamed, the prepared file renamed
E00.log (the writer fsyncs the directory once for both, before anything depends on them).
Every write is written whole or raises.  Before recovery looks, `finish_interrupted_roll`
finishes a roll a crash cut between its CLOSE record and the rename, and removes prepared
files never installed.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import uuid
from pathlib import Path

from dag_common.durable import fsync_dir
from replication_node.log import logfile
from replication_node.log.logfile import (
    HEADER_SIZE,
    OPEN_LOG_NAME,
    PREPARED_PREFIX,
    LogHeader,
    LogRecord,
    PreparedHeader,
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

    Prepared files never installed are removed first: whatever a crash left in one (its
    prepared header, or the real header and CARRIED record the roll writes just before the
    rename) was never part of the log, since records are appended only once it is E00.log.
    An E00.log that ends with a whole CLOSE record was closed durably: rename it to its
    generation's name (durably) so recovery sees a closed generation.  Returns that
    generation, or None if there was nothing to finish.  An E00.log that is still a prepared
    file is left for recovery (`recovery.plan_recovery`), which checks what it was prepared
    for before replacing it.
    """
    remove_prepared(log_dir)
    path = log_dir / OPEN_LOG_NAME
    if not path.exists():
        return None
    data = path.read_bytes()
    if data.startswith(logfile.PREPARED_MAGIC):
        return None
    result = logfile.scan(data)
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


def prepare_open_log(log_dir: Path, prepared: PreparedHeader) -> tuple[int, Path]:
    """Create a file to become E00.log at the next roll: its prepared header, fsync'd.  Runs
    beside the writer, off the commit path; returns a write fd and the file's path.

    Its directory entry is not fsync'd here: the roll's directory fsync, after its rename,
    makes the name durable, and a crash before that leaves a stray prepared file, which
    `finish_interrupted_roll` removes."""
    path = log_dir / f"{PREPARED_PREFIX}{uuid.uuid4().hex}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_all(fd, prepared.encode())
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    return fd, path


def install_prepared(
    log_dir: Path, closed_generation: int, fd: int, path: Path, header: LogHeader, first: bytes
) -> None:
    """The roll's file steps once the CLOSE record is durable: the prepared file at `path`
    (write fd `fd`) becomes E00.log for `header`, the old E00.log closed generation
    `closed_generation`.  Nothing here is fsync'd: the writer makes the two renames durable
    (one directory fsync) before it answers anything or hands the copies any byte of the new
    generation, and the header with the new E00.log's first fsync (`writer.py`).

    The steps, and why each crash state is one recovery knows (`tests/replication_node/
    test_prepared_roll.py` builds each):
    1. `header` and `first` (the CARRIED record) are written over the prepared header.  Until
       the new E00.log is fsync'd a power loss may leave the prepared header there; nothing
       in such a file was acknowledged (the fsync that would have made a record in it
       durable makes the header durable too), and recovery replaces it.
    2. E00.log is renamed to its generation's name, and 3. the prepared file to E00.log.  A
       kill -9 leaves the kernel's view, a prefix of these steps.  A power loss before the
       directory fsync leaves a prefix too on the file systems the log is meant for (ext4,
       XFS: a journal that commits metadata operations in the order they were made): no
       E00.log beside the closed generation, or E00.log still the closed generation (the
       roll is finished on open); the prepared file, whatever it holds, was never part of
       the log anyone was told of, and is removed.  Were a file system to make the second
       rename durable without the first, the closed generation would be missing below
       E00.log and recovery stops with RecoveryError (a gap, or a prepared file for the
       wrong generation): never silently.
    """
    os.lseek(fd, 0, os.SEEK_SET)
    write_all(fd, header.encode() + first)
    os.replace(log_dir / OPEN_LOG_NAME, log_dir / closed_log_name(closed_generation))
    os.replace(path, log_dir / OPEN_LOG_NAME)


def remove_prepared(log_dir: Path) -> list[str]:
    """Remove the prepared files in `log_dir` that were never installed (a crash or a close
    left them); their names."""
    removed = []
    for entry in os.scandir(log_dir):
        if entry.name.startswith(PREPARED_PREFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed.append(entry.name)
    if removed:
        logger.info("removed prepared log files never used: %s", ", ".join(sorted(removed)))
    return removed


def read_records(path: Path) -> list[LogRecord]:
    """All records of a closed generation, verified whole (raises on any defect)."""
    data = path.read_bytes()
    return list(logfile.verify_closed(data, logfile.parse_closed_log_name(path.name)).records)
