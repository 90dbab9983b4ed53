"""The `replication-node` commands that run nodes: `serve` (one node) and `cluster up` (every
node of a config as a local process)."""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from dag_common.cli import ExitCode, add_config, add_duration
from dag_common.clock import SystemClock
from dag_common.cluster_store import open_cluster_store
from dag_common.config import accepted_credentials, load_config, load_token
from dag_common.durations import format_duration
from dag_common.echo import quoted
from dag_common.errors import ConfigError
from dag_common.event_loop import EventLoop, run, running
from dag_common.exclusive import bind_port, lock_directory
from dag_common.memory import busy_heap
from replication_node.audit import AUDIT_FILE, AuditLog
from replication_node.cli.supervisor import NodeSlot, last_line, restartable, why_exited
from replication_node.http.app import build_app
from replication_node.metrics import NodeMetrics
from replication_node.node import Node
from replication_node.taskdump import TASK_DUMP_END, describe_tasks


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def ensure_token_file(path: Path | None) -> None:
    """Create the token file (0600) the first time a local cluster starts, if none exists
    (`path`: the config's `auth_token_file`)."""
    if os.environ.get("DG_AUTH_TOKEN") or path is None:
        return
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")


async def _serve(
    config_path: Path, node_name: str, refresh: float, listen_host: str | None = None
) -> int:
    config = load_config(config_path)
    try:
        node_config = config.node(node_name)
    except KeyError:
        raise ConfigError(f"{config_path}: no node named {quoted(node_name)}") from None
    token = load_token(config)
    # Before anything is opened: the node's data directory (a second process for the same
    # node would mount its live databases) and its port.  Both kept until the process ends.
    lock = lock_directory(node_config.data_dir, f"node {node_name}")  # noqa: F841 - held
    # The url's host by default; a pod binds every address (`--listen-host 0.0.0.0`), since
    # its url names a DNS record that points at it only once it runs.
    host = listen_host or node_config.host
    sockets = bind_port(host, node_config.port, f"node {node_name}")
    store = open_cluster_store(config)
    tls = config.tls.for_node(node_name) if config.tls else None
    ssl_ctx = tls.server_context() if tls else None

    def reload_certificates() -> None:  # a rotated certificate, for new handshakes
        if tls is not None and ssl_ctx is not None:
            tls.reload(ssl_ctx, server=True)
            node.reload_client_certificate()

    accepted = accepted_credentials(config_path, node=node_name, on_reload=reload_certificates)
    clock = SystemClock()
    metrics = NodeMetrics(node_name)
    audit = AuditLog(
        node_config.data_dir / AUDIT_FILE, node=node_name, clock=clock,
        counter=metrics.audit_events,
    )  # fmt: skip
    node = Node(
        config=config,
        name=node_name,
        token=token,
        clock=clock,
        cluster_store=store,
        config_path=config_path,
        config_refresh=refresh,
        credentials=accepted,
        audit=audit,
        metrics=metrics,
    )
    app = build_app(node)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    sites = [web.SockSite(runner, sock, ssl_context=ssl_ctx) for sock in sockets]
    try:
        await node.start()
        for site in sites:
            await site.start()
    except BaseException:  # e.g. etcd refused our credentials: one error line, nothing left open
        await node.stop()
        await runner.cleanup()
        await store.aclose()
        raise
    print(f"node {node_name} listening on {node_config.url} (event loop: {running()})", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # SIGUSR1: every task's await chain into the log, to see what a node that hangs waits
    # on; SIGUSR2: every thread's stack, at once even while the event loop itself is stuck.
    loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    # Credentials rotate without a restart: SIGHUP, or a change of a credential file.
    loop.add_signal_handler(signal.SIGHUP, accepted.reload)
    watching = asyncio.create_task(accepted.watch(clock.sleep), name="credentials")
    await stop.wait()
    watching.cancel()
    logging.getLogger(__name__).info("node %s stopping", node_name)
    for site in sites:
        await site.stop()  # no new connections
    await node.stop()  # the databases dismounted: a commit waiting is answered
    # The app's on_shutdown: the pushed streams end, the requests still in flight get
    # SHUTDOWN_GRACE (http/in_flight.py); those left are named in the log and cancelled.
    await runner.cleanup()
    await store.aclose()
    return ExitCode.OK


def _dump_tasks() -> None:
    """Log every task of the running loop with its whole await chain (SIGUSR1)."""
    log = logging.getLogger(__name__)
    for text in describe_tasks():
        log.warning("%s", text)
    log.warning(TASK_DUMP_END)


def cmd_serve(args: argparse.Namespace) -> int:
    _setup_logging(args.verbose)
    # Large bodies given back to the kernel once freed (memory.py); blocks of up to a few
    # generations kept in the heap while busy, given back once quiet (idle_memory.py).
    busy_heap()
    # asyncio's loop: uvloop costs a node more CPU on every large body it reads than it
    # saves on small writes (dag_common/event_loop.py); DG_EVENT_LOOP=uvloop asks for it
    return run(
        _serve(
            Path(args.config),
            args.node,
            args.config_refresh.total_seconds(),
            args.listen_host,
        ),
        default=EventLoop.ASYNCIO,
    )


def cmd_cluster_up(args: argparse.Namespace) -> int:
    """Start every node of the config as a local process and supervise them: a node that
    exits is named with why (its exit, its log's last line) and started again after a
    backoff while the others keep running, or, with --exit-on-failure, the cluster stops.
    Ctrl-C/SIGTERM stops them all."""
    config = load_config(args.config)
    ensure_token_file(config.auth_token_file)
    load_token(config)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    slots: dict[str, NodeSlot] = {}

    def start(name: str) -> None:
        node = config.node(name)
        refresh = format_duration(args.config_refresh)
        cmd = [
            sys.executable, "-m", "replication_node.cli.main", "serve",
            "--config", args.config, "--node", name, "--config-refresh", refresh,
        ]  # fmt: skip
        node.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(slots[name].log, "ab")  # noqa: SIM115 - the child owns it
        procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        slots[name].restarts.started_at(time.monotonic())

    for node in config.nodes:
        log_dir = Path(args.log_dir) if args.log_dir else node.data_dir.parent
        log_dir.mkdir(parents=True, exist_ok=True)
        slots[node.name] = NodeSlot(node.name, log_dir / f"{node.name}.log")
        start(node.name)
        log_name = slots[node.name].log
        print(f"{node.name:<10} {node.site:<10} {node.url:<28} log {log_name}", flush=True)
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = ExitCode.OK
    try:
        while not stopping:
            now = time.monotonic()
            for name, slot in slots.items():
                proc = procs.get(name)
                if proc is not None and proc.poll() is not None:
                    del procs[name]
                    said = last_line(slot.log)
                    print(
                        f"node {name} exited ({why_exited(proc.returncode)})"
                        + (f": {said}" if said else "")
                        + f" [log {slot.log}]",
                        file=sys.stderr,
                        flush=True,
                    )
                    if args.exit_on_failure:
                        print(
                            f"stopping the cluster: node {name} exited (--exit-on-failure)",
                            file=sys.stderr,
                            flush=True,
                        )
                        stopping, code = True, ExitCode.FAILED
                    elif not restartable(proc.returncode):
                        print(
                            f"node {name} is not restarted: exit code 2 is bad input, which a "
                            "restart would meet again; the other nodes keep running",
                            file=sys.stderr,
                            flush=True,
                        )
                    else:
                        wait = slot.restarts.exited_at(now)
                        slot.restart_at = now + wait
                        print(f"restarting {name} in {wait:g}s", file=sys.stderr, flush=True)
                elif proc is None and slot.restart_at is not None and now >= slot.restart_at:
                    slot.restart_at = None
                    start(name)
                    print(f"node {name} started again", file=sys.stderr, flush=True)
            if not stopping:
                time.sleep(0.2)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    return code


def build_serve(serve: argparse.ArgumentParser) -> None:
    """`serve`."""
    add_config(serve)
    serve.add_argument("--node", required=True, help="the node to run, by its name in the config")
    add_duration(
        serve,
        "--config-refresh",
        default="30s",
        help="how often the config is read again (the configupdater)",
    )
    serve.add_argument(
        "--listen-host",
        default=None,
        help="address to bind (default: the host of the node's url; 0.0.0.0 in a container)",
    )
    serve.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    serve.set_defaults(func=cmd_serve)


def build_cluster_up(up: argparse.ArgumentParser) -> None:
    """`cluster up`."""
    add_config(up)
    add_duration(up, "--config-refresh", default="30s", help="each node's configupdater period")
    up.add_argument(
        "--log-dir",
        default=None,
        help="where each node's log (<node>.log) goes; default: beside its data directory",
    )
    up.add_argument(
        "--exit-on-failure",
        action="store_true",
        help="stop the whole cluster (exit 1) when a node exits, instead of restarting it",
    )
    up.set_defaults(func=cmd_cluster_up)
