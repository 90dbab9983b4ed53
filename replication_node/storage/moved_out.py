"""Messages moved out of a folder (issue 50): the UIDs a listing `?since_modseq` of the
source tells as expunged.

A moved item keeps its id and its row, in its new folder, so nothing in `items` says it
left its source; `moved_out` records its UID there, with the move's modseq.  It is keyed by
the source's UIDVALIDITY, a folder's identity in its mailbox, which a rename keeps: a
rename changes nothing here.  The rows are written by `MoveItems`'s replay (`tables.py`;
the LLR overlay holds the same, `LlrOverlay.moved_out`), so every copy replaying the log has
them, and the log carries nothing new.  A folder's deletion drops its records, a mailbox's
removal its mailbox's.
"""

from __future__ import annotations

import sqlite3

MOVED_OUT_SCHEMA = """
-- a message moved out of a folder: its UID there, expunged at `modseq` (a moved item keeps
-- its row, in its new folder; this is what a listing `?since_modseq` of the source tells as
-- expunged).  Keyed by the source's UIDVALIDITY, which a rename keeps: no name to follow.
CREATE TABLE moved_out(
  mailbox TEXT NOT NULL, uidvalidity INTEGER NOT NULL, uid INTEGER NOT NULL,
  modseq INTEGER NOT NULL,
  PRIMARY KEY (mailbox, uidvalidity, uid)
) WITHOUT ROWID;
"""

# Before a move's UPDATE: the live item's UID in its folder, recorded as moved out of it.
# Arguments: the move's modseq, the mailbox, the item id, the source folder.
RECORD = (
    "INSERT OR REPLACE INTO moved_out (mailbox, uidvalidity, uid, modseq)"
    " SELECT i.mailbox, f.uidvalidity, i.uid, ? FROM items i JOIN folders f"
    " ON f.mailbox=i.mailbox AND f.folder=i.folder"
    " WHERE i.mailbox=? AND i.item_id=? AND i.deleted=0 AND i.folder=? AND i.uid>0"
)

# Before a folder's row is deleted: its records.  Arguments: mailbox, mailbox, folder.
FORGET_FOLDER = (
    "DELETE FROM moved_out WHERE mailbox=? AND uidvalidity IN"
    " (SELECT uidvalidity FROM folders WHERE mailbox=? AND folder=?)"
)


def add_moved_out(conn: sqlite3.Connection) -> None:
    """Give a file from before moves were recorded in their source the table: the same
    statement on every copy; moves it replayed before are not in it (a listing of their
    source `?since_modseq` does not tell them, as before)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name='moved_out'").fetchone():
        return
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name='items'").fetchone():
        return  # not a file of ours yet: its schema makes the table
    conn.executescript(MOVED_OUT_SCHEMA)
