"""The user's folders as a set, as pymap sees it (`MailboxSetInterface`): listed, created,
renamed and deleted through the node's store API; each one opened as a `folders.Folder`.

A folder looked up here is remembered with its database and UIDVALIDITY (`known`), so a
command on the selected folder need not look it up again: the folder's listing checks it is
still the same one (`Folder.refresh`).
"""

from __future__ import annotations

from pymap.backend.mailbox import MailboxSetInterface
from pymap.exceptions import MailboxConflict, MailboxNotFound
from pymap.listtree import ListTree
from pymap.parsing.specials import ObjectId

from dag_common.clock import Clock
from imap_front.folders import DELIMITER, Folder, Shown, imap_name, node_name
from imap_front.listing import Listings, RowsCache
from imap_front.metrics import FrontMetrics
from imap_front.node_api import MailboxApi


class Folders(MailboxSetInterface[Folder]):
    """The folders of the user's one mailbox."""

    def __init__(
        self, api: MailboxApi, *, clock: Clock, metrics: FrontMetrics | None = None,
        rows: RowsCache | None = None,
    ) -> None:  # fmt: skip
        self._api = api
        self._clock = clock
        self._metrics = metrics
        self._listings = Listings(api, rows)
        self._validity: dict[str, tuple[str, int]] = {}  # name: (database, UIDVALIDITY)

    @property
    def metrics(self) -> FrontMetrics | None:
        return self._metrics

    @property
    def delimiter(self) -> str:
        return DELIMITER

    async def set_subscribed(self, name: str, subscribed: bool) -> None:
        pass  # every folder counts as subscribed: the node keeps no subscriptions yet

    async def list_subscribed(self) -> ListTree:
        return await self.list_mailboxes()

    async def list_mailboxes(self) -> ListTree:
        state = await self._api.state()
        return ListTree(DELIMITER).update("INBOX", *(imap_name(f) for f in state.folders))

    async def highest_modseq(self, name: str) -> int:
        """A folder's highest modseq, the node's (STATUS HIGHESTMODSEQ); KeyError: none."""
        try:
            return (await self._api.status(node_name(name))).highest_modseq
        except MailboxNotFound:
            raise KeyError(name) from None

    async def get_mailbox(self, name: str) -> Folder:
        folder = node_name(name)
        try:
            status = await self._api.status(folder)
        except MailboxNotFound:
            raise KeyError(name) from None
        self._validity[name] = (self._api.database, status.uidvalidity)
        return Folder(self._api, folder, status.uidvalidity, clock=self._clock,
                      metrics=self._metrics, listings=self._listings)  # fmt: skip

    def kept(self, name: str) -> Folder | None:
        """The folder `name` as the front's rows of it say (no store call), for a SELECT
        that polls the change feed before it trusts them (`Folder.select_kept`); None when
        no rows of it here are known current at a cursor of the feed.  A folder deleted,
        renamed or made again since would be named by the feed: the rows cannot outlive it
        unseen."""
        folder = node_name(name)
        rows = self._listings.kept(folder)
        if rows is None or rows.database != self._api.database or not rows.cursor:
            return None
        return Folder(self._api, folder, rows.uidvalidity, clock=self._clock,
                      metrics=self._metrics, listings=self._listings)  # fmt: skip

    def current(self, name: str, shown: Shown | None) -> Folder | None:
        """The selected folder `name` from the front's rows, with no store call, for IDLE's
        update of the selected state (`Session.check_mailbox`): when the rows are those of
        the folder the session was shown (its database, UIDVALIDITY and the active's epoch)
        and hold every change up to the feed cursor it was shown at.  The update polls the
        feed since that cursor, which names the folder deleted or made again after it, or
        a parent renamed (`Folder._names` matches parents).
        None otherwise (looked up on the node).  Each woken idler looked its folder up on
        the node (a state GET: 1,000 a delivery with 1,000 idlers), and a delivery
        meanwhile waited behind them (bench/README.md, *IDLE fan-out*)."""
        folder = node_name(name)
        rows = self._listings.kept(folder)
        database = self._api.database
        if (
            rows is None or shown is None or not shown.epoch or not rows.cursor
            or rows.database != database or shown.database != database
            or rows.uidvalidity != shown.uidvalidity or rows.epoch != shown.epoch
            or rows.cursor_epoch != shown.epoch or rows.cursor < shown.cursor
        ):  # fmt: skip
            return None
        self._validity[name] = (database, rows.uidvalidity)
        return Folder(self._api, folder, rows.uidvalidity, clock=self._clock,
                      metrics=self._metrics, listings=self._listings, checked=True)  # fmt: skip

    def looked_up(self, name: str, folder: Folder) -> None:
        """`folder` is what `name` is now (as `get_mailbox` notes it for `known`)."""
        self._validity[name] = (self._api.database, folder.uid_validity)

    def known(self, name: str) -> Folder | None:
        """The selected folder `name` as this session last looked it up (no store call),
        for a command that lists it (`Folder.refresh` checks it is still the same folder:
        gone or another UIDVALIDITY is MailboxNotFound); None if not looked up here."""
        found = self._validity.get(name)
        if found is None or found[0] != self._api.database:
            return None
        return Folder(self._api, node_name(name), found[1], clock=self._clock,
                      metrics=self._metrics, listings=self._listings, checked=True)  # fmt: skip

    async def add_mailbox(self, name: str) -> ObjectId:
        folder = node_name(name.rstrip(DELIMITER))
        if folder in (await self._api.state()).folders:
            raise ValueError(name)
        await self._api.create_folder(folder)
        status = await self._api.status(folder)
        return ObjectId(b"F%d" % status.uidvalidity)

    async def delete_mailbox(self, name: str) -> None:
        self._validity.clear()
        folder = node_name(name)
        try:
            await self._api.delete_folder(folder)
        except MailboxNotFound:
            raise KeyError(name) from None

    async def rename_mailbox(self, before: str, after: str) -> None:
        self._validity.clear()
        try:
            await self._api.rename_folder(node_name(before), node_name(after))
        except MailboxNotFound:
            raise KeyError(before) from None
        except MailboxConflict:
            raise ValueError(after) from None
