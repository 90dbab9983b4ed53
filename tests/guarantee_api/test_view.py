"""The live view: freshness, unreachable nodes, unreported copies, measured rates."""

from __future__ import annotations

from pathlib import Path

import pytest

from guarantee_api.view import LiveView
from tests.guarantee_api.helpers import cluster_config, healthy_cluster, node_status, report

URLS = {n: f"http://127.0.0.1:{7101 + i}" for i, n in enumerate(("mbx1", "mbx2", "mbx3"))}


@pytest.fixture
def live(tmp_path: Path) -> LiveView:
    return LiveView(cluster_config(URLS, tmp_path), stale_after=3.0)


def poll_all(live: LiveView, now: float, **mbx2: object) -> None:
    for name, status in healthy_cluster(**mbx2).items():
        live.node_polled(name, status, now)
    live.round_completed()


def problems(live: LiveView, now: float) -> dict[str, str | None]:
    return {c.node: c.problem for c in live.snapshot("DB1", now).copies}


def test_no_status_before_first_poll(live):
    snap = live.snapshot("DB1", 0.0)
    assert not snap.has_status
    assert all("no status from node" in (c.problem or "") for c in snap.copies)


def test_fresh_then_stale(live):
    poll_all(live, 10.0)
    assert problems(live, 13.0) == {"mbx1": None, "mbx2": None, "mbx3": None}
    assert "stale: last seen 3.5s ago" in (problems(live, 13.5)["mbx2"] or "")


def test_unreachable_node_is_not_healthy_for_that_moment(live):
    poll_all(live, 10.0)
    live.node_failed("mbx3", "connection refused")
    assert problems(live, 10.5)["mbx3"] == "node mbx3 unreachable: connection refused"
    live.node_polled("mbx3", node_status("mbx3", report("mbx3")), 11.0)
    assert problems(live, 11.0)["mbx3"] is None


def test_copy_missing_from_report_is_kept_with_reason(live):
    poll_all(live, 1.0)
    live.node_polled("mbx3", node_status("mbx3"), 2.0)  # mbx3 stops reporting DB1
    live.node_polled("mbx1", node_status("mbx1"), 2.0)
    snap = live.snapshot("DB1", 2.0)
    assert [c.node for c in snap.copies] == ["mbx1", "mbx2", "mbx3"]
    # the last report is kept but marked stale once it ages out
    assert "stale" in (live.problem("DB1", "mbx3", 5.0) or "")


def test_unconfigured_copy_ignored(live):
    live.node_polled("mbx3", node_status("mbx3", report("mbx3", "DB2")), 1.0)
    assert live.copy_state("DB2", "mbx3") is None
    assert not live.snapshot("DB2", 1.0).has_status


def test_rates_measured_from_successive_polls(live):
    poll_all(live, 0.0, cq=40, replayed=100)
    poll_all(live, 2.0, cq=30, replayed=104)
    rates = live.snapshot("DB1", 2.0).copies[1].rates
    assert rates.copy_queue_per_s == -5.0
    assert rates.replayed_per_s == 2.0


def test_rates_reset_when_replay_goes_backwards(live):
    poll_all(live, 0.0, cq=40, replayed=100)
    poll_all(live, 1.0, cq=10, replayed=5)  # reseeded
    assert live.snapshot("DB1", 1.0).copies[1].rates.copy_queue_per_s is None


def test_unknown_database_raises(live):
    assert not live.knows("DB9")
    with pytest.raises(KeyError):
        live.snapshot("DB9", 0.0)


async def test_a_waiting_request_wakes_only_for_a_change_of_its_own_database(live):
    """DB1 is on every node, DB2 on mbx2 only: a change of DB2's copy does not wake a
    request waiting on DB1 (at scale, every change waking every waiter would cost a
    judgement per waiter per change); a change of DB1's copy does, and so does a node of
    DB1 going unreachable."""
    import asyncio

    from dag_common.clock import ManualClock
    from dag_common.model import CopyRole

    clock = ManualClock()
    poll_all(live, 0.0)
    v1, v2 = live.version("DB1"), live.version("DB2")
    waiter = asyncio.ensure_future(live.wait_change("DB1", v1, clock.monotonic() + 60, clock))
    await asyncio.sleep(0)
    live.copies_reported("mbx2", [report("mbx2", "DB2", role=CopyRole.ACTIVE)], 1.0)
    await asyncio.sleep(0)
    assert not waiter.done() and live.version("DB2") > v2 and live.version("DB1") == v1
    live.copies_reported("mbx3", [report("mbx3", replayed=101)], 1.0)
    assert await asyncio.wait_for(waiter, 1) is True
    v1 = live.version("DB1")
    waiter = asyncio.ensure_future(live.wait_change("DB1", v1, clock.monotonic() + 60, clock))
    await asyncio.sleep(0)
    live.node_failed("mbx1", "connection refused")
    assert await asyncio.wait_for(waiter, 1) is True
    # And the wait ends on the clock when nothing changes.
    v1 = live.version("DB1")
    waiter = asyncio.ensure_future(live.wait_change("DB1", v1, clock.monotonic() + 5, clock))
    for _ in range(5):  # its timer registered with the clock
        await asyncio.sleep(0)
    await clock.advance(5)
    assert await asyncio.wait_for(waiter, 1) is False
