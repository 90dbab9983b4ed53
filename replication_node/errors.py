"""Errors of the replication node.  The cluster store's own (ClusterStoreError, and the
StoreConflicts LeaseHeld and FailoverPaused) and a request's (BadRequest, BodyIncomplete,
RequestTooLarge: the transport's HTTP edge raises them too) are on the ground floor, in
dag_common.errors, and named here too.

DagError (dag_common.errors)
└── ReplicationError
    ├── LogFormatError            a log file is not a valid log of this format
    │   ├── LogHeaderError        bad magic, version or header checksum
    │   └── LogRecordError        a record's length or CRC32C is wrong, or the file is cut
    ├── LogSequenceError          a generation missing, out of order, or from another stream
    ├── LogShareError             the active's log share cannot give what was asked
    │   └── GenerationGone        the generation is no longer on the active (reseed needed)
    ├── InspectionFailed          a copied generation failed the inspector's checks
    ├── Diverged                  a log this copy wrote as active differs from the active's
    ├── CopyFailed                a passive copy stopped: FailedAndSuspended, with the reason
    ├── RecoveryError             crash recovery cannot bring the database to a consistent state
    ├── LogStreamStopped          the active's log stream stopped (a failed write): no commit
    ├── LeaseLost                 the active cannot show a live lease on its role: no commit
    ├── SynchronousCopiesMissing  fewer synchronous copies hold a commit than required
    ├── DatabaseError             the database file or its header is unusable
    ├── CheckInterrupted          a check of a database file stopped before its end: no verdict
    ├── BackupError               a backup or a restore that cannot go on (nothing stamped)
    │   └── BackupDamaged         a backup set that fails verification: the file and why
    ├── StoreError                a store request that cannot be served
    │   ├── NotFound              no such database, mailbox or item
    │   ├── Conflict              already exists, or locked by a move
    │   │   ├── MountRefused      an activation refused: the logs it would lose, in `details`
    │   │   └── HeldForHandOver   the active holds its last logs for the copy taking over
    │   ├── NotActive             writes go to the active copy; this one is passive
    │   │   ├── Deposed           the cluster store says this node is no longer the active
    │   │   ├── SwitchingOver     a switchover hands the role on: nothing written, write there
    │   │   └── StagedBodyLost    the log closed (switchover, dismount) while a body was staged
    │   ├── TransactionTooLarge   a commit record (staged bodies aside) over a log file (413)
    │   └── BodyChanged           an item's body replaced while it was read a part at a time
"""

from dag_common.errors import BadRequest as BadRequest  # a request's, shared with the transport
from dag_common.errors import BodyIncomplete as BodyIncomplete
from dag_common.errors import ClusterStoreError as ClusterStoreError  # the store's, shared
from dag_common.errors import DagError
from dag_common.errors import FailoverPaused as FailoverPaused
from dag_common.errors import LeaseHeld as LeaseHeld
from dag_common.errors import RequestTooLarge as RequestTooLarge
from dag_common.errors import StoreConflict as StoreConflict


class ReplicationError(DagError):
    """Base of the node's errors."""


class LogFormatError(ReplicationError):
    """A log file that is not a valid log of this format."""


class LogHeaderError(LogFormatError):
    """The header's magic, version or checksum is wrong."""


class LogRecordError(LogFormatError):
    """A record's frame or checksum is wrong, or the file ends inside a record."""


class LogSequenceError(ReplicationError):
    """A generation that is missing, out of order, or belongs to another log stream."""


class LogShareError(ReplicationError):
    """The active's log share is unreachable, refused, or sent something incomplete."""


class GenerationGone(LogShareError):
    """A generation the copy needs is no longer on the active: only a reseed helps."""


class InspectionFailed(ReplicationError):
    """A copied generation failed inspection (checksum, header, signature or sequence)."""


class Diverged(ReplicationError):
    """A log this copy wrote when it was active differs from the active's: the streams
    diverged at `generation` (a lossy failover)."""

    def __init__(self, generation: int, message: str) -> None:
        super().__init__(message)
        self.generation = generation


class CopyFailed(ReplicationError):
    """A passive copy cannot go on without an operator: it becomes FailedAndSuspended."""


class RecoveryError(ReplicationError):
    """Crash recovery cannot make the database consistent."""


class LogStreamStopped(ReplicationError):
    """The active's log stream stopped after a failed write: nothing more is acknowledged."""


class LeaseLost(ReplicationError):
    """The active copy cannot show an unexpired lease on its role (the cluster store did not
    renew it in time): it acknowledges nothing until it renews, and dismounts once the lease
    has surely expired (another copy may then be activated)."""


class SynchronousCopiesMissing(ReplicationError):
    """A commit not acknowledged: fewer passive copies than `synchronous_copies` follow the
    log in block mode, or held it within `synchronous_wait`."""


class DatabaseError(ReplicationError):
    """The database file or its header cannot be used."""


class CheckInterrupted(ReplicationError):
    """A check of a database file (the scrub) was interrupted before its end: what it read
    says nothing of the file, sound or damaged."""


class BackupError(ReplicationError):
    """A backup or a restore that cannot go on: what it wrote is left without a manifest
    (never mistaken for a whole backup), and no header is stamped."""


class BackupDamaged(BackupError):
    """A backup set that fails verification (a manifest, a checksum, a log's checks or the
    order of the sets): the message names the file and the reason."""


class StoreError(ReplicationError):
    """A store request that cannot be served."""


class NotFound(StoreError):
    """No such database, mailbox or item."""


class Conflict(StoreError):
    """The object exists already, or a move holds the mailbox locked."""


class MountRefused(Conflict):
    """An activation refused because of what it would lose; `details` go into the answer."""

    def __init__(self, message: str, details: dict[str, object]) -> None:
        super().__init__(message)
        self.details = details


class NotActive(StoreError):
    """This copy is passive: writes go to the active copy."""


class Deposed(NotActive):
    """The cluster store no longer names this node the active at its epoch (another copy was
    activated): it must not acknowledge a write, and its log stream stops."""


class SwitchingOver(NotActive):
    """A write refused before anything was written: this active is handing its role to the
    target of a switchover (every commit already in its log stream is answered first)."""


class StagedBodyLost(NotActive):
    """A write refused after its body was staged: the log was closed for a switchover or a
    dismount before its commit (the body aborted, nothing of the write visible); write it
    again at the active."""


class TransactionTooLarge(StoreError):
    """A transaction whose commit record (its operations, staged bodies aside) does not fit
    in one log generation."""


class BodyChanged(StoreError):
    """An item's body was replaced or deleted between two parts of a read of it
    (`storage/body_reads.py`): what was read so far is of another version."""


class HeldForHandOver(Conflict):
    """The active copy is not mounted, and holds its last logs for the copy taking over
    (Attempt Copy Last Logs): it does not mount until that is done or the hold ends."""
