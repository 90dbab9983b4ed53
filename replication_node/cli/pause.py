"""`replication-node cluster pause|resume`: pause automatic failover for maintenance
(patronictl's pause), and end the pause.  While paused no copy is activated automatically;
`db activate` and `db switchover` still work.  `status` says the pause above its table.

The flag is written in the cluster store directly, not through a node's admin API: it is the
cluster's, not any node's, so there is no node to choose; `status` already reads the store
itself (the leases); and a pause is taken for maintenance, when nodes are being stopped and
restarted, so it must not need one of them up.  Whoever may run these commands with the
config may open the store with it (the embedded file, or etcd with its credentials), as
`status` does.  The nodes read the flag at each failover pass (about a second)."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import socket
from collections.abc import Awaitable, Callable
from typing import TypeVar

from dag_common.cli import ExitCode, add_config, add_json
from dag_common.clock import SystemClock
from dag_common.cluster_store import open_cluster_store
from dag_common.cluster_store.interface import ClusterStore
from dag_common.config import load_config
from dag_common.errors import CommandFailed
from dag_common.model import FailoverPause

T = TypeVar("T")


def operator() -> str:
    """Who runs this command, as the pause records it: user@host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


async def _with_store(config_path: str, action: Callable[[ClusterStore], Awaitable[T]]) -> T:
    store = open_cluster_store(load_config(config_path))
    try:
        return await action(store)
    finally:
        await store.aclose()


def _say(args: argparse.Namespace, pause: FailoverPause | None, paused: bool, line: str) -> None:
    if args.json:
        body = {"paused": paused, "pause": pause.model_dump(mode="json") if pause else None}
        print(json.dumps(body, indent=2))
    else:
        print(line)


def cmd_pause(args: argparse.Namespace) -> int:
    wanted = FailoverPause(since=SystemClock().now(), by=operator(), reason=args.reason or "")

    async def pause(store: ClusterStore) -> tuple[bool, FailoverPause | None]:
        if await store.pause_failover(wanted):
            return True, wanted
        return False, await store.failover_pause()

    done, pause_now = asyncio.run(_with_store(args.config, pause))
    if not done:
        # patronictl refuses a second pause too: the first one's reason stands
        said = pause_now.sentence() if pause_now else "automatic failover was paused"
        raise CommandFailed(f"already paused: {said}")
    _say(args, pause_now, True, pause_now.sentence() if pause_now else "")
    return ExitCode.OK


def cmd_resume(args: argparse.Namespace) -> int:
    ended = asyncio.run(_with_store(args.config, lambda store: store.resume_failover()))
    if ended is None:
        raise CommandFailed("automatic failover is not paused")
    _say(args, ended, False, f"automatic failover resumed (paused {ended.described()})")
    return ExitCode.OK


def build_pause(pause: argparse.ArgumentParser) -> None:
    """`cluster pause`."""
    add_config(pause)
    pause.add_argument(
        "--reason", default=None, help="why, shown by `status` while paused (optional)"
    )
    add_json(pause, "print the pause as JSON")
    pause.set_defaults(func=cmd_pause)


def build_resume(resume: argparse.ArgumentParser) -> None:
    """`cluster resume`."""
    add_config(resume)
    add_json(resume, "print the pause that ended as JSON")
    resume.set_defaults(func=cmd_resume)
