"""The mailbox directory's side of the store writes that decide where a mailbox lives: a
new mailbox, a restored one, a purged one.

The invariant: **a live mailbox is only ever in the database the mailbox directory names
for it.**  A second live copy the directory does not name (an orphan) takes mail nobody
reads, and a move would find its name taken.

The order that keeps it: the directory first, then the store (each function here is the
`Claim` a `MailboxStore` write awaits once the request is checked, before anything is
numbered).  The directory's write is a compare-and-set, so of two creations racing in two
databases one wins and the other is refused before it writes anything.  Should the node die
(or the commit fail) between the two steps, the directory names a database in which the
mailbox is absent (a creation) or still soft-deleted (a restore): unreachable until the same
request is asked again, which finds the directory naming this database already and goes on,
but never doubled.  The other order (create, then claim, then undo the creation should the
claim fail) leaves the orphan behind whenever the node dies before the undo, which no one
would then run.  A claim is never undone either: a commit answered with an error may still
be in the log (written, then the lease lost), and undoing the claim would make it an orphan.

A move's target copy is created locked without a claim: the directory names the source
until the move's step 8 (`mrs_client.steps`), and the lock keeps store clients out.
"""

from __future__ import annotations

from dag_common.cluster_store.interface import ClusterStore
from replication_node.errors import Conflict


async def claim_new(directory: ClusterStore, mailbox: str, database: str) -> None:
    """Point the directory at `database` for a new `mailbox`; Conflict naming the database
    the directory holds if it is another (nothing is written then)."""
    if await directory.set_mailbox_database(mailbox, database, expected=None):
        return
    placed = await directory.mailbox_database(mailbox)
    if placed == database:  # claimed by a creation that died before it wrote: go on
        return
    if placed is None:  # entries are never removed: a store that changed under us
        raise Conflict(f"the mailbox directory changed for {mailbox!r} meanwhile; ask again")
    raise Conflict(
        f"the mailbox directory places {mailbox!r} in {placed}: a mailbox created in "
        f"{database} would be one it does not name; use it in {placed}, or move it there "
        "(`mrs move`)"
    )


async def claim_restored(
    directory: ClusterStore, mailbox: str, database: str, *, replace: str | None
) -> None:
    """Point the directory at `database` for a soft-deleted `mailbox` being restored there
    (Exchange's Connect-Mailbox).  Refused (Conflict) while a move holds the mailbox, and
    when the directory places it in another database unless `replace` names that database:
    the caller's word that its copy there is lost or not live (`replication-node mailbox
    restore --replace` asks that database first and refuses a live copy)."""
    entry = await directory.mailbox_entry(mailbox)
    if entry is not None and entry.moving is not None:
        raise Conflict(
            f"move {entry.moving.move_id} holds {mailbox!r}: restore it once the move has "
            "ended (`mrs cancel`, or its completion)"
        )
    placed = entry.database if entry is not None else None
    if replace is not None and replace != placed:
        where = f"in {placed}" if placed else "nowhere"
        raise Conflict(
            f"--replace {replace}: the mailbox directory places {mailbox!r} {where}, not in "
            f"{replace}"
        )
    if placed == database:
        return
    if placed is not None and replace is None:
        raise Conflict(
            f"the mailbox directory places {mailbox!r} in {placed}: restored in {database} it "
            f"would be a second mailbox the directory does not name; move it back (`mrs move "
            f"--mailbox {mailbox} --to {database}`: the move replaces this soft-deleted copy), "
            f"or, if {placed}'s copy is lost, restore with --replace {placed}"
        )
    if not await directory.set_mailbox_database(mailbox, database, expected=placed):
        raise Conflict(f"the mailbox directory changed for {mailbox!r} meanwhile; ask again")


async def check_purgeable(directory: ClusterStore, mailbox: str, database: str) -> None:
    """A soft-deleted mailbox the directory places here is the only one its users have:
    Conflict (restore it instead); any other may be purged."""
    if await directory.mailbox_database(mailbox) == database:
        raise Conflict(
            f"the mailbox directory places {mailbox!r} in {database}: it is the mailbox its "
            "users have, soft-deleted; restore it (`replication-node mailbox restore`) rather "
            "than purge it"
        )
