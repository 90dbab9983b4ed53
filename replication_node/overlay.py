"""Lost log resilience on the active: transactions on disk in the log but not yet in the
database file.

The active writes a transaction into its database file only once `llr_depth` more
generations exist; until then it lives here, and reads merge it over the database.  Each
entry remembers the generation of its latest write, so that after generations up to F are
written to the file, exactly the entries last written at or below F are dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from replication_node.database import Transaction
from replication_node.ops import DEFAULT_FOLDERS

Row = dict[str, Any]


class LlrOverlay:
    """The active copy's unflushed transactions, and the rows they produce."""

    def __init__(self) -> None:
        self._txns: dict[int, list[Transaction]] = {}
        self.mailboxes: dict[str, tuple[int, Row]] = {}
        self.folders: dict[tuple[str, str], int] = {}
        self.items: dict[tuple[str, str], tuple[int, Row]] = {}
        self.max_change_number = 0

    def __len__(self) -> int:
        return sum(len(v) for v in self._txns.values())

    @property
    def generations(self) -> list[int]:
        return sorted(self._txns)

    def add(
        self,
        txn: Transaction,
        *,
        db_mailbox: Callable[[str], Row | None],
        db_item: Callable[[str, str], Row | None],
    ) -> None:
        """Take a durable transaction; `db_*` read rows not in the overlay yet."""
        self._txns.setdefault(txn.generation, []).append(txn)
        gen = txn.generation
        when = txn.commit_time.isoformat()
        for op in txn.ops:
            kind, mailbox, cn = op["op"], op["mailbox"], int(op["cn"])
            self.max_change_number = max(self.max_change_number, cn)
            if kind == "create_mailbox":
                row = {
                    "mailbox": mailbox,
                    "display_name": op.get("display_name", ""),
                    "locked": False,
                    "soft_deleted": False,
                    "change_number": cn,
                }
                self.mailboxes[mailbox] = (gen, row)
                for folder in op.get("folders", DEFAULT_FOLDERS):
                    self.folders.setdefault((mailbox, folder), gen)
            elif kind == "set_mailbox":
                current = self.mailbox(mailbox) or db_mailbox(mailbox)
                if current is None:
                    continue
                row = dict(current, change_number=cn)
                for field in ("locked", "soft_deleted"):
                    if op.get(field) is not None:
                        row[field] = bool(op[field])
                self.mailboxes[mailbox] = (gen, row)
            elif kind == "create_folder":
                self.folders[(mailbox, op["folder"])] = gen
            elif kind == "put_item":
                body = op.get("body", "")
                row = {
                    "mailbox": mailbox,
                    "item_id": op["item_id"],
                    "folder": op["folder"],
                    "subject": op.get("subject", ""),
                    "body": body,
                    "size": len(body.encode()),
                    "change_number": cn,
                    "deleted": False,
                    "commit_time": when,
                }
                self.items[(mailbox, op["item_id"])] = (gen, row)
            elif kind == "delete_item":
                key = (mailbox, op["item_id"])
                base = (
                    self.item(*key)
                    or db_item(*key)
                    or {
                        "mailbox": mailbox,
                        "item_id": op["item_id"],
                        "folder": "",
                        "subject": "",
                    }
                )
                row = dict(base, body="", size=0, change_number=cn, deleted=True, commit_time=when)
                self.items[key] = (gen, row)

    def transactions_through(self, generation: int) -> list[Transaction]:
        """The transactions of generations up to `generation`, in log order."""
        out: list[Transaction] = []
        for gen in sorted(g for g in self._txns if g <= generation):
            out.extend(self._txns[gen])
        return out

    def forget_through(self, generation: int) -> None:
        """Drop what generations up to `generation` wrote: the database file has it now."""
        for gen in [g for g in self._txns if g <= generation]:
            del self._txns[gen]
        self.mailboxes = {k: v for k, v in self.mailboxes.items() if v[0] > generation}
        self.folders = {k: g for k, g in self.folders.items() if g > generation}
        self.items = {k: v for k, v in self.items.items() if v[0] > generation}

    def mailbox(self, name: str) -> Row | None:
        entry = self.mailboxes.get(name)
        return entry[1] if entry else None

    def item(self, mailbox: str, item_id: str) -> Row | None:
        entry = self.items.get((mailbox, item_id))
        return entry[1] if entry else None
