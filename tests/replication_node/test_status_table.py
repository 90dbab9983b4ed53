"""`replication-node status` as a person and a script see it: on a terminal a rich table with
the statuses in colour; in a pipe the plain aligned table, unchanged, and a reader that goes
away (`status | head -1`) ends it quietly.  The rows are the same in both."""

from __future__ import annotations

import asyncio
import io
import os
import pty
import re
import sys
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import web
from rich.console import Console

from dag_common.model import CopyRole, CopyStatus, CopyStatusReport
from replication_node.cli.status_table import plain_table, rich_table, status_row
from tests.cluster_harness import ROOT, TOKEN, cluster_config, serve_app, write_cluster_config

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
INSPECTED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def report(node: str, role: CopyRole, status: CopyStatus, **kw) -> CopyStatusReport:
    return CopyStatusReport(
        database="DB1", node=node, site="s", role=role, status=status, activation_preference=1,
        **kw,
    )  # fmt: skip


def rows():
    return [
        status_row(
            "DB1", "mbx1", 1,
            report("mbx1", CopyRole.ACTIVE, CopyStatus.MOUNTED, block_followers=["mbx2"],
                   synchronous_copies=1),
            None,
        ),
        status_row(
            "DB1", "mbx2", 2,
            report("mbx2", CopyRole.PASSIVE, CopyStatus.SUSPENDED, copy_queue_length=12,
                   replay_queue_length=3, replay_lag_time=timedelta(minutes=5),
                   error="suspended by operator"),
            None,
        ),
        status_row(
            "DB1", "mbx3", 3, report("mbx3", CopyRole.PASSIVE, CopyStatus.RESYNCHRONIZING), None
        ),
        status_row("DB1", "mbx4", 4, None, "unreachable: connection refused"),
    ]  # fmt: skip


def test_the_plain_table_keeps_its_columns_for_scripts():
    lines = plain_table(rows())
    assert lines[0] == (
        "Name                Status                  Pref Mode   CopyQueue ReplayQueue ReplayLag"
        "  LastInspectedLogTime ContentIndex/Error"
    )
    assert lines[1] == (
        "DB1\\mbx1            Mounted                    1 -              0           0         -"
        "  -                    block mode: mbx2; 1 synchronous"
    )
    assert lines[2] == (
        "DB1\\mbx2            Suspended                  2 File          12           3        5m"
        "  -                    suspended by operator"
    )
    assert lines[4] == (
        "DB1\\mbx4            Unknown                    4 -              -           -         -"
        "  -                    unreachable: connection refused"
    )


def test_the_terminal_table_has_the_same_rows_with_statuses_in_colour():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, color_system="standard")
    console.print(rich_table(rows()))
    drawn = out.getvalue()
    green, yellow, red, bold_red = "\x1b[1;32m", "\x1b[33m", "\x1b[31m", "\x1b[1;31m"
    assert f"{green}Mounted" in drawn
    assert f"{red}Suspended" in drawn and f"{red}suspended by operator" in drawn
    assert f"{yellow}Resynchronizing" in drawn
    assert f"{bold_red}Unknown" in drawn and f"{red}unreachable: connection refused" in drawn
    lines = [ANSI.sub("", line) for line in drawn.splitlines()]
    for plain in plain_table(rows()):  # each row's cells, in the same order
        assert any(line.split() == plain.split() for line in lines), (plain, lines)


def test_an_activation_suspended_copy_stays_healthy_and_says_so_and_a_seed_its_bytes():
    barred = report(
        "mbx2", CopyRole.PASSIVE, CopyStatus.HEALTHY, activation_suspended=True,
        note="activation suspended: patching",
    )  # fmt: skip
    seeding = report(
        "mbx3", CopyRole.PASSIVE, CopyStatus.SEEDING, seed_bytes_done=3_100_000,
        seed_bytes_total=8_400_000,
    )  # fmt: skip
    table = [
        status_row("DB1", "mbx2", 2, barred, None),
        status_row("DB1", "mbx3", 3, seeding, None),
    ]
    lines = plain_table(table)
    assert lines[1] == (
        "DB1\\mbx2            Healthy                    2 File           0           0         -"
        "  -                    activation suspended: patching"
    )
    assert lines[2].startswith("DB1\\mbx3            Seeding   ")
    assert lines[2].endswith("  -                    seeding: 3.1 of 8.4 MB (37%)")
    out = io.StringIO()
    Console(file=out, force_terminal=True, width=200, color_system="standard").print(
        rich_table(table)
    )
    drawn = out.getvalue()
    assert "\x1b[32mHealthy" in drawn and "\x1b[33mactivation suspended: patching" in drawn
    assert "seeding: 3.1 of 8.4 MB (37%)" in drawn


@pytest.fixture
async def one_node(tmp_path):
    """A config of one node serving DB1 (a fake node: a real aiohttp server on port 0)."""

    async def status(request: web.Request) -> web.Response:
        copy = {
            "database": "DB1", "node": "mbx1", "site": "s", "role": "Active",
            "status": "Mounted", "activation_preference": 1,
        }  # fmt: skip
        return web.json_response({"node": "mbx1", "site": "s", "copies": [copy]})

    app = web.Application()
    app.router.add_get("/v1/status", status)
    runner, url = await serve_app(app)
    yield write_cluster_config(
        tmp_path / "cluster.yaml",
        cluster_config(
            [("mbx1", "s", url)],
            [{"name": "DB1", "copies": [{"node": "mbx1", "activation_preference": 1}]}],
        ),
    )
    await runner.cleanup()


async def status_to(config, stdout: int, **env: str) -> tuple[int, str]:
    """Run `replication-node status` with its stdout on the file descriptor `stdout`."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "replication_node.cli.main", "status", "--config", str(config),
        stdout=stdout, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
        env={"DG_AUTH_TOKEN": TOKEN, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **env},
    )  # fmt: skip
    os.close(stdout)
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode, err.decode()


async def test_on_a_terminal_the_table_is_in_colour(one_node):
    main, secondary = pty.openpty()
    code, err = await status_to(one_node, secondary, TERM="xterm", COLUMNS="160")
    drawn = b""
    while True:  # the child has exited: read what it left until the pty says it is done
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: no writer left
            break
        if not chunk:
            break
        drawn += chunk
    os.close(main)
    text = drawn.decode()
    assert code == 0 and err == "", (code, err, text)
    assert "\x1b[" in text and "Mounted" in text
    assert any(ANSI.sub("", line).split()[:4] == ["DB1\\mbx1", "Mounted", "1", "-"]
               for line in text.splitlines()), text  # fmt: skip


async def test_in_a_pipe_the_table_is_plain_even_when_colour_is_forced(one_node):
    read, write = os.pipe()
    code, err = await status_to(one_node, write, FORCE_COLOR="1")
    with os.fdopen(read) as pipe:
        text = pipe.read()
    assert code == 0 and err == "", (code, err)
    assert "\x1b" not in text
    assert text.splitlines()[1].startswith("Name                Status                  Pref")


async def test_a_reader_that_goes_away_ends_status_quietly(one_node):
    read, write = os.pipe()
    os.close(read)  # `status | head -0`: nothing will read it
    code, err = await status_to(one_node, write)
    assert (code, err) == (1, ""), err  # said nothing: no traceback, no "Exception ignored"
