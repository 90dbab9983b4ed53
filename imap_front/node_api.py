"""One user's mailbox as the node's store API serves it, for the IMAP session: its folders
and their counters, a folder's UIDs, a message's bytes, and the writes IMAP makes (append,
flags, copy, move, expunge, folders created, renamed and removed).

Every call goes through the one node client (`dag_common.node_client.NodeStoreClient`),
which finds the database's active and follows it.  A node's answer becomes an IMAP answer
here and nowhere else: 404 a folder not found, 409 a name taken or a folder with children,
400 a name or flag the node does not take, anything else (an outage, a lock, a 5xx)
NO [UNAVAILABLE] — never a session ended by a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from pymap.exceptions import MailboxConflict, MailboxHasChildren, MailboxNotFound

from dag_common.errors import NodeCallError
from dag_common.node_client import NodeStoreClient
from dag_common.rfc822 import body_of_message
from dag_common.store_api import Changes, FolderStatus, Mailbox
from imap_front.errors import Cannot, Unavailable

NODE_INBOX = "Inbox"  # the node's name of IMAP's INBOX
BATCH = 1000  # items one write names, at most (the node's MAX_NAMED)


@dataclass(frozen=True, slots=True)
class Listed:
    """A message as a folder's UID listing gives it (no body)."""

    uid: int
    item_id: str
    flags: tuple[str, ...]
    modseq: int
    size: int
    received: datetime | None


@dataclass(frozen=True, slots=True)
class FolderUids:
    """GET …/folders/{folder}/uids: the folder's counters and its messages."""

    uidvalidity: int
    uid_next: int
    highest_modseq: int
    messages: tuple[Listed, ...]
    expunged: tuple[int, ...]


def _received(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def _path(folder: str) -> str:
    return quote(folder, safe="/")


class MailboxApi:
    """The store calls of one mailbox in one database."""

    def __init__(self, nodes: NodeStoreClient, database: str, mailbox: str) -> None:
        self._nodes = nodes
        self.database = database
        self.mailbox = mailbox
        self._base = f"/mailboxes/{mailbox}"

    async def _call(
        self, method: str, path: str, *, folder: str | None = None, **kw: Any
    ) -> tuple[int, Any]:
        try:
            return await self._nodes.call(method, self.database, self._base + path, **kw)
        except NodeCallError as exc:
            raise _answer(exc, folder) from exc

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
        return FolderUids(
            uidvalidity=body["uidvalidity"],
            uid_next=body["uid_next"],
            highest_modseq=body["highest_modseq"],
            messages=tuple(
                Listed(m[0], m[1], tuple(m[2]), m[3], m[4], _received(m[5]))
                for m in body["messages"]
            ),
            expunged=tuple(body["expunged"]),
        )

    async def changes(self, since: int, *, wait: float, epoch: int | None) -> Changes | None:
        """The mailbox's change feed above `since` (None: the active has no such mailbox);
        the node client follows a switchover to the new active (its epoch then differs)."""
        try:
            return await self._nodes.changes(
                self.database, self.mailbox, since, wait=wait, epoch=epoch
            )
        except NodeCallError as exc:
            raise _answer(exc, None) from exc

    async def message(self, item_id: str) -> bytes | None:
        """A message's bytes as stored (None: no longer there)."""
        try:
            return await self._nodes.message(self.database, self.mailbox, item_id)
        except NodeCallError as exc:
            raise _answer(exc, None) from exc

    async def append(
        self, folder: str, raw: bytes, flags: Sequence[str], received: datetime | None
    ) -> str:
        """Write a message to `folder` byte for byte; its item id."""
        body, fmt = body_of_message(raw)
        item: dict[str, Any] = {"folder": folder, "body": body, "format": fmt.value}
        if flags:
            item["flags"] = list(flags)
        if received is not None:
            item["received"] = received.isoformat()
        _, answer = await self._call("POST", "/items", folder=folder, json=item)
        return str(answer["item_id"])

    async def create_folder(self, folder: str) -> None:
        await self._call("POST", "/folders", folder=folder, json={"folder": folder})

    async def rename_folder(self, folder: str, to: str) -> None:
        await self._call("POST", f"/folders/{_path(folder)}/rename", folder=to, json={"to": to})

    async def delete_folder(self, folder: str) -> None:
        await self._call("DELETE", f"/folders/{_path(folder)}", folder=folder)

    async def set_flags(
        self, folder: str, uids: Sequence[int], *, add: Sequence[str] = (),
        remove: Sequence[str] = (), replace: Sequence[str] | None = None,
    ) -> dict[int, tuple[str, ...]]:  # fmt: skip
        """The flags changed of the folder's `uids`; each UID's flags after."""
        after: dict[int, tuple[str, ...]] = {}
        for start in range(0, len(uids), BATCH):
            change: dict[str, Any] = {"folder": folder, "uids": list(uids[start : start + BATCH])}
            if replace is not None:
                change["replace"] = list(replace)
            else:
                change["add"], change["remove"] = list(add), list(remove)
            _, body = await self._call("POST", "/items/flags", folder=folder, json=change)
            after.update({i["uid"]: tuple(i["flags"]) for i in body["items"]})
        return after

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
