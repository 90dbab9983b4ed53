"""Store calls to either end of a move, each answer's epoch checked.

Every node answer names the epoch (stream incarnation) of the copy that gave it; the move
record keeps the epochs its cursors were read and written under.  An answer naming another
epoch, or a refusal (404) after which a mailbox of the move is gone, raises `NeedsReconcile`;
the first epoch seen of an end is taken, and saved with the record's next save.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dag_common.store_api import Mailbox, NodeStore
from mrs_client.epoch_watch import EpochWatch, Side
from mrs_client.errors import MoveFailed, NeedsReconcile, NodeCallError
from mrs_client.gates import Gates
from mrs_client.move_store.interface import MoveRecord


class EndCalls:
    """Calls to the source and target databases of a move, through the gates' retries."""

    def __init__(self, *, nodes: NodeStore, gates: Gates) -> None:
        self.nodes = nodes
        self.gates = gates

    def seen(self, record: MoveRecord, side: Side, epoch: int, what: str) -> MoveRecord:
        """Check an answer's epoch against the one the move's cursors were saved under;
        NeedsReconcile if it differs.  The first epoch seen of an end is taken (and saved
        with the next save)."""
        watch = EpochWatch(source=record.source_epoch, target=record.target_epoch)
        db = record.target_db if side is Side.TARGET else record.source_db
        watch.see(side, epoch, f"{what} ({db})")
        return replace(
            record,
            source_epoch=watch.epochs[Side.SOURCE],
            target_epoch=watch.epochs[Side.TARGET],
        )

    async def call(
        self, record: MoveRecord, side: Side, what: str, fn: Callable[[], Any]
    ) -> tuple[MoveRecord, Any]:
        """A store call to one end of the move whose answer's epoch is checked (`seen`)."""
        try:
            answer = await self.gates.node_call(record, what, fn)
        except MoveFailed as exc:
            if isinstance(exc.__cause__, NodeCallError) and exc.__cause__.status == 404:
                await self._refused(record, side, exc)
            raise
        if answer is not None:
            record = self.seen(record, side, answer.epoch, what)
        return record, answer

    async def source_mailbox(self, record: MoveRecord, name: str) -> tuple[MoveRecord, Mailbox]:
        """The source's mailbox `name`; MoveFailed if it is not there (the move's own
        mailbox vanished from under it)."""
        src = record.source_db
        record, box = await self.call(
            record, Side.SOURCE, "read source mailbox", lambda: self.nodes.mailbox(src, name)
        )
        if box is None:
            raise MoveFailed(f"mailbox {name!r} vanished from {src}")
        return record, box

    async def set_state(self, record: MoveRecord, side: Side, name: str, action: str) -> MoveRecord:
        """`action` (lock, unlock or soft-delete) on mailbox `name` at one end of the move,
        the answer's epoch checked (`seen`)."""
        db = record.target_db if side is Side.TARGET else record.source_db
        record, _ = await self.call(
            record, side, f"{action} {side}", lambda: self.nodes.set_state(db, name, action)
        )
        return record

    async def _refused(self, record: MoveRecord, side: Side, exc: MoveFailed) -> None:
        """A 404 names no epoch: a mailbox the move made (or read) may have been lost with a
        failover.  NeedsReconcile if that end changed incarnation or lost a mailbox of the
        move; otherwise the refusal stands."""
        db = record.target_db if side is Side.TARGET else record.source_db
        for name in record.mailboxes:
            box = await self.gates.node_call(
                record, "read mailbox", lambda n=name: self.nodes.mailbox(db, n)
            )
            if box is None:
                raise NeedsReconcile(
                    f"{exc}: {name!r} is gone from {db}", target_changed=side is Side.TARGET
                )
            self.seen(record, side, box.epoch, str(exc))
