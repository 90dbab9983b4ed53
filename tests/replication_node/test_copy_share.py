"""A generation damaged on the active's disk, taken whole from another copy on the same
epoch (the copies' read-only log share, `http/copy_share.py`): in one process, a real
active's share and two passive copies, the first serving its inspected generations over
HTTP to the second.  Found by the resilience suite (bitflip-log-active): before, only a
reseed could help, and it failed again until the active's database was past the damage."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from dag_common.model import CopyStatus
from dag_common.store_api import ItemIn
from replication_node.http.auth import auth_middleware
from replication_node.http.error_middleware import error_middleware
from replication_node.log import logfile
from replication_node.log.logfile import RecordType, closed_log_name
from replication_node.log.spanning import decode_part
from replication_node.passive.copy import PassiveCopy
from replication_node.shipping.copy_share import HttpCopyLogs, add_copy_share_routes
from tests.cluster_harness import serve_app, wait_until
from tests.replication_node.helpers import items_as_read, passive, replayed_through, text_body
from tests.replication_node.share import TOKEN, Share


class CopyShare:
    """The copy share of one passive copy, on a real aiohttp server."""

    def __init__(self, copy: PassiveCopy, url: str, runner: web.AppRunner) -> None:
        self.copy, self.url, self.runner = copy, url, runner
        self.session = aiohttp.ClientSession()

    def logs(self) -> HttpCopyLogs:
        return HttpCopyLogs(
            self.copy.settings.node, self.url, "DB1", session=self.session, token=TOKEN
        )


@pytest.fixture
async def first(share: Share, tmp_path: Path) -> AsyncIterator[CopyShare]:
    """Copy p1 of DB1, started, serving its copy share."""
    copy = passive(share, tmp_path, node="p1")
    await copy.start()
    app = web.Application(middlewares=[auth_middleware(TOKEN), error_middleware])
    add_copy_share_routes(app, lookup=lambda db: copy if db == "DB1" else None)
    runner, url = await serve_app(app)
    served = CopyShare(copy, url, runner)
    yield served
    await served.session.close()
    await runner.cleanup()
    await copy.stop()


@contextlib.asynccontextmanager
async def second_copy(
    share: Share, first: CopyShare, tmp_path: Path
) -> AsyncIterator[tuple[PassiveCopy, int]]:
    """Copy p2 of DB1, asking p1's copy share: generation one written, p2 started, and both
    copies past it; p2 and that generation; p2 stopped after."""
    await share.write(0, 10)
    one = await share.roll()
    second = passive(share, tmp_path, node="p2", peers=(first.logs(),))
    await second.start()
    try:
        await wait_until("both replay", lambda: all(
            replayed_through(c, one)() for c in (first.copy, second)
        ))  # fmt: skip
        yield second, one
    finally:
        await second.stop()


def flip(share: Share, generation: int) -> None:
    path = share.closed_file(generation)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))


async def test_a_generation_damaged_on_the_active_is_taken_from_another_copy(
    share, first, tmp_path
):
    async with second_copy(share, first, tmp_path) as (second, _):
        await second.suspend("lagging")
        await share.write(10, 10)
        bad = await share.roll()
        await wait_until("the first copy inspects it", replayed_through(first.copy, bad))
        flip(share, bad)  # on the active's disk, after the first copy got it
        await second.resume()
        await wait_until("the second copy past the damage", replayed_through(second, bad))
        status = second.status()
        assert status.status is CopyStatus.HEALTHY and status.error is None
        assert second.reader().items("m") == items_as_read(share.active.copy, "m")
        # The active's damaged bytes are set aside once, never in the log directory.
        failed = second.paths.ignored / "InspectionFailed"
        assert [p.name for p in failed.iterdir()] == [f"{closed_log_name(bad)}.1"]
        ours = (second.paths.logs / closed_log_name(bad)).read_bytes()
        assert ours == (first.copy.paths.logs / closed_log_name(bad)).read_bytes()
        assert ours != share.closed_file(bad).read_bytes()
        # The stream goes on from the active as before.
        await share.write(20, 5)
        after = await share.roll()
        await wait_until("replay after it", replayed_through(second, after))
        assert len(second.reader().items("m")) == 25


async def test_no_copy_has_it_whole_the_copy_fails_naming_each_answer(share, first, tmp_path):
    async with second_copy(share, first, tmp_path) as (second, one):
        await first.copy.suspend("down too")
        await second.suspend("lagging")
        await share.write(10, 10)
        bad = await share.roll()
        flip(share, bad)  # before any copy got it: nobody has it whole
        await second.resume()
        await wait_until(
            "FailedAndSuspended",
            lambda: second.status().status is CopyStatus.FAILED_AND_SUSPENDED,
        )
        error = second.status().error or ""
        assert f"generation {bad} failed inspection 3 times" in error
        assert "no other copy had it whole" in error
        assert "p1: HTTP 409" in error and f"inspected through generation {one}" in error
        assert second.status().last_log_inspected == one


async def test_a_generation_damaged_on_the_other_copy_is_refused_too(share, first, tmp_path):
    """The asking copy inspects what another copy gives as it inspects the active's."""
    async with second_copy(share, first, tmp_path) as (second, one):
        await second.suspend("lagging")
        await share.write(10, 10)
        bad = await share.roll()
        await wait_until("the first copy inspects it", replayed_through(first.copy, bad))
        flip(share, bad)
        theirs = first.copy.paths.logs / closed_log_name(bad)
        data = bytearray(theirs.read_bytes())
        data[len(data) // 3] ^= 0x08
        theirs.write_bytes(bytes(data))
        await second.resume()
        await wait_until(
            "FailedAndSuspended",
            lambda: second.status().status is CopyStatus.FAILED_AND_SUSPENDED,
        )
        assert second.status().last_log_inspected == one
        assert "no other copy had it whole (generation" in (second.status().error or "")
        names = sorted(p.name for p in (second.paths.ignored / "InspectionFailed").iterdir())
        assert f"{closed_log_name(bad)}.1.p1" in names


async def test_the_copy_share_refuses_what_it_cannot_vouch_for(share, first):
    await share.write(0, 10)
    one = await share.roll()
    await wait_until("replay", replayed_through(first.copy, one))
    logs = first.logs()
    assert len(await logs.fetch(one, 1)) == share.closed_file(one).stat().st_size

    async def answer(path: str, token: str = TOKEN, db: str = "DB1") -> tuple[int, str]:
        async with first.session.get(
            f"{first.url}/v1/databases/{db}/copy/logs/{path}",
            headers={"Authorization": f"Bearer {token}"},
        ) as resp:
            return resp.status, await resp.text()

    name = closed_log_name(one)
    assert (await answer(f"{name}?epoch=2"))[0] == 409  # another epoch's stream
    status, body = await answer(f"{closed_log_name(one + 1)}?epoch=1")
    assert status == 409 and f"inspected through generation {one}" in body
    assert (await answer(f"{name}"))[0] == 400  # no epoch
    assert (await answer(f"{name}?epoch=x"))[0] == 400
    assert (await answer(f"{name}?epoch=0"))[0] == 400
    assert (await answer("..%2F..%2Fcopy-state.json?epoch=1"))[0] in (400, 404)
    assert (await answer("E00.log?epoch=1"))[0] == 400  # the open log is never shared here
    assert (await answer(f"{name}?epoch=1", token="wrong"))[0] == 401
    assert (await answer(f"{name}?epoch=1", db="DB9"))[0] == 404  # no copy of DB9 here


async def test_a_bit_flip_in_a_continuation_is_refused_naming_it_and_taken_from_another_copy(
    share, first, tmp_path
):
    """A large item's body spans generations; a bit flips inside one of its later parts on
    the active's disk: the lagging copy's inspection refuses that generation, naming it, and
    takes it whole from the other copy; the item replays whole."""
    async with second_copy(share, first, tmp_path) as (second, _):
        await second.suspend("lagging")
        text = text_body(200_000, seed=9)
        store = share.active.store
        result = await store.put_items("m", [ItemIn(item_id="big", body=text)])
        last = await share.roll()
        await wait_until("the first copy replays it", replayed_through(first.copy, last))
        # The active writes its own file past the item (LLR depth 2: two more rolls), as it
        # does llr_depth generations after any write; only then is the flip made, so what is
        # damaged is a generation the copies still need and the active no longer reads.  (An
        # active that must read back a damaged generation still in its LLR window takes it
        # from a copy: `active/log_mend.py`, test_llr_damage_e2e.py.)
        for _ in range(2):
            await share.roll()
        assert share.active.copy is not None
        copy = share.active.copy
        await wait_until(
            "the active's file holds the item", lambda: copy.db.header.waypoint >= last
        )
        continued = [
            (g, r)
            for g in range(result.lsn.generation - 4, result.lsn.generation)
            for r in logfile.verify_closed(share.closed_file(g).read_bytes(), g).records
            if r.type is RecordType.PART and decode_part(r)[1] > 0
        ]
        bad, rec = continued[0]
        path = share.closed_file(bad)
        data = bytearray(path.read_bytes())
        data[rec.offset + rec.size - 100] ^= 0x04  # inside the part's bytes
        path.write_bytes(bytes(data))
        await second.resume()
        await wait_until("the second copy replays it", replayed_through(second, last))
        assert second.status().status is CopyStatus.HEALTHY
        assert second.reader().item("m", "big").body == text
        failed = second.paths.ignored / "InspectionFailed"
        assert [p.name for p in failed.iterdir()] == [f"{closed_log_name(bad)}.1"]
