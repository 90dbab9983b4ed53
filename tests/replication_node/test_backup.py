"""Backup and restore in one process: the backup lease's rules (a manual clock), the
manifest's checks (table-driven), and a backup taken from a real active copy through the
active's own coordination code (`active/backup_leases.py`, as its routes call it), restored, then
damaged in each way a restore must refuse, naming the file and the reason; and a backup that
fails before its end (a disk full, the active refusing the end) leaves no manifest and no
stamp."""

from __future__ import annotations

import errno
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dag_common.clock import ManualClock, SystemClock
from replication_node.active.backup_leases import BackupLeases, begin_answer, stamp
from replication_node.active.instance import ActiveInstance
from replication_node.backup.backup import BackupRequest, run_backup
from replication_node.backup.files import sha256_of
from replication_node.backup.manifest import (
    MANIFEST_NAME,
    FileEntry,
    LogEntry,
    Manifest,
    parse_manifest,
    sequence_problem,
)
from replication_node.backup.restore import restore
from replication_node.backup.sources import ActiveSource
from replication_node.errors import BackupDamaged, BackupError, BadRequest, Conflict, NotFound
from replication_node.log.body import BodyReader
from replication_node.storage.database import Database
from replication_node.storage.header import DatabaseState
from replication_node.storage.ops import BackupKind
from tests.cluster_harness import wait_until
from tests.replication_node.helpers import commit_staged, mount, text_body
from tests.replication_node.share import Share

# ---- the lease ---------------------------------------------------------------------------


async def test_one_backup_at_a_time_and_a_lease_not_renewed_ends():
    clock = ManualClock()
    leases = BackupLeases(clock=clock, ttl=10)
    first = leases.begin("mbx2", BackupKind.FULL)
    with pytest.raises(Conflict, match="full backup from mbx2"):
        leases.begin("mbx3", BackupKind.FULL)
    await clock.advance(9)
    leases.renew(first.backup_id)
    await clock.advance(9)
    assert leases.running() == replace(first, expires=first.expires + 9)
    await clock.advance(1)
    assert leases.running() is None  # not renewed for a whole TTL: over
    with pytest.raises(NotFound):
        leases.renew(first.backup_id)
    with pytest.raises(NotFound):
        leases.finish(first.backup_id)
    second = leases.begin("mbx3", BackupKind.FULL)
    leases.finish(second.backup_id)
    assert leases.running() is None


# ---- the manifest ------------------------------------------------------------------------

T = datetime(2026, 11, 23, tzinfo=UTC)
SIG = (uuid.uuid4(), uuid.uuid4())


def manifest(kind=BackupKind.FULL, after=4, last=6, **kw) -> Manifest:
    logs = tuple(
        LogEntry.of(g, FileEntry(name=f"E{g:08X}.log", size=10, sha256="0" * 64), T, T)
        for g in range(after + 1, last + 1)
    )
    db_file = (
        FileEntry(name="DB1.sqlite", size=10, sha256="0" * 64) if kind is BackupKind.FULL else None
    )
    fields = dict(
        kind=kind, backup_id="b", database="DB1", source_node="mbx2", source_role="passive",
        database_signature=SIG[0], log_signature=SIG[1], started_at=T, ended_at=T,
        after_generation=after, last_generation=last, logs=logs, database_file=db_file,
    )  # fmt: skip
    return Manifest(**{**fields, **kw})


def test_a_manifest_reads_back_as_written():
    m = manifest()
    assert parse_manifest(m.encode(), "x") == m


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"{", "not a usable manifest"),
        (b'{"format": 2}', "format 2"),
        (manifest().encode().replace(b'"kind": "full"', b'"kind": "daily"'), "daily"),
        (manifest(logs=manifest().logs[:1]).encode(), "not generations 5-6"),
        (manifest(database_file=None).encode(), "full backup without a database file"),
        (b"[1]", "not a JSON object"),
        (manifest().encode().replace(b'"size": 10', b'"size": "10"', 1), "size: .*integer"),
        (manifest().encode().replace(b'"0000', b'"zz00', 1), "sha256: .*pattern"),
        (manifest().encode().replace(b'"backup_id": "b",', b"", 1), "backup_id: Field required"),
        (
            manifest().encode().replace(b'"after_generation": 4', b'"after_generation": true'),
            "after_generation: .*integer",
        ),
        (
            manifest().encode().replace(b'"2026-11-23T00:00:00+00:00"', b"1795392000", 1),
            "started_at: .*datetime",
        ),
        (manifest().encode().replace(b'"size": 10', b'"size": -1', 1), "size: .*0"),
        (manifest().encode().replace(b'"generation": 5', b'"generation": 0'), "generation"),
        # Forged: a file named outside the set's directory, or two entries for one file.
        (manifest().encode().replace(b'"E00000005.log"', b'"../E00000005.log"'), "leave the set"),
        (manifest().encode().replace(b'"E00000006.log"', b'"E00000005.log"'), "names repeat"),
    ],
)
def test_a_manifest_that_is_not_one_is_refused_naming_why(data, why):
    with pytest.raises(BackupDamaged, match=why):
        parse_manifest(data, "set/manifest.json")


INC = BackupKind.INCREMENTAL


@pytest.mark.parametrize(
    ("sets", "why"),
    [
        ([], "no backup set"),
        ([manifest(INC)], "begins with a full backup"),
        ([manifest(), manifest()], "second full backup"),
        ([manifest(), manifest(INC, after=7, last=9)], "begins after generation 7, but"),
        ([manifest(), manifest(INC, 6, 9, log_signature=uuid.uuid4())], "another database"),
        ([manifest(), manifest(INC, 6, 9), manifest(INC, 9, 12)], None),
    ],
)
def test_the_order_of_backup_sets(sets, why):
    problem = sequence_problem([(f"set{i}", m) for i, m in enumerate(sets)])
    assert (problem is None) if why is None else (why in problem), problem


# ---- a backup of a real active copy ------------------------------------------------------


class InProcessActive:
    """The active's backup routes without HTTP: the same coordinator calls they make."""

    def __init__(self, instance: ActiveInstance, *, circular_logging=False, end_error=None):
        self.instance = instance
        self.circular_logging = circular_logging
        self.end_error = end_error
        self.aborted: list[str] = []

    async def begin(self, node, kind):
        copy = self.instance.copy
        return begin_answer(
            self.instance.backups, copy.merged_header, node=node, kind=kind,
            circular_logging=self.circular_logging, epoch=1,
        )  # fmt: skip

    async def renew(self, backup_id):
        self.instance.backups.renew(backup_id)

    async def roll(self, backup_id):
        await self.instance.copy.roll(force=True)
        return self.instance.copy.stream.last_closed_generation

    async def end(self, backup_id, generation, ended):
        if self.end_error is not None:
            raise self.end_error
        return await stamp(
            self.instance.copy, self.instance.backups, backup_id, generation=generation,
            ended=ended,
        )  # fmt: skip

    async def abort(self, backup_id):
        self.aborted.append(backup_id)
        self.instance.backups.finish(backup_id)


async def take(share: Share, to: Path, kind=BackupKind.FULL, **kw) -> Manifest:
    result = await run_backup(
        BackupRequest("DB1", "a", to, kind),
        source=ActiveSource(share.active),
        active=kw.pop("active", None) or InProcessActive(share.active, **kw),
        clock=SystemClock(),
    )
    return result.manifest


def items(path: Path) -> set[str]:
    db = Database.open(path)
    try:
        return {r.item_id for r in db.items("m") if not r.deleted}
    finally:
        db.close()


async def test_full_then_incremental_restore_every_write_and_stamp_the_active(share, tmp_path):
    await share.write(0, 40)
    await share.roll()
    await share.write(40, 40)  # in the open log: the backup's roll closes it
    full = await take(share, tmp_path / "full")
    assert full.last_generation == share.active.copy.stream.last_closed_generation
    header = share.active.copy.merged_header
    assert header.last_full_backup_generation == full.last_generation
    assert header.last_backup_generation == full.last_generation

    await share.write(80, 40)
    inc = await take(share, tmp_path / "inc", BackupKind.INCREMENTAL)
    assert inc.after_generation == full.last_generation and inc.database_file is None
    assert share.active.copy.merged_header.last_incremental_backup_generation == inc.last_generation

    result = restore([tmp_path / "full", tmp_path / "inc"], to=tmp_path / "r", clock=SystemClock())
    assert result.header.state is DatabaseState.CLEAN_SHUTDOWN
    assert result.header.waypoint == inc.last_generation
    # the full backup's own stamp is in a generation the incremental holds
    assert result.header.last_full_backup_generation == full.last_generation
    assert items(result.path) == {f"i{n}" for n in range(120)}

    part = restore(
        [tmp_path / "full", tmp_path / "inc"],
        to=tmp_path / "p",
        clock=SystemClock(),
        until_generation=full.last_generation,
    )
    assert items(part.path) == {f"i{n}" for n in range(80)}

    # A node mounts the restored file as a database: its stream goes on after the waypoint.
    copy = await mount(tmp_path / "r", create=False)
    try:
        assert copy.stream.generation == inc.last_generation + 1
        assert len(copy.items("m")) == 120
    finally:
        await copy.dismount()


async def test_incremental_refusals(share, tmp_path):
    await share.write(0, 5)
    with pytest.raises(Conflict, match="no full backup"):
        await take(share, tmp_path / "i", BackupKind.INCREMENTAL)
    with pytest.raises(BadRequest, match="circular_logging"):
        await take(share, tmp_path / "i", BackupKind.INCREMENTAL, circular_logging=True)
    assert not (tmp_path / "i").exists()
    assert share.active.backups.running() is None


async def test_a_backup_that_fails_leaves_no_manifest_and_no_stamp(share, tmp_path):
    await share.write(0, 20)
    full_disk = OSError(errno.ENOSPC, "No space left on device")
    active = InProcessActive(share.active, end_error=full_disk)
    with pytest.raises(OSError, match="No space"):
        await take(share, tmp_path / "b", active=active)
    assert not (tmp_path / "b").exists()  # made by the backup, and taken back whole
    assert active.aborted and share.active.backups.running() is None
    assert share.active.copy.merged_header.last_backup_generation == 0

    kept = tmp_path / "kept"
    kept.mkdir()  # an empty directory given: stays, emptied again
    refused = InProcessActive(share.active, end_error=NotFound("no running backup"))
    with pytest.raises(NotFound):
        await take(share, kept, active=refused)
    assert list(kept.iterdir()) == []
    assert share.active.copy.merged_header.last_backup_generation == 0


# ---- a damaged backup --------------------------------------------------------------------


@pytest.fixture
async def backed_up(share, tmp_path) -> tuple[Path, Manifest]:
    await share.write(0, 30)
    await share.roll()
    await share.write(30, 30)
    return tmp_path / "full", await take(share, tmp_path / "full")


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


async def test_a_damaged_or_incomplete_backup_is_refused_naming_the_file(backed_up, tmp_path):
    where, m = backed_up
    log = where / m.logs[-1].file.name

    def refused(why: str, *dirs: Path) -> None:
        with pytest.raises(BackupError, match=why):
            restore(list(dirs) or [where], to=tmp_path / "r", clock=SystemClock())
        assert not (tmp_path / "r" / "DB1.sqlite").exists()

    original = log.read_bytes()
    flip(log, len(original) - 40)
    refused(f"{log.name}: checksum mismatch")
    # the manifest rewritten to the damaged file's checksum: the log's own checks find it
    _, digest = sha256_of(log)
    text = (where / MANIFEST_NAME).read_text().replace(m.logs[-1].file.sha256, digest)
    (where / MANIFEST_NAME).write_text(text)
    refused(f"{log.name}: generation {m.logs[-1].generation}: record checksum mismatch")
    log.write_bytes(original)
    (where / MANIFEST_NAME).write_text(m.encode().decode())

    restore_dir = tmp_path / "busy"
    restore_dir.mkdir()
    (restore_dir / "x").write_text("x")
    with pytest.raises(BackupError, match="not empty"):
        restore([where], to=restore_dir, clock=SystemClock())

    with pytest.raises(BackupError, match="--until-generation"):
        restore([where], to=tmp_path / "r", clock=SystemClock(), until_generation=10**6)

    log.unlink()
    refused(f"{log.name}: missing")
    log.write_bytes(original)
    (where / MANIFEST_NAME).unlink()
    refused("incomplete backup")
    assert BackupDamaged.__mro__[1] is BackupError


async def test_a_backup_whose_first_log_continues_a_staged_body_restores_it_whole(share, tmp_path):
    """A full backup taken while a large item's body is staged (its first parts below the
    snapshot's waypoint), the item committed after it, an incremental: the full set holds the
    start of the body (Logs Required), and the restore reads it back across the sets."""
    await share.write(0, 5)
    active = share.active.copy
    text = text_body(90_000, seed=5)
    ref = await active.stage(BodyReader(text.encode()))
    for i in range(4):  # the file's waypoint passes the body's first parts (LLR depth 2)
        await share.write(10 + i, 1)
        await share.roll()
    await wait_until("the LLR flush", lambda: active.db.header.waypoint > ref.id.generation + 1)
    full = await take(share, tmp_path / "full")
    assert full.first <= ref.id.generation < full.after_generation, "the start is in the set"
    assert parse_manifest((tmp_path / "full" / "manifest.json").read_bytes(), "m") == full
    await commit_staged(active, text, ref)
    await share.write(20, 2)
    await take(share, tmp_path / "inc", BackupKind.INCREMENTAL)
    result = restore([tmp_path / "full", tmp_path / "inc"], to=tmp_path / "r", clock=SystemClock())
    assert result.header.required_from == 0
    db = Database.open(result.path)
    try:
        assert db.item("m", "big").body == text
    finally:
        db.close()
    # restored to a point where the body is still pending: its Logs Required say so
    part = restore(
        [tmp_path / "full", tmp_path / "inc"],
        to=tmp_path / "p",
        clock=SystemClock(),
        until_generation=full.last_generation,
    )
    assert part.header.required_from == ref.id.generation
    assert "big" not in items(part.path)
