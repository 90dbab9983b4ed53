"""The span: the generations the writer's rolls closed since its last settle, and the settle
that makes them durable and named (`writer.py` says when a batch settles).

The settle: every file of the span fsync'd, in order (or, for one fsync'd early, its fsync
waited for), then the open generation's file, then all renamed in order
(`logdir.install_span`, which says why each crash state is safe), then the directory fsync'd
once.  Only then does a generation of the span exist for anyone.

The early fsyncs (`sync_early`): each generation a deferring batch closes is fsync'd at
once by the syncer (two threads, `SYNCERS`) while the writer writes the next, the settle then
only waiting for those fsyncs.  Why: once the span's fsyncs were deferred, an 8 MiB item
spent half its commit in them at the end (the settle's batch 16-18 ms, against 21-24 for the
raw append's whole write and fsync).  On the bench's virtio disk the cost of making bytes
durable is the cache flush itself, whenever the writeback ran (an fsync of 8 MiB whose
writeback had been waited for still took 13 ms, in an ad-hoc test), so it can only overlap
other work.  In an ad-hoc trace of one item the syncer's first fsync, of half a generation,
took 10 ms: it carried what the writer wrote meanwhile (on ext4 the journal commit of a
file's new size writes out the data of every file written since), the next ones less and
less.  The log's 8 MiB commits went from 0.51-0.77 of the raw append to 0.61-0.87 (medians
0.56-0.60 before, 0.75-0.83 after, in two series: bench/README.md large_items run 8).
Nothing depends on an early fsync before the settle (the file is named only then, in order,
after every fsync of the span has returned), so the crash states are the same; a failed one
fails the settle, as its own fsync would.

Every file step goes through the writer's `LogFiles` (`files.py`).
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dag_common.clock import Clock
from replication_node.log.files import LogFiles
from replication_node.log.logdir import install_span

if TYPE_CHECKING:
    from replication_node.metrics import StreamMetrics

# The name of the threads that fsync a deferring batch's generations early (`sync_early`),
# and how many: with two, a generation's fsync starts while the one before still waits for
# its journal commit and cache flush, and the file system takes both in one commit or the next
# at once, where one thread started it only after the earlier fsync returned.  Bench part 1
# (8 MiB items, 15 rounds, 16 runs alternated with one thread): the log's MB/s median 280
# against 262, higher in 13 of the 16 pairs; its ratio to the raw append 0.79 against 0.73
# (bench/README.md large_items run 9).  The fsyncs' order does not matter: the settle waits for
# all of them before anything of the span is named.
SYNCER_THREAD = "log-sync"
SYNCERS = 2


@dataclass(slots=True)
class Unsettled:
    """A generation a roll closed, its file not yet fsync'd or named (`Span.settle`)."""

    generation: int
    fd: int
    path: Path  # E00.log for the first of a span, else its hidden name
    synced: Future[None] | None = None  # its fsync, started early by the syncer


class Span:
    """The generations closed and not yet settled, and the log's fsyncs (worker thread; the
    early fsyncs on the syncer's)."""

    def __init__(self, *, log_dir: Path, files: LogFiles, clock: Clock) -> None:
        self.log_dir = log_dir
        self._files = files
        self._clock = clock
        self.metrics: StreamMetrics | None = None
        self.fsyncs = 0  # how many times a log file was fsync'd
        self._closed: list[Unsettled] = []
        self._syncer: ThreadPoolExecutor | None = None

    def __len__(self) -> int:
        return len(self._closed)

    def add(self, generation: int, fd: int, path: Path, *, early: bool) -> None:
        """A generation a roll closed (its file `fd`, now at `path`); `early`: fsync'd now,
        on the syncer, while the writer goes on."""
        unsettled = Unsettled(generation, fd, path)
        self._closed.append(unsettled)
        if early:
            unsettled.synced = self._sync_early(fd)

    def settle(self, open_fd: int, open_path: Path) -> None:
        """Make the span durable and named: every closed file fsync'd (or its early fsync
        waited for), then the open one (`open_fd`, at `open_path`), then all renamed in order
        (`logdir.install_span`), then the directory fsync'd once."""
        for unsettled in self._closed:
            if unsettled.synced is None:
                self.fsync(unsettled.fd)
            else:
                unsettled.synced.result()  # its failure stops the stream here, as an fsync's
                self.fsyncs += 1
        self.fsync(open_fd)
        install_span(
            self.log_dir, [(u.generation, u.path) for u in self._closed], open_path, self._files
        )
        while self._closed:
            self._files.close(self._closed.pop().fd)
        self._files.fsync_dir(self.log_dir)

    def fsync(self, fd: int) -> None:
        """fsync one of the log's files (worker thread), counted."""
        self._timed_fsync(fd)
        self.fsyncs += 1

    def _timed_fsync(self, fd: int) -> None:
        """Make a log file's data durable, timed when metrics are on (worker or syncer
        thread).  `fdatasync`: it makes durable what reading the data back needs (a new
        size, new blocks) and leaves out only the times, so a generation written over a
        spare (`spares.py`), same size and blocks, costs the data and one cache flush, no
        journal commit; the names are the directory fsync's."""
        if self.metrics is None:
            self._files.fdatasync(fd)
        else:
            start = self._clock.monotonic()
            self._files.fdatasync(fd)
            self.metrics.fsync.observe(self._clock.monotonic() - start)

    def _sync_early(self, fd: int) -> Future[None]:
        """Start fsyncing a generation a deferring batch closed, on the syncer: its
        data reaches the disk while the writer writes the next generation, and the settle
        only waits for it.  Nothing depends on it before the settle (the file is named only
        then), so the order of the syncer's fsyncs among the writer's steps does not matter."""
        if self._syncer is None:
            self._syncer = ThreadPoolExecutor(SYNCERS, thread_name_prefix=SYNCER_THREAD)
        return self._syncer.submit(self._timed_fsync, fd)

    def close(self) -> None:
        """Close the span's files, nothing settled (no fd closed while the syncer may use
        it)."""
        for unsettled in self._closed:
            if unsettled.synced is not None:
                with contextlib.suppress(OSError):
                    unsettled.synced.result()
        if self._syncer is not None:
            self._syncer.shutdown()
        for unsettled in self._closed:
            with contextlib.suppress(OSError):  # a roll that failed half-way closed it
                self._files.close(unsettled.fd)
        self._closed.clear()
