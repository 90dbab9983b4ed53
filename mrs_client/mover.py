"""The move loop: runs a move request's ten steps, persisting after each, gated on the Data
Guarantee API (decisions from `policy`; I/O here).

Idempotent by construction, so `kill -9` at any point and `mrs resume` give the result of an
uninterrupted move: items are copied with their own item ids (a re-copy replaces, never
duplicates); sync cursors are saved after each batch; the final flush waits for the
generation the target rolled *after* the final sync, saved before the wait.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from dag_common.clock import Clock
from mrs_client.errors import MoveFailed, MoveRejected, NodeCallError
from mrs_client.node_client import NodeStoreClient
from mrs_client.policy import (
    Decision,
    GuaranteeAnswer,
    MoveSettings,
    MoveState,
    MoveStep,
    Verdict,
    flush_gate,
    gate,
    health_check_due,
    incremental_done,
)
from mrs_client.requests_store import MoveRecord, MoveRequestStore

logger = logging.getLogger(__name__)
ARCHIVE_SUFFIX = ".archive"


class GuaranteeClient(Protocol):
    """The two questions a mover asks the Data Guarantee API."""

    async def check_health(self, database: str, caller_id: str) -> GuaranteeAnswer: ...

    async def check_flush(
        self, database: str, caller_id: str, generation: int, commit_time: datetime
    ) -> GuaranteeAnswer:
        """By the LSN (`generation`) when the service offers it, by `commit_time` otherwise."""
        ...


class Directory(Protocol):
    """The mailbox directory (the cluster store)."""

    async def mailbox_database(self, mailbox: str) -> str | None: ...

    async def set_mailbox_database(
        self, mailbox: str, database: str, *, expected: str | None
    ) -> bool: ...


def _write_size(entry: dict[str, Any]) -> int:
    """About what an item costs in the target's log record (its text and the JSON around)."""
    return sum(len(str(v).encode()) for v in entry.values()) + 200


class Mover:
    """Creates, runs and resumes move requests."""

    def __init__(
        self,
        *,
        requests: MoveRequestStore,
        nodes: NodeStoreClient,
        guarantee: GuaranteeClient,
        directory: Directory,
        databases: set[str],
        clock: Clock,
        settings: MoveSettings | None = None,
        caller_id: str = "mrs",
        progress: Callable[[MoveRecord, str], None] | None = None,
    ) -> None:
        self.requests = requests
        self.nodes = nodes
        self.guarantee = guarantee
        self.directory = directory
        self.databases = databases
        self.clock = clock
        self.settings = settings or MoveSettings()
        self.caller_id = caller_id
        self._progress = progress or (lambda record, line: None)
        self._last_check: Any = None

    # ---- creating a request ----------------------------------------------------------------

    async def submit(
        self, mailbox: str, target_db: str, *, with_archive: bool = False
    ) -> MoveRecord:
        """Validate and record a move; MoveRejected (nothing changed) if it cannot be."""
        if target_db not in self.databases:
            raise MoveRejected(f"unknown database {target_db!r}")
        source_db = await self.directory.mailbox_database(mailbox)
        if source_db is None:
            raise MoveRejected(f"unknown mailbox {mailbox!r} (not in the mailbox directory)")
        if source_db == target_db:
            raise MoveRejected(f"mailbox {mailbox!r} is already in {target_db}")
        mailboxes = [mailbox]
        if with_archive:
            archive = mailbox + ARCHIVE_SUFFIX
            if await self.directory.mailbox_database(archive) != source_db:
                raise MoveRejected(f"mailbox {mailbox!r} has no archive {archive!r} in {source_db}")
            mailboxes.append(archive)
        for name in mailboxes:
            try:
                row = await self.nodes.mailbox(source_db, name)
                existing = await self.nodes.mailbox(target_db, name)
            except NodeCallError as exc:
                raise MoveRejected(f"cannot check {name!r}: {exc}") from exc
            if row is None or row.get("soft_deleted"):
                raise MoveRejected(f"mailbox {name!r} is not in {source_db}")
            if row.get("locked"):
                raise MoveRejected(f"mailbox {name!r} is locked")
            if existing is not None:
                raise MoveRejected(f"{target_db} already holds a mailbox {name!r}")
        record = self.requests.create(
            mailboxes=tuple(mailboxes),
            source_db=source_db,
            target_db=target_db,
            now=self.clock.now(),
        )
        self._progress(record, f"move {record.id} recorded: {mailboxes} {source_db} -> {target_db}")
        return record

    # ---- running ---------------------------------------------------------------------------

    async def run(self, move_id: str) -> MoveRecord:
        """Run (or resume) a move until it completes or fails; return the final record.

        MoveRejected if another client is running the same move right now."""
        with self.requests.running(move_id):
            return await self._run_held(move_id)

    async def _run_held(self, move_id: str) -> MoveRecord:
        record = self.requests.get(move_id)
        if record is None:
            raise MoveRejected(f"no move request {move_id!r}")
        if record.state is MoveState.COMPLETED:
            return record
        resumed_after_failure = record.state is MoveState.FAILED
        record = replace(record, state=MoveState.IN_PROGRESS, failure=None)
        if resumed_after_failure:
            # An operator's resume starts the stall and flush limits afresh; a crash-resume
            # (kill -9) keeps them running, since the time passed while nobody watched counts.
            record = replace(
                record,
                stalled_since=None,
                stall_reason=None,
                flush_started=self.clock.now() if record.flush_started else None,
            )
        record = self._save(record)
        steps = {
            MoveStep.RECORD_REQUEST: self._step_record,
            MoveStep.CLONE_STRUCTURE: self._step_clone,
            MoveStep.INITIAL_SYNC: self._step_initial_sync,
            MoveStep.INCREMENTAL_SYNC: self._step_incremental_sync,
            MoveStep.LOCK_SOURCE: self._step_lock_source,
            MoveStep.FINAL_SYNC_AND_FLUSH: self._step_final_sync_and_flush,
            MoveStep.FINAL_HEALTH_CHECK: self._step_final_health,
            MoveStep.UPDATE_DIRECTORY: self._step_update_directory,
            MoveStep.UNLOCK_TARGET: self._step_unlock_target,
            MoveStep.SOFT_DELETE_SOURCE: self._step_soft_delete_source,
        }
        try:
            for step in MoveStep:
                if step <= record.steps_done:
                    continue
                record = self._save(replace(record, step=step))
                self._progress(record, f"step {int(step)}: {step.label}")
                record = await steps[step](record)
                record = self._save(replace(record, steps_done=int(step)))
        except MoveFailed as exc:
            record = self._save(
                replace(
                    self.requests.get(move_id) or record, state=MoveState.FAILED, failure=str(exc)
                )
            )
            self._progress(record, f"move failed at step {int(record.step)}: {exc}")
            return record
        record = self._save(
            replace(
                record,
                state=MoveState.COMPLETED,
                completed=self.clock.now(),
                stalled_since=None,
                stall_reason=None,
            )
        )
        self._progress(record, "move completed")
        return record

    def _save(self, record: MoveRecord) -> MoveRecord:
        # time_stalled only grows: a step that stalled inside a node call (`_node_call`
        # saves the stall) and then saves the record it held from before must not undo it.
        stored = self.requests.get(record.id)
        if stored is not None and stored.time_stalled > record.time_stalled:
            record = replace(record, time_stalled=stored.time_stalled)
        return self.requests.save(record, self.clock.now())

    async def _wait(self, record: MoveRecord, decision: Decision) -> MoveRecord:
        """Stall: record why, sleep, and count the time stalled."""
        record = self._save(
            replace(
                record,
                state=MoveState.STALLED,
                stalled_since=decision.stalled_since,
                stall_reason=decision.reason,
            )
        )
        self._progress(
            record,
            f"stalled: {decision.reason}; next check in {decision.wait.total_seconds():.0f}s",
        )
        await self.clock.sleep(decision.wait.total_seconds())
        return self._save(
            replace(record, time_stalled=record.time_stalled + decision.wait.total_seconds())
        )

    def _unstall(self, record: MoveRecord) -> MoveRecord:
        if record.state is MoveState.IN_PROGRESS:
            return record
        return self._save(
            replace(record, state=MoveState.IN_PROGRESS, stalled_since=None, stall_reason=None)
        )

    async def _ask_health(self, record: MoveRecord) -> GuaranteeAnswer:
        answer = await self.guarantee.check_health(record.target_db, self.caller_id)
        self.requests.add_answer(
            record.id,
            step=record.step,
            method="CheckReplicationHealth",
            answer=answer,
            now=self.clock.now(),
        )
        return answer

    async def _health_gate(self, record: MoveRecord) -> MoveRecord:
        """Ask CheckReplicationHealth until Satisfied (stalling) or fail past the limit."""
        while True:
            answer = await self._ask_health(record)
            self._last_check = self.clock.now()
            decision = gate(
                answer,
                now=self.clock.now(),
                stalled_since=record.stalled_since,
                settings=self.settings,
            )
            if decision.verdict is Verdict.CONTINUE:
                return self._unstall(record)
            if decision.verdict is Verdict.FAIL:
                raise MoveFailed(decision.reason)
            record = await self._wait(record, decision)

    async def _periodic_gate(self, record: MoveRecord) -> MoveRecord:
        if health_check_due(self._last_check, self.clock.now(), self.settings):
            return await self._health_gate(record)
        return record

    async def _node_call(self, record: MoveRecord, what: str, fn: Callable[[], Any]) -> Any:
        """A store call; a node that cannot answer stalls the move (same limit as the API)."""
        stalled_since = None
        while True:
            try:
                result = await fn()
                if stalled_since is not None:
                    self._unstall(record)
                return result
            except NodeCallError as exc:
                if exc.status is not None and exc.status < 500 and exc.status not in (409, 423):
                    raise MoveFailed(f"{what}: {exc}") from exc
                now = self.clock.now()
                stalled_since = stalled_since or now
                if now - stalled_since >= self.settings.stall_limit:
                    raise MoveFailed(f"{what}: stalled {self.settings.stall_limit}: {exc}") from exc
                record = await self._wait(
                    record,
                    Decision(
                        Verdict.WAIT,
                        wait=self.settings.stall_retry_interval,
                        reason=f"{what}: {exc}",
                        stalled_since=stalled_since,
                    ),
                )

    # ---- the ten steps ---------------------------------------------------------------------

    async def _step_record(self, record: MoveRecord) -> MoveRecord:
        return await self._health_gate(record)

    async def _step_clone(self, record: MoveRecord) -> MoveRecord:
        for name in record.mailboxes:
            source = await self._node_call(
                record,
                "read source mailbox",
                lambda n=name: self.nodes.mailbox(record.source_db, n),
            )
            if source is None:
                raise MoveFailed(f"mailbox {name!r} vanished from {record.source_db}")
            target = await self._node_call(
                record,
                "read target mailbox",
                lambda n=name: self.nodes.mailbox(record.target_db, n),
            )
            if target is None:
                await self._node_call(
                    record,
                    "create target mailbox",
                    lambda n=name, s=source: self.nodes.create_mailbox(
                        record.target_db,
                        n,
                        display_name=s["display_name"],
                        folders=s["folders"],
                        locked=True,
                    ),
                )
            else:
                for folder in set(source["folders"]) - set(target["folders"]):
                    await self._node_call(
                        record,
                        "create target folder",
                        lambda n=name, f=folder: self.nodes.create_folder(record.target_db, n, f),
                    )
        return await self._health_gate(record)

    async def _copy_changes(self, record: MoveRecord, *, initial: bool) -> tuple[MoveRecord, int]:
        """Copy changes since each mailbox's cursor; return the record and the change count."""
        total = 0
        src, dst = record.source_db, record.target_db
        for name in record.mailboxes:
            cursor = record.sync_cursor.get(name, 0)
            changes = await self._node_call(
                record,
                "read source items",
                lambda n=name, c=cursor: self.nodes.items(src, n, c),
            )
            batch: list[dict[str, Any]] = []
            size = 0
            for item in changes:
                if item["deleted"]:
                    if not initial:
                        await self._node_call(
                            record,
                            "delete target item",
                            lambda n=name, it=item: self.nodes.delete_item(dst, n, it["item_id"]),
                        )
                else:
                    entry = {k: item[k] for k in ("item_id", "folder", "subject", "body")}
                    entry_size = _write_size(entry)
                    # One write is one transaction, and a transaction must fit in one log
                    # generation of the target: cut batches by bytes as well as by count.
                    if batch and (
                        len(batch) >= self.settings.sync_batch
                        or size + entry_size > self.settings.sync_batch_bytes
                    ):
                        record = await self._write_batch(record, name, batch, cursor)
                        batch, size = [], 0
                    batch.append(entry)
                    size += entry_size
                cursor = item["change_number"]
            if batch:
                record = await self._write_batch(record, name, batch, cursor)
            elif changes:
                record = self._save(
                    replace(record, sync_cursor={**record.sync_cursor, name: cursor})
                )
            total += len(changes)
        return record, total

    async def _write_batch(
        self, record: MoveRecord, mailbox: str, batch: list[dict[str, Any]], cursor: int
    ) -> MoveRecord:
        """Write one batch to the target, then save the cursor that covers it."""
        await self._node_call(
            record,
            "write target items",
            lambda: self.nodes.put_items(record.target_db, mailbox, batch),
        )
        record = self._save(
            replace(
                record,
                items_copied=record.items_copied + len(batch),
                bytes_copied=record.bytes_copied + sum(len(b["body"].encode()) for b in batch),
                sync_cursor={**record.sync_cursor, mailbox: cursor},
            )
        )
        self._progress(record, "")
        return await self._periodic_gate(record)

    async def _step_initial_sync(self, record: MoveRecord) -> MoveRecord:
        record, _ = await self._copy_changes(record, initial=True)
        return await self._health_gate(record)

    async def _step_incremental_sync(self, record: MoveRecord) -> MoveRecord:
        while True:
            record, changes = await self._copy_changes(record, initial=False)
            record = self._save(replace(record, incremental_passes=record.incremental_passes + 1))
            record = await self._periodic_gate(record)
            if incremental_done(changes, record.incremental_passes, self.settings):
                return record

    async def _step_lock_source(self, record: MoveRecord) -> MoveRecord:
        for name in record.mailboxes:
            await self._node_call(
                record,
                "lock source",
                lambda n=name: self.nodes.set_state(record.source_db, n, "lock"),
            )
        return record

    async def _step_final_sync_and_flush(self, record: MoveRecord) -> MoveRecord:
        if record.final_generation is None:
            record, _ = await self._copy_changes(record, initial=False)
            generation = await self._node_call(
                record, "roll target log", lambda: self.nodes.roll_log(record.target_db)
            )
            record = self._save(
                replace(record, final_generation=generation, flush_started=self.clock.now())
            )
            self._progress(
                record, f"target log rolled: generation {generation} holds the final sync"
            )
        return await self._flush_wait(record, record.final_generation)

    async def _flush_wait(self, record: MoveRecord, generation: int | None) -> MoveRecord:
        """Ask CheckReplicationFlush for `generation` until Satisfied, or fail at the limit."""
        assert generation is not None and record.flush_started is not None
        s = self.settings
        first = record.flush_started + min(s.flush_first_check_after, s.flush_retry_interval)
        if self.clock.now() < first:
            await self.clock.sleep((first - self.clock.now()).total_seconds())
        while True:
            # The roll closed the generation just before flush_started: that is the commit
            # time the seed's check compares the copies' last replayed log time with.
            answer = await self.guarantee.check_flush(
                record.target_db, self.caller_id, generation, record.flush_started
            )
            self.requests.add_answer(
                record.id,
                step=record.step,
                method="CheckReplicationFlush",
                answer=answer,
                now=self.clock.now(),
            )
            decision = flush_gate(
                answer,
                now=self.clock.now(),
                flush_started=record.flush_started,
                settings=self.settings,
            )
            if decision.verdict is Verdict.CONTINUE:
                return self._unstall(record)
            if decision.verdict is Verdict.FAIL:
                raise MoveFailed(decision.reason)
            record = await self._wait(record, decision)

    async def _step_final_health(self, record: MoveRecord) -> MoveRecord:
        return await self._health_gate(replace(record, stalled_since=None))

    async def _step_update_directory(self, record: MoveRecord) -> MoveRecord:
        for name in record.mailboxes:
            current = await self.directory.mailbox_database(name)
            if current == record.target_db:
                continue  # done before a crash
            if not await self.directory.set_mailbox_database(
                name, record.target_db, expected=record.source_db
            ):
                raise MoveFailed(f"the mailbox directory entry of {name!r} changed under the move")
        return record

    async def _step_unlock_target(self, record: MoveRecord) -> MoveRecord:
        """Unlock the target, and wait until the unlock is replayed like the final sync was:
        a failover right after completion must leave a usable mailbox, not a locked one."""
        if record.unlock_generation is None:
            for name in record.mailboxes:
                await self._node_call(
                    record,
                    "unlock target",
                    lambda n=name: self.nodes.set_state(record.target_db, n, "unlock"),
                )
            generation = await self._node_call(
                record, "roll target log", lambda: self.nodes.roll_log(record.target_db)
            )
            record = self._save(
                replace(record, unlock_generation=generation, flush_started=self.clock.now())
            )
            self._progress(record, f"target log rolled: generation {generation} holds the unlock")
        return await self._flush_wait(record, record.unlock_generation)

    async def _step_soft_delete_source(self, record: MoveRecord) -> MoveRecord:
        for name in record.mailboxes:
            row = await self._node_call(
                record,
                "read source mailbox",
                lambda n=name: self.nodes.mailbox(record.source_db, n),
            )
            if row is not None and not row.get("soft_deleted"):
                await self._node_call(
                    record,
                    "soft-delete source",
                    lambda n=name: self.nodes.set_state(record.source_db, n, "soft-delete"),
                )
        return record
