"""A large body kept apart in `bodies` is read a part at a time (`storage/body_reads.py`, issue
52): `GET …/items/{id}/message` and the messages batch read hold a part of it, not SQLite's
value and Python's bytes of it at once, and serve the bytes written, exactly.  Over real node
processes; the peak read from `/proc/PID/status` (`VmHWM`), reset before each read
(`/proc/PID/clear_refs`, 5), so the replay's own peak is not counted."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from pathlib import Path

import pytest

from dag_common.memory import resident_memory
from tests.cluster_harness import LocalCluster
from tests.replication_node.e2e import converged
from tests.replication_node.test_memory_e2e import (
    LONG,
    MIB,
    PREFIX,
    cluster,
    message,
    mounted,
)

pytestmark = pytest.mark.slow

MESSAGE = 30 * MIB


def utf8_message() -> bytes:
    """3 MiB of UTF-8 of 2 to 4 bytes a character, a 4-byte one across the first 1 MiB edge."""
    head = b"Subject: caf\xc3\xa9\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
    text = head + b"a" * (MIB - len(head) - 2) + "\U0001f600".encode()
    text += ("caf\xe9 \u20ac \U0001f600 ".encode() * (2 * MIB // 16))[: 2 * MIB]
    return text + b"\r\n"


def eight_bit_message() -> bytes:
    """3 MiB that are not UTF-8 (kept as Latin-1 text: two bytes of UTF-8 each byte past
    ASCII), one of them across the first 1 MiB edge of the row's bytes."""
    head = b"Subject: 8-bit\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
    assert len(head) % 2 == 1  # then 1 MiB falls inside a byte's two of UTF-8
    return head + bytes(range(128, 256)) * (3 * MIB // 128) + b"\r\n"


def reset_peak(pid: int) -> int:
    """Set `pid`'s VmHWM to its resident memory now; that."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return resident_memory(pid).resident


def in_blob(root: Path, node: str) -> dict[str, str]:
    (database,) = [p for p in root.rglob("DB1.sqlite") if node in str(p)]
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        return dict(db.execute("SELECT of_item_id, 'blob' FROM bodies").fetchall())


async def written(c: LocalCluster, messages: dict[str, bytes]) -> None:
    await c.ok("PUT", "mbx1", PREFIX, json={"display_name": "Big"})
    for item, raw in messages.items():
        status, answer = await c.call(
            "PUT", "mbx1", f"{PREFIX}/items/{item}/message", data=raw,
            headers={"Content-Type": "message/rfc822"}, timeout=LONG,
        )  # fmt: skip
        assert status == 201, answer
    await converged(c, "DB1", "mbx1", ["mbx2"])


async def test_a_large_message_is_read_from_its_row_a_part_at_a_time(tmp_path: Path) -> None:
    # Before: the row's body read whole, SQLite's value and Python's text of it at once
    # (GET: 2.0-2.1 times the message over rest; the batch read: its bytes and the answer's
    # buffer besides, 3 times).
    messages = {
        "big": message(MESSAGE, 7),
        "utf8": utf8_message(),
        "latin": eight_bit_message(),
    }
    c = cluster(tmp_path)
    await c.start()
    try:
        await mounted(c)
        await written(c, messages)
        assert in_blob(tmp_path, "mbx2") == dict.fromkeys(messages, "blob")
        pid = c.procs["mbx2"].pid  # the passive answers reads too, from its file only
        for item, raw in messages.items():
            url = f"{c.url('mbx2')}{PREFIX}/items/{item}/message"
            async with c.session.get(url, timeout=LONG) as resp:  # type: ignore[union-attr]
                assert resp.status == 200
                got, headers = await resp.read(), resp.headers
            assert hashlib.sha256(got).digest() == hashlib.sha256(raw).digest(), item
            assert headers["X-Message-SHA256"] == hashlib.sha256(raw).hexdigest()
            del got
        rest = reset_peak(pid)
        got = await c.ok("GET", "mbx2", f"{PREFIX}/items/big/message", timeout=LONG)
        peak = resident_memory(pid).peak - rest
        assert got == messages["big"]
        del got
        assert peak < 0.5 * MESSAGE, (rest, peak)
        rest = reset_peak(pid)
        batch = await c.ok(
            "POST", "mbx2", f"{PREFIX}/items/messages", json={"item_ids": ["big"]},
            timeout=LONG,
        )  # fmt: skip
        peak = resident_memory(pid).peak - rest
        # The answer's part is the message once (a part is at least one message).
        assert peak < 1.6 * MESSAGE, (rest, peak)
        assert batch == b"+big %d\n%s.\n" % (MESSAGE, messages["big"])
        del batch
        batch = await c.ok(
            "POST", "mbx2", f"{PREFIX}/items/messages", json={"item_ids": ["utf8", "latin"]}
        )
        expected = b"".join(b"+%s %d\n%s" % (i.encode(), len(messages[i]), messages[i])
                            for i in ("utf8", "latin"))  # fmt: skip
        assert hashlib.sha256(batch).digest() == hashlib.sha256(expected + b".\n").digest()
    finally:
        await c.close()
