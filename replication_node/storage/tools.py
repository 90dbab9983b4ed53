"""The database file's header as `replication-node db-header` prints it (eseutil /mh)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from replication_node.errors import DatabaseError
from replication_node.storage.header import HeaderFields, read_header


class DbHeaderDump(HeaderFields):
    """`db-header --json`: the header of the database file named."""

    file: str


def db_header(path: Path) -> DbHeaderDump:
    """The database header of a database file, read without writing to it (eseutil /mh):
    a read-only connection, so that neither a live node's file nor an offline one is changed
    by looking at it (no migration, no checkpoint of its WAL on close)."""
    if not path.is_file():
        raise DatabaseError(f"{path}: no such database file")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        header = read_header(conn, path)
    except (IndexError, KeyError) as exc:  # a header row without a column added since
        raise DatabaseError(
            f"{path} was written by an older version (its header lacks {exc}): mount it "
            "on a node, which brings it up to date, to read its header here"
        ) from None
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(f"{path} cannot be read as a database: {exc}") from None
    finally:
        conn.close()
    return {"file": str(path), **header.as_dict()}


def render_db_header(info: DbHeaderDump) -> str:
    com = info["log_committed"]
    return "\n".join(
        [
            f"Database: {info['file']}",
            f"  State:               {info['state']}",
            "  Log Required:        "
            + (
                f"{info['log_required'][0]}-{info['log_required'][1]} (a staged body begun in "
                f"generation {info['log_required'][0]} is committed above the waypoint)"
                if info.get("log_required")
                else f"none (consistent through generation {info['waypoint']})"
            ),
            f"  Log Committed:       {com[0]}-{com[1]} (0x{com[0]:X}-0x{com[1]:X})",
            f"  Checkpoint:          {info['checkpoint']}",
            f"  Waypoint:            {info['waypoint']}",
            f"  Committed:           {info['committed']}",
            f"  Database signature:  {info['database_signature']}",
            f"  Log signature:       {info['log_signature']}",
            f"  Last change number:  {info['last_change_number']}",
            f"  Last log time:       {info['last_log_time'] or '-'}",
            f"  Last backup:         generation {info['last_backup_generation']} "
            f"at {info['last_backup_time'] or '-'}",
            f"  Last full backup:    generation {info.get('last_full_backup_generation', 0)} "
            f"at {info.get('last_full_backup_time') or '-'}",
            f"  Last incremental:    generation "
            f"{info.get('last_incremental_backup_generation', 0)} "
            f"at {info.get('last_incremental_backup_time') or '-'}",
        ]
    )
