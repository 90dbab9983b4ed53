"""The resilience scenarios: one fault each, struck at a point the seed chooses while a
writer loads DB1 and a mailbox moves from DB1 to DB2, then healed; every copy is then read
and held to the invariants (`invariants.py`).  Each prints a line of figures; a failure
names the scenario, its seed (`--seed N` replays it) and the invariants broken.

Run alone: `pytest -m resilience` (they are slow: real processes in network namespaces).
"""

from __future__ import annotations

import pytest

from tests.resilience import faults as f
from tests.resilience.scenario import scenario

pytestmark = [pytest.mark.slow, pytest.mark.resilience]


async def test_kill_9_of_the_active_under_load_and_a_move(tmp_path, seed):
    """kill -9 of DB1's active (the writer's and the move's source): another copy takes
    over within the dial, the mover goes on or fails cleanly, the old active rejoins."""
    async with scenario(tmp_path, "kill-9-active", seed) as s:
        s.start_load()
        await s.fault_point()
        s.faults.begin("kill -9 mbx1", {"mbx1"})
        s.cluster.kill("mbx1")
        new = await s.mounted_elsewhere("DB1", "mbx1")
        await s.writer.acks_after(10, since=s.fault_at)
        await f.restart(s.cluster, "mbx1")
        s.faults.end("kill -9 mbx1")
        s.notes.append(f"DB1 failed over to {new}")
        await s.finish()
