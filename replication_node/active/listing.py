"""A folder's listing and messages' bodies read off the event loop on the active (issue 50):
the file's rows through a connection of their own, the LLR overlay's snapshot merged over them.

The loop only takes a snapshot of what the overlay holds for the mailbox (its rows are
immutable); the worker thread reads the file's rows at a waypoint in one read transaction.
If a generation the snapshot did not hold whole was flushed into the file meanwhile (the
snapshot's rows would then be older than the file's), the thread's listing is refused (None)
and the caller lists on the loop; so it does at once (no function) when the overlay renames
the mailbox's folders or numbers its items (the file's names and UIDs are not yet final).

Also the other reads that merge the overlay over the file row by row: the digest's rows, the
count of live items and a page of the items listing (on the loop, as `ActiveCopy` calls them).

A page of the listing is cut by bytes over the merged rows, not the file's alone (issue 52):
the overlay's rows (the last `llr_depth` generations' puts, which may be several items of
30 MiB) were merged in whole whatever the page's `page_bytes`.  Both sources share one
cursor, the change number (unique in a mailbox), so a page cut after the row that reaches
`page_bytes`, whichever source it came from, ends at that row's number and the next page
resumes just after it: no row lost or repeated.  An overlay row's body is read back from
the log only once the row is in the page.

An overlay row whose body the file holds (a flag change, a move, a copy of an item the file
has: `LlrOverlay.in_file`) is given to readers with the body read from the file a part at a
time (`with_body`, `bodies_apart`), as the file's own rows are: the overlay never held it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from operator import attrgetter

from dag_common.items_query import ItemsQuery
from dag_common.mailbox_digest import DigestRow
from replication_node.active.logged_bodies import LogBodies, without_body
from replication_node.storage.bodies import APART
from replication_node.storage.body_reads import BlobBody, BlobText, text_parts
from replication_node.storage.database import Database
from replication_node.storage.file_reads import Held
from replication_node.storage.ops import floored
from replication_node.storage.overlay import LlrOverlay
from replication_node.storage.reader import ItemRow, ItemsPage


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
    them (taken on the loop: its rows are immutable, the file may be behind it).  A row whose
    body is the file's own row's (a flag change, a move: `LlrOverlay.in_file`) is left to the
    file; a copy's is a `BlobText` read from the file's rows that hold it, when written."""
    held: Held = {}
    hidden = overlay.hides(mailbox)
    for item in ids:
        row = overlay.item(mailbox, item)
        in_file = overlay.file_body(mailbox, item)
        if row is None:
            if hidden:
                held[item] = None
        elif row.deleted:
            held[item] = None
        elif in_file is None:
            held[item] = (row.body, row.format, row.subject)
        elif in_file != (item,):
            held[item] = (_file_text(db, row, in_file), row.format, row.subject)
    return db, held


def _file_text(db: Database, row: ItemRow, in_file: tuple[str, ...]) -> BlobText:
    """An overlay row's body the file holds (in the rows `in_file`), read a part at a time
    when it is written (`FileReads.held_part`)."""
    head = BlobBody(row.mailbox, row.item_id, row.format, row.subject, row.size, row.body_hash)
    return BlobText(head, functools.partial(db.held_part, in_file))


def with_body(overlay: LlrOverlay, db: Database, bodies: LogBodies, row: ItemRow) -> ItemRow:
    """An overlay row with its body as a reader is given it, none read whole past `APART`:
    one the log holds as a `LogText`, one the file holds (`LlrOverlay.in_file`) as a
    `BlobText` of the file, each read a part at a time as it is written; a smaller one the
    file holds read whole, as the file's own rows are."""
    if row.deleted:
        return row
    logged = overlay.logged_body(row.mailbox, row.item_id)
    if logged is not None:
        return row._replace(body=bodies.text_of(row, logged), body_hash="")
    in_file = overlay.file_body(row.mailbox, row.item_id)
    if in_file is None:
        return row
    body = _file_text(db, row, in_file)
    if row.size < APART:
        return row._replace(body="".join(text_parts(body.parts())), body_hash="")
    return row._replace(body=body, body_hash="")


def digest_rows(overlay: LlrOverlay, db: Database, mailbox: str) -> list[DigestRow]:
    """The file's digest rows (`Database.digest_rows`) with the overlay's items over them
    (those it holds in memory carry their bodies, which the digest hashes; those it holds in
    the log, their hash, as a file's row), and the file's folders renamed since."""
    stored = [] if overlay.hides(mailbox) else db.digest_rows(mailbox)
    if overlay.renames.get(mailbox):
        stored = [r._replace(folder=overlay.renamed(mailbox, r.folder)) for r in stored]
    rows = {r.item_id: r for r in stored}
    for (m, item_id), (_, row) in overlay.items.items():
        if m == mailbox:
            rows[item_id] = DigestRow(
                item_id, row.folder, row.subject, row.deleted, row.change_number,
                row.body_hash if not row.body else "", row.body, row.format,
            )  # fmt: skip
    return list(rows.values())


def live_count(overlay: LlrOverlay, db: Database, mailbox: str, since_change: int) -> int:
    """The file's count of live items changed after `since_change`, corrected item by item
    for what the overlay changed."""
    hidden = overlay.hides(mailbox)  # removed: the file's rows are gone
    count = 0 if hidden else db.live_count(mailbox, since_change)
    for (m, item_id), (_, row) in overlay.items.items():
        if m == mailbox:
            old = None if hidden else db.item_head(mailbox, item_id)
            count -= bool(old and not old.deleted and old.change_number > since_change)
            count += bool(not row.deleted and row.change_number > since_change)
    return count


def items_page(
    overlay: LlrOverlay,
    db: Database,
    mailbox: str,
    query: ItemsQuery,
    *,
    with_body: Callable[[ItemRow], ItemRow],
    blobs: bool = False,
) -> ItemsPage:
    """The changes after `query.since_change`, the overlay's over the file's, at most
    `limit` and cut once their `listed_size` reaches `page_bytes` (one change at least), as
    `Database.items_page` cuts the file's alone.  `with_body`: an overlay row with its body
    (read back from the log), called only for the rows the page holds; without `bodies`,
    the overlay's rows are hashed instead (`without_body`).  `blobs`: the file's large bodies
    left to be read a part at a time (`FileReads.items_page`)."""
    if overlay.hides(mailbox):  # removed: the file's rows are gone
        page = ItemsPage([], query.since_change, True)
    else:
        page = db.items_page(mailbox, query, blobs=blobs)
        if overlay.renames.get(mailbox) or overlay.assigned:
            page = ItemsPage([overlay.over_file(r) for r in page.items], page.through,  # type: ignore[misc]
                             page.complete)  # fmt: skip
    held = [row for (m, _), (_, row) in overlay.items.items() if m == mailbox]
    merged = merged_page(page, held, query)
    # The file's rows past the cut let go of before an overlay row's body is read back.
    del page
    own = {row.item_id for row in held}
    fill = with_body if query.bodies else without_body
    return ItemsPage(
        [fill(r) if r.item_id in own else r for r in merged.items], merged.through,
        merged.complete,
    )  # fmt: skip


def merged_page(file_page: ItemsPage, held: list[ItemRow], query: ItemsQuery) -> ItemsPage:
    """A page of the file's changes (`file_page`, read for `query`) with the overlay's rows
    of the mailbox (`held`, which supersede the file's rows of the same items) merged in up
    to where the file's page ends (an overlay change past that end belongs to a later page:
    it would otherwise hide the file's rows between), then cut after the row that brings the
    page to `query.limit` changes or `page_bytes` (`listed_size`).  Pure: the rows are as
    given, bodies or not."""
    since_change, limit, page_bytes = query.since_change, query.limit, query.page_bytes
    end = None if file_page.complete else file_page.through
    superseded = {row.item_id for row in held}
    rows = [r for r in file_page.items if r.item_id not in superseded]
    rows.extend(
        r for r in held
        if since_change < r.change_number and (end is None or r.change_number <= end)
    )  # fmt: skip
    rows.sort(key=_change_number)
    weight = 0
    for count, row in enumerate(rows, 1):
        weight += row.listed_size(query.bodies)
        full = (limit is not None and count >= limit) or (
            page_bytes is not None and weight >= page_bytes
        )
        if full and (count < len(rows) or end is not None):
            return ItemsPage(rows[:count], row.change_number, False)
    if end is not None:
        return ItemsPage(rows, end, False)
    return ItemsPage(rows, max([since_change, *(r.change_number for r in rows)]), True)


_change_number = attrgetter("change_number")
