"""A disk for the log's crash-state tests, at the log's file seam (`log/files.py`).

`TestDisk` takes every file step the writer, its roll, its settle and its spares take on
the real files (the operating system's, `OsLogFiles`), records it (`steps`), tells a test's
watcher when one is done (`watch`), and at a step a test chooses either fails it (`fail`: an
error the process lives through, the disk's EIO or ENOSPC) or crashes there (`crash`: that
step and every later one never reach the disk, as when the process is killed or the power
goes; closing a descriptor still works, as the kernel closes them for a dead process).  The
writer is never patched: it takes its steps, and the disk answers them.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from replication_node.log.files import LogFiles, OpenMode, OsLogFiles


class Op(StrEnum):
    """A file step of `LogFiles`."""

    OPEN = "open"
    WRITE = "write"
    TRUNCATE = "truncate"
    SEEK = "seek"
    FDATASYNC = "fdatasync"
    FSYNC = "fsync"
    WRITEBACK = "start_writeback"
    CLOSE = "close"
    REPLACE = "replace"
    UNLINK = "unlink"
    FSYNC_DIR = "fsync_dir"


@dataclass(frozen=True, slots=True)
class Step:
    """One file step: on which file (a descriptor's file where it is named now), where a
    rename goes, how a file was opened, on which thread."""

    op: Op
    path: Path
    target: Path | None = None
    mode: OpenMode | None = None
    thread: str = ""


@dataclass(slots=True)
class _Rule:
    op: Op
    when: Callable[[Step], bool]
    error: OSError
    crash: bool
    skip: int  # matching steps let through before the one that fails
    fired: bool = False


@dataclass(repr=False)
class TestDisk:
    """The real files, every step recorded, failing or crashing where a test says."""

    __test__ = False  # not a test class, whatever its name

    real: LogFiles = field(default_factory=OsLogFiles)
    steps: list[Step] = field(default_factory=list)  # the steps done
    failed: list[Step] = field(default_factory=list)  # the steps failed (or crashed at)
    crashed_at: Step | None = None
    _paths: dict[int, Path] = field(default_factory=dict)
    _rules: list[_Rule] = field(default_factory=list)
    _watchers: dict[Op, list[Callable[[Step], None]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _why: str = ""

    # ---- what a test says --------------------------------------------------------------

    def fail(
        self,
        op: Op,
        error: OSError,
        *,
        when: Callable[[Step], bool] = lambda step: True,
        skip: int = 0,
    ) -> None:
        """Fail the first `op` step that `when` matches, after `skip` such steps went
        through, with `error`; once (the disk goes on working)."""
        with self._lock:
            self._rules.append(_Rule(op, when, error, crash=False, skip=skip))

    def crash(
        self,
        op: Op,
        *,
        when: Callable[[Step], bool] = lambda step: True,
        skip: int = 0,
        why: str = "the power went",
    ) -> None:
        """Crash at the first `op` step that `when` matches, after `skip` such steps went
        through: it and every later step (but closing) fail, nothing more reaching the disk."""
        with self._lock:
            self._rules.append(_Rule(op, when, OSError(errno.EIO, why), crash=True, skip=skip))

    def watch(self, op: Op, watcher: Callable[[Step], None]) -> None:
        """Call `watcher` with each `op` step once it is done (on the thread that took it)."""
        with self._lock:
            self._watchers.setdefault(op, []).append(watcher)

    def done(self, op: Op) -> list[Step]:
        """The `op` steps done so far, in order."""
        with self._lock:
            return [s for s in self.steps if s.op == op]

    # ---- the seam --------------------------------------------------------------------------

    def _begin(
        self, op: Op, path: Path, target: Path | None = None, mode: OpenMode | None = None
    ) -> Step:
        step = Step(op, path, target, mode, threading.current_thread().name)
        with self._lock:
            if self.crashed_at is not None and op != Op.CLOSE:
                self.failed.append(step)
                raise OSError(errno.EIO, f"{self._why} (crashed at {self.crashed_at.op})")
            for rule in self._rules:
                if rule.fired or rule.op != op or not rule.when(step):
                    continue
                if rule.skip:
                    rule.skip -= 1
                    continue
                rule.fired = True
                self.failed.append(step)
                if rule.crash:
                    self.crashed_at, self._why = step, rule.error.strerror
                raise rule.error
        return step

    def _end(self, step: Step) -> None:
        with self._lock:
            self.steps.append(step)
            watchers = list(self._watchers.get(step.op, ()))
        for watcher in watchers:
            watcher(step)

    def _path(self, fd: int) -> Path:
        with self._lock:
            return self._paths.get(fd, Path(f"<fd {fd}>"))

    def _on_fd(self, op: Op, fd: int, act: Callable[[], object]) -> None:
        step = self._begin(op, self._path(fd))
        act()
        self._end(step)

    def open(self, path: Path, mode: OpenMode) -> int:
        step = self._begin(Op.OPEN, path, mode=mode)
        fd = self.real.open(path, mode)
        with self._lock:
            self._paths[fd] = path
        self._end(step)
        return fd

    def write(self, fd: int, data: bytes | memoryview) -> int:
        step = self._begin(Op.WRITE, self._path(fd))
        written = self.real.write(fd, data)
        self._end(step)
        return written

    def truncate(self, fd: int, size: int) -> None:
        self._on_fd(Op.TRUNCATE, fd, lambda: self.real.truncate(fd, size))

    def seek(self, fd: int, offset: int) -> None:
        self._on_fd(Op.SEEK, fd, lambda: self.real.seek(fd, offset))

    def fdatasync(self, fd: int) -> None:
        self._on_fd(Op.FDATASYNC, fd, lambda: self.real.fdatasync(fd))

    def fsync(self, fd: int) -> None:
        self._on_fd(Op.FSYNC, fd, lambda: self.real.fsync(fd))

    def start_writeback(self, fd: int) -> None:
        self._on_fd(Op.WRITEBACK, fd, lambda: self.real.start_writeback(fd))

    def close(self, fd: int) -> None:
        step = self._begin(Op.CLOSE, self._path(fd))
        self.real.close(fd)
        with self._lock:
            self._paths.pop(fd, None)
        self._end(step)

    def replace(self, src: Path, dst: Path) -> None:
        step = self._begin(Op.REPLACE, src, target=dst)
        self.real.replace(src, dst)
        with self._lock:  # the descriptors open on it follow it
            for fd, path in self._paths.items():
                if path == src:
                    self._paths[fd] = dst
        self._end(step)

    def unlink(self, path: Path) -> None:
        step = self._begin(Op.UNLINK, path)
        self.real.unlink(path)
        self._end(step)

    def fsync_dir(self, path: Path) -> None:
        step = self._begin(Op.FSYNC_DIR, path)
        self.real.fsync_dir(path)
        self._end(step)
