"""A session's listings of the folders its commands read, kept current by `since_modseq`.

A command that needs a folder's messages (a FETCH, a STORE, SELECT's counts) reads the
folder's rows (UID, item id, flags, size, INTERNALDATE).  Listing the folder whole for each
command made a client that fetches one message a command (mbsync: `UID FETCH n
(BODY.PEEK[])` for each) quadratic in the folder: 10,000 rows listed and decoded for each
message (bench/README.md, *imap*).  Here the session keeps the last listing of each folder
and asks the node only for what changed since its highest modseq (the node answers the rows
changed and the UIDs expunged or moved out since), and lists whole when it cannot trust
that: no listing yet, another database (a move followed), another epoch of the active (a
switchover or a failover: a lossy one may have lost changes below what was listed), another
UIDVALIDITY, or counters that went back.

An idling session holds none of it: `drop` (IDLE) forgets every listing, so the memory of
an idle session stays the selected state's (`selected.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from imap_front.node_api import FolderUids, Listed, MailboxApi


@dataclass(slots=True)
class Rows:
    """One folder's rows as last listed, with the counters they were listed at."""

    database: str
    epoch: int
    uidvalidity: int
    uid_next: int
    highest_modseq: int
    by_uid: dict[int, Listed]

    @classmethod
    def of(cls, database: str, listing: FolderUids) -> Rows:
        return cls(database, listing.epoch, listing.uidvalidity, listing.uid_next,
                   listing.highest_modseq, {m.uid: m for m in listing.messages})  # fmt: skip

    def sorted(self) -> list[Listed]:
        return [self.by_uid[u] for u in sorted(self.by_uid)]


def _applies(rows: Rows, since: FolderUids, database: str) -> bool:
    """Whether a listing since `rows.highest_modseq` may be laid over `rows`."""
    return (
        rows.database == database
        and since.epoch == rows.epoch
        and since.uidvalidity == rows.uidvalidity
        and since.highest_modseq >= rows.highest_modseq
        and since.uid_next >= rows.uid_next
    )


class Listings:
    """The folders' rows a session read last, by the node's folder name."""

    def __init__(self, api: MailboxApi) -> None:
        self._api = api
        self._rows: dict[str, Rows] = {}

    async def rows(self, folder: str) -> Rows:
        """`folder`'s rows as the node has them now."""
        database = self._api.database
        kept = self._rows.get(folder)
        if kept is not None and kept.database == database and kept.highest_modseq:
            since = await self._api.uids(folder, kept.highest_modseq)
            if _applies(kept, since, self._api.database):
                for row in since.messages:
                    kept.by_uid[row.uid] = row
                for uid in since.expunged:
                    kept.by_uid.pop(uid, None)
                kept.uid_next = since.uid_next
                kept.highest_modseq = since.highest_modseq
                return kept
        database = self._api.database
        rows = self._rows[folder] = Rows.of(database, await self._api.uids(folder))
        return rows

    def drop(self) -> None:
        """Every listing forgotten (a session going idle)."""
        self._rows.clear()
