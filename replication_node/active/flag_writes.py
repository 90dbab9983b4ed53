"""The flag writes of the mailbox store: a STORE, and a conditional one (RFC 7162
UNCHANGEDSINCE).

A part of `MailboxStore` (`store_core` says how a write is checked and numbered).  A flag
change numbered but not yet in the rows is held here (`item_modseq`), so a conditional STORE
checked meanwhile counts it."""

from __future__ import annotations

from collections.abc import Sequence

from dag_common.store_api import Written
from replication_node.active.copy import ActiveCopy
from replication_node.active.store_core import StoreCore, admitted
from replication_node.errors import BadRequest
from replication_node.log.operations import SetFlags
from replication_node.storage.reader import ItemRow


class FlagWrites(StoreCore):
    """The flags of items of a folder, one operation and one modseq per change."""

    def __init__(self, copy: ActiveCopy) -> None:
        super().__init__(copy)
        # (mailbox, item id) -> the modseq of a flag change numbered, not yet in the rows
        self._flag_modseqs: dict[tuple[str, str], int] = {}

    def _flags_op(
        self, mailbox: str, folder: str, chosen: list[ItemRow], *, add: Sequence[str],
        remove: Sequence[str], replace: Sequence[str] | None, modseq: int | None,
        override_lock: bool,
    ) -> SetFlags:  # fmt: skip
        """The numbered `SetFlags` of `chosen` (no await: the caller checked them)."""
        row = self._folder_row(mailbox, folder)
        assert row is not None
        if modseq is not None:
            if not override_lock:
                raise BadRequest("a modseq is given only by a move's copy (override_lock)")
            self.counters.given(row, 0, modseq)
        else:
            modseq = self.counters.modseq(row)
        return SetFlags(
            mailbox, self._cns(len(chosen)), folder, tuple(r.item_id for r in chosen), modseq,
            tuple(sorted(set(add))), tuple(sorted(set(remove))),
            None if replace is None else tuple(sorted(set(replace))),
        )  # fmt: skip

    async def _commit_flags(self, op: SetFlags) -> Written:
        """Commit a flag change; its items' modseq held (`_flag_modseqs`) until it is in the
        rows, so a conditional STORE checked meanwhile sees it."""
        for item_id in op.item_ids:
            self._flag_modseqs[(op.mailbox, item_id)] = op.modseq
        try:
            return await self._commit([op])
        finally:
            for item_id in op.item_ids:
                if self._flag_modseqs.get((op.mailbox, item_id)) == op.modseq:
                    del self._flag_modseqs[(op.mailbox, item_id)]

    def item_modseq(self, row: ItemRow) -> int:
        """An item's modseq, a flag change numbered and not yet durable counted."""
        return max(row.modseq, self._flag_modseqs.get((row.mailbox, row.item_id), 0))

    @admitted
    async def set_flags(
        self,
        mailbox: str,
        folder: str,
        *,
        uids: Sequence[int] | None = None,
        item_ids: Sequence[str] | None = None,
        add: Sequence[str] = (),
        remove: Sequence[str] = (),
        replace: Sequence[str] | None = None,
        modseq: int | None = None,
        override_lock: bool = False,
        unchanged_since: int | None = None,
    ) -> tuple[Written | None, SetFlags | None, list[ItemRow]]:
        """Change the flags of items of a folder (a STORE): one operation and one modseq;
        with the operation, which says what each item was given.  `modseq`: the source's,
        given by a move's copy of a flag change (override_lock only).

        With `unchanged_since`, a conditional STORE (RFC 7162 UNCHANGEDSINCE): the flags
        changed of those items whose modseq is at most `unchanged_since`, the others left as
        they are and answered (the third value: MODIFIED; else empty).  The check and the
        numbering have no await between them, and an earlier flag change not yet durable
        counts (`item_modseq`), so of two conditional STOREs racing on an item only one
        passes.  Nothing is written when no item passes (None, None, the items)."""
        self._live_mailbox(mailbox, override_lock=override_lock)
        self._folder_row(mailbox, folder)
        if replace is not None and (add or remove):
            raise BadRequest("replace the flags, or add and remove some: not both")
        if unchanged_since is not None and not 0 <= unchanged_since <= 2**63 - 1:
            raise BadRequest("unchanged_since must be within 0..2^63-1")
        # the rows as listed: each modseq at least the folder's floor (`ops.floored`)
        chosen = self._chosen(mailbox, folder, uids=uids, item_ids=item_ids)
        modified: list[ItemRow] = []
        if unchanged_since is not None:
            modified = [r for r in chosen if self.item_modseq(r) > unchanged_since]
            chosen = [r for r in chosen if self.item_modseq(r) <= unchanged_since]
            if not chosen:
                return None, None, modified
        op = self._flags_op(
            mailbox, folder, chosen, add=add, remove=remove, replace=replace, modseq=modseq,
            override_lock=override_lock,
        )  # fmt: skip
        return await self._commit_flags(op), op, modified
