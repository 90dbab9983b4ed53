"""Spare log files: files written whole and made durable beforehand, for a roll to write the
next generation over.

Why: a generation written into a new file makes its fsync wait for the file system's journal
to commit the file's new blocks and size, a cache flush of its own, nine times for an 8 MiB
item (bench/README.md large_items run 9: ten flushes an item against the raw append's one).
Written over a file whose blocks are already allocated and written, at the same size (every
closed generation is exactly `log_file_size` bytes, `logfile.py`), the writer's `fdatasync`
has no metadata to commit: the data and one flush.  In the file steps alone, 1.34-1.39 of a
raw fsync'd append against 0.96-1.01 for new files (bench/log_fsync_shapes.py,
`recycled-early-2` against `early-2`).  ESE creates its next log file ahead of time for the
same reason, and PostgreSQL recycles WAL segments.

What a spare's old bytes mean: nothing.  A spare holds zeros; once the writer has written a
generation over it, past the last record lie those zeros, and the record checksums are
salted with the generation's header (`logfile.py`, format version 2), so a scan stops at
the end of what this generation wrote, whatever the file held before.

The pool is files in the log directory named `.E00.spare.<id>` (hidden, no generation's
name: no reader of the log sees them), made by `prepare_one` (a hidden prepared name,
zeros written and `fdatasync`'d, then renamed to a spare's name) and taken by the writer's
roll (`take`: renamed to a prepared name, the name `logdir.create_hidden` gives a new file).
A spare is named only once it is whole and durable; a crash may leave one being made, or one
taken, under a prepared name, removed with every other prepared file on the next mount
(`logdir.remove_prepared`).  Nothing about a spare needs the directory fsync'd: a spare lost
to a crash is made again.

Where spares come from: `prepare_one`, which the log stream calls while it is idle
(`LogStream.keep_spares`: nothing written for half a second), so it takes the disk only
when no write waits.  Not from
truncation: a generation deleted by truncation may still be open in a reader (a copy's pull
on the log share, a backup), which unlinking leaves whole and writing over would not.

The room they take: `target` files (`log_spare_files`, default 64: 64 MiB of 1 MiB logs, as
PostgreSQL keeps 80 MB of recycled WAL by default).  A spare is made only while the file
system keeps, after it, at least 1 GiB free, four times the pool's full size and 5% of
itself: on a small or nearly full disk the log simply writes new files, as it would with no
pool, and never runs the database out of space for its own spares (nor changes what a full
disk does to it: the resilience suite's small disks get none).
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from pathlib import Path

from replication_node.log.files import OS_FILES, LogFiles, OpenMode, write_all
from replication_node.log.logfile import PREPARED_PREFIX

SPARE_PREFIX = ".E00.spare."
# What must stay free on the file system after a spare is made: all of these.
FREE_FLOOR = 1 << 30
FREE_POOLS = 4  # times the pool's full size
FREE_FRACTION = 0.05  # of the file system's size


class SparePool:
    """The spare files of one log directory (`target` at most, each `file_size` bytes)."""

    def __init__(
        self, log_dir: Path, file_size: int, target: int, files: LogFiles = OS_FILES
    ) -> None:
        self.log_dir, self.file_size, self.target = log_dir, file_size, target
        self._files = files
        self._lock = threading.Lock()
        self._names: list[str] = self._scan()
        self.made = self.taken = 0  # spares made, and taken by rolls, by this pool

    def _scan(self) -> list[str]:
        """The spares already in the directory (made before a restart).  One of another size
        (`log_file_size` changed since) is removed: a generation written over a larger one
        would end before the file does, which no reader takes for a closed generation."""
        names = []
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.log_dir):
                if not self._is_spare(entry.name):
                    continue
                if entry.stat().st_size == self.file_size:
                    names.append(entry.name)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        self._files.unlink(self.log_dir / entry.name)
        return sorted(names)

    @staticmethod
    def _is_spare(name: str) -> bool:
        return name.startswith(SPARE_PREFIX)

    @property
    def count(self) -> int:
        """How many spares the pool holds now."""
        with self._lock:
            return len(self._names)

    @property
    def short(self) -> bool:
        """Whether the pool holds fewer spares than its target."""
        return self.count < self.target

    def take(self) -> Path | None:
        """A spare renamed to a new prepared name (`logfile.PREPARED_PREFIX`) for the writer
        to write a generation over; None when the pool is empty (the roll makes a new file).
        Writer thread."""
        while True:
            with self._lock:
                if not self._names:
                    return None
                name = self._names.pop()
            path = self.log_dir / f"{PREPARED_PREFIX}{uuid.uuid4().hex}"
            try:
                self._files.replace(self.log_dir / name, path)
            except FileNotFoundError:
                continue  # gone (a reseed emptied the directory): the next one
            self.taken += 1
            return path

    def prepare_one(self) -> bool:
        """Make one spare (zeros written and `fdatasync`'d under a prepared name, then renamed
        to a spare's); False when the pool is full or the disk has not the room
        (FREE_FLOOR, FREE_POOLS, FREE_FRACTION).  Blocking: a worker thread."""
        if not self.short or not self.room():
            return False
        tmp = self.log_dir / f"{PREPARED_PREFIX}{uuid.uuid4().hex}"
        name = f"{SPARE_PREFIX}{uuid.uuid4().hex}"
        files = self._files
        fd = files.open(tmp, OpenMode.NEW)
        try:
            write_all(fd, bytes(self.file_size), files)
            files.fdatasync(fd)
        except BaseException:
            files.close(fd)
            with contextlib.suppress(FileNotFoundError):
                files.unlink(tmp)
            raise
        files.close(fd)
        files.replace(tmp, self.log_dir / name)
        with self._lock:
            self._names.append(name)
            self.made += 1
        return True

    def room(self) -> bool:
        """Whether the file system has the room for one more spare."""
        st = os.statvfs(self.log_dir)
        free = st.f_bavail * st.f_frsize - self.file_size
        return free >= max(
            FREE_FLOOR,
            FREE_POOLS * self.target * self.file_size,
            FREE_FRACTION * st.f_blocks * st.f_frsize,
        )
