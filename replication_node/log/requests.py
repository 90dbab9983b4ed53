"""What the log stream asks of its writer: one `Pending` request per commit, roll, stage,
abort or stop, answered through its future once the batch that wrote it is durable
(`logstream.py` queues them, `writer.py` writes them)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dag_common.model import RollCause
from replication_node.log.body import BodyReader
from replication_node.log.operations import Operation
from replication_node.log.spanning import BlobId, BlobRef, PendingBlob


@dataclass(slots=True)
class StageJob:
    """A body being staged: the writer thread's progress through it."""

    data: BodyReader  # how much of it is written: its `read_bytes`
    blob: PendingBlob | None = None
    # A body pending in the log these bytes go on with (a body staged as it arrives,
    # `LogStream.stage`'s `continues`): its parts so far are the writer's.
    continues: BlobId | None = None
    abort_on: BaseException | None = None  # set by a roll that closes the stream's writes


@dataclass(frozen=True, slots=True)
class AbortJob:
    """Staged bodies no commit will use: an ABORT record each (those still pending)."""

    blobs: tuple[BlobId, ...]


# Not finished in this batch: the stage request goes on in the next.
UNFINISHED = object()


@dataclass(slots=True)
class Pending:
    """One request to the writer, answered through its future."""

    data: bytes | None  # None: a roll request; b"": stop the writer
    commit_time: datetime
    force: bool
    future: asyncio.Future[Any]
    ops: tuple[Operation, ...] = ()
    queued: float = 0.0  # monotonic time the commit was queued (commit latency)
    cause: RollCause = RollCause.DEMAND  # a roll request's cause
    blobs: tuple[BlobId, ...] = ()  # the staged bodies a commit ends
    staged: tuple[tuple[int, BlobRef], ...] = ()  # (put's index, its body) for the event
    job: StageJob | AbortJob | None = None  # a stage or abort request (data is None)

    @property
    def is_commit(self) -> bool:
        return bool(self.data)


def answer(
    batch: Sequence[Pending], work: Sequence[Pending], results: Sequence[Any]
) -> list[Pending]:
    """Answer the requests of a durable batch: each of `work` with its result (an exception
    fails it), each stop request of `batch` with None.  Returns the stage requests not
    finished (`UNFINISHED`), which go on in the next batch."""
    unfinished = []
    for p, result in zip(work, results, strict=True):
        if result is UNFINISHED:
            unfinished.append(p)
        elif p.future.done():
            pass
        elif isinstance(result, BaseException):
            p.future.set_exception(result)
        else:
            p.future.set_result(result)
    for p in batch:
        if p.data == b"" and not p.future.done():
            p.future.set_result(None)
    return unfinished


def fail(waiting: Sequence[Pending], exc: BaseException) -> None:
    """Fail every request of `waiting` not yet answered with `exc` (a stop request is
    answered: the stream is stopped)."""
    for p in waiting:
        if p.future.done():
            continue
        if p.data == b"":
            p.future.set_result(None)  # close() asked to stop: it is stopped
        else:
            p.future.set_exception(exc)
