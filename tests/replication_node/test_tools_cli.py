import json
import shutil

from dag_common.store_api import ItemIn
from replication_node.active.mailbox_store import MailboxStore
from replication_node.cli.main import main
from replication_node.log import logfile
from tests.replication_node.helpers import mount


async def make(tmp_path):
    copy = await mount(tmp_path, llr_depth=1)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    await store.put_items("m", [ItemIn(item_id="a", body="hello"), ItemIn(item_id="b")])
    await copy.roll()
    await copy.commit([])
    await copy.dismount()
    return copy


async def test_log_dump_of_a_good_closed_generation(tmp_path, capsys):
    copy = await make(tmp_path)
    path = copy.paths.logs / logfile.closed_log_name(1)
    assert main(["log", "dump", str(path), "--json"]) == 0
    dump = json.loads(capsys.readouterr().out)
    assert dump["verdict"] == "ok"
    assert dump["header"]["generation"] == 1
    assert dump["records"]["transactions"] == 2
    assert dump["records"]["operations"] == 3
    assert dump["records"]["closed"] is True
    assert main(["log", "dump", str(path), "--records"]) == 0
    text = capsys.readouterr().out
    assert "Verdict:             OK" in text and "TRANSACTION" in text and "CLOSE" in text


async def test_log_dump_reports_damage_with_exit_1(tmp_path, capsys):
    copy = await make(tmp_path)
    path = copy.paths.logs / logfile.closed_log_name(1)
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF
    path.write_bytes(bytes(data))
    assert main(["log", "dump", str(path), "--json"]) == 1
    dump = json.loads(capsys.readouterr().out)
    assert dump["verdict"] == "damaged"
    assert any("checksum mismatch" in p for p in dump["problems"])
    renamed = path.with_name(logfile.closed_log_name(7))
    path.rename(renamed)
    assert main(["log", "dump", str(renamed)]) == 1
    assert "file name says generation 7" in capsys.readouterr().out


def test_log_dump_of_garbage_and_missing_files(tmp_path, capsys):
    junk = tmp_path / "E00000001.log"
    junk.write_bytes(b"not a log" * 100)
    assert main(["log", "dump", str(junk)]) == 1
    assert "bad magic" in capsys.readouterr().out
    assert main(["log", "dump", str(tmp_path / "nope.log")]) == 2


async def test_db_header(tmp_path, capsys):
    copy = await make(tmp_path)
    assert main(["db", "header", str(copy.paths.database), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["state"] == "Clean Shutdown"
    assert info["waypoint"] == 2 and info["checkpoint"] == 3
    assert info["log_committed"] == [0, 3]
    assert main(["db", "header", str(copy.paths.database)]) == 0
    out = capsys.readouterr().out
    assert "Log Required:        none (consistent through generation 2)" in out
    assert "Waypoint:            2" in out
    assert main(["db", "header", str(tmp_path / "missing.sqlite")]) == 2


async def test_db_header_of_a_crashed_copy_changes_nothing(tmp_path, capsys):
    """Looking at the header of a copy left by a crash (eseutil /mh) writes nothing: its file
    and its WAL stay as they are, byte for byte.  It used to be opened read-write, and its
    close, the last connection, checkpointed the WAL into the file and deleted it."""
    live = await mount(tmp_path / "live")
    await MailboxStore(live).create_mailbox("m")
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    for f in live.paths.database.parent.glob(live.paths.database.name + "*"):
        shutil.copyfile(f, crashed / f.name)  # the files as a kill -9 leaves them
    await live.dismount()
    db = crashed / live.paths.database.name
    wal = db.with_name(db.name + "-wal")
    before = (db.read_bytes(), wal.read_bytes())
    assert main(["db", "header", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "Dirty Shutdown"
    assert wal.exists() and (db.read_bytes(), wal.read_bytes()) == before


async def test_log_dump_shows_where_a_spanning_transaction_begins_and_ends(tmp_path, capsys):
    copy = await mount(tmp_path, log_file_size=32 * 1024, llr_depth=1)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    result = await store.put_items("m", [ItemIn(item_id="big", body="q" * 100_000)])
    await copy.roll()
    await copy.dismount()
    logs = copy.paths.logs
    assert main(["log", "dump", str(logs / logfile.closed_log_name(1)), "--json"]) == 0
    staged = json.loads(capsys.readouterr().out)["records"]["staged_bodies"]
    (begun,) = staged["begun"]
    assert begun.startswith("1:")
    assert staged["pending_at_end"] == [begun] and staged["committed"] == []
    end = logs / logfile.closed_log_name(result.lsn.generation)
    assert main(["log", "dump", str(end), "--records"]) == 0
    text = capsys.readouterr().out
    assert f"Staged bodies:       carried {begun}; committed {begun}" in text
    assert f"commits body {begun} (100000 bytes, begun in generation 1)" in text
    assert f"body {begun} part 0" not in text and f"body {begun} part " in text
