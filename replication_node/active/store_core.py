"""What every write of the mailbox store stands on: the checks of names and batches, a
write's admission, and the look-ups and numbering its writes share.

A request is checked against the current state (the mailbox exists, is not locked by a
move, the folder exists) and turned into operations with change numbers and item ids
assigned, so that every copy replays exactly the same thing.  Checks and change-number
assignment happen without an await in between, so two concurrent requests cannot both pass
a check that only one of them may pass.  The writes themselves are in their own modules
(`mailbox_store`: mailboxes; `folder_writes`, `item_writes`, `flag_writes`), each a part of
`MailboxStore` standing on `StoreCore`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from dag_common.api_types import FOLDER_PATTERN, NAME_PATTERN
from dag_common.store_api import Written
from replication_node.active.copy import ActiveCopy
from replication_node.active.imap_counters import ImapCounters, UidExhausted
from replication_node.errors import BadRequest, Conflict, NotFound
from replication_node.log.operations import Operation, last_cn
from replication_node.log.spanning import BlobRef
from replication_node.storage.reader import FolderRow, ItemRow, MailboxRow

T = TypeVar("T")
# Recorded outside the log before a write is numbered; raises (Conflict) to refuse the write.
Claim = Callable[[], Awaitable[None]]

_NAME = re.compile(NAME_PATTERN)
_FOLDER = re.compile(FOLDER_PATTERN)
MAX_BATCH = 1000


def check_text(field: str, value: str) -> None:
    """Text must be valid Unicode that UTF-8 can carry: a lone surrogate ("\ud800", which
    JSON can spell) cannot be written to the log.  ASCII text (most mail) is UTF-8 as it
    stands: no copy of a 36 MiB body is made to find that out."""
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest(f"{field} is not valid UTF-8 text: {exc.reason} at {exc.start}") from exc


def check_folder(folder: str) -> None:
    if not _FOLDER.match(folder):
        raise BadRequest(f"invalid folder name {folder!r}")
    check_text("folder", folder)


def check_name(mailbox: str) -> None:
    if not _NAME.match(mailbox):
        raise BadRequest(f"invalid mailbox name {mailbox!r}")


def admitted(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """A write: the copy admits it (`ActiveCopy.admit`: its lease, its synchronous copies)
    before any change number is handed out, so a refused write leaves no gap behind."""

    @functools.wraps(method)
    async def write(self: StoreCore, *args: Any, **kwargs: Any) -> T:
        await self.copy.admit()
        return await method(self, *args, **kwargs)

    return write


class StoreCore:
    """The copy a mailbox store writes to, its IMAP counters, and what its writes share."""

    def __init__(self, copy: ActiveCopy) -> None:
        self.copy = copy
        self.counters = ImapCounters()  # UIDs, modseqs, UIDVALIDITYs handed out

    def _live_mailbox(self, mailbox: str, *, override_lock: bool = False) -> MailboxRow:
        check_name(mailbox)
        row = self.copy.mailbox(mailbox)
        if row is None or row.soft_deleted:
            raise NotFound(f"no mailbox {mailbox!r}")
        if row.locked and not override_lock:
            raise Conflict(f"mailbox {mailbox!r} is locked by a move")
        return row

    async def _commit(
        self,
        ops: list[Operation],
        item_ids: tuple[str, ...] = (),
        *,
        staged: dict[int, BlobRef] | None = None,
        uids: tuple[int, ...] = (),
    ) -> Written:
        """Commit `ops`; `staged`: the bodies staged for some of them, by op index (the record
        names them where the body would be: `LogStream.commit`); `uids`: the items'."""
        committed = await self.copy.commit(ops, staged=staged)
        # The LSN names the stream's epoch as the writer made it (`log/writer.py`).
        last = max(map(last_cn, ops))
        return Written.of(committed.lsn, committed.commit_time, last, item_ids, uids)

    def _unix_now(self) -> int:
        return int(self.copy.now().timestamp())

    def _uids(self, folder: FolderRow, count: int) -> list[int]:
        try:
            return self.counters.uids(folder, count)
        except UidExhausted as exc:
            raise Conflict(str(exc)) from None

    def _folder_row(
        self, mailbox: str, folder: str, *, missing: type[Exception] | None = NotFound
    ) -> FolderRow | None:
        """A folder of a mailbox with its counters; `missing` raised when there is none."""
        row = next((f for f in self.copy.folder_rows(mailbox) if f.folder == folder), None)
        if row is None and missing is not None:
            raise missing(f"mailbox {mailbox!r} has no folder {folder!r}")
        return row

    def _chosen(
        self,
        mailbox: str,
        folder: str,
        *,
        uids: Sequence[int] | None,
        item_ids: Sequence[str] | None,
    ) -> list[ItemRow]:
        """The live items of a folder a request names by UID or by item id (one of them),
        in the order named, each once; NotFound naming the first that is not there."""
        if (uids is None) == (item_ids is None):
            raise BadRequest("name the items by uids or by item_ids (one of them)")
        named: Sequence[object] = uids if uids is not None else item_ids  # type: ignore[assignment]
        if not named:
            raise BadRequest("no items named")
        if len(named) > MAX_BATCH:
            raise BadRequest(f"at most {MAX_BATCH} items per request")
        rows = self.copy.folder_items(mailbox, folder)
        by = {r.uid: r for r in rows} if uids is not None else {r.item_id: r for r in rows}
        chosen: dict[str, ItemRow] = {}
        for key in named:
            row = by.get(key)  # type: ignore[call-overload]
            if row is None:
                what = "UID" if uids is not None else "item"
                raise NotFound(f"folder {folder!r} of {mailbox!r} has no {what} {key!r}")
            chosen.setdefault(row.item_id, row)
        return list(chosen.values())

    def _cns(self, count: int) -> int:
        """`count` change numbers (at least one), in order; the first."""
        first = self.copy.next_change_number()
        for _ in range(count - 1):
            self.copy.next_change_number()
        return first
