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

What a spare's old bytes mean: nothing.  A spare holds zeros, or a truncated generation's
records; once the writer has written a generation over it, past the last record lie those
bytes, and the record checksums are salted with the generation's header (`logfile.py`,
format version 2), so a scan stops at the end of what this generation wrote, whatever the
file held before (a crash then cuts the old records as a torn tail; zeros are kept as room).

The pool is files in the log directory named `.E00.spare.<id>` (hidden, no generation's
name: no reader of the log sees them), made by `prepare_one` (a hidden prepared name,
zeros written and `fdatasync`'d, then renamed to a spare's name) and taken by the writer's
roll (`take`: renamed to a prepared name, the name `logdir.create_hidden` gives a new file).
A spare is named only once it is whole and durable; a crash may leave one being made, or one
taken, under a prepared name, removed with every other prepared file on the next mount
(`logdir.remove_prepared`).  Nothing about a spare needs the directory fsync'd: a spare lost
to a crash is made again.

Where spares come from:
- **Truncation** (`retire`): a closed generation truncation removes is renamed to a spare
  rather than unlinked, as PostgreSQL recycles its WAL segments.  Its blocks stay allocated
  and, above all, its pages stay in the page cache: the next roll writes over cached pages
  instead of the kernel allocating and filling fresh ones and ext4 allocating an inode:
  the log alone used 0.555 of the CPU a MiB it used writing new files
  (`bench/log_recycle.py`; bench/README.md, "lmtp: truncated generations recycled").
  Only a generation nothing has open: a reader (a copy's pull on the log share, a backup,
  `log dump` in another process) keeps its view whole when the file is unlinked, and would
  not if it were written over.  The kernel says so: it grants a write lease
  (`F_SETLEASE`) only on a file no other open file refers to, in any process, and an open
  of it meanwhile waits until the lease is let go (`_lease`).  The lease is held across
  the rename and must still be unbroken after it: an open that found the file under its
  old name and waits for the lease makes it unlinked as before.  What is left is an open
  whose lookup of the old name came before the rename and whose open comes after the
  lease is let go, a window inside one `openat` call at the moment the generation is
  truncated: such a reader may then see the file written over, and fails on it (the next
  generation's header, records salted with it, no CLOSE at the end: `logfile.py`), never
  takes it for the old one.  A file system that grants no leases (NFS) recycles nothing;
  nor is a file with a second name recycled (a passive's block buffer linked into its log).
  A passive copy keeps a pool of its own the same way (`PassiveCopy.spares`, filled by its
  truncation after each replay batch, its target at most, no spares made): the generations
  it copies (`Copier._write`) and the block buffers it receives (`BlockReceiver._write`)
  are written over them (`new_file`), cut to what they hold if shorter (`fit`).
- **`prepare_one`**, which the log stream calls while it is idle (`LogStream.keep_spares`:
  nothing written for half a second), so it takes the disk only when no write waits, until
  the pool holds its target.  While idle, the keeper also removes the spares past the
  target that truncation left (`trim_one`): a quiet log holds its target, no more.

The room they take: `target` files (`log_spare_files`, default 64: 64 MiB of 1 MiB logs, as
PostgreSQL keeps 80 MB of recycled WAL by default).  A spare is made only while the file
system keeps, after it, at least 1 GiB free, four times the pool's full size and 5% of
itself: on a small or nearly full disk the log simply writes new files, as it would with no
pool, and never runs the database out of space for its own spares (nor changes what a full
disk does to it: the resilience suite's small disks get none).  Truncation's take the pool
to RECYCLE_FACTOR times the target at most, within the same room: a pass removes what a busy
log wrote since the last one (a second of it or more, `truncator.py`), which the next rolls
take; the rest is unlinked, and a quiet log's pool is trimmed back to its target.  Those
files were the log's a moment before: the disk the log takes at its busiest does not grow.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

from replication_node.log.files import OS_FILES, LogFiles, OpenMode, write_all
from replication_node.log.logfile import PREPARED_PREFIX

SPARE_PREFIX = ".E00.spare."
# What must stay free on the file system after a spare is made: all of these.
FREE_FLOOR = 1 << 30
FREE_POOLS = 4  # times the pool's full size
FREE_FRACTION = 0.05  # of the file system's size
# The pool takes truncated generations (`retire`) until it holds this many times its target.
RECYCLE_FACTOR = 16
# A platform without file leases recycles nothing (`_lease`).
_F_SETLEASE = getattr(fcntl, "F_SETLEASE", None)


class SparePool:
    """The spare files of one log directory (`target` at most, each `file_size` bytes)."""

    def __init__(
        self,
        log_dir: Path,
        file_size: int,
        target: int,
        files: LogFiles = OS_FILES,
        *,
        most: int | None = None,
    ) -> None:
        self.log_dir, self.file_size, self.target = log_dir, file_size, target
        # The most truncation fills it to (`retire`): RECYCLE_FACTOR times the target unless
        # said (a passive's, which truncates after every replay batch: its target).
        self.most = target * RECYCLE_FACTOR if most is None else most
        self._files = files
        self._lock = threading.Lock()
        self._names: list[str] = self._scan()
        # Spares made, recycled from truncated generations, taken by rolls, and removed as
        # past the target, by this pool.
        self.made = self.recycled = self.taken = self.trimmed = 0

    @classmethod
    def recycling(cls, log_dir: Path, file_size: int, target: int) -> SparePool | None:
        """A pool only truncation fills (a passive copy's: no spares made), to its target
        at most, as the copy truncates after every replay batch; None for a target of 0."""
        return cls(log_dir, file_size, target, most=target) if target > 0 else None

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
        return self._take_as(self.log_dir / f"{PREPARED_PREFIX}{uuid.uuid4().hex}")

    def _take_as(self, path: Path) -> Path | None:
        """A spare renamed to `path`; None when the pool is empty.  OSError when it cannot
        be renamed there (another file system): the spare stays in the pool."""
        while True:
            with self._lock:
                if not self._names:
                    return None
                name = self._names.pop()
            try:
                self._files.replace(self.log_dir / name, path)
            except FileNotFoundError:
                continue  # gone (a reseed emptied the directory): the next one
            except OSError:
                with self._lock:
                    self._names.append(name)
                raise
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

    def retire(self, path: Path) -> bool:
        """Remove the closed generation `path`, which truncation let go: renamed to a spare
        when the pool can take it (fewer than `most` spares held, the disk's room, the file
        `file_size` bytes and of one name, nothing else holding it open), else unlinked.
        True when it was recycled.  Not durable until the directory is fsync'd: a crash may
        bring the generation's name back, as after an unlink.  Blocking."""
        spare = self.log_dir / f"{SPARE_PREFIX}{uuid.uuid4().hex}"
        taking = self.target > 0 and self.count < self.most and self.room()
        if taking and self._rename_alone(path, spare):
            with self._lock:
                self._names.append(spare.name)
                self.recycled += 1
            return True
        for gone in (path, spare):
            with contextlib.suppress(FileNotFoundError):
                self._files.unlink(gone)
        return False

    def take_as(self, path: Path) -> bool:
        """Whether a spare was renamed to `path` (False: the pool is empty, or `path` is on
        another file system, the spare kept)."""
        with contextlib.suppress(OSError):
            return self._take_as(path) is not None
        return False

    def _rename_alone(self, path: Path, spare: Path) -> bool:
        """Whether `path` is now `spare` with nothing else holding it open: renamed under a
        write lease (`_lease`), which the kernel grants only when no other open file refers
        to the file, and still held unbroken after the rename (an open that found the file
        under its old name waits for the lease then, and would see it written over)."""
        try:
            with _lease(path) as fd:
                st = os.fstat(fd)
                # A second name (a passive's block buffer linked into its log) would see
                # the file written over too.
                if st.st_size != self.file_size or st.st_nlink != 1:
                    return False
                self._files.replace(path, spare)
                return fcntl.fcntl(fd, fcntl.F_GETLEASE) == fcntl.F_WRLCK
        except OSError:
            return False

    def trim_one(self) -> bool:
        """Remove one spare past the pool's target (truncation's, `retire`); False when
        there is none.  Blocking: a worker thread."""
        with self._lock:
            if len(self._names) <= self.target:
                return False
            name = self._names.pop(0)
        with contextlib.suppress(FileNotFoundError):
            self._files.unlink(self.log_dir / name)
        self.trimmed += 1
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


@contextlib.contextmanager
def _lease(path: Path) -> Iterator[int]:
    """A write lease on `path` while the block runs (its descriptor given).  The kernel
    grants one only when no other open file refers to the file, in this process or any
    other; an open of it meanwhile waits until the lease is let go, and shows as the lease
    no longer F_WRLCK (a break pending).  OSError when the file is open elsewhere (EAGAIN),
    gone, or the file system or platform grants no lease."""
    if _F_SETLEASE is None:
        raise OSError("no file leases on this platform")
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        # An open that breaks the lease signals the holder: SIGIO by default, which ends
        # the process; SIGURG's default is to ignore it.
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_WRLCK)
        try:
            yield fd
        finally:
            fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_UNLCK)
    finally:
        os.close(fd)


def new_file(path: Path, spares: SparePool | None) -> int:
    """A descriptor, open for writing, of a new file at `path` (a passive's copied or
    received generation) to be written from its start: a spare of `spares` renamed there
    when it holds one, else a new file.  A spare's old bytes lie past what is written; a
    writer that ends short of its size cuts it (`fit`).  Blocking."""
    if spares is not None and spares.take_as(path):
        return os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)


def fit(fd: int, size: int) -> bool:
    """Cut a file written over a spare (`new_file`) to the `size` bytes written, if its old
    bytes reach past them, before its fsync; whether it was cut."""
    if os.fstat(fd).st_size <= size:
        return False
    os.ftruncate(fd, size)
    return True
