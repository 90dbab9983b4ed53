"""Closed generations read and verified once by a stage, kept for the other readers of the
same stage that need them again (any thread), bounded in bytes.

Why (issue 49, the 1 MiB LMTP path): a staged body's parts were read from the log files by
each of the stage's readers, each with its own `spanning.BodyReader`, and each read a whole
closed generation again (a fresh 1 MiB mapping, its page faults, its CRC32C scan): on a
passive, the replay's read, then its check of a large body's UTF-8 and SHA-256, then the
row's write of its parts; on the active, each LLR flush read the generations of its bodies,
and the next flush the generation the two shared.  A generation holds the parts of more than
one body, and a body's parts span generations, so a reader of its own per body read most
generations twice or three times.

What is kept is what was verified (`logfile.verify_closed`: the header, every record's
CRC32C, CLOSE last), as it was verified: a `ScanResult` over the bytes read, which nothing
can change (`bytes`).  A reader given it reads exactly the bytes that were checked, so no
check is given up: each body's size, CRC32C, SHA-256 and UTF-8 are still checked from them
by the reader.  What a hit does not do is read the file again, so a file damaged on disk
after this stage read it is not noticed by this stage, which writes the right bytes anyway;
the readers that serve bodies to clients (`LogBodies.checked_parts`) and the inspection keep
reading the file each time, and so notice it.

Kept only while the file is the one read: each look compares the file's identity (device,
inode, size, modification time) with the one it had when it was read, and reads it again if
it differs (a generation restored, or a copy reseeded under the same name).  The open log is
never kept (it grows): only results that end with their CLOSE record.

Bounded in bytes (`most`: each generation counts its file's size), the least recently used
let go of first; the stage also lets go of the generations it will not need again
(`forget_below`), so an idle node holds none.  A generation being read by a reader stays in
memory while that reader holds it, as before; the cache adds at most `most` bytes to that.

Weighed and not taken: reading a part's record alone by its position (a body's later parts'
positions are not recorded anywhere, so a reader would walk every frame of the generations
after the first, a read each); a reused read buffer (a part handed to a writer is a view of
the bytes read, and the reader holding the last part back, `checked_parts`, would see it
overwritten by the next generation); a mapping of the file (SIGBUS: `logfile.read_closed`);
reading the file again but skipping its CRC32C scan when its inode, size and modification
time are those of a file verified before (unsound: they say the file was not written
through the file system since, not that the disk gives back the bytes it was given, and the
read's cost, a fresh mapping and its page faults, is most of what a read costs here).
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable
from pathlib import Path

from replication_node.log.logfile import ScanResult

# What a stage keeps by default: four generations of the seeds' 1 MiB.
MOST = 4 * 1024 * 1024

_Identity = tuple[int, int, int, int]


def _identity(path: Path) -> _Identity | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class GenerationCache:
    """Verified closed generations by their file's path (thread-safe)."""

    def __init__(self, most: int = MOST) -> None:
        self._most = most
        self._kept: collections.OrderedDict[Path, tuple[_Identity, ScanResult]] = (
            collections.OrderedDict()
        )
        self._bytes = 0
        self._lock = threading.Lock()
        self.loads = 0  # generations read (not found kept), for tests and benches

    def get(self, path: Path, load: Callable[[], ScanResult]) -> ScanResult:
        """The verified generation at `path`: the one kept if the file is still the one it
        was read from, else `load()`'s (kept if it is closed).  `load` raises as it would."""
        ident = _identity(path)
        with self._lock:
            kept = self._kept.get(path)
            if kept is not None and kept[0] == ident:
                self._kept.move_to_end(path)
                return kept[1]
        # Read outside the lock: another thread's look need not wait on this read.
        result = load()
        with self._lock:
            self.loads += 1
            # `ident` was taken before the read: a file changed since is read again next time.
            if ident is not None and result.closed and result.file_size <= self._most:
                self._drop(path)
                self._kept[path] = (ident, result)
                self._bytes += result.file_size
                while self._bytes > self._most:
                    self._drop(next(iter(self._kept)))
        return result

    def forget_below(self, generation: int) -> None:
        """Let go of the generations below `generation` (the stage will not read them)."""
        with self._lock:
            for path in [p for p, (_, r) in self._kept.items() if r.header.generation < generation]:
                self._drop(path)

    def _drop(self, path: Path) -> None:
        kept = self._kept.pop(path, None)
        if kept is not None:
            self._bytes -= kept[1].file_size

    def __len__(self) -> int:
        with self._lock:
            return len(self._kept)
