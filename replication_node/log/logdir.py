"""The log directory on disk: which closed generations it holds, and the durable file steps
of the log stream.

The first E00.log of a stream (and the one recovery replaces) is written as a temp file with
its header, fsync'd, renamed and the directory fsync'd (`create_open_log`).  At a roll the
next generation goes into a new file under a hidden name (`create_hidden`); it keeps that
name until the writer has fsync'd it and every generation closed before it, and
`install_span` then names them all, in order (the writer fsyncs the directory once for the
renames, before anything depends on them).  Every write is
written whole or raises.  Before recovery looks, `finish_interrupted_roll` finishes a roll a
crash cut between its CLOSE record and the rename, and removes prepared files never named.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

from replication_node.log import logfile
from replication_node.log.files import OS_FILES, LogFiles, OpenMode, write_all
from replication_node.log.logfile import (
    HEADER_SIZE,
    OPEN_LOG_NAME,
    PREPARED_PREFIX,
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


def finish_interrupted_roll(log_dir: Path, files: LogFiles = OS_FILES) -> int | None:
    """Complete a roll that a crash cut between its CLOSE record and the rename.

    Hidden files never named are removed first: whatever a crash left in one (a header,
    records, even a CLOSE record) was never part of the log anyone heard of: nothing in it was
    answered or shipped, since the writer names a file only once it is durable, and answers
    nothing of it before that (`writer.py`).
    An E00.log that ends with a whole CLOSE record was closed durably: rename it to its
    generation's name (durably) so recovery sees a closed generation.  Returns that
    generation, or None if there was nothing to finish.  An E00.log that is still a prepared
    file (a state earlier versions could leave) is left for recovery
    (`recovery.plan_recovery`), which checks what it was prepared for before replacing it.
    """
    remove_prepared(log_dir, files)
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
    # Its CLOSE record may be in the page cache only (the writer fsyncs a span's files only
    # at its end, `writer.py`): a closed name is given only to a durable file.
    fd = files.open(path, OpenMode.EXISTING)
    try:
        files.fsync(fd)
    finally:
        files.close(fd)
    files.replace(path, target)
    files.fsync_dir(log_dir)
    logger.warning(
        "E00.log held closed generation %d (a crash cut its roll); renamed",
        result.header.generation,
    )
    return result.header.generation


def create_open_log(
    log_dir: Path, header: LogHeader, first: bytes = b"", files: LogFiles = OS_FILES
) -> int:
    """Write a new E00.log holding `header` and the record `first` (the CARRIED record, when
    staged bodies are pending), durably; return a write fd at its end."""
    tmp = log_dir / f".{OPEN_LOG_NAME}.tmp"
    fd = files.open(tmp, OpenMode.REPLACE)
    try:
        write_all(fd, header.encode() + first, files)
        files.fsync(fd)
    finally:
        files.close(fd)
    files.replace(tmp, log_dir / OPEN_LOG_NAME)
    files.fsync_dir(log_dir)
    fd = files.open(log_dir / OPEN_LOG_NAME, OpenMode.EXISTING)
    files.seek(fd, HEADER_SIZE + len(first))
    return fd


def create_hidden(
    log_dir: Path,
    header: LogHeader,
    first: bytes,
    spare: Path | None = None,
    files: LogFiles = OS_FILES,
) -> tuple[int, Path]:
    """A file for the generation a roll opens: `header` and the record `first` (the CARRIED
    record, when staged bodies are pending), under a hidden name (PREPARED_PREFIX) that no
    reader of the log takes for a generation: `spare`, a spare file already under such a
    name (`spares.SparePool.take`), written over from its start; else a new file.  Returns a
    write fd at the end of what was written, and the path.  Nothing is fsync'd: the file is
    named only once the writer has fsync'd it (`install_span`), and a crash before that
    leaves a stray hidden file, which `finish_interrupted_roll` removes."""
    if spare is not None:
        path = spare
        fd = files.open(path, OpenMode.EXISTING)
    else:
        path = log_dir / f"{PREPARED_PREFIX}{uuid.uuid4().hex}"
        fd = files.open(path, OpenMode.NEW)
    try:
        write_all(fd, header.encode() + first, files)
    except BaseException:
        files.close(fd)
        with contextlib.suppress(FileNotFoundError):
            files.unlink(path)
        raise
    return fd, path


def install_span(
    log_dir: Path,
    closed: Sequence[tuple[int, Path]],
    open_path: Path,
    files: LogFiles = OS_FILES,
) -> None:
    """Name a span of generations the writer has made durable: each closed one (generation,
    where it is: E00.log for the first, a prepared file's hidden name for the others) renamed
    to its generation's name, in order, then `open_path` (the file of the generation the span
    ends in, hidden) renamed E00.log.  Every file was fsync'd before this; nothing is fsync'd
    here: the writer fsyncs the directory once for all the renames before it answers anything
    or hands the copies any byte of the span (`writer.py`).

    Why each crash state is one recovery knows (`tests/replication_node/test_prepared_roll.py`
    builds each).  A kill -9 leaves a prefix of the renames; a power loss before the
    directory fsync leaves a prefix too on the file systems the log is meant for (ext4, XFS:
    a journal that commits metadata operations in the order they were made).
    - None done: E00.log is the span's first generation, whole with its CLOSE record (the
      roll is finished on open, `finish_interrupted_roll`), the others hidden, removed.
    - Some done: the closed generations named so far are whole and durable; there is no
      E00.log, and the next generation is created on open; the rest is hidden, removed.
    Nothing of the span was answered or sent to a copy before the directory fsync, and a
    body staged across it whose commit is in a removed file was never committed: recovery
    finds it pending at the end of the log and aborts it.  Were a file system to make a later
    rename durable without an earlier one, a generation would be missing below a named one
    and recovery stops with RecoveryError (a gap, or a closed E00.log beside a higher
    generation): never silently.
    """
    for generation, path in closed:
        files.replace(path, log_dir / closed_log_name(generation))
    files.replace(open_path, log_dir / OPEN_LOG_NAME)


def remove_prepared(log_dir: Path, files: LogFiles = OS_FILES) -> list[str]:
    """Remove the hidden files in `log_dir` that were never named (a crash or a close left
    them); their names."""
    removed = []
    for entry in os.scandir(log_dir):
        if entry.name.startswith(PREPARED_PREFIX):
            with contextlib.suppress(FileNotFoundError):
                files.unlink(log_dir / entry.name)
                removed.append(entry.name)
    if removed:
        logger.info("removed prepared log files never used: %s", ", ".join(sorted(removed)))
    return removed


def read_records(path: Path) -> list[LogRecord]:
    """All records of a closed generation, verified whole (raises on any defect)."""
    data = path.read_bytes()
    return list(logfile.verify_closed(data, logfile.parse_closed_log_name(path.name)).records)
