"""`transport serve`: run one transport (its queue, its delivery, its API) until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from aiohttp import web

from dag_common.cli import ExitCode, add_config, transport_named
from dag_common.clock import SystemClock
from dag_common.cluster_store import open_cluster_store
from dag_common.config import accepted_credentials, load_config, load_token
from dag_common.event_loop import EventLoop, run, running
from dag_common.exclusive import bind_port, lock_directory
from dag_common.http_client import client_session
from dag_common.memory import MemoryBudget, busy_heap, trim_when_quiet
from dag_common.memory_metrics import watch_memory
from dag_common.node_client import NodeStoreClient
from transport.app import build_app
from transport.delivery import Deliverer
from transport.directory import CachedDirectory
from transport.mail_listener import Listener, MailService
from transport.metrics import TransportMetrics
from transport.queue import QueueStore
from transport.retry import RetryPolicy
from transport.service import Transport

logger = logging.getLogger(__name__)


async def _serve(config_path: Path, name: str, listen_host: str | None) -> int:
    config = load_config(config_path)
    hub = transport_named(config, name, config_path)
    token = load_token(config)
    lock = lock_directory(hub.data_dir, f"transport {name}")  # noqa: F841 - held
    host = listen_host or hub.host
    sockets = bind_port(host, hub.port, f"transport {name}")
    mail_sockets = {
        listener: bind_port(host, port, f"transport {name}'s {listener} listener")
        for listener, port in ((Listener.SMTP, hub.smtp_port), (Listener.LMTP, hub.lmtp_port))
        if port is not None
    }
    settings = config.transport
    clock = SystemClock()
    metrics = TransportMetrics()
    store = QueueStore(
        hub.data_dir / "queue.db",
        max_dumpster_time=settings.max_dumpster_time.total_seconds(),
        max_dumpster_size=int(settings.max_dumpster_size_per_database),
    )
    store_of_cluster = open_cluster_store(config)
    directory = CachedDirectory(store_of_cluster, clock)
    session = client_session(config)
    nodes = NodeStoreClient(config, token=token, session=session, clock=clock)
    policy = RetryPolicy(
        interval=settings.retry_interval.total_seconds(),
        max_interval=settings.retry_max_interval.total_seconds(),
        expiration=settings.message_expiration.total_seconds(),
        max_tries=settings.max_tries,
    )
    # One budget for the bodies a transport holds: submissions read, deliveries tried.
    memory = MemoryBudget(int(settings.memory_budget))
    watch_memory(metrics.registry, memory)
    deliverer = Deliverer(
        store=store, directory=directory, nodes=nodes, policy=policy, clock=clock,
        metrics=metrics, concurrency=settings.concurrency, memory=memory,
    )  # fmt: skip
    tls = config.tls.for_node(name) if config.tls else None
    ssl_ctx = tls.server_context() if tls else None

    def reload_certificate() -> None:  # a rotated certificate, for new handshakes
        if tls is not None and ssl_ctx is not None:
            tls.reload(ssl_ctx, server=True)

    accepted = accepted_credentials(config_path, node=name, on_reload=reload_certificate)
    transport = Transport(
        config=config, name=name, token=token, store=store, directory=directory,
        deliverer=deliverer, clock=clock, metrics=metrics, credentials=accepted, memory=memory,
    )  # fmt: skip
    runner = web.AppRunner(build_app(transport), access_log=None, shutdown_timeout=1.0)
    await runner.setup()

    delivering = asyncio.create_task(deliverer.run(), name="delivery")
    servers: list[asyncio.Server] = []
    try:
        for sock in sockets:
            await web.SockSite(runner, sock, ssl_context=ssl_ctx).start()
        print(f"transport {name} listening on {hub.url} (event loop: {running()})", flush=True)
        for listener, socks in mail_sockets.items():
            mail = MailService(
                transport=transport, listener=listener, settings=settings.mail,
                credentials=accepted, tls=ssl_ctx,
            )  # fmt: skip
            servers += await mail.start(socks)
            port = socks[0].getsockname()[1]
            print(f"transport {name} {listener} listening on {host}:{port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, accepted.reload)  # credentials rotated
        watching = asyncio.create_task(accepted.watch(clock.sleep), name="credentials")

        # What its heap keeps while busy (`busy_heap`, below) given back once no body has
        # been taken for a while: every submission and delivery takes its share of `memory`.
        def taken() -> object:  # moves with every body a submission or a delivery takes
            return memory.granted, memory.in_use

        trimming = asyncio.create_task(trim_when_quiet(taken, clock.sleep), name="trim")
        await asyncio.wait(
            [asyncio.ensure_future(stop.wait()), delivering], return_when=asyncio.FIRST_COMPLETED
        )
        logger.info("transport %s stopping", name)
        watching.cancel()
        trimming.cancel()
    finally:
        for server in servers:  # no new mail sessions; a message not yet answered 250 is
            server.close()  # the MTA's to send again
        await runner.cleanup()  # no new submissions; those in flight answered
        delivering.cancel()
        await asyncio.gather(delivering, return_exceptions=True)
        await session.close()
        await store_of_cluster.aclose()
        store.close()
    failure = None if not delivering.done() or delivering.cancelled() else delivering.exception()
    if failure is not None:
        raise failure
    return ExitCode.OK


def _cmd_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # aiosmtpd logs every command line at INFO (an AUTH's credentials among them)
    logging.getLogger("mail.log").setLevel(logging.WARNING)
    # Bodies' blocks up to a couple of MiB from the heap, kept there while busy and given back
    # when quiet (`trim_when_quiet` in `_serve`): a fresh mapping per block was 100-170 page
    # faults a MiB delivered, ~7 % of the transport's CPU (issue 49; bench/README.md).
    busy_heap()
    # uvloop: a small message's hop costs a fifth less CPU on it (dag_common/event_loop.py)
    return run(_serve(Path(args.config), args.name, args.listen_host), default=EventLoop.UVLOOP)


def build(serve: argparse.ArgumentParser) -> None:
    """`transport serve`."""
    add_config(serve)
    serve.add_argument("--name", required=True, help="the transport's name in the config")
    serve.add_argument("--listen-host", help="the address to bind (default: the url's host)")
    serve.set_defaults(func=_cmd_serve)
