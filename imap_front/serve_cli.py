"""`imap_front serve`: run one IMAP front until SIGTERM; `imap_front passwd`: a hash."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from proxyprotocol.reader import ProxyProtocolReader
from proxyprotocol.version import ProxyProtocolVersion

from dag_common.cli import ExitCode, add_config
from dag_common.clock import SystemClock
from dag_common.cluster_store import open_cluster_store
from dag_common.config import load_config, load_token
from dag_common.errors import BadArgument
from dag_common.exclusive import bind_port
from dag_common.http_client import client_session
from dag_common.memory import bound_allocator, bound_tls_buffers
from dag_common.node_client import NodeStoreClient
from imap_front.backend import Backend, Login
from imap_front.feed_polls import FeedPolls
from imap_front.limits import LoginThrottle, Sessions, ThrottlePolicy
from imap_front.metrics import FrontMetrics, bound_port, start_http
from imap_front.protocol import FrontConfig, FrontServer
from imap_front.users import HASHER, Users

logger = logging.getLogger(__name__)


async def _serve(
    config_path: Path,
    name: str,
    port: int | None,
    host: str | None,
    tls_port: int | None,
    metrics_port: int | None,
) -> int:
    config = load_config(config_path)
    settings = config.imap
    token = load_token(config)
    users = Users(settings.users_file, concurrency=settings.login_concurrency)
    tls = config.tls.for_node(name) if config.tls else None
    ssl_ctx = tls.server_context() if tls else None
    if ssl_ctx is None:
        logger.warning("no tls: section in the config: no client can log in (LOGINDISABLED)")
    host = host or settings.host
    sockets = bind_port(host, settings.port if port is None else port, f"imap front {name}")
    tls_port = settings.tls_port if tls_port is None else tls_port
    tls_sockets = []
    if tls_port is not None and ssl_ctx is not None:
        tls_sockets = bind_port(host, tls_port, f"imap front {name} (implicit TLS)")
    elif tls_port is not None:
        logger.warning("imap.tls_port set but no tls: section: no implicit-TLS port")
    clock = SystemClock()
    store = open_cluster_store(config)
    session = client_session(config)
    # IDLE's long polls on connections of their own (unbounded: one per mailbox idling),
    # so that no command waits behind them (feed_polls.py)
    poll_session = client_session(config, limit=0)
    nodes = NodeStoreClient(
        config, token=token, session=session, clock=clock, poll_session=poll_session
    )
    feeds = FeedPolls(nodes)
    front = FrontConfig(
        host=host, port=sockets[0].getsockname()[1], ssl_context=ssl_ctx,
        max_line=int(settings.max_line), max_literal=int(settings.max_literal),
        idle_timeout=settings.idle_timeout,
    )  # fmt: skip
    front.apply_context()
    metrics = front.metrics = FrontMetrics()
    # a failed login's wait is the throttle's (per client address), not the backend's
    login = Login(
        config=front, users=users, directory=store, nodes=nodes, clock=clock,
        failure_delay=0.0, metrics=metrics, move_lock_wait=settings.move_lock_wait,
        failover_wait=settings.failover_wait, feeds=feeds,
    )  # fmt: skip
    http = None
    if metrics_port is not None:
        http = await start_http(metrics, host, metrics_port)
        print(f"imap front {name} metrics on {host}:{bound_port(http)}", flush=True)
    backend = Backend(login, front)
    sessions = Sessions(
        max_sessions=settings.max_sessions, max_per_user=settings.max_sessions_per_user
    )
    throttle = LoginThrottle(ThrottlePolicy(base=settings.invalid_login_delay), clock)
    reader = ProxyProtocolReader(ProxyProtocolVersion.get(None))

    fronts: list[FrontServer] = []

    def handler(implicit_tls: bool) -> Any:
        fronts.append(
            FrontServer(
                backend.login,
                front,
                sessions=sessions,
                throttle=throttle,
                clock=clock,
                implicit_tls=implicit_tls,
            )
        )
        return reader.get_callback(fronts[-1])

    servers = [
        await asyncio.start_server(handler(False), sock=sock, limit=int(settings.max_line))
        for sock in sockets
    ] + [
        await asyncio.start_server(
            handler(True),
            sock=sock,
            limit=int(settings.max_line),
            ssl=ssl_ctx,
            ssl_handshake_timeout=30,
        )
        for sock in tls_sockets
    ]
    try:
        print(f"imap front {name} listening on {host}:{front.port}", flush=True)
        for sock in tls_sockets:
            print(f"imap front {name} implicit TLS on {host}:{sock.getsockname()[1]}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        logger.info("imap front %s stopping", name)
    finally:
        for server in servers:
            server.close()
        for one in fronts:  # before the node client closes under a command still waiting
            await one.end_sessions()
        if http is not None:
            await http.cleanup()
        await session.close()
        await poll_session.close()
        await store.aclose()
    return ExitCode.OK


def _cmd_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    bound_allocator()  # freed listings back to the kernel (dag_common/memory.py)
    bound_tls_buffers()  # 16 KiB, not 256, per TLS connection: two per idling session
    return asyncio.run(
        _serve(
            Path(args.config),
            args.name,
            args.port,
            args.listen_host,
            args.tls_port,
            args.metrics_port,
        )
    )


def build(serve: argparse.ArgumentParser) -> None:
    """`imap_front serve`."""
    add_config(serve)
    serve.add_argument("--name", default="imap", help="the front's name: {node} in tls: paths")
    serve.add_argument("--port", type=int, help="the port to listen on (default: imap.port)")
    serve.add_argument(
        "--tls-port", type=int, help="the implicit-TLS port (default: imap.tls_port)"
    )
    serve.add_argument("--listen-host", help="the address to bind (default: imap.host)")
    serve.add_argument(
        "--metrics-port", type=int,
        help="serve GET /metrics and /healthz on this port (0: any free one; default: none)",
    )  # fmt: skip
    serve.set_defaults(func=_cmd_serve)


def _cmd_passwd(args: argparse.Namespace) -> int:
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise BadArgument("no password on stdin")
    print(HASHER.hash(password))
    return ExitCode.OK


def build_passwd(parser: argparse.ArgumentParser) -> None:
    """`imap_front passwd`."""
    parser.set_defaults(func=_cmd_passwd)
