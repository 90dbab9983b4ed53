"""Errors of the move-request client.

DagError (dag_common.errors)
└── MoveError
    ├── MoveRejected      bad input: unknown mailbox or database, target = source, a
    │                     mailbox already being moved or locked (exit 2, nothing changed)
    ├── MoveFailed        the move stopped: stalled too long, flush never satisfied, a
    │                     node refused; `mrs resume` continues from the last step done
    │   └── MoveBusy      another mrs process is running the move right now
    ├── MoveStopped       internal, never leaves the mover: an operator asked the move to
    │                     stop (mrs suspend or cancel); the loop saves it Suspended
    ├── MoveReleased      internal, never leaves the mover: its worker stops and gives
    │                     the move back at a safe point, as it is
    └── NeedsReconcile    internal, never leaves the mover: an end of the move changed
                          incarnation, a flush was lost, or the digests differ; the move
                          loop reconciles by content and goes on

NodeCallError (a store call to a node failed, retried by the move loop) is the node client's,
on the ground floor (dag_common.errors), and named here too.
"""

from dag_common.errors import DagError
from dag_common.errors import NodeCallError as NodeCallError


class MoveError(DagError):
    """Base of the mover's errors."""


class MoveRejected(MoveError):
    """The request is invalid; nothing was changed."""


class MoveBusy(MoveRejected):
    """Another `mrs` process holds the move (`MoveRequestStore.running`)."""


class MoveStopped(MoveError):
    """An operator asked the running move to stop at its next safe point."""


class MoveReleased(MoveError):
    """Internal, never leaves the mover: its worker is stopping and gives the move back at
    a safe point (everything done is saved; another worker, or this one restarted, goes on)."""


class MoveFailed(MoveError):
    """The move failed; it is not resumed by itself.  `stalled`: the StallStatus it failed
    waiting on (the 15-minute stall limit, the flush limit), None for any other failure; a
    batch queues a move that failed stalled again later (`batches.retry_due`)."""

    def __init__(self, message: str, *, stalled: str | None = None) -> None:
        super().__init__(message)
        self.stalled = stalled


class NeedsReconcile(MoveError):
    """The move must reconcile the target with the source before it goes on.

    `target_changed`: what was written to the target is in doubt (a new target epoch, a lost
    flush, a failed verification), so any flush already obtained must be obtained again."""

    def __init__(self, reason: str, *, target_changed: bool) -> None:
        super().__init__(reason)
        self.target_changed = target_changed
