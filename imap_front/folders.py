"""The user's folders as pymap sees them (`MailboxSetInterface`, `MailboxDataInterface`),
over the node's store API (`node_api.MailboxApi`).

Nothing here is the truth: UIDVALIDITY, UIDNEXT, UIDs and flags are the node's, read for
each command that needs them; a message's bytes are fetched only when a FETCH or SEARCH
needs its headers or body (`Message.load_content`), byte for byte from GET …/message.

A selected folder's state (what the client was shown) is pymap's `SelectedMailbox`; this
module tells it what changed since the last command (`update_selected`, which IDLE and NOOP
and every command on a selected folder come through).  The session keeps the node's change
feed's cursor and the active's epoch beside what it showed (`Shown`, in the selected
mailbox's `mod_sequence`): a command asks the feed (no wait) whether anything above the
cursor touched the folder, and only then lists the folder's UIDs again; IDLE long-polls the
feed, one poll at a time per session, until it names the folder or the client says DONE.
A new epoch (a switchover or a failover: the node client follows the active) lists the
folder again too.  A feed answer that is not `live` (a move locked the mailbox, or removed it
from its source) reads the directory again; once it names another database (the move ended)
the session lists the folder there and carries on: the mover kept UIDVALIDITY and UIDs, so
what the client holds stays true; a folder whose UIDVALIDITY is not the one shown ends the
session `* BYE [UNAVAILABLE]` (`errors.Bye`).  A folder that changed is listed
`?since_modseq` of what the session last showed (the node tells a message moved out of it as
expunged since step 1's `moved_out`), and whole at SELECT, after a move followed, on a new
epoch, or when the node's counters are not past what was shown (`_since`).

Names: IMAP's INBOX is the node's "Inbox"; the hierarchy delimiter is "/", as the node's
folder names have it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from pymap.backend.mailbox import MailboxDataInterface
from pymap.exceptions import MailboxNotFound
from pymap.flags import FlagOp
from pymap.mailbox import MailboxSnapshot
from pymap.message import BaseLoadedMessage, BaseMessage
from pymap.parsing.message import AppendMessage
from pymap.parsing.specials import FetchRequirement, ObjectId
from pymap.parsing.specials.flag import Flag, Seen
from pymap.selected import SelectedMailbox, SelectedSet

from dag_common.clock import Clock
from dag_common.store_api import Changes, Listed, MailboxState
from imap_front.errors import Bye, Unavailable
from imap_front.fetching import Bodies, RawLoaded
from imap_front.listing import Listings, Rows
from imap_front.metrics import FrontMetrics
from imap_front.node_api import NODE_INBOX, MailboxApi, Stored
from imap_front.selected import FLAG_SETS, CompactMessages

logger = logging.getLogger(__name__)

DELIMITER = "/"
FEED_WAIT = 25.0  # seconds one long poll of the change feed waits (the node's bound: 60)
FEED_RETRY = 1.0  # seconds before polling again after a failed poll, or a locked mailbox


def node_name(imap_name: str) -> str:
    """The node's name of an IMAP folder name (INBOX, in any case, is Inbox)."""
    head, sep, rest = imap_name.partition(DELIMITER)
    if head.upper() == "INBOX":
        return NODE_INBOX + sep + rest
    return imap_name


def imap_name(node_folder: str) -> str:
    head, sep, rest = node_folder.partition(DELIMITER)
    return "INBOX" + sep + rest if head == NODE_INBOX else node_folder


def flag_names(flags: Iterable[Flag]) -> list[str]:
    return [str(f) for f in flags]


def _flags(names: Iterable[str]) -> frozenset[Flag]:
    return frozenset(Flag(n.encode()) for n in names)


class Message(BaseMessage):
    """A message of a folder: its UID, INTERNALDATE and flags as listed; its bytes loaded
    from the node only when asked for."""

    __slots__ = ["_api", "bodies", "item_id", "modseq", "size"]

    def __init__(
        self, uid: int, when: datetime, flags: Iterable[Flag], *, item_id: str, size: int,
        api: MailboxApi, expunged: bool = False, modseq: int = 0,
    ) -> None:  # fmt: skip
        super().__init__(uid, when, flags, expunged=expunged)
        self._api = api
        self.item_id = item_id
        self.size = size
        self.modseq = modseq  # the node's (CONDSTORE shows it plus one: `condstore.shown`)
        self.bodies: Bodies | None = None  # a FETCH's read-ahead (`fetching.Bodies`)

    @classmethod
    def listed(cls, row: Listed, api: MailboxApi) -> Message:
        when = row.received or datetime.fromtimestamp(0, UTC)
        return cls(row.uid, when, _flags(row.flags), item_id=row.item_id, size=row.size,
                   api=api, modseq=row.modseq)  # fmt: skip

    async def load_content(self, requirement: FetchRequirement) -> BaseLoadedMessage:
        if self.expunged or requirement.has_none(FetchRequirement.CONTENT):
            return BaseLoadedMessage(self, requirement, None)
        bodies = self.bodies
        get = self._api.message if bodies is None else bodies.get
        raw = await get(self.item_id)
        if raw is None:  # expunged meanwhile: nothing to show
            return BaseLoadedMessage(self, requirement, None)
        return RawLoaded(self, requirement, raw)

    @classmethod
    def copy_expunged(cls, msg: Any) -> Message:
        return cls(msg.uid, msg.internal_date, msg.permanent_flags, item_id=msg.item_id,
                   size=msg.size, api=msg._api, expunged=True)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Shown:
    """What a selected session was shown (pymap's `SelectedMailbox.mod_sequence`): the
    folder's highest modseq at the last listing, and the change feed's cursor and the
    active's epoch taken just before it; the database listed and the folder's UIDVALIDITY
    there (a move followed is checked against it).  The UIDs and flags shown are the
    selected state's own (`selected.CompactMessages`)."""

    modseq: int
    cursor: int
    epoch: int
    database: str = ""
    uidvalidity: int = 0


def _compact(selected: SelectedMailbox) -> CompactMessages:
    messages = selected.messages
    if not isinstance(messages, CompactMessages):
        raise TypeError("a folder of the front is selected through CompactSelected")
    return messages


def _since(shown: Shown | None, feed: Changes | None, database: str) -> int:
    """The modseq to list a selected folder's changes since (0: list it whole).  Whole at
    SELECT, after a move followed (another database's numbers), when the active's epoch is not
    the one of the last listing (a switchover or a failover: a lossy one may have lost
    changes shown), or when nothing was listed with a cursor."""
    if shown is None or feed is None or not shown.epoch or not shown.modseq:
        return 0
    if shown.database != database or feed.epoch != shown.epoch:
        return 0
    return shown.modseq


class Folder(MailboxDataInterface[Message]):
    """One folder of the user's mailbox, as one session uses it."""

    def __init__(
        self, api: MailboxApi, name: str, uidvalidity: int, *, clock: Clock,
        metrics: FrontMetrics | None = None, listings: Listings | None = None,
        checked: bool = False,
    ) -> None:  # fmt: skip
        self._api = api
        self._checked = checked  # the listing must show `uidvalidity` (`Folders.known`)
        self._listings = listings if listings is not None else Listings(api)
        self._clock = clock
        self._metrics = metrics
        self.name = name  # the node's
        self._uidvalidity = uidvalidity
        # The folder's rows, read only when a command needs its messages (FETCH, STORE,
        # SELECT's counts), from the session's listings (`listing.Listings`: since the modseq
        # listed last); not for NOOP or IDLE, and IDLE forgets them.
        self._rows: Rows | None = None
        self._selected = SelectedSet()

    @property
    def mailbox_id(self) -> ObjectId:
        # Stable through a rename: a folder's UIDVALIDITY is unique in its mailbox.
        return ObjectId(b"F%d" % self._uidvalidity)

    @property
    def readonly(self) -> bool:
        return False

    @property
    def uid_validity(self) -> int:
        return self._uidvalidity

    @property
    def selected_set(self) -> SelectedSet:
        return self._selected

    async def refresh(self) -> Rows:
        """The folder's rows as the node has them now."""
        rows = await self._listings.rows(self.name)
        if self._checked and rows.uidvalidity != self._uidvalidity:
            raise MailboxNotFound(imap_name(self.name))  # gone, and another made in its place
        self._rows = rows
        return rows

    async def _listed(self) -> Rows:
        """The folder's rows, read once per command that needs them."""
        return self._rows if self._rows is not None else await self.refresh()

    def _message(self, row: Listed) -> Message:
        return Message.listed(row, self._api)

    async def quiet(self, selected: SelectedMailbox) -> tuple[bool, Changes | None]:
        """For a command that writes nothing (a FETCH setting no \\Seen): one poll of the
        change feed, since the older of what the session was shown and what the front's rows
        of the folder are known to hold.  If it names neither this folder nor a parent (a
        parent renamed renames it), both are current as of its cursor: True, and nothing more
        is asked (no listing, no second poll).  Otherwise False and the poll's answer (for
        `update_selected`'s `polled`), the rows read after it and known current as of it."""
        shown: Shown | None = selected.mod_sequence
        if shown is None or shown.database != self._api.database or not shown.epoch:
            await self._listed()
            return False, None
        rows = self._listings.kept(self.name)
        known = rows is not None and rows.cursor > 0 and rows.cursor_epoch == shown.epoch
        since = min(shown.cursor, rows.cursor) if known and rows is not None else shown.cursor
        feed = await self._api.changes(since, wait=0, epoch=shown.epoch)
        self._polled(feed, shown)
        if feed is None or feed.state != MailboxState.LIVE or feed.epoch != shown.epoch:
            await self._listed()
            return False, None
        if known and rows is not None and not self._touched(feed):
            if self._checked and rows.uidvalidity != self._uidvalidity:
                raise MailboxNotFound(imap_name(self.name))
            self._rows = rows
            rows.cursor = max(rows.cursor, feed.last_change_number)
            selected.mod_sequence = replace(shown, cursor=feed.last_change_number)
            return True, feed
        rows = await self.refresh()
        if rows.epoch == feed.epoch and rows.database == self._api.database:
            rows.cursor, rows.cursor_epoch = feed.last_change_number, feed.epoch
        return False, feed

    def _touched(self, feed: Changes) -> bool:
        """Whether the feed's answer may have changed this folder or renamed a parent."""
        if not feed.changed:
            return False
        if feed.folders is None:
            return True
        return any(f == self.name or self.name.startswith(f + DELIMITER) for f in feed.folders)

    async def update_selected(
        self, selected: SelectedMailbox, *, wait_on: Any = None, polled: Changes | None = None
    ) -> SelectedMailbox:
        """pymap's update of the selected state; `polled`: the feed's answer this command
        took before reading the rows (`quiet`), used instead of another poll."""
        shown: Shown | None = selected.mod_sequence
        if shown is None:  # SELECT: the feed's cursor first, then the folder's rows
            return await self._select(selected)
        if shown.database != self._api.database:  # a move followed since the last listing
            return await self._resync(selected, shown, await self._feed_now())
        if wait_on is None:  # any other command (NOOP included): has this folder changed?
            feed = polled
            if feed is None:
                feed = await self._api.changes(shown.cursor, wait=0, epoch=shown.epoch)
                self._polled(feed, shown)
            if await self._follow(feed):
                return await self._resync(selected, shown, await self._feed_now())
        else:
            self._listings.drop()  # an idling session holds no listing
            woke, feed = await self._idle(selected, shown, wait_on)
            if not woke:  # DONE before the folder changed
                return selected
            shown = selected.mod_sequence
            if shown.database != self._api.database:
                return await self._resync(selected, shown, await self._feed_now())
            if feed is not None and self._names(feed, shown):
                woken = await self._woken(selected, shown, feed)
                if woken is not None:
                    return woken
        if feed is not None and not self._names(feed, shown):
            selected.mod_sequence = replace(shown, cursor=feed.last_change_number,
                                            epoch=feed.epoch)  # fmt: skip
            return selected
        return await self._resync(selected, shown, feed)

    async def _woken(
        self, selected: SelectedMailbox, shown: Shown, feed: Changes
    ) -> SelectedMailbox | None:
        """An IDLE woken by a change of this folder: its updates taken from the front's rows,
        read since once for all the sessions the same answer woke (`Listings.current`),
        when their last since-listing starts at the modseq this session was shown.  None
        (list as any other command does, `_resync`) otherwise: another epoch, a mailbox not
        live, rows of another UIDVALIDITY or database, a session shown other rows."""
        if not self._listings.shared or feed.state != MailboxState.LIVE:
            return None
        if not feed.epoch or feed.epoch != shown.epoch:
            return None
        database = self._api.database
        rows = await self._listings.current(self.name, feed.last_change_number, feed.epoch)
        delta = rows.delta
        if (
            delta is None or delta[0] != shown.modseq or rows.uidvalidity != shown.uidvalidity
            or rows.database != database or self._api.database != database
            or rows.epoch != feed.epoch
        ):  # fmt: skip
            return None
        _, messages, expunged = delta
        shown_uids = _compact(selected)
        selected.add_updates([self._message(m) for m in messages],
                             [u for u in expunged if u in shown_uids])  # fmt: skip
        if self._metrics is not None:
            self._metrics.resyncs.labels("shared").inc()
        selected.mod_sequence = Shown(rows.highest_modseq, feed.last_change_number, feed.epoch,
                                      database, rows.uidvalidity)  # fmt: skip
        return selected

    async def _follow(self, feed: Changes | None) -> bool:
        """Whether the mailbox now lives in another database (the session's calls go there
        from now on): asked of the directory when the feed says the mailbox is locked by a
        move, soft-deleted or gone here."""
        if feed is not None and feed.state == MailboxState.LIVE:
            return False
        return await self._api.relocate()

    async def _feed_now(self) -> Changes | None:
        """The feed's cursor where the mailbox is (followed there first if it moved)."""
        feed = await self._api.changes(0, wait=0, epoch=None)
        if await self._follow(feed):
            feed = await self._api.changes(0, wait=0, epoch=None)
        return feed

    def _names(self, feed: Changes, shown: Shown) -> bool:
        """Whether the feed's answer may have changed this folder (the active moved, or it
        cannot say which folders, or it names this one or a parent: a parent renamed or
        deleted takes this name away, and the feed names only the folder the operation
        named, `P` for `P` renamed to `Q`, not `P/child`)."""
        return feed.epoch != shown.epoch or self._touched(feed)

    def _polled(self, feed: Changes | None, shown: Shown) -> None:
        if self._metrics is None:
            return
        outcome = ("gone" if feed is None else "epoch" if feed.epoch != shown.epoch
                   else "changed" if feed.changed else "quiet")  # fmt: skip
        self._metrics.feed_polls.labels(outcome).inc()

    async def _idle(
        self, selected: SelectedMailbox, shown: Shown, done: Any
    ) -> tuple[bool, Changes | None]:
        """IDLE: one long poll of the feed at a time, until it names this folder (True and
        its answer) or the client says DONE (False).  A failed poll (the active moving, nobody
        mounted yet, an outage) is tried again after `FEED_RETRY`: the node client finds the
        active again, and a new epoch resyncs the folder."""
        idle = None if self._metrics is None else self._metrics.sessions.labels("idle")
        if idle is not None:
            idle.inc()
        try:
            return await self._poll_until(selected, shown, done)
        finally:
            if idle is not None:
                idle.dec()

    async def _poll_until(
        self, selected: SelectedMailbox, shown: Shown, done: Any
    ) -> tuple[bool, Changes | None]:
        while True:
            poll = asyncio.ensure_future(
                self._api.changes(shown.cursor, wait=FEED_WAIT, epoch=shown.epoch)
            )
            told = asyncio.ensure_future(done.wait())
            try:
                await asyncio.wait((poll, told), return_when=asyncio.FIRST_COMPLETED)
            finally:
                told.cancel()
                if not poll.done():
                    poll.cancel()
            if not poll.done() or poll.cancelled():
                return False, None
            failure = poll.exception()
            if failure is not None:
                if not isinstance(failure, Unavailable):
                    raise failure
                if self._metrics is not None:
                    self._metrics.feed_polls.labels("failed").inc()
                logger.info("idle on %s/%s: %s; polling again", self._api.mailbox, self.name,
                            failure)  # fmt: skip
                if await self._pause(done, FEED_RETRY):
                    return False, None
                continue
            feed = poll.result()
            self._polled(feed, shown)
            if await self._follow(feed):  # the move ended: list the folder where it is now
                if self._metrics is not None:
                    self._metrics.idle_wakeups.inc()
                return True, feed
            if feed is None or self._names(feed, shown):
                if self._metrics is not None:
                    self._metrics.idle_wakeups.inc()
                return True, feed
            shown = replace(shown, cursor=feed.last_change_number, epoch=feed.epoch)
            selected.mod_sequence = shown
            if feed.state != MailboxState.LIVE and await self._pause(done, FEED_RETRY):
                return False, None  # locked or going: the feed answers at once; poll at a pace

    async def _pause(self, done: Any, seconds: float) -> bool:
        """Wait `seconds` (the injected clock's) or until DONE; whether DONE came."""
        nap = asyncio.ensure_future(self._clock.sleep(seconds))
        told = asyncio.ensure_future(done.wait())
        await asyncio.wait((nap, told), return_when=asyncio.FIRST_COMPLETED)
        nap.cancel()
        told.cancel()
        return bool(done.is_set())

    async def _resync(
        self, selected: SelectedMailbox, shown: Shown | None, feed: Changes | None
    ) -> SelectedMailbox:
        """The folder listed, compared with what the client was shown: EXISTS or FETCH for
        each message new or changed, EXPUNGE for each UID no longer there.  Listed since the
        modseq shown (`_since`) when that can be trusted, else whole."""
        database = self._api.database
        since = _since(shown, feed, database)
        listing = await self._api.uids(self.name, since) if since else None
        if listing is not None and (
            listing.uidvalidity != shown.uidvalidity or listing.highest_modseq < since
            or listing.epoch not in (0, shown.epoch)
        ):  # fmt: skip
            listing = None  # another folder, its counters back, or the active another: whole
        if listing is None:
            since = 0
            listing = await self._api.uids(self.name)  # not kept: an idler holds none of it
        if self._metrics is not None:
            self._metrics.resyncs.labels("since" if since else "whole").inc()
        if shown is not None and shown.uidvalidity and listing.uidvalidity != shown.uidvalidity:
            if self._metrics is not None:
                self._metrics.follows.labels("bye").inc()
            raise Bye(
                f"mailbox moved to {self._api.database}, where folder {self.name!r} has "
                f"UIDVALIDITY {listing.uidvalidity}, not {shown.uidvalidity}: reconnect"
            )
        shown_uids = _compact(selected)
        if shown is None:
            selected.add_updates([self._message(m) for m in listing.messages], [])
        elif since:  # what changed since the modseq shown, and what left
            gone = [u for u in listing.expunged if u in shown_uids]
            selected.add_updates([self._message(m) for m in listing.messages], gone)
        else:
            changed = [self._message(m) for m in listing.messages
                       if m.modseq > shown.modseq or m.uid not in shown_uids]  # fmt: skip
            listed = {m.uid for m in listing.messages}
            selected.add_updates(changed, [u for u in shown_uids.uids if u not in listed])
        cursor = feed.last_change_number if feed is not None else 0
        epoch = feed.epoch if feed is not None else 0
        if self._api.database != database or listing.epoch not in (0, epoch):
            cursor, epoch = 0, 0  # followed meanwhile: the feed's cursor is not the listing's
        selected.mod_sequence = Shown(listing.highest_modseq, cursor, epoch, self._api.database,
                                      listing.uidvalidity)  # fmt: skip
        return selected

    async def _select(self, selected: SelectedMailbox) -> SelectedMailbox:
        """SELECT's state from the front's rows: the feed polled since the cursor they are
        known current at, and read again (since) only if it names the folder or a parent."""
        database = self._api.database
        rows = self._listings.kept(self.name)
        since = rows.cursor if rows is not None and rows.database == database else 0
        feed = await self._api.changes(since, wait=0, epoch=None)
        if await self._follow(feed):
            since, feed = 0, await self._api.changes(0, wait=0, epoch=None)
            database = self._api.database
        if (
            since and rows is not None and feed is not None
            and feed.state == MailboxState.LIVE and feed.epoch == rows.cursor_epoch
            and rows.uidvalidity == self._uidvalidity and not self._touched(feed)
        ):  # fmt: skip
            self._rows = rows
            return self._selected_from(selected, rows, feed, database)
        return self._selected_from(selected, await self.refresh(), feed, database)

    async def select_kept(self, selected: SelectedMailbox) -> SelectedMailbox | None:
        """SELECT from the front's rows with no lookup of the folder (`Folders.kept`): one
        poll of the feed since the cursor they are known current at; None if it names the
        folder or a parent, or the mailbox is not live here, or the active is another
        (`select_mailbox` then looks the folder up and selects it as `_select` does)."""
        rows = self._listings.kept(self.name)
        database = self._api.database
        if rows is None or not rows.cursor or rows.database != database:
            return None
        feed = await self._api.changes(rows.cursor, wait=0, epoch=None)
        if (
            feed is None or feed.state != MailboxState.LIVE or feed.epoch != rows.cursor_epoch
            or rows.uidvalidity != self._uidvalidity or self._api.database != database
            or self._touched(feed)
        ):  # fmt: skip
            return None
        self._rows = rows
        return self._selected_from(selected, rows, feed, database)

    def _selected_from(
        self, selected: SelectedMailbox, rows: Rows, feed: Changes | None, database: str
    ) -> SelectedMailbox:
        """SELECT's state: every row of the folder shown, the feed's cursor taken before."""
        if self._metrics is not None:
            self._metrics.resyncs.labels("whole").inc()
        ordered = rows.ordered()  # shared by the sessions selecting the folder: no copy
        _compact(selected).show(ordered.uids, ordered.flags)
        cursor = feed.last_change_number if feed is not None else 0
        epoch = feed.epoch if feed is not None else 0
        if self._api.database != database or rows.database != database:
            cursor, epoch = 0, 0  # followed meanwhile: the next command lists it again
        elif feed is not None and feed.state == MailboxState.LIVE and rows.epoch == epoch:
            if rows.cursor_epoch != epoch:  # read after the poll: current as of its cursor
                rows.cursor = 0
            rows.cursor, rows.cursor_epoch = max(rows.cursor, cursor), epoch
        selected.mod_sequence = Shown(rows.highest_modseq, cursor, epoch, rows.database,
                                      rows.uidvalidity)  # fmt: skip
        return selected

    async def append(self, append_msg: AppendMessage, *, recent: bool = False) -> Message:
        raw = bytes(append_msg.literal)
        flags = flag_names(append_msg.flag_set)
        item_id, uid = await self._api.append(self.name, raw, flags, append_msg.when)
        if uid is None:  # a node that does not answer the UID: read it back
            rows = (await self.refresh()).by_uid.values()
            row = next((r for r in rows if r.item_id == item_id), None)
            uid = 0 if row is None else row.uid  # 0: moved or expunged already
        when = append_msg.when or datetime.now(UTC)
        return Message(uid, when, _flags(flags), item_id=item_id, size=len(raw), api=self._api,
                       expunged=not uid)  # fmt: skip

    async def copy(self, uid: int, destination: Folder, *, recent: bool = False) -> int | None:
        _, pairs = await self._api.transfer(self.name, [uid], destination.name, copy=True)
        return pairs[0][1] if pairs else None

    async def move(self, uid: int, destination: Folder, *, recent: bool = False) -> int | None:
        _, pairs = await self._api.transfer(self.name, [uid], destination.name, copy=False)
        return pairs[0][1] if pairs else None

    async def get(self, uid: int, cached_msg: Any) -> Message:
        row = (await self._listed()).by_uid.get(uid)
        if row is None:
            return Message(uid, cached_msg.internal_date, cached_msg.permanent_flags,
                           item_id=getattr(cached_msg, "item_id", ""), size=0, api=self._api,
                           expunged=True)  # fmt: skip
        return self._message(row)

    async def update(
        self, uid: int, cached_msg: Any, flag_set: frozenset[Flag], mode: FlagOp
    ) -> Message:
        stored = await self.store([uid], flag_set, mode)  # a FETCH BODY[] setting \Seen
        msg = await self.get(uid, cached_msg)
        if uid in stored.flags:
            msg.permanent_flags = _flags(stored.flags[uid])
            msg.modseq = stored.modseq
        return msg

    async def store(
        self, uids: Sequence[int], flag_set: frozenset[Flag], mode: FlagOp,
        unchanged_since: int | None = None,
    ) -> Stored:  # fmt: skip
        """The flags of `uids` changed in one write a thousand at a time: each UID's after.
        `unchanged_since` (the node's modseq, -1 for a client's 0): only those not changed
        past it (RFC 7162), the others answered `modified`."""
        names = flag_names(flag_set)
        rows = (await self._listed()).by_uid
        live = [u for u in uids if u in rows]
        if unchanged_since is not None and unchanged_since < 0:
            return Stored({}, 0, tuple(live))  # every message has a modseq past it
        if not live or (mode is not FlagOp.REPLACE and not names):
            return Stored({})
        if mode is FlagOp.REPLACE:
            change: dict[str, Any] = {"replace": names}
        elif mode is FlagOp.ADD:
            change = {"add": names}
        else:
            change = {"remove": names}
        return await self._api.set_flags(self.name, live, unchanged_since=unchanged_since, **change)

    async def delete(self, uids: Iterable[int]) -> None:
        wanted = sorted(set(uids))
        if wanted:
            await self._api.expunge(self.name, wanted)

    async def claim_recent(self, selected: SelectedMailbox) -> None:
        pass  # \Recent is gone from IMAP4rev2; none is kept

    async def cleanup(self) -> None:
        pass

    async def snapshot(self) -> MailboxSnapshot:
        listing = await self._listed()
        numbers = listing.ordered().flags  # counted by flag set, not message by message
        unseen = [n for n in set(numbers) if Seen not in FLAG_SETS[n]]
        first = min((numbers.index(n) for n in unseen), default=None)
        return MailboxSnapshot(
            self.mailbox_id, False, listing.uidvalidity, self.permanent_flags,
            self.session_flags, len(numbers), 0, sum(numbers.count(n) for n in unseen),
            None if first is None else first + 1, listing.uid_next,
        )  # fmt: skip

    async def messages(self) -> AsyncIterable[Message]:
        for row in (await self._listed()).sorted():
            yield self._message(row)
