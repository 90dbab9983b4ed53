"""A body the active's LLR overlay holds as its place in the log (the last `llr_depth`
generations' large writes) is read a part at a time from the log files by every read that
sends it on (`active/logged_bodies.LogText`, issue 52): `GET …/message`, the items listing
(the mover's page) and the messages batch read hold a part of it, where each read the body
back whole first (its bytes and its text, on the loop).  The same bytes, checked: a body in
a generation damaged since is an error naming it, never sent, never a traceback, and the
active's status says so.  Over real node processes, the peak read from `/proc/PID/status`
(`VmHWM`), reset before each read (`/proc/PID/clear_refs`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from pathlib import Path

import aiohttp
import pytest

from dag_common.memory import resident_memory
from replication_node.log import logfile
from replication_node.log.logfile import RecordType
from tests.cluster_harness import LocalCluster
from tests.replication_node.e2e import converged, two_nodes
from tests.replication_node.test_memory_e2e import LONG, MIB, PREFIX, body, message, mounted
from tests.replication_node.test_row_read_memory_e2e import (
    eight_bit_message,
    reset_peak,
    utf8_message,
)

pytestmark = pytest.mark.slow

MESSAGE = 30 * MIB
TEXT = 2 * MIB


def cluster(root: Path) -> LocalCluster:
    """DB1 on mbx1 and mbx2, 1 MiB logs and an LLR window of 60 of them: what the test
    writes stays in the active's overlay, its large bodies held in the log."""
    return two_nodes(root, log_file_size="1MiB", llr_depth=60, max_item_size="36MiB")


def rows_in_file(root: Path, node: str) -> set[str]:
    """The item ids of DB1's database file on `node` (what the LLR flush has written)."""
    (database,) = [p for p in root.rglob("DB1.sqlite") if node in str(p)]
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        return {r[0] for r in db.execute("SELECT item_id FROM items")}


async def put_message(c: LocalCluster, item: str, raw: bytes) -> None:
    status, answer = await c.call(
        "PUT", "mbx1", f"{PREFIX}/items/{item}/message", data=raw,
        headers={"Content-Type": "message/rfc822"}, timeout=LONG,
    )  # fmt: skip
    assert status == 201, answer


async def get(c: LocalCluster, node: str, path: str) -> tuple[bytes, str]:
    async with c.session.get(c.url(node) + path, timeout=LONG) as resp:  # type: ignore[union-attr]
        assert resp.status == 200, await resp.text()
        return await resp.read(), resp.headers["X-Message-SHA256"]


async def test_a_body_held_in_the_log_is_read_a_part_at_a_time(tmp_path: Path) -> None:
    messages = {"big": message(MESSAGE, 9), "utf8": utf8_message(), "latin": eight_bit_message()}
    text = body(TEXT, 3)
    c = cluster(tmp_path)
    await c.start()
    try:
        await mounted(c)
        await c.ok("PUT", "mbx1", PREFIX, json={"display_name": "Big"})
        for item, raw in messages.items():
            await put_message(c, item, raw)
        note = {"item_id": "note", "subject": "a long note", "body": text}
        await c.ok("POST", "mbx1", f"{PREFIX}/items", json=note, timeout=LONG)
        await converged(c, "DB1", "mbx1", ["mbx2"])
        assert not rows_in_file(tmp_path, "mbx1") & {*messages, "note"}, "in the overlay"

        # The bytes written, from the log: as the passive serves them from its file.
        for item in [*messages, "note"]:
            got, digest = await get(c, "mbx1", f"{PREFIX}/items/{item}/message")
            from_file = await get(c, "mbx2", f"{PREFIX}/items/{item}/message")
            assert (hashlib.sha256(got).hexdigest(), digest) == (
                hashlib.sha256(from_file[0]).hexdigest(), from_file[1],
            ), item  # fmt: skip
            if item in messages:
                assert got == messages[item] and digest == hashlib.sha256(got).hexdigest()
            del got, from_file

        pid = c.procs["mbx1"].pid
        rest = reset_peak(pid)
        got = await c.ok("GET", "mbx1", f"{PREFIX}/items/big/message", timeout=LONG)
        peak = resident_memory(pid).peak - rest
        assert got == messages["big"]
        del got
        # Before: the body read back whole and its text (2 times the message).
        assert peak < 0.5 * MESSAGE, (rest, peak)

        rest = reset_peak(pid)
        batch = await c.ok(
            "POST", "mbx1", f"{PREFIX}/items/messages", json={"item_ids": ["big"]},
            timeout=LONG,
        )  # fmt: skip
        peak = resident_memory(pid).peak - rest
        assert batch == b"+big %d\n%s.\n" % (MESSAGE, messages["big"])
        del batch
        # The answer's part is the message once (a part is at least one message); before,
        # its text besides.
        assert peak < 1.6 * MESSAGE, (rest, peak)

        rest = reset_peak(pid)
        total = 0
        digests: dict[str, str] = {}
        async with c.session.get(  # type: ignore[union-attr]
            c.url("mbx1") + f"{PREFIX}/items", params={"since_change": "0"}, timeout=LONG
        ) as resp:
            assert resp.status == 200
            listing = bytearray()
            async for chunk in resp.content.iter_chunked(MIB):
                total += len(chunk)
                listing += chunk
        peak = resident_memory(pid).peak - rest
        for item in json.loads(listing)["items"]:
            digests[item["item_id"]] = hashlib.sha256(item["body"].encode()).hexdigest()
        del listing
        assert digests["big"] == hashlib.sha256(messages["big"]).hexdigest()
        assert digests["note"] == hashlib.sha256(text.encode()).hexdigest()
        assert total > MESSAGE
        # Before: the body read back whole and its text, on the loop.
        assert peak < 0.5 * MESSAGE, (rest, peak)
        assert not rows_in_file(tmp_path, "mbx1") & {*messages, "note"}, "still in the overlay"
    finally:
        await c.close()


def part_generations(logs: Path) -> list[Path]:
    """The closed generations of `logs` holding a part of a staged body, in order."""
    found = []
    for path in sorted(logs.glob("E*.log")):
        if path.name == logfile.OPEN_LOG_NAME:
            continue
        scanned = logfile.scan(path.read_bytes())
        if any(rec.type is RecordType.PART for rec in scanned.records):
            found.append(path)
    return found


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


async def test_a_damaged_generation_in_the_llr_window_is_an_error_naming_it(
    tmp_path: Path,
) -> None:
    raw = message(4 * MIB, 5)
    c = cluster(tmp_path)
    await c.start()
    try:
        await mounted(c)
        await c.ok("PUT", "mbx1", PREFIX, json={"display_name": "Big"})
        await put_message(c, "big", raw)
        await converged(c, "DB1", "mbx1", ["mbx2"])
        # No copy to mend it from (`active/log_mend.py`, test_llr_damage_e2e.py): the
        # damage stays until the generation is put back.
        c.terminate("mbx2")
        (open_log,) = [p for p in tmp_path.rglob(logfile.OPEN_LOG_NAME) if "mbx1" in str(p)]
        generations = part_generations(open_log.parent)
        assert len(generations) >= 3, generations
        damaged = generations[len(generations) // 2]  # parts of the body before and after it
        gen = logfile.read_header(damaged).generation
        flip(damaged)
        before = len(c.log("mbx1"))

        # GET …/message: checked whole before its answer begins, so refused with the cause.
        status, answer = await c.call("GET", "mbx1", f"{PREFIX}/items/big/message")
        assert status == 503, answer
        assert f"generation {gen} of the log is damaged" in answer["error"]
        # The listing and the batch read have begun their answers: cut before the body's
        # end, never a whole-looking answer.
        for method, path, kwargs in [
            ("GET", f"{PREFIX}/items", {}),
            ("POST", f"{PREFIX}/items/messages", {"json": {"item_ids": ["big"]}}),
        ]:
            with pytest.raises(aiohttp.ClientPayloadError):
                async with c.session.request(  # type: ignore[union-attr]
                    method, c.url("mbx1") + path, timeout=LONG, **kwargs
                ) as resp:
                    assert resp.status == 200
                    await resp.read()
        copy = (await c.status("mbx1"))["DB1"]
        assert copy["status"] == "Mounted"
        assert f"generation {gen} of the log is damaged" in (copy["note"] or ""), copy
        said = c.log("mbx1")[before:]
        assert f"generation {gen} of the log is damaged" in said
        assert "Traceback" not in said, said[-3000:]

        # The node goes on: other items are written and read; and once the generation
        # reads whole again (put back), so does the body, and the status no longer says so.
        await c.ok("POST", "mbx1", f"{PREFIX}/items", json={"item_id": "s", "body": "small"})
        assert b"small" in await c.ok("GET", "mbx1", f"{PREFIX}/items/s/message")
        flip(damaged)
        assert await c.ok("GET", "mbx1", f"{PREFIX}/items/big/message") == raw
        assert (await c.status("mbx1"))["DB1"]["note"] is None
    finally:
        await c.close()
