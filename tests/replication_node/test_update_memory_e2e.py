"""An UPDATE of an item whose body is large (an IMAP flag change, a move to another folder)
neither reads nor writes its body (`storage/bodies.py`, issue 52): a passive replaying flag
changes and moves of a 30 MiB item peaks well under 1.5 times the item over its rest.
Before, a large body was a column of its item's row, and each UPDATE had SQLite read the
whole record and build it again: twice the item, each time.  Over real node processes; the
peak read from `/proc/PID/status` (`VmHWM`), reset once the item is replayed
(`/proc/PID/clear_refs`, 5), so that the write's own peak is not counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from dag_common.memory import resident_memory
from tests.replication_node.e2e import converged
from tests.replication_node.test_memory_e2e import LONG, MIB, PREFIX, cluster, message, mounted
from tests.replication_node.test_row_read_memory_e2e import in_blob, reset_peak

pytestmark = pytest.mark.slow

MESSAGE = 30 * MIB
ROUNDS = 3  # each a flag set, a move, a flag cleared, a move back


async def test_flag_changes_and_moves_of_a_large_item_never_touch_its_body(
    tmp_path: Path,
) -> None:
    c = cluster(tmp_path)
    await c.start()
    try:
        await mounted(c)
        await c.ok("PUT", "mbx1", PREFIX, json={"display_name": "Big", "folders": ["Inbox", "Old"]})
        raw = message(MESSAGE, 52)
        status, answer = await c.call(
            "PUT", "mbx1", f"{PREFIX}/items/big/message", data=raw,
            headers={"Content-Type": "message/rfc822"}, timeout=LONG,
        )  # fmt: skip
        assert status == 201, answer
        await converged(c, "DB1", "mbx1", ["mbx2"])
        assert in_blob(tmp_path, "mbx2") == {"big": "blob"}, "the body kept apart"
        pid = c.procs["mbx2"].pid
        rest = reset_peak(pid)
        here, there = "Inbox", "Old"
        for _ in range(ROUNDS):
            for change in ("add", "remove"):
                flags = {"folder": here, "item_ids": ["big"], change: ["\\Flagged"]}
                await c.ok("POST", "mbx1", f"{PREFIX}/items/flags", json=flags)
                move = {"folder": here, "to": there, "item_ids": ["big"]}
                await c.ok("POST", "mbx1", f"{PREFIX}/items/move", json=move)
                here, there = there, here
        await converged(c, "DB1", "mbx1", ["mbx2"])
        peak = resident_memory(pid).peak - rest
        # Before: 2 times the item and more (the record read whole, then built again).
        assert peak < 1.5 * MESSAGE, (rest, peak)
        inbox = await c.ok("GET", "mbx2", f"{PREFIX}/folders/Inbox/uids")
        assert [m[1:3] for m in inbox["messages"]] == [["big", []]]
        got = await c.ok("GET", "mbx2", f"{PREFIX}/items/big/message", timeout=LONG)
        assert got == raw
    finally:
        await c.close()
