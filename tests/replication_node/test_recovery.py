import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dag_common.store_api import ItemIn
from replication_node.active.mailbox_store import MailboxStore
from replication_node.errors import RecoveryError
from replication_node.log import logfile
from replication_node.log.logdir import list_closed_generations
from tests.replication_node.helpers import mount

ROOT = Path(__file__).resolve().parents[2]


def items(copy):
    return {r.item_id: r for r in copy.items("m") if not r.deleted}


async def fill(tmp_path, n=120, llr_depth=2):
    copy = await mount(tmp_path, llr_depth=llr_depth, log_file_size=16 * 1024)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    for i in range(n):
        await store.put_items("m", [ItemIn(item_id=f"i{i}", body="z" * 900)])
    return copy, store


@pytest.mark.parametrize(("round_", "spares"), [(0, 0), (1, 0), (2, 0), (0, 32), (2, 32)])
def test_kill_9_during_concurrent_commits_loses_no_acknowledged_write(tmp_path, round_, spares):
    """kill -9 of a process committing from 16 writers at once; with `spares`, its rolls
    write the generations over spare log files (`log/spares.py`): the killed E00.log is one,
    zeros past its last record."""
    child = ["tests.replication_node.crash_writer", str(tmp_path), "16", str(64 * 1024), "700"]
    proc = subprocess.Popen(
        [sys.executable, "-m", *child, str(spares)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    acked = []
    for line in proc.stdout:
        acked.append(line.split()[1])
        if len(acked) >= 400 + 150 * round_:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    acked += [line.split()[1] for line in proc.stdout if line.startswith("ACK ")]

    import asyncio

    if spares:  # the open log the kill left is a spare: its file is whole, zeros at its end
        e00 = tmp_path / "logs" / logfile.OPEN_LOG_NAME
        assert e00.stat().st_size == 64 * 1024
        assert logfile.scan(e00.read_bytes()).unwritten > 0

    async def check():
        copy = await mount(tmp_path, llr_depth=3, create=False)
        present = items(copy)
        missing = [a for a in acked if a not in present]
        assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:3]}"
        for row in present.values():  # nothing half-applied
            assert row.subject == row.item_id and row.body == "y" * 700
        # the stream continues where it stopped
        store = MailboxStore(copy)
        ack = await store.put_items("m", [ItemIn(item_id="after", body=".")])
        assert ack.lsn.generation == copy.stream.generation
        await copy.crash_close()

    asyncio.run(check())


async def test_torn_tail_is_cut_and_reported(tmp_path):
    copy, _ = await fill(tmp_path, n=10)
    created, salt = copy.stream.open_header.creation_time, copy.stream.open_header.salt
    await copy.crash_close()
    e00 = copy.paths.logs / logfile.OPEN_LOG_NAME
    size = e00.stat().st_size
    with open(e00, "ab") as f:  # a write that was in flight when the power went
        f.write(logfile.encode_transaction([{"op": "put_item"}], created, salt=salt)[:-7])
    copy = await mount(tmp_path, create=False, log_file_size=16 * 1024)
    assert len(items(copy)) == 10
    assert any("cut at offset" in n for n in copy.recovery_notes)
    assert e00.stat().st_size == size
    await copy.crash_close()


@pytest.mark.parametrize(
    ("op", "why"),
    [
        ({"op": "put_item", "mailbox": "m", "cn": 99, "folder": "Inbox"}, "field `item_id`"),
        ({"op": "drop_table", "mailbox": "m", "cn": 99}, "Invalid value 'drop_table'"),
    ],
)
async def test_a_forged_operation_with_a_valid_checksum_stops_recovery_naming_it(tmp_path, op, why):
    """A whole record (its CRC32C holds) whose operation is not one: decoded once, where the
    log is read, and refused there with where it is and why; never skipped."""
    copy, _ = await fill(tmp_path, n=3)
    created, salt = copy.stream.open_header.creation_time, copy.stream.open_header.salt
    await copy.crash_close()
    e00 = copy.paths.logs / logfile.OPEN_LOG_NAME
    offset = e00.stat().st_size
    with open(e00, "ab") as f:
        f.write(logfile.encode_transaction([op], created, salt=salt))
    with pytest.raises(RecoveryError, match=f"offset {offset}: malformed operation: .*{why}"):
        await mount(tmp_path, create=False, log_file_size=16 * 1024)


async def test_crash_between_close_record_and_rename_finishes_the_roll(tmp_path):
    copy, _ = await fill(tmp_path, n=10)
    gen = copy.stream.generation
    created, salt = copy.stream.open_header.creation_time, copy.stream.open_header.salt
    await copy.crash_close()
    e00 = copy.paths.logs / logfile.OPEN_LOG_NAME
    with open(e00, "ab") as f:  # the CLOSE record is durable, the rename never happened
        f.write(logfile.encode_record(logfile.RecordType.CLOSE, created, salt=salt))
    copy = await mount(tmp_path, create=False, log_file_size=16 * 1024)
    assert len(items(copy)) == 10
    assert logfile.verify_closed((copy.paths.logs / logfile.closed_log_name(gen)).read_bytes(), gen)
    assert copy.stream.generation == gen + 1
    await copy.crash_close()


async def test_flipped_bit_in_closed_generation_stops_recovery(tmp_path):
    copy, _ = await fill(tmp_path, llr_depth=4)
    await copy.crash_close()
    gen = copy.db.header.waypoint + 1
    path = copy.paths.logs / logfile.closed_log_name(gen)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(RecoveryError, match=f"closed generation {gen} is corrupt"):
        await mount(tmp_path, create=False, log_file_size=16 * 1024)


async def test_missing_generation_stops_recovery(tmp_path):
    copy, _ = await fill(tmp_path, llr_depth=4)
    await copy.crash_close()
    gen = copy.db.header.waypoint + 2
    (copy.paths.logs / logfile.closed_log_name(gen)).unlink()
    with pytest.raises(RecoveryError, match=f"\\[{gen}\\].*missing"):
        await mount(tmp_path, create=False, log_file_size=16 * 1024)


async def test_wrong_generation_in_file_name_stops_recovery(tmp_path):
    copy, _ = await fill(tmp_path, llr_depth=4)
    await copy.crash_close()
    a = copy.db.header.waypoint + 1
    pa = copy.paths.logs / logfile.closed_log_name(a)
    pb = copy.paths.logs / logfile.closed_log_name(a + 1)
    da, db_ = pa.read_bytes(), pb.read_bytes()
    pa.write_bytes(db_)
    pb.write_bytes(da)
    with pytest.raises(RecoveryError, match="file name says"):
        await mount(tmp_path, create=False, log_file_size=16 * 1024)


async def test_log_from_another_stream_stops_recovery(tmp_path):
    copy, _ = await fill(tmp_path, llr_depth=4)
    await copy.crash_close()
    other, _ = await fill(tmp_path / "other", llr_depth=4)
    await other.crash_close()
    gen = copy.db.header.waypoint + 1
    name = logfile.closed_log_name(gen)
    (copy.paths.logs / name).write_bytes((other.paths.logs / name).read_bytes())
    with pytest.raises(RecoveryError, match="belongs to log stream"):
        await mount(tmp_path, create=False, log_file_size=16 * 1024)


@pytest.mark.parametrize("llr_depth", [1, 2, 5])
async def test_llr_waypoint_stays_llr_depth_behind_committed(tmp_path, llr_depth):
    copy, _ = await fill(tmp_path, n=200, llr_depth=llr_depth)
    await copy.roll()
    for task in list(copy._flush_tasks):
        await task
    header = copy.db.header
    committed = copy.stream.generation
    assert committed > llr_depth + 2
    assert header.waypoint == committed - llr_depth
    assert header.checkpoint == header.waypoint + 1
    # the database file holds exactly the transactions of generations <= waypoint
    on_disk = {r.item_id: r for r in copy.db.items("m")}
    gens = {}
    for gen in list_closed_generations(copy.paths.logs):
        data = (copy.paths.logs / logfile.closed_log_name(gen)).read_bytes()
        for rec in logfile.verify_closed(data).transactions:
            for op in rec.ops:
                if op["op"] == "put_item":
                    gens[op["item_id"]] = gen
    for item_id, gen in gens.items():
        assert (item_id in on_disk) == (gen <= header.waypoint), item_id
    # and reads see everything, file or memory
    assert len(items(copy)) == 200
    await copy.crash_close()


async def test_clean_dismount_writes_everything(tmp_path):
    copy, _ = await fill(tmp_path, n=50, llr_depth=10)
    header = await copy.dismount()
    assert header.state == "Clean Shutdown"
    assert header.waypoint == copy.stream.last_closed_generation
    copy = await mount(tmp_path, create=False, llr_depth=10, log_file_size=16 * 1024)
    assert len(items(copy)) == 50
    await copy.crash_close()
