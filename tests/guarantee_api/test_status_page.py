"""The status page: the renderer over frozen snapshots (escaping, stale copies, no answers
yet), the last answers it reads, the page the real service serves on `http_listen` after
real questions, and (slow) the same page as headless Chromium shows it."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import aiohttp
import grpc
import numpy as np
import pytest
from PIL import Image

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common.credentials import Credential, Credentials, Role, digest
from dag_common.guarantee.values import CopySnapshot, DatabaseView
from dag_common.model import CopyRole, GuaranteeStatus
from dag_common.model import DataMoveReplicationConstraint as Constraint
from guarantee_api.last_answers import MAX_REASON, LastAnswer, LastAnswers, Method, shorten
from guarantee_api.status_page import REFRESH_SECONDS, StatusSnapshot, render
from tests.browser import chromium
from tests.guarantee_api.helpers import AUTH, T0, TOKEN, ask, report, start_service
from tests.guarantee_api.status_html import page_text, read_page, rows
from tests.prometheus import value

NOW = T0 + timedelta(seconds=5)
HOSTILE_DB = "<script>alert('db')</script>&amp;"
HOSTILE_REASON = '</td></tr></table><img src=x onerror=alert(1)> & "quoted"'
HOSTILE_CALLER = "\"'><b>caller</b>"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
MONITOR = "a-dashboards-secret-0123456789"


def copy(node: str, database: str = "DB1", problem: str | None = None, **kw) -> CopySnapshot:
    status = report(node, database, **kw)
    return CopySnapshot(database, node, status.site, status, problem)


def snapshot(databases: list[DatabaseView], answers: tuple[LastAnswer, ...] = ()) -> StatusSnapshot:
    return StatusSnapshot(
        cluster="dag1",
        rendered_at=NOW,
        serving=True,
        reachable_nodes=2,
        nodes=3,
        databases=tuple(databases),
        answers=answers,
    )


def answer(database: str = "DB1", method: Method = Method.HEALTH, **kw: object) -> LastAnswer:
    fields: dict[str, object] = {
        "status": GuaranteeStatus.SATISFIED,
        "at": T0,
        "caller_id": "mover-1",
        "constraint": Constraint.SECOND_COPY,
        "reason": "met by passive copy mbx2",
        **kw,
    }
    return LastAnswer(database, method, **fields)  # type: ignore[arg-type]


def test_hostile_names_and_reasons_read_back_as_text_never_as_markup():
    view = DatabaseView(HOSTILE_DB, (copy("mbx1", HOSTILE_DB, role=CopyRole.ACTIVE),))
    hostile = answer(HOSTILE_DB, reason=HOSTILE_REASON, caller_id=HOSTILE_CALLER)
    html = render(snapshot([view], (hostile,)))
    benign = render(snapshot([DatabaseView("DB1", (copy("mbx1", role=CopyRole.ACTIVE),))],
                             (answer(),)))  # fmt: skip
    # The same elements as a page with plain names: nothing smuggled in (no script, img, b).
    assert sorted(read_page(html).tags) == sorted(read_page(benign).tags)
    assert rows(html, "copies")[0][0] == HOSTILE_DB
    health = rows(html, "answers")[0]
    assert health[0] == HOSTILE_DB
    assert health[5:] == [HOSTILE_CALLER, HOSTILE_REASON]
    assert "<script>" not in html and "<img" not in html


def test_a_stale_copy_is_shown_stale_with_why_and_its_last_known_numbers():
    view = DatabaseView(
        "DB1",
        (
            copy("mbx1", role=CopyRole.ACTIVE),
            copy("mbx2", cq=3, rq=2, replayed=95),
            copy("mbx3", problem="node mbx3 unreachable: connection refused"),
        ),
    )
    never = DatabaseView("DB2", (CopySnapshot("DB2", "mbx2", "redmond", None,
                                              "no status from node mbx2 yet"),))  # fmt: skip
    html = render(snapshot([view, never]))
    assert rows(html, "copies") == [
        ["DB1", "mbx1", "redmond", "Active", "Mounted", "0", "0", "100", "100", "fresh"],
        ["DB1", "mbx2", "redmond", "Passive", "Healthy", "3", "2", "97", "95", "fresh"],
        ["DB1", "mbx3", "dublin", "Passive", "Healthy", "0", "0", "100", "100",
         "stale: node mbx3 unreachable: connection refused"],
        ["DB2", "mbx2", "redmond", "—", "—", "—", "—", "—", "—",
         "stale: no status from node mbx2 yet"],
    ]  # fmt: skip
    assert read_page(html).row_classes["copies"][1:] == ["fresh", "fresh", "stale", "stale"]


def test_no_answers_yet_is_said_for_every_database_and_check():
    html = render(snapshot([DatabaseView("DB1", (copy("mbx1"),)), DatabaseView("DB2", ())]))
    assert "The service has answered no check yet." in page_text(html)
    assert rows(html, "answers") == [
        [db, method, "no answer yet"]
        for db in ("DB1", "DB2")
        for method in ("CheckReplicationHealth", "CheckReplicationFlush")
    ]


def test_the_page_says_when_it_was_rendered_and_refreshes_itself():
    flush = answer(method=Method.FLUSH, status=GuaranteeStatus.RETRY, at=T0 + timedelta(seconds=2))
    html = render(snapshot([DatabaseView("DB1", (copy("mbx1"),))], (flush,)))
    page = read_page(html)
    assert page.refresh == [str(REFRESH_SECONDS)] == ["5"]
    text = page_text(html)
    assert "Rendered 2026-11-22 12:00:05 UTC; this page refreshes every 5 s." in text
    assert "nodes reachable at the last poll: 2 of 3" in text
    assert rows(html, "answers") == [
        ["DB1", "CheckReplicationHealth", "no answer yet"],
        ["DB1", "CheckReplicationFlush", "Retry", "SecondCopy", "2026-11-22 12:00:02 UTC (3 s ago)",
         "mover-1", "met by passive copy mbx2"],
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "limit", "shown"),
    [
        ("short", 10, "short"),
        ("exactly10!", 10, "exactly10!"),
        ("eleven char", 10, "eleven ch…"),
        ("a b c", 3, "a…"),
    ],
)
def test_shorten(text, limit, shown):
    assert shorten(text, limit) == shown
    assert len(shown) <= limit


def test_last_answers_keep_the_newest_per_database_and_method_shortened_and_bounded():
    answers = LastAnswers(capacity=3)
    common = {"status": GuaranteeStatus.RETRY, "constraint": Constraint.SECOND_COPY}
    answers.record(database="DB1", method=Method.HEALTH, at=T0, caller_id="a", reason="first",
                   **common)  # fmt: skip
    answers.record(database="DB1", method=Method.HEALTH, at=NOW, caller_id="b",
                   reason="x" * 1000, **common)  # fmt: skip
    newest = answers.get("DB1", Method.HEALTH)
    assert newest is not None and newest.caller_id == "b" and newest.at == NOW
    assert len(newest.reason) == MAX_REASON and newest.reason.endswith("…")
    assert answers.get("DB1", Method.FLUSH) is None
    for db in ("DB2", "DB3", "DB4"):
        answers.record(database=db, method=Method.FLUSH, at=NOW, caller_id="c", reason="",
                       **common)  # fmt: skip
    # Three kept: the least recently answered (DB1's health check) went first.
    assert [(a.database, a.method) for a in answers.all()] == [
        ("DB2", Method.FLUSH), ("DB3", Method.FLUSH), ("DB4", Method.FLUSH)
    ]  # fmt: skip


async def fetch(running, path: str = "/") -> str:
    """The page as served, to the token (a credential holding every role)."""
    url = f"http://127.0.0.1:{running.service.http_port}{path}"
    async with aiohttp.ClientSession() as session, session.get(url, headers=BEARER) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/html; charset=utf-8"
        return await resp.text()


def copy_rows(html: str) -> dict[tuple[str, str], list[str]]:
    return {(r[0], r[1]): r[2:] for r in rows(html, "copies")}


async def test_the_service_serves_its_copies_and_last_answers(running, nodes):
    before = await fetch(running)
    assert copy_rows(before) == {
        ("DB1", "mbx1"): ["redmond", "Active", "Mounted", "0", "0", "100", "100", "fresh"],
        ("DB1", "mbx2"): ["redmond", "Passive", "Healthy", "0", "0", "100", "100", "fresh"],
        ("DB1", "mbx3"): ["dublin", "Passive", "Healthy", "0", "0", "100", "100", "fresh"],
        ("DB2", "mbx2"): ["redmond", "Active", "Mounted", "0", "0", "100", "100", "fresh"],
    }
    assert all(r[2] == "no answer yet" for r in rows(before, "answers"))

    assert (await ask(running, caller="mover-7")).status == pb.SATISFIED
    flush = pb.CheckReplicationFlushRequest(database="DB1", caller_id="mover-8",
                                            lsn=pb.Lsn(generation=101))  # fmt: skip
    assert (await running.stub.CheckReplicationFlush(flush, metadata=AUTH)).status == (
        pb.NOT_SATISFIED
    )
    with pytest.raises(grpc.aio.AioRpcError):  # refused: no answer to remember
        await running.stub.CheckReplicationHealth(
            pb.CheckReplicationHealthRequest(database="DB2", caller_id=""), metadata=AUTH
        )
    await nodes["mbx3"].stop()
    await running.next_round()

    after = await fetch(running, "/status")
    assert (
        copy_rows(after)[("DB1", "mbx3")][-1] == "stale: node mbx3 unreachable: connection refused"
    )
    assert copy_rows(after)[("DB1", "mbx2")][-1] == "fresh"
    answers = {(r[0], r[1]): r[2:] for r in rows(after, "answers")}
    health = answers[("DB1", "CheckReplicationHealth")]
    assert health[:2] == ["Satisfied", "SecondCopy"] and health[3] == "mover-7"
    assert re.fullmatch(r"2026-01-01 00:00:00 UTC \(\d+ s ago\)", health[2])
    assert (
        health[4]
        == "CheckReplicationHealth SecondCopy Satisfied for DB1: met by passive copy mbx2, mbx3"
    )
    flushed = answers[("DB1", "CheckReplicationFlush")]
    assert flushed[:2] == ["NotSatisfied", "SecondCopy"] and flushed[3] == "mover-8"
    assert "needs generation 101" in flushed[4]
    assert answers[("DB2", "CheckReplicationHealth")] == ["no answer yet"]
    assert "nodes reachable at the last poll: 2 of 3" in page_text(after)


async def test_the_page_is_the_monitor_roles_when_the_service_checks_credentials(nodes, tmp_path):
    """It shows who asked what and why: as the credentials page says, every route but
    /healthz and /metrics needs its role."""
    clients = Credentials(
        [
            Credential("movers", frozenset({Role.MOVER}), (digest(TOKEN),)),
            Credential("dashboards", frozenset({Role.MONITOR}), (digest(MONITOR),)),
        ]
    )
    run = await start_service(nodes, tmp_path, clients=clients)
    base = f"http://127.0.0.1:{run.service.http_port}"
    try:
        async with aiohttp.ClientSession() as session:
            for path in ("/", "/status"):
                for headers, status in (
                    ({}, 401),
                    ({"Authorization": "Bearer an-unknown-secret-0000"}, 401),
                    ({"Authorization": f"Bearer {TOKEN}"}, 403),
                    ({"Authorization": f"Bearer {MONITOR}"}, 200),
                ):
                    async with session.get(base + path, headers=headers) as resp:
                        assert resp.status == status, (path, headers)
                        if status == 403:
                            said = (await resp.json())["error"]
                            assert "needs the monitor role" in said and "'movers'" in said
            for path in ("/metrics", "/healthz"):  # Prometheus and probes: no credential
                async with session.get(base + path) as resp:
                    assert resp.status == 200, path
            async with session.get(base + "/metrics") as resp:
                text = await resp.text()
        refused = {"name": "dataguarantee_http_calls_refused_total", "role": "monitor"}
        assert value(text, **refused, code="401") == 4
        assert value(text, **refused, code="403") == 2
    finally:
        await run.channel.close()
        await run.service.stop(grace=0)


async def test_a_service_that_checks_no_credential_shows_the_page_to_anyone(nodes, tmp_path):
    run = await start_service(nodes, tmp_path, anyone=True)  # --no-client-token
    try:
        url = f"http://127.0.0.1:{run.service.http_port}/"
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            assert resp.status == 200
    finally:
        await run.channel.close()
        await run.service.stop(grace=0)


STALE_PINK = (253, 226, 225)  # tr.stale's background


def _pink(image: Image.Image) -> int:
    """Pixels of the stale rows' background colour."""
    pixels = np.asarray(image.convert("RGB"), dtype=np.int32)
    return int((np.abs(pixels - np.array(STALE_PINK)).sum(axis=2) < 12).sum())


@pytest.fixture
async def open_service(nodes, tmp_path):
    """A service that checks no credential (`--no-client-token`): a browser sends none."""
    run = await start_service(nodes, tmp_path, anyone=True)
    yield run
    await run.channel.close()
    await run.service.stop(grace=0)


@pytest.mark.slow
async def test_a_browser_shows_the_copies_their_statuses_and_refreshes(
    open_service, nodes, tmp_path
):
    running = open_service
    await ask(running, caller="mover-7")
    await nodes["mbx3"].stop()
    await running.next_round()
    url = f"http://127.0.0.1:{running.service.http_port}/"
    # In a thread: the service answers Chromium from this test's event loop.
    dom = await asyncio.to_thread(chromium, url, "--dump-dom", profile=tmp_path / "p1")
    page = read_page(dom)
    assert page.refresh == ["5"]
    assert copy_rows(dom) == {
        ("DB1", "mbx1"): ["redmond", "Active", "Mounted", "0", "0", "100", "100", "fresh"],
        ("DB1", "mbx2"): ["redmond", "Passive", "Healthy", "0", "0", "100", "100", "fresh"],
        ("DB1", "mbx3"): ["dublin", "Passive", "Healthy", "0", "0", "100", "100",
                          "stale: node mbx3 unreachable: connection refused"],
        ("DB2", "mbx2"): ["redmond", "Active", "Mounted", "0", "0", "100", "100", "fresh"],
    }  # fmt: skip
    assert rows(dom, "answers")[0][:3] == ["DB1", "CheckReplicationHealth", "Satisfied"]
    # And the stale row is marked where a person looks: its background, gone once the node
    # is back.
    shot = tmp_path / "stale.png"
    await asyncio.to_thread(chromium, url, "--window-size=1280,800", f"--screenshot={shot}",
                            profile=tmp_path / "p2")  # fmt: skip
    assert _pink(Image.open(shot)) > 2000
    await nodes["mbx3"].start()
    await running.next_round()
    shot = tmp_path / "fresh.png"
    await asyncio.to_thread(chromium, url, "--window-size=1280,800", f"--screenshot={shot}",
                            profile=tmp_path / "p3")  # fmt: skip
    assert _pink(Image.open(shot)) == 0
