"""The seams between the node (wiring, HTTP, cluster store) and the copies it hosts.

    node.py ──owns──▶ ActiveInstance ──holds──▶ ActiveLogShare ──implements──▶ LogShareSource
                                                            (served by shipping/logshare.py)
                      PassiveCopy    ──reads via──▶ LogSource (shipping/logshare_client.py)
    both are a HostedCopy; both read through a MailboxReader (storage/reader.py: the API's
    GET routes)

The pipeline's own seams (how generations travel) are `shipping/interfaces.py`.
"""

from __future__ import annotations

from typing import Protocol

from dag_common.model import CopyStatusReport
from replication_node.storage.reader import MailboxReader


class HostedCopy(Protocol):
    """A node's copy of one database, whichever its role: what the node asks of each."""

    database: str

    def status(self) -> CopyStatusReport: ...

    def reader(self) -> MailboxReader | None:
        """The copy's store to read (None while it cannot be read: dismounted, seeding)."""
        ...

    async def stop(self) -> None: ...
