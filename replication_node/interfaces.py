"""The seams between the node (wiring, HTTP, cluster store) and the copies it hosts.

    node.py ──owns──▶ ActiveInstance ──holds──▶ ActiveLogShare ──implements──▶ LogShareSource
                                                            (served by shipping/logshare.py)
                      PassiveCopy    ──reads via──▶ LogSource (shipping/logshare_client.py)
    both are a HostedCopy; both read through a MailboxReader (storage/reader.py: the API's
    GET routes); the active is also an ActiveHostedCopy, what the API's writes, admin
    calls, backups and change feeds ask of it

The node's HTTP API reaches the copies through this module alone (tests/test_layers.py holds
it): what the active hands out to a request, its store to write to (`MailboxWriter`), its
mounted copy (`MountedCopy`: the log stream, the header) and its change feed
(`ChangeFeedView`), is named here, so a change of rooms inside `active/` touches this file
and not the routes.  They are the active's own classes, not narrowed: the seam is where the
API depends on them, not a second copy of their signatures.

The pipeline's own seams (how generations travel) are `shipping/interfaces.py`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from dag_common.model import CopyStatusReport
from replication_node.active.backup_leases import BackupLeases
from replication_node.active.change_feed import ChangeFeed
from replication_node.active.copy import ActiveCopy
from replication_node.active.mailbox_store import MailboxStore
from replication_node.active.share import ActiveLogShare
from replication_node.admin_api import BackupLease, BackupStamp
from replication_node.log.operations import BackupKind
from replication_node.storage.reader import MailboxReader

MailboxWriter = MailboxStore  # the active's writes (answered once durable)
MountedCopy = ActiveCopy  # the mounted active copy: log stream, database, LLR overlay
ChangeFeedView = ChangeFeed  # the mount's change feed, which a long poll waits on


class HostedCopy(Protocol):
    """A node's copy of one database, whichever its role: what the node asks of each."""

    database: str

    def status(self) -> CopyStatusReport: ...

    def reader(self) -> MailboxReader | None:
        """The copy's store to read (None while it cannot be read: dismounted, seeding)."""
        ...

    async def stop(self) -> None: ...


class ActiveHostedCopy(HostedCopy, Protocol):
    """The active copy of a database on this node, mounted or not: what the HTTP API asks
    of it (`active/instance.py`'s ActiveInstance)."""

    epoch: int  # the stream incarnation (the cluster store's activation epoch)
    circular_logging: bool
    mounting: bool  # opening its files (a switchover's new active, a re-mount)
    dismounted_by_operator: bool
    error: str | None  # why it is not mounted, if it is not
    backups: BackupLeases
    share: ActiveLogShare  # the log share the passive copies pull from
    store: MailboxWriter | None  # None while not mounted
    copy: MountedCopy | None
    changes: ChangeFeedView | None

    @property
    def switching_to(self) -> str | None: ...

    async def roll(self) -> int | None:
        """Close the open log and publish it; the generation closed, if any (NotActive:
        not mounted)."""
        ...

    async def publish(self) -> None: ...

    async def quiesce(self, target: str, *, hold: float = 180.0) -> int: ...

    def unquiesce(self) -> None: ...

    async def mount_again(self) -> bool: ...

    async def dismount(self) -> bool: ...

    def begin_backup(self, node: str, kind: BackupKind) -> BackupLease:
        """A backup's lease begun, after the refusals an incremental meets."""
        ...

    async def stamp_backup(
        self, backup_id: str, *, generation: int, ended: datetime
    ) -> BackupStamp:
        """The backup completed through `generation`: its stamp committed, its lease ended."""
        ...
