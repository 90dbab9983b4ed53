"""Errors shared by every component.

DagError
├── ConfigError        the cluster config file is missing, unreadable or invalid (exit 2)
├── InUse              a data directory or port is held by another process (exit 2)
├── BadArgument        a command-line value the parser cannot take, named by its option (exit 2)
├── TokenRefused       the nodes or the service refuse the token (exit 2)
├── ClusterStoreError  the cluster store cannot be reached or answered nonsense
├── IncomparableLsns   two LSNs of different epochs ordered (also a TypeError: a bug)
├── NodeCallError      a store call to a node failed (the node client's: `status`, `detail`)
├── RequestError       a request to one of our HTTP servers that cannot be served as sent
│   ├── BadRequest     a malformed request (400)
│   │   └── BodyIncomplete  the body ended early (the client went away): nothing written
│   └── RequestTooLarge     a body or an item over its limit (413), named in `details`
└── StoreConflict      the cluster store refused a change for the cluster's state
    ├── LeaseHeld      another node holds the active's lease
    └── FailoverPaused automatic failover is paused
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dag_common.model import FailoverPause, Lsn


class DagError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(DagError):
    """The cluster config cannot be used; the message names the field and the reason."""


class InUse(DagError):
    """What a command would take is taken: a node's data directory locked by a running
    process, a port another process listens on (exit 2, nothing changed)."""


class BadInput(DagError):
    """What the command was asked cannot be done as asked (exit 2): said in one line."""


class CommandFailed(DagError):
    """The operation was tried and did not happen (exit 1): said in one line."""


def failure(code: int, message: str) -> DagError:
    """The error a command raises for an outcome of exit `code` (2: BadInput, else
    CommandFailed)."""
    return BadInput(message) if code == 2 else CommandFailed(message)


class TokenRefused(DagError):
    """The nodes or the service refuse this command's token (exit 2: fix the token)."""


class BadArgument(DagError):
    """A command-line option's value cannot be taken (`--stall-limit bogus`); the message
    names the option (exit 2, said in one line, without argparse's usage)."""


class ClusterStoreError(DagError):
    """The cluster store cannot be reached or answered nonsense."""


class StoreConflict(DagError):
    """The cluster store refused a change for the cluster's state (HTTP 409 at a node)."""


class LeaseHeld(StoreConflict):
    """A copy may not be activated while another node holds an unexpired lease on the active
    role of its database: that node may still be acknowledging writes."""

    def __init__(self, database: str, holder: str, expires_in: float) -> None:
        super().__init__(
            f"{database}: {holder} holds the active's lease for {expires_in:.1f}s more; "
            "a copy is activated only once it has expired or been released"
        )
        self.holder = holder
        self.expires_in = expires_in


class FailoverPaused(StoreConflict):
    """An automatic failover refused: an operator paused automatic failover
    (`replication-node cluster pause`).  Only automatic activations are refused."""

    def __init__(self, pause: FailoverPause) -> None:
        super().__init__(f"{pause.sentence()}; nothing is activated automatically")
        self.pause = pause


class IncomparableLsns(DagError, TypeError):
    """Two LSNs of different stream incarnations (epochs) were ordered: their streams share
    a prefix only up to where a later epoch forked, which only the epoch history knows
    (`dag_common.incarnation.fork_below`).  A TypeError, as ordering any values without an
    order is: the caller's bug, never an answer to a request."""

    def __init__(self, a: Lsn, b: Lsn) -> None:
        super().__init__(
            f"{a!r} and {b!r} are in the streams of epochs {a.epoch} and {b.epoch}: LSNs of "
            "two epochs have no order (0: unknown); ask dag_common.incarnation.fork_below "
            "whether one survived the other's failover, or compare `.position` where the "
            "two streams are known to be one"
        )
        self.a = a
        self.b = b


class NodeCallError(DagError):
    """A call to a node's store API failed: `status` is the HTTP status it answered, if
    any; `detail` the node's own `error` sentence, if it said one."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        detail: str | None = None,
        database: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail
        self.database = database  # the database whose active copy was called


class RequestError(DagError):
    """A request to one of our HTTP servers (a node, the transport) that cannot be served as
    it was sent: a 4xx, nothing changed."""


class BadRequest(RequestError):
    """A malformed request."""


class BodyIncomplete(BadRequest):
    """A request body that ended before its end (the client went away mid-upload): nothing
    of it is written."""


class RequestTooLarge(RequestError):
    """A request body over what a request may carry, or an item over its database's
    `max_item_size` (413): refused before anything is written, a body before it is read.
    `details` (the limit in bytes, the item) go into the answer."""

    def __init__(self, message: str, details: dict[str, object]) -> None:
        super().__init__(message)
        self.details = details
