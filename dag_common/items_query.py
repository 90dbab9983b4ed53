"""What a read of a mailbox's changes asks of a node (GET …/mailboxes/{mailbox}/items, the
store call `store_api.NodeStore.items`), and the query string that carries it.  On the node
the same query reads a page of the store (`MailboxReader.items_page`)."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass


@dataclass(frozen=True, slots=True)
class ItemsQuery:
    """What a read of a mailbox's changes asks for (GET …/mailboxes/{mailbox}/items): the
    changes after `since_change`; with `limit`, a page of about that many; with `page_bytes`,
    a page whose bodies stop once they reach that many bytes (one change at least; with
    `bodies` off, the rows as listed); with `count`, how many live items all the pages hold
    (`Items.live`); with `bodies` off, each item without its body (`Item`: its hash and size
    instead)."""

    since_change: int
    limit: int | None = None
    _: KW_ONLY
    count: bool = False
    page_bytes: int | None = None
    bodies: bool = True

    def params(self) -> dict[str, str]:
        """The query's parameters, as the node reads them."""
        params = {"since_change": str(self.since_change)}
        if self.limit is not None:
            params["limit"] = str(self.limit)
        if self.page_bytes is not None:
            params["page_bytes"] = str(self.page_bytes)
        if self.count:
            params["count"] = "true"
        if not self.bodies:
            params["bodies"] = "false"
        return params
