"""The UIDs, modseqs and UIDVALIDITYs an active hands out, reserved as change numbers are.

A write reads its folder's counters from the rows (the LLR overlay over the file) and
numbers its operations with no await in between; but its rows move the counters only once
its commit is durable, so a second write checked meanwhile would read the same counters.
Each number handed out is therefore also held here, and the next is the greater of the
row's and the one held: two writes never share a UID, however their commits interleave.
A write refused after it was numbered leaves a gap, which IMAP allows (UIDs and modseqs
only ever grow).  Pure: no I/O; the store passes the rows in.
"""

from __future__ import annotations

from datetime import datetime

from dag_common.counted_text import is_bytes_only
from dag_common.mailbox_digest import body_hash
from dag_common.store_api import ItemIn
from replication_node.log.operations import RESERVE_MAX
from replication_node.storage.reader import FolderRow, ItemRow

MAX_UID = 2**32 - 1


def lost_reservation(
    *, lost_logs: int | None, first_mount_of_epoch: bool, ceiling: int, held: int
) -> int:
    """How far a new active advances every folder's UIDs and modseqs and every mailbox's
    UIDVALIDITYs before its first write (`ReserveLost`), so that none the lost tail of the
    log may have shown a client is given again; 0: nothing to reserve.

    The bound: every UID, modseq and UIDVALIDITY the old active handed out took a change
    number of its own, and none of those can be above the cluster store's `ceiling`; this
    copy holds every change through `held`; so no folder's counter can have gone more than
    `ceiling - held` past this copy's.  Only an activation that lost logs reserves (the
    dumpster redelivery's test, `redelivery.py`; `lost_logs` None, not known, as 0, as
    there), and only at the epoch's first mount: a re-mount at the same epoch (the store's
    record shows an open log announced at it) already committed the reservation before
    any write it took."""
    if not lost_logs or not first_mount_of_epoch:
        return 0
    return min(max(0, ceiling - held), RESERVE_MAX)


def put_again(row: ItemRow | None, item: ItemIn) -> bool:
    """Whether a put is of an item the mailbox holds already as it is (same folder, subject,
    format and bytes; the put naming no flags, or the ones held, and no INTERNALDATE, or the
    one held): the dumpster redelivering a message a lossy failover did not lose, or a
    delivery or an IMAP APPEND retried under its item id after its answer was lost.  Such a
    put keeps the item's UID, modseq, flags and INTERNALDATE: a new UID would show an IMAP
    client a message it holds as expunged and new, and drop the flags its user set."""
    if row is None or row.deleted:
        return False
    if item.flags and tuple(sorted(set(item.flags))) != tuple(row.flags):
        return False
    if item.received is not None and (
        not row.received or datetime.fromisoformat(row.received) != item.received
    ):
        return False
    if (row.folder, row.subject, row.format) != (item.folder, item.subject, item.format):
        return False
    if row.body and not is_bytes_only(item.body):
        return row.body == item.body
    # a row read without its body (its hash), or a put carried as its bytes (their hash)
    return (row.body_hash or body_hash(row.body)) == body_hash(item.body)


class UidExhausted(Exception):
    """A folder has handed out its last 32-bit UID (a new UIDVALIDITY is the way on)."""


class ImapCounters:
    """The numbers handed out and not yet in the rows, per folder and per mailbox."""

    def __init__(self) -> None:
        self._uid: dict[tuple[str, str], int] = {}
        self._modseq: dict[tuple[str, str], int] = {}
        self._uidvalidity: dict[str, int] = {}

    def uids(self, folder: FolderRow, count: int) -> list[int]:
        """`count` new UIDs in `folder`, in order."""
        key = (folder.mailbox, folder.folder)
        first = max(folder.uid_next, self._uid.get(key, 1))
        if first + count - 1 > MAX_UID:
            raise UidExhausted(f"folder {folder.folder!r} has no UID left")
        self._uid[key] = first + count
        return list(range(first, first + count))

    def given(self, folder: FolderRow, uid: int, modseq: int) -> None:
        """A UID (0: none) and a modseq given from outside (a move's copy keeps the
        source's): the next ones handed out in `folder` go past them."""
        key = (folder.mailbox, folder.folder)
        self._uid[key] = max(self._uid.get(key, 1), uid + 1)
        self._modseq[key] = max(self._modseq.get(key, 0), modseq)

    def modseq(self, *folders: FolderRow) -> int:
        """One new modseq, above each folder's highest (a move's is both folders')."""
        if len(folders) == 1:  # a put's, per item: no generator over one folder
            (f,) = folders
            key = (f.mailbox, f.folder)
            value = 1 + max(f.highest_modseq, self._modseq.get(key, 0))
            self._modseq[key] = value
            return value
        value = 1 + max(
            max(f.highest_modseq, self._modseq.get((f.mailbox, f.folder), 0)) for f in folders
        )
        for f in folders:
            self._modseq[(f.mailbox, f.folder)] = value
        return value

    def uidvalidity_given(self, mailbox: str, uidvalidity: int) -> None:
        """A folder's UIDVALIDITY given from outside (a move's copy): the next goes past it."""
        self._uidvalidity[mailbox] = max(self._uidvalidity.get(mailbox, 0), uidvalidity + 1)

    def uidvalidity(self, mailbox: str, floor: int, count: int = 1) -> int:
        """The first of `count` new UIDVALIDITYs of a mailbox's folders, at least `floor`
        (its `uidvalidity_next`; for a new mailbox, the time)."""
        first = max(floor, self._uidvalidity.get(mailbox, 0))
        self._uidvalidity[mailbox] = first + count
        return first
