"""The database file's header as `replication-node db-header` prints it (eseutil /mh)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replication_node.storage.database import Database


def db_header(path: Path) -> dict[str, Any]:
    """The database header of a database file."""
    db = Database.open(path)
    try:
        return {"file": str(path), **db.header.as_dict()}
    finally:
        db.close()


def render_db_header(info: dict[str, Any]) -> str:
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
