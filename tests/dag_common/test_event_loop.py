"""The serving processes' event loop (dag_common/event_loop.py): uvloop's by default,
asyncio's own when `DG_EVENT_LOOP` asks for it (with the socket reads bounded), a bad value
refused as bad input."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import warnings
from asyncio import selector_events
from pathlib import Path

import pytest
import uvloop

from dag_common.errors import ConfigError
from dag_common.event_loop import ENV, EventLoop, chosen, run, running
from dag_common.memory import SOCKET_READ_SIZE

ROOT = Path(__file__).resolve().parents[2]


async def _running_loop() -> tuple[asyncio.AbstractEventLoop, EventLoop]:
    await asyncio.sleep(0)
    return asyncio.get_running_loop(), running()


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, EventLoop.UVLOOP),
        ({ENV: ""}, EventLoop.UVLOOP),
        ({ENV: "uvloop"}, EventLoop.UVLOOP),
        ({ENV: " AsyncIO "}, EventLoop.ASYNCIO),
    ],
)
def test_the_loop_asked_for(environ, expected):
    assert chosen(environ) is expected


@pytest.mark.parametrize("default", list(EventLoop))
def test_without_asking_each_process_has_its_default(default):
    assert chosen({}, default) is default
    assert chosen({ENV: " "}, default) is default
    other = next(loop for loop in EventLoop if loop is not default)
    assert chosen({ENV: other.value}, default) is other


def test_a_process_whose_default_is_uvloop_runs_on_it():
    loop, said = run(_running_loop(), default=EventLoop.UVLOOP, environ={})
    assert isinstance(loop, uvloop.Loop)
    assert said is EventLoop.UVLOOP
    assert loop.is_closed()


def test_asyncio_s_loop_when_asked_with_its_socket_reads_bounded(monkeypatch):
    transport = selector_events._SelectorSocketTransport
    monkeypatch.setattr(transport, "max_size", 256 * 1024)
    loop, said = run(_running_loop(), default=EventLoop.UVLOOP, environ={ENV: "asyncio"})
    assert not isinstance(loop, uvloop.Loop)
    assert isinstance(loop, asyncio.BaseEventLoop)
    assert said is EventLoop.ASYNCIO
    assert transport.max_size == SOCKET_READ_SIZE


def test_uvloop_leaves_asyncio_s_transports_as_they_were(monkeypatch):
    transport = selector_events._SelectorSocketTransport
    monkeypatch.setattr(transport, "max_size", 256 * 1024)
    run(_running_loop(), default=EventLoop.UVLOOP, environ={})
    assert transport.max_size == 256 * 1024


def test_a_process_whose_default_is_asyncio_runs_on_it_with_its_reads_bounded(monkeypatch):
    transport = selector_events._SelectorSocketTransport
    monkeypatch.setattr(transport, "max_size", 256 * 1024)
    loop, said = run(_running_loop(), default=EventLoop.ASYNCIO, environ={})
    assert not isinstance(loop, uvloop.Loop)
    assert said is EventLoop.ASYNCIO
    assert transport.max_size == SOCKET_READ_SIZE


def test_a_bad_value_is_refused_and_nothing_runs():
    coro = _running_loop()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would be one
        with pytest.raises(ConfigError, match=r"\$DG_EVENT_LOOP='trio': not an event loop"):
            run(coro, default=EventLoop.UVLOOP, environ={ENV: "trio"})
    assert coro.cr_frame is None  # closed, never started


@pytest.mark.parametrize(
    "command",
    [
        ["transport.cli", "serve", "--name", "hub"],
        ["replication_node.cli.main", "serve", "--node", "mbx1"],
    ],
)
def test_the_servers_refuse_a_bad_loop_with_one_line(tmp_path, command):
    """A bad `DG_EVENT_LOOP` is bad input for `transport serve` and `replication-node
    serve`: exit 2, one line naming it, before the config is read (here one that does not
    exist).  Which loop each runs on by default is seen in their e2e tests (tests/
    transport's mail e2e: the transport says uvloop, every node asyncio, beside its
    address)."""
    args = [sys.executable, "-m", *command, "--config", str(tmp_path / "none.yaml")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), ENV: "trio"}
    refused = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines() == [
        "error: $DG_EVENT_LOOP='trio': not an event loop (one of uvloop, asyncio)"
    ]
