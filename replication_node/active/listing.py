"""A folder's listing and messages' bodies read off the event loop on the active (issue 50):
the file's rows through a connection of their own, the LLR overlay's snapshot merged over them.

The loop only takes a snapshot of what the overlay holds for the mailbox (its rows are
immutable); the worker thread reads the file's rows at a waypoint in one read transaction.
If a generation the snapshot did not hold whole was flushed into the file meanwhile (the
snapshot's rows would then be older than the file's), the thread's listing is refused (None)
and the caller lists on the loop; so it does at once (no function) when the overlay renames
the mailbox's folders or numbers its items (the file's names and UIDs are not yet final).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from replication_node.storage.database import Database
from replication_node.storage.file_reads import Held
from replication_node.storage.ops import floored
from replication_node.storage.overlay import LlrOverlay
from replication_node.storage.reader import ItemRow


def listing_apart(
    overlay: LlrOverlay,
    db: Database,
    mailbox: str,
    folder: str,
    since_modseq: int,
    floor: int,
) -> Callable[[], list[ItemRow] | None] | None:
    """The folder's items (bodiless) to read in a worker thread, as `folder_items` lists
    them; None: list on the loop.  `floor`: the folder's `modseq_floor` as the overlay has it
    (it may hold a ReserveLost the file has not): below it, every row of the file is read and
    each reported at it (`ops.floored`)."""
    if overlay.hides(mailbox) or overlay.assigned or overlay.renames.get(mailbox):
        return None
    file_since = 0 if floor > since_modseq else since_modseq
    generations = overlay.generations
    # The file may be read at a waypoint below the newest generation the snapshot holds (that
    # one may be open: more of it may come); with no overlay, only at the waypoint it has now.
    highest = generations[-1] - 1 if generations else db.header.waypoint
    held = [row for (m, _), (_, row) in overlay.items.items() if m == mailbox]

    def build() -> list[ItemRow] | None:
        waypoint, stored = db.folder_items_apart(
            mailbox, folder, file_since, tombstones=since_modseq > 0
        )
        if waypoint > highest:  # flushed meanwhile: what the snapshot held may be older
            return None
        rows = {r.item_id: r for r in stored if r.folder == folder}
        for row in held:
            rows.pop(row.item_id, None)
            if row.folder == folder:
                rows[row.item_id] = row._replace(body="")
        listed = [
            r
            for r in (floored(r, floor) for r in rows.values())
            if (since_modseq == 0 and not r.deleted)
            or (since_modseq > 0 and r.modseq > since_modseq)
        ]
        listed.sort(key=lambda r: (r.uid, r.item_id))
        return listed

    return build


def bodies_apart(
    overlay: LlrOverlay, db: Database, mailbox: str, ids: Sequence[str]
) -> tuple[Database, Held]:
    """The file to read the bodies of `ids` from off the loop, and what the overlay holds of
    them (taken on the loop: its rows are immutable, the file may be behind it)."""
    held: Held = {}
    hidden = overlay.hides(mailbox)
    for item in ids:
        row = overlay.item(mailbox, item)
        if row is not None:
            held[item] = None if row.deleted else (row.body, row.format, row.subject)
        elif hidden:
            held[item] = None
    return db, held
