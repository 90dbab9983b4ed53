"""Real clients through an online move (issue 50, steps 6 and 7), over the processes of
test_imap_move_e2e (three TLS nodes, the guarantee API, a transport with LMTP, the front, the
mover in this process):

- `mbsync` after a move fetches nothing it already had: a Maildir synced before the move
  keeps every file (same names, same inodes) through a sync after it; only the message
  delivered after the move is fetched, and the Maildir and the mailbox agree.
- Writes made while the move holds the source's lock: several sessions' STOREs, APPENDs
  (to INBOX and to another folder), a COPY, a MOVE and an EXPUNGE sent while the mover is
  paused right after locking the source each wait, are answered OK after the move, and
  every one of them is on the target.

No sleeps: each wait is for the thing itself (an answer, a log line)."""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mrs_client.policy import MoveState
from tests.cluster_harness import wait_until
from tests.imap_front.test_imap_clients import (
    _tuidless,
    maildir_state,
    mbsync,
    mbsync_config,
    server_state,
)
from tests.imap_front.test_imap_e2e import logged_in
from tests.imap_front.test_imap_move_e2e import (  # noqa: F401 - lab is a fixture
    SOURCE,
    TARGET,
    deliver,
    lab,
    listing,
    node_bytes,
)
from tests.mrs_client.e2e import active_of, mover_in_process, outcome

pytestmark = pytest.mark.slow


def files(local: Path) -> dict[str, int]:
    """Every message file of the Maildir (folders below `md/` and the inbox): its path
    without the flags suffix -> its inode."""
    out = {}
    for base in (local / "inbox", *(local / "md").iterdir()):
        for sub in ("cur", "new"):
            if (base / sub).is_dir():
                for f in (base / sub).iterdir():
                    out[str(f.relative_to(local)).partition(":2,")[0]] = f.stat().st_ino
    return out


async def folder_listing(c, node: str, folder: str) -> dict[int, tuple[str, tuple[str, ...]]]:
    body = await c.ok("GET", node, f"{TARGET}/folders/{folder}/uids")
    return {m[0]: (m[1], tuple(sorted(m[2]))) for m in body["messages"]}


async def test_mbsync_after_a_move_fetches_only_what_is_new(lab, tmp_path):  # noqa: F811
    c, hubs, front, ca = lab
    for n in (1, 2, 3):
        await asyncio.to_thread(deliver, hubs, n)
    await hubs.drained("hub1")

    def seed() -> None:
        m = logged_in(front.port, ca)
        m.create("Work")
        m.append("Work", r"(\Seen)", None, b"Subject: work\r\n\r\nwork item\r\n")
        m.select("INBOX")
        m.uid("STORE", "2", "+FLAGS", r"(\Flagged)")
        m.logout()

    await asyncio.to_thread(seed)
    local = tmp_path / "mbsync"
    local.mkdir()
    config = mbsync_config(local, front.port, ca)
    await asyncio.to_thread(mbsync, config)
    assert maildir_state(local) == await asyncio.to_thread(server_state, front.port, ca)
    had = files(local)
    assert len(had) == 4, had

    async with mover_in_process(c) as (start, _):
        await outcome(c, await start())
    target = await active_of(c, "DB2")
    raw = await asyncio.to_thread(deliver, hubs, 4)  # taken by DB2
    await hubs.drained("hub1")
    assert sorted(await folder_listing(c, target, "Inbox")) == [1, 2, 3, 4]

    said = await asyncio.to_thread(mbsync, config)
    now = files(local)
    assert {k: v for k, v in now.items() if k in had} == had, f"a file was fetched again:\n{said}"
    new = set(now) - set(had)
    assert len(new) == 1, (new, said)
    (path,) = new
    fetched = next((local / path).parent.glob(Path(path).name + "*"))
    assert _tuidless(fetched.read_bytes()).endswith(_tuidless(raw)), "the new delivery"
    assert "UIDVALIDITY" not in said, said
    server = await asyncio.to_thread(server_state, front.port, ca)
    assert maildir_state(local) == server, f"after the move: mbsync said\n{said[-4000:]}"
    assert len(server["INBOX"]) == 4 and len(server["Work"]) == 1, server


async def test_writes_while_the_source_is_locked_wait_and_land_on_the_target(lab):  # noqa: F811
    c, hubs, front, ca = lab
    for n in (1, 2, 3, 4, 5):
        await asyncio.to_thread(deliver, hubs, n)
    await hubs.drained("hub1")

    def sessions() -> list:
        out = []
        for _ in range(5):
            m = logged_in(front.port, ca)
            assert m.select("INBOX") == ("OK", [b"5"])
            out.append(m)
        out[0].create("Work")
        # \Deleted before the lock: the EXPUNGE sent during it has something to remove
        assert out[4].uid("STORE", "5", "+FLAGS", r"(\Deleted)")[0] == "OK"
        return out

    a, b, cc, d, e = await asyncio.to_thread(sessions)
    source_ids = {uid: item for uid, (item, _) in (await listing(c, "mbx1", SOURCE)).items()}
    source = {uid: await node_bytes(c, "mbx1", SOURCE, item) for uid, item in source_ids.items()}
    validity = a.untagged_responses["UIDVALIDITY"][0]
    during = b"Subject: appended while locked\r\n\r\nlocked\r\n"
    to_work = b"Subject: to work while locked\r\n\r\nwork\r\n"

    async with mover_in_process(c) as (start, _):
        run = await start()
        locked = run.nodes.pause(lambda method, db, n: (method, db) == ("set_state", "DB1"))
        await asyncio.wait_for(locked.reached.wait(), timeout=240)
        waits_before = front.log().count("locked by a move; waiting")
        # b's STORE and APPEND share its connection: one after the other, both in the lock
        writes = {
            "store a": lambda: a.uid("STORE", "1", "+FLAGS", r"(\Flagged)"),
            "store b, append": lambda: (
                b.uid("STORE", "1", "+FLAGS", r"(\Seen)"),
                b.append("INBOX", r"(\Draft)", None, during),
            ),
            "copy": lambda: cc.uid("COPY", "2", "Work"),
            "move": lambda: d.uid("MOVE", "3", "Work"),
            "expunge": e.expunge,
            "append to Work": lambda: logged_in(front.port, ca).append("Work", None, None, to_work),
        }
        # threads of their own: held by the lock, they would take every worker of the loop's
        # default pool, which the mover's lease (its store in this process) needs meanwhile
        pool = ThreadPoolExecutor(len(writes))
        loop = asyncio.get_running_loop()
        tasks = {n: loop.run_in_executor(pool, f) for n, f in writes.items()}

        async def all_waiting() -> bool:
            # one "waiting" line per write held; b's APPEND is sent once its STORE is answered
            return front.log().count("locked by a move; waiting") - waits_before >= len(writes)

        await wait_until("every write waits on the lock", all_waiting, timeout=60, every=0.05)
        assert not any(t.done() for t in tasks.values()), {
            n: t.result() for n, t in tasks.items() if t.done()
        }
        locked.release.set()
        # the move completes; `outcome` would compare the target with the source, which the
        # writes held by the lock change on the target as soon as it is unlocked
        record = await asyncio.wait_for(run.task, timeout=300)
        assert record.state is MoveState.COMPLETED, (record, run.lines)
        answers = {n: await asyncio.wait_for(t, timeout=120) for n, t in tasks.items()}
        pool.shutdown()
    stored_b, appended = answers.pop("store b, append")
    answers.update({"store b": stored_b, "append": appended})
    assert all(typ == "OK" for typ, _ in answers.values()), answers
    assert re.search(rb"APPENDUID %s 6\]" % validity, appended[1][0]), appended
    assert answers["expunge"][1] not in ([], [None]), answers["expunge"]

    target = await active_of(c, "DB2")
    inbox = await folder_listing(c, target, "Inbox")
    work = await folder_listing(c, target, "Work")
    assert sorted(inbox) == [1, 2, 4, 6], inbox  # 3 moved out, 5 expunged, 6 appended
    assert inbox[1][1] == ("\\Flagged", "\\Seen"), inbox
    assert inbox[6][1] == ("\\Draft",), inbox
    assert await node_bytes(c, target, TARGET, inbox[6][0]) == during
    work_bodies = {
        uid: await node_bytes(c, target, TARGET, item) for uid, (item, _) in work.items()
    }
    assert sorted(work_bodies.values()) == sorted([source[2], source[3], to_work]), work_bodies
    assert source_ids[3] in {item for item, _ in work.values()}, "a MOVE keeps the item"

    def after() -> dict:
        out = {}
        for name, m in zip("abcde", (a, b, cc, d, e), strict=True):
            out[name] = m.select("INBOX")
            m.logout()
        return out

    selected = await asyncio.to_thread(after)
    assert all(s == ("OK", [b"4"]) for s in selected.values()), selected
