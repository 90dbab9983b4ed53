"""The listings of the folders a front's sessions read, kept current by `since_modseq`.

A command that needs a folder's messages (a FETCH, a STORE, SELECT's counts) reads the
folder's rows (UID, item id, flags, size, INTERNALDATE).  Listing the folder whole for each
command made a client that fetches one message a command (mbsync: `UID FETCH n
(BODY.PEEK[])` for each) quadratic in the folder: 10,000 rows listed and decoded for each
message (bench/README.md, *imap*).  Here the front keeps the last listing of each folder,
shared by its sessions (`RowsCache`: a SELECT in a new session reads only what changed
since another read it, the least recently used let go past `MAX_ROWS` rows), and asks the
node only for what changed since its highest modseq (the node answers the rows changed and
the UIDs expunged or moved out since), and lists whole when it cannot trust that: no
listing yet, another database (a move followed), another epoch of the active (a switchover
or a failover: a lossy one may have lost changes below what was listed), another
UIDVALIDITY, or counters that went back.

A session holds none of it between commands, so the memory of an idle session stays the
selected state's (`selected.py`); the front's rows are counted once, not per session.  The
rows also carry the change feed's cursor they are known current at (`Rows.cursor`, set by a
command that polled the feed before reading them): a FETCH that writes nothing and finds
the feed quiet for its folder since then reads no listing at all (`folders.Folder.quiet`).
"""

from __future__ import annotations

import asyncio
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field

from dag_common.store_api import FolderUids, Listed
from imap_front.node_api import MailboxApi
from imap_front.selected import FLAG_SETS, flag_set


@dataclass(frozen=True, slots=True)
class Ordered:
    """A folder's rows in UID order, as the selected state holds them: the UIDs
    (`array('I')`), each one's flag-set number (`selected.FLAG_SETS`, `array('H')`) and the
    rows themselves.  Made once per change of the rows and shared by every session that
    selects the folder: the arrays are never changed in place (`selected.CompactMessages`
    replaces them), so a SELECT of a quiet folder takes them as they are."""

    uids: array[int]
    flags: array[int]
    rows: list[Listed]

    def __len__(self) -> int:
        return len(self.rows)

    def pairs(self) -> list[tuple[int, Listed]]:
        """(sequence number, row) of every row, as a FETCH of them all chooses them."""
        return list(zip(range(1, len(self.rows) + 1), self.rows, strict=True))

    @classmethod
    def of(cls, by_uid: dict[int, Listed]) -> Ordered:
        rows = [by_uid[u] for u in sorted(by_uid)]
        numbers: dict[tuple[str, ...], int] = {}
        for names in {r.flags for r in rows}:
            numbers[names] = FLAG_SETS.number(flag_set(names))
        return cls(array("I", [r.uid for r in rows]),
                   array("H", [numbers[r.flags] for r in rows]), rows)  # fmt: skip


@dataclass(slots=True)
class Rows:
    """One folder's rows as last listed, with the counters they were listed at."""

    database: str
    epoch: int
    uidvalidity: int
    uid_next: int
    highest_modseq: int
    by_uid: dict[int, Listed]
    counted: int = 0  # rows counted against the cache's bound (`RowsCache`)
    # The change feed's cursor (and its epoch) the rows are known to hold every change up
    # to: set by a command that polled the feed before reading them (`Folder.quiet`).
    cursor: int = 0
    cursor_epoch: int = 0
    # The last since-listing laid over the rows: (the modseq it was listed since, its rows,
    # its expunged UIDs).  A session shown the rows as of that modseq takes its updates
    # from it (an IDLE woken, `Listings.current`), not from a listing of its own.
    delta: tuple[int, tuple[Listed, ...], tuple[int, ...]] | None = None
    _ordered: Ordered | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, database: str, listing: FolderUids) -> Rows:
        return cls(database, listing.epoch, listing.uidvalidity, listing.uid_next,
                   listing.highest_modseq, {m.uid: m for m in listing.messages})  # fmt: skip

    def sorted(self) -> list[Listed]:
        return self.ordered().rows

    def ordered(self) -> Ordered:
        """The rows in UID order (`Ordered`), made again only after they changed."""
        found = self._ordered
        if found is None:
            found = self._ordered = Ordered.of(self.by_uid)
        return found

    def changed(self) -> None:
        """`by_uid` was changed: the order made of it is not current."""
        self._ordered = None


def _applies(rows: Rows, since: FolderUids, database: str) -> bool:
    """Whether a listing since `rows.highest_modseq` may be laid over `rows`."""
    return (
        rows.database == database
        and since.epoch == rows.epoch
        and since.uidvalidity == rows.uidvalidity
        and since.highest_modseq >= rows.highest_modseq
        and since.uid_next >= rows.uid_next
    )


MAX_ROWS = 200_000  # rows one front keeps listed, over all its folders (about 60 MB)

Key = tuple[str, str, str]  # database, mailbox, the node's folder name


class RowsCache:
    """The folders' rows a front keeps, shared by its sessions: each folder listed whole once,
    then read `since_modseq` by whichever session needs it next, the least recently used let
    go past `max_rows` rows.  A folder's refreshes are one at a time (`lock`): two sessions
    laying their since-listings over the same rows out of order would undo the later one."""

    def __init__(self, max_rows: int = MAX_ROWS) -> None:
        self._max_rows = max_rows
        self._rows: OrderedDict[Key, Rows] = OrderedDict()
        self._locks: dict[Key, asyncio.Lock] = {}
        self._count = 0

    def lock(self, key: Key) -> asyncio.Lock:
        found = self._locks.get(key)
        if found is None:
            found = self._locks[key] = asyncio.Lock()
        return found

    def get(self, key: Key) -> Rows | None:
        found = self._rows.get(key)
        if found is not None:
            self._rows.move_to_end(key)
        return found

    def put(self, key: Key, rows: Rows | None) -> None:
        """`rows` kept for `key` (None: forgotten), counted as `rows.by_uid` is now."""
        old = self._rows.pop(key, None)
        if old is not None:
            self._count -= old.counted
        if rows is None:
            return
        rows.counted = len(rows.by_uid)
        self._rows[key] = rows
        self._count += rows.counted
        while self._count > self._max_rows and len(self._rows) > 1:
            gone, dropped = self._rows.popitem(last=False)
            self._count -= dropped.counted
            lock = self._locks.get(gone)
            if lock is not None and not lock.locked():
                del self._locks[gone]

    def clear(self) -> None:
        self._rows.clear()
        self._count = 0


class Listings:
    """The folders' rows a session reads: the front's (`RowsCache`, shared by its sessions)
    or, without one, the session's own (which IDLE forgets)."""

    def __init__(self, api: MailboxApi, cache: RowsCache | None = None) -> None:
        self._api = api
        self._own = cache is None
        self._cache = RowsCache() if cache is None else cache

    @property
    def shared(self) -> bool:
        """Whether the rows are the front's (shared by its sessions), not the session's."""
        return not self._own

    def kept(self, folder: str) -> Rows | None:
        """`folder`'s rows as last read (no store call), if kept."""
        return self._cache.get((self._api.database, self._api.mailbox, folder))

    async def rows(self, folder: str) -> Rows:
        """`folder`'s rows as the node has them now."""
        key = (self._api.database, self._api.mailbox, folder)
        async with self._cache.lock(key):
            return await self._rows(key, folder)

    async def _rows(self, key: Key, folder: str) -> Rows:
        database = self._api.database
        kept = self._cache.get(key)
        if kept is not None and kept.database == database and kept.highest_modseq:
            since = await self._api.uids(folder, kept.highest_modseq)
            if _applies(kept, since, self._api.database):
                if since.highest_modseq > kept.highest_modseq:  # else the last one holds
                    kept.delta = (kept.highest_modseq, tuple(since.messages),
                                  tuple(since.expunged))  # fmt: skip
                for row in since.messages:
                    kept.by_uid[row.uid] = row
                for uid in since.expunged:
                    kept.by_uid.pop(uid, None)
                if since.messages or since.expunged:
                    kept.changed()
                kept.uid_next = since.uid_next
                kept.highest_modseq = since.highest_modseq
                if len(kept.by_uid) != kept.counted:
                    self._cache.put(key, kept)
                return kept
        database = self._api.database
        rows = Rows.of(database, await self._api.uids(folder))
        self._cache.put((database, self._api.mailbox, folder), rows)
        return rows

    async def current(self, folder: str, cursor: int, epoch: int) -> Rows:
        """`folder`'s rows holding every change up to the change feed's `cursor` (of the
        active's `epoch`), the feed having answered that cursor before this call: read since
        by the first of the sessions woken by that answer, and found current by the others,
        which wait on its read rather than each listing the folder."""
        key = (self._api.database, self._api.mailbox, folder)
        async with self._cache.lock(key):
            kept = self._cache.get(key)
            if (
                kept is not None and kept.database == self._api.database
                and kept.epoch == epoch and kept.cursor_epoch == epoch and kept.cursor >= cursor
            ):  # fmt: skip
                return kept
            rows = await self._rows(key, folder)
            if rows.epoch == epoch and rows.database == self._api.database:
                known = rows.cursor if rows.cursor_epoch == epoch else 0
                rows.cursor, rows.cursor_epoch = max(known, cursor), epoch
            return rows

    def drop(self) -> None:
        """The session's own listings forgotten (a session going idle); the front's kept."""
        if self._own:
            self._cache.clear()
