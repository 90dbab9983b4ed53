"""One user's mailbox as the node's store API serves it, for the IMAP session: its folders
and their counters, a folder's UIDs, a message's bytes, and the writes IMAP makes (append,
flags, copy, move, expunge, folders created, renamed and removed).

Every call goes through the one node client (`dag_common.node_client.NodeStoreClient`),
which finds the database's active and follows it.  A node's answer becomes an IMAP answer
here and nowhere else: 404 a folder not found, 409 a name taken or a folder with children,
400 a name or flag the node does not take, anything else (an outage, a lock, a 5xx)
NO [UNAVAILABLE] — never a session ended by a traceback.

**Following a move** (docs/concepts/imap.md, step 6): `MailboxApi.database` is where the
session's calls go, and `relocate` reads the directory again (the login's lookup) and
re-points it.  A write refused because a move holds the mailbox's lock waits (the directory
read again every `LOCK_PAUSE`, on the injected clock) until the directory names another
database and the write is taken there, at most `imap.move_lock_wait` (60 s by default),
then NO [UNAVAILABLE]: the refusal wrote nothing, so the retry is safe.  A call answered
"no mailbox" (the source removed) is made again where the directory points.  While the
mailbox is `suspect` (a lock refusal, or a change feed answer that was not `live`), each
call first reads the directory.

**An APPEND in flight when the active dies** (docs/concepts/imap.md, step 7): the front
names the message's item id itself (a UUIDv7, as the node's), so sending the put again is
safe: the node keeps one item per id, and an item put again as it is keeps its UID.  A put
that got no answer (the node unreachable, no active mounted yet, a 5xx: it may or may not
have been committed) is sent again under the same id every `LOCK_PAUSE` until an active
answers, at most `imap.failover_wait` (60 s by default), then NO [UNAVAILABLE]: the
client is told OK with the UID only once the message is on the active that answered.  The
put's answer carries the UID (`Written.uid`): nothing is read back after the write.  A read
(GET: the folder's status, its listing) that got no answer is sent again the same way, so
the commands around the write (the folder looked up before it, the selected folder's update
after it) wait for the new active too rather than answer NO for a message written.  A put
answered by an active that has given way since (its answer late, after a switchover or a
lossy failover: the feed now names another epoch) is sent again the same way, so the
APPENDUID told is a message the serving active holds (`_still_active`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from pymap.exceptions import MailboxConflict, MailboxHasChildren, MailboxNotFound

from dag_common.clock import Clock, SystemClock
from dag_common.errors import ClusterStoreError, NodeCallError
from dag_common.node_client import NodeStoreClient
from dag_common.rfc822 import body_of_message, is_message
from dag_common.store_api import Changes, FolderStatus, FolderUids, Mailbox, MailboxState, Written
from imap_front.errors import Cannot, Unavailable
from imap_front.feed_polls import FeedPolls

logger = logging.getLogger(__name__)

NODE_INBOX = "Inbox"  # the node's name of IMAP's INBOX
BATCH = 1000  # items one write names, at most (the node's MAX_NAMED)
MOVE_LOCK_WAIT = 60.0  # imap.move_lock_wait's default: a write refused by a move's lock waits
LOCK_PAUSE = 0.25  # seconds between two reads of the directory while a write waits
FAILOVER_WAIT = 60.0  # imap.failover_wait's default: an APPEND or read with no answer: again
APPEND_ROUNDS = 3  # puts of one APPEND, each answered by an active that then gave way

Locate = Callable[[str], Awaitable[str | None]]  # mailbox -> its database (the directory)


@dataclass(frozen=True, slots=True)
class Stored:
    """POST …/items/flags's answer: each UID's flags after, the modseq the change took
    (0: nothing written), the UIDs left as they were (a conditional STORE's MODIFIED), and
    the epoch of the active that took it (0: nothing written)."""

    flags: dict[int, tuple[str, ...]]
    modseq: int = 0
    modified: tuple[int, ...] = ()
    epoch: int = 0


def _path(folder: str) -> str:
    return quote(folder, safe="/")


class MailboxApi:
    """The store calls of one mailbox in one database."""

    def __init__(
        self, nodes: NodeStoreClient, database: str, mailbox: str, *,
        locate: Locate | None = None, clock: Clock | None = None,
        lock_wait: float = MOVE_LOCK_WAIT, on_follow: Callable[[], None] | None = None,
        failover_wait: float = FAILOVER_WAIT, feeds: FeedPolls | None = None,
    ) -> None:  # fmt: skip
        """`feeds`: the front's shared long polls (IDLE's), on their own connections."""
        self._nodes = nodes
        self._feeds = feeds
        self.database = database
        self.mailbox = mailbox
        self._base = f"/mailboxes/{mailbox}"
        self._locate = locate
        self._clock = clock or SystemClock()
        self._lock_wait = lock_wait
        self._failover_wait = failover_wait
        self._on_follow = on_follow
        self.suspect = False  # a move may be ending: read the directory before each call
        self.follows = 0  # databases followed to

    async def relocate(self) -> bool:
        """Read the directory again; whether it names another database now (then the
        session's calls go there).  Unavailable if it cannot be read or names none."""
        if self._locate is None:
            return False
        try:
            database = await self._locate(self.mailbox)
        except ClusterStoreError as exc:
            raise Unavailable(f"the mailbox directory cannot be read now: {exc}") from exc
        if database is None:
            raise Unavailable(f"mailbox {self.mailbox!r} is no longer in the directory")
        if database == self.database:
            return False
        logger.info("mailbox %s moved: following it from %s to %s", self.mailbox,
                    self.database, database)  # fmt: skip
        self.database = database
        self.follows += 1
        if self._on_follow is not None:
            self._on_follow()
        return True

    def settled(self, live: bool) -> None:
        """A change feed answer from the current database: `live` or not (locked, going)."""
        self.suspect = not live

    async def _call(
        self, method: str, path: str, *, folder: str | None = None, again: bool = False,
        **kw: Any,
    ) -> tuple[int, Any]:  # fmt: skip
        """`again`: the call may be sent again when it got no answer (an APPEND under its
        own item id), until an active answers, for at most `failover_wait`; a read (GET) may
        always be."""
        again = again or method == "GET"
        if self.suspect:
            await self.relocate()
        waiting_since: float | None = None
        unanswered_since: float | None = None
        while True:
            try:
                return await self._nodes.call(method, self.database, self._base + path, **kw)
            except NodeCallError as exc:
                if _mailbox_gone(exc) and await self.relocate():
                    continue  # the move ended: the same call where the mailbox is now
                if again and _unanswered(exc):
                    now = self._clock.monotonic()
                    if unanswered_since is None:
                        unanswered_since = now
                        logger.info("%s %s of mailbox %s in %s got no answer (%s); sending it "
                                    "again until an active answers", method, path or "/",
                                    self.mailbox, self.database, exc)  # fmt: skip
                    if now - unanswered_since < self._failover_wait:
                        await self._clock.sleep(LOCK_PAUSE)
                        continue
                if not _locked(exc) or self._locate is None:
                    raise _answer(exc, folder) from exc
                self.suspect = True
                now = self._clock.monotonic()
                if waiting_since is None:
                    waiting_since = now
                    logger.info("%s %s of mailbox %s in %s: locked by a move; waiting for "
                                "the move to end", method, path or "/", self.mailbox,
                                self.database)  # fmt: skip
                if now - waiting_since >= self._lock_wait:
                    raise Unavailable(
                        f"mailbox {self.mailbox!r} has been locked by a move for "
                        f"{self._lock_wait:g}s: try again"
                    ) from exc
                if not await self.relocate():
                    await self._clock.sleep(LOCK_PAUSE)

    async def state(self) -> Mailbox:
        """The mailbox's folders and their counters (GET …/mailboxes/{mailbox})."""
        _, body = await self._call("GET", "")
        return Mailbox.model_validate(body)

    async def status(self, folder: str) -> FolderStatus:
        """One folder's counters and counts; MailboxNotFound if there is no such folder."""
        for row in (await self.state()).folder_status:
            if row.folder == folder:
                return row
        raise MailboxNotFound(folder)

    async def uids(self, folder: str, since_modseq: int = 0) -> FolderUids:
        """The folder's messages changed after `since_modseq` (all with 0), no bodies."""
        _, body = await self._call(
            "GET", f"/folders/{_path(folder)}/uids", folder=folder,
            params={"since_modseq": str(since_modseq)},
        )  # fmt: skip
        return FolderUids.model_validate(body)

    async def changes(self, since: int, *, wait: float, epoch: int | None) -> Changes | None:
        """The mailbox's change feed above `since` (None: the active has no such mailbox);
        the node client follows a switchover to the new active (its epoch then differs)."""
        try:
            if wait and self._feeds is not None:  # IDLE: shared, off the commands' pool
                feed = await self._feeds.changes(
                    self.database, self.mailbox, since, wait=wait, epoch=epoch
                )
            else:
                feed = await self._nodes.changes(
                    self.database, self.mailbox, since, wait=wait, epoch=epoch
                )
        except NodeCallError as exc:
            raise _answer(exc, None) from exc
        self.settled(feed is not None and feed.state == MailboxState.LIVE)
        return feed

    async def message(self, item_id: str) -> bytes | None:
        """A message's bytes as stored (None: no longer there)."""
        for _ in range(2):
            try:
                raw = await self._nodes.message(self.database, self.mailbox, item_id)
            except NodeCallError as exc:
                raise _answer(exc, None) from exc
            if raw is not None or not await self.relocate():
                return raw
        return None

    async def messages(
        self, item_ids: Sequence[str], max_bytes: int
    ) -> dict[str, memoryview | None]:
        """Many messages' bytes as stored, views of one answer (None: no longer there); the ids
        after the message that reached `max_bytes` are absent (`NodeStoreClient.messages`)."""
        for _ in range(2):
            try:
                got = await self._nodes.messages(
                    self.database, self.mailbox, item_ids, max_bytes=max_bytes
                )
            except NodeCallError as exc:
                raise _answer(exc, None) from exc
            if got is not None or not await self.relocate():
                break
        return got if got is not None else dict.fromkeys(item_ids)

    async def append(
        self, folder: str, raw: bytes, flags: Sequence[str], received: datetime | None
    ) -> tuple[str, int | None]:
        """Write a message to `folder` byte for byte; its item id and the UID the node gave
        it (None: a node that does not say).  Under an item id of the front's own, so a write
        that got no answer is sent again (`again`) and lands once.  As its bytes (PUT
        …/items/{id}/message: the node decodes, counts and stages them once, with no JSON to
        escape or parse), unless they cannot be an RFC 5322 message, which that route
        refuses and a JSON item is still taken as (an APPEND of bytes without headers)."""
        item_id = new_item_id(self._clock.now())
        if is_message(raw):
            params = {"folder": folder}
            if flags:
                params["flags"] = " ".join(flags)
            if received is not None:
                params["received"] = received.isoformat()
            path, kw = f"/items/{item_id}/message", {"message": raw, "params": params}
            method = "PUT"
        else:
            body, fmt = body_of_message(raw)
            item: dict[str, Any] = {
                "item_id": item_id, "folder": folder, "body": body, "format": fmt.value,
            }  # fmt: skip
            if flags:
                item["flags"] = list(flags)
            if received is not None:
                item["received"] = received.isoformat()
            method, path, kw = "POST", "/items", {"json": item}
        for _ in range(APPEND_ROUNDS):
            _, answer = await self._call(method, path, folder=folder, again=True, **kw)
            written = Written.model_validate(answer)
            if await self._still_active(written):
                break
            logger.info("APPEND %s to %s/%s: taken by an active of epoch %d that has given "
                        "way; put again under its id", item_id, self.mailbox, folder,
                        written.epoch)  # fmt: skip
        return item_id, written.uid_of(item_id)

    async def _still_active(self, written: Written) -> bool:
        """Whether the active that took a write is the one serving now (its epoch the feed's),
        asked of the feed since the write.  An answer can come late, after a switchover or a
        failover (a lossy one drops it): the write acknowledged by an active that has given
        way is put again under its item id, which keeps the item's UID where the new active
        holds it and gives it a new one where it was lost, so the APPENDUID told is a message
        the mailbox has.  True when the feed cannot say (no epoch, no answer)."""
        if not written.epoch:
            return True
        try:
            feed = await self.changes(written.change_number, wait=0, epoch=written.epoch)
        except Unavailable:
            return True  # nobody to ask now: the answer is all there is
        return feed is None or not feed.epoch or feed.epoch == written.epoch

    async def create_folder(self, folder: str) -> None:
        await self._call("POST", "/folders", folder=folder, json={"folder": folder})

    async def rename_folder(self, folder: str, to: str) -> None:
        await self._call("POST", f"/folders/{_path(folder)}/rename", folder=to, json={"to": to})

    async def delete_folder(self, folder: str) -> None:
        await self._call("DELETE", f"/folders/{_path(folder)}", folder=folder)

    async def set_flags(
        self, folder: str, uids: Sequence[int], *, add: Sequence[str] = (),
        remove: Sequence[str] = (), replace: Sequence[str] | None = None,
        unchanged_since: int | None = None,
    ) -> Stored:  # fmt: skip
        """The flags changed of the folder's `uids`; each UID's flags after.  With
        `unchanged_since` (the node's modseq), only those not changed past it."""
        after: dict[int, tuple[str, ...]] = {}
        modseq = epoch = 0
        modified: list[int] = []
        for start in range(0, len(uids), BATCH):
            change: dict[str, Any] = {"folder": folder, "uids": list(uids[start : start + BATCH])}
            if replace is not None:
                change["replace"] = list(replace)
            else:
                change["add"], change["remove"] = list(add), list(remove)
            if unchanged_since is not None:
                change["unchanged_since"] = unchanged_since
            _, body = await self._call("POST", "/items/flags", folder=folder, json=change)
            after.update({i["uid"]: tuple(i["flags"]) for i in body["items"]})
            modseq = max(modseq, body.get("modseq") or 0)
            epoch = max(epoch, int(body.get("epoch") or 0))
            modified += [i["uid"] for i in body.get("modified", ())]
        return Stored(after, modseq, tuple(modified), epoch)

    async def transfer(
        self, folder: str, uids: Sequence[int], to: str, *, copy: bool
    ) -> tuple[int, list[tuple[int, int]]]:
        """Copy or move the folder's `uids` to `to`: (its UIDVALIDITY, [(old, new)])."""
        pairs: list[tuple[int, int]] = []
        validity = 0
        for start in range(0, len(uids), BATCH):
            _, body = await self._call(
                "POST", "/items/copy" if copy else "/items/move", folder=to,
                json={"folder": folder, "uids": list(uids[start : start + BATCH]), "to": to},
            )  # fmt: skip
            validity = body["uidvalidity"]
            pairs += [(a, b) for a, b in body["uids"]]
        return validity, pairs

    async def expunge(self, folder: str, uids: Sequence[int] | None) -> list[int]:
        """Remove the folder's messages flagged \\Deleted (those among `uids`, if given)."""
        gone: list[int] = []
        batches = (
            [None] if uids is None else [uids[s : s + BATCH] for s in range(0, len(uids), BATCH)]
        )
        for batch in batches:
            change: dict[str, Any] = {"folder": folder}
            if batch is not None:
                change["uids"] = list(batch)
            _, body = await self._call("POST", "/items/expunge", folder=folder, json=change)
            gone += body["expunged"]
        return gone


def new_item_id(now: datetime) -> str:
    """A UUIDv7 (RFC 9562) as 32 hex digits, as the node gives ids: the time in
    milliseconds, then random bits (never another front's or the node's)."""
    ms = int(now.timestamp() * 1000) & (2**48 - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms << 80) | (0x7 << 76) | ((rand >> 62) & 0xFFF) << 64 | 0b10 << 62
    return f"{value | (rand & (2**62 - 1)):032x}"


def _unanswered(exc: NodeCallError) -> bool:
    """No active took the call, or the call may have been cut off: nobody reachable or
    mounted (no status), or a dismounted or failing active (5xx)."""
    return exc.status is None or exc.status >= 500


def _locked(exc: NodeCallError) -> bool:
    """The node refused a write because a move holds the mailbox (nothing was written)."""
    return exc.status == 409 and "locked by a move" in (exc.detail or "")


def _mailbox_gone(exc: NodeCallError) -> bool:
    """The node has no live mailbox of that name (a move's source soft-deleted or removed),
    as against a folder or an item it has not."""
    return exc.status == 404 and (exc.detail or "").startswith("no mailbox")


def _answer(exc: NodeCallError, folder: str | None) -> Exception:
    """The IMAP answer to a node's refusal or failure."""
    detail = exc.detail or str(exc)
    if exc.status == 404 and folder is not None:
        return MailboxNotFound(folder)
    if exc.status == 409 and folder is not None and "locked" not in detail:
        if "has children" in detail:
            return MailboxHasChildren(folder)
        if "has a folder" in detail:  # a rename onto a name taken
            return MailboxConflict(folder)
        return Cannot(detail)
    if exc.status in (400, 413, 422):
        return Cannot(detail)
    return Unavailable(f"the mailbox cannot be reached now: {detail}")
