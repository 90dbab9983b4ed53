"""`transport`: run a transport, give it a message, see its queue.

    transport serve --config FILE --name HUB [--listen-host H]
    transport submit --config FILE --via HUB --to MAILBOX [--to …] --message-id ID
                     [--subject S] [--body B | --body-file F] [--folder F]
    transport status --config FILE --via HUB [--json]
    transport poison --config FILE --via HUB [--json]

Exit codes: 0 ok, 1 the transport cannot be reached or failed, 2 bad input (a refused
message, an unknown transport, a bad config)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from pydantic import ValidationError

from dag_common.auth import bearer
from dag_common.cli import add_config, add_json, add_version, exit_now, run
from dag_common.clock import SystemClock
from dag_common.cluster_store import open_cluster_store
from dag_common.config import (
    ClusterConfig,
    TransportNode,
    accepted_credentials,
    load_config,
    load_token,
)
from dag_common.echo import quoted
from dag_common.errors import CommandFailed, ConfigError, failure
from dag_common.exclusive import bind_port, lock_directory
from dag_common.http_client import client_session
from dag_common.memory import MemoryBudget, bound_allocator
from dag_common.memory_metrics import watch_memory
from dag_common.model import ExitCode
from dag_common.node_client import NodeStoreClient
from transport.app import build_app
from transport.delivery import Deliverer
from transport.directory import CachedDirectory
from transport.metrics import TransportMetrics
from transport.queue import QueueStore
from transport.retry import RetryPolicy
from transport.service import QueueState, Transport

logger = logging.getLogger(__name__)


def _hub(config: ClusterConfig, name: str, source: object) -> TransportNode:
    try:
        return config.transport_node(name)
    except KeyError:
        raise ConfigError(f"no transport {quoted(name)} in {source}") from None


async def _serve(config_path: Path, name: str, listen_host: str | None) -> int:
    config = load_config(config_path)
    hub = _hub(config, name, config_path)
    token = load_token(config)
    lock = lock_directory(hub.data_dir, f"transport {name}")  # noqa: F841 - held
    sockets = bind_port(listen_host or hub.host, hub.port, f"transport {name}")
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
    try:
        for sock in sockets:
            await web.SockSite(runner, sock, ssl_context=ssl_ctx).start()
        print(f"transport {name} listening on {hub.url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, accepted.reload)  # credentials rotated
        watching = asyncio.create_task(accepted.watch(clock.sleep), name="credentials")
        await asyncio.wait(
            [asyncio.ensure_future(stop.wait()), delivering], return_when=asyncio.FIRST_COMPLETED
        )
        logger.info("transport %s stopping", name)
        watching.cancel()
    finally:
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


async def _call(
    config: ClusterConfig, hub: TransportNode, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    token = load_token(config)
    async with client_session(config, timeout=aiohttp.ClientTimeout(total=60)) as session:
        try:
            async with session.request(
                method, hub.url + path, json=body, headers=bearer(token)
            ) as resp:
                return resp.status, await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError) as exc:
            why = str(exc) or type(exc).__name__
            raise ConnectionError(f"transport {hub.name} at {hub.url}: {why}") from None


def _cmd_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    bound_allocator()  # freed bodies back to the kernel (dag_common/memory.py)
    return asyncio.run(_serve(Path(args.config), args.name, args.listen_host))


def _answer(status: int, body: Any, *, as_json: bool, ok: str) -> int:
    if status >= 400 or not isinstance(body, dict):
        said = body.get("error") if isinstance(body, dict) else body
        code = ExitCode.BAD_INPUT if 400 <= status < 500 and status != 401 else ExitCode.FAILED
        raise failure(code, f"HTTP {status}: {said}")
    print(json.dumps(body, indent=2) if as_json else ok.format(**body))
    return ExitCode.OK


def _cmd_submit(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    hub = _hub(config, args.via, args.config)
    body = Path(args.body_file).read_text() if args.body_file else args.body
    message = {"message_id": args.message_id, "recipients": args.to, "folder": args.folder,
               "subject": args.subject, "body": body}  # fmt: skip
    status, answer = asyncio.run(_call(config, hub, "POST", "/v1/messages", message))
    if status == 200:
        print(f"{args.message_id}: already accepted (nothing queued again)")
        return ExitCode.OK
    return _answer(status, answer, as_json=False, ok="{message_id}: accepted for {recipients}")


def _cmd_status(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    hub = _hub(config, args.via, args.config)
    status, body = asyncio.run(_call(config, hub, "GET", "/v1/queue"))
    if status != 200 or args.json:
        return _answer(status, body, as_json=True, ok="")
    try:
        state = QueueState.model_validate(body)
    except ValidationError as exc:
        raise CommandFailed(f"transport {hub.name}: a malformed queue answer: {exc}") from None
    d = state.deliveries
    print(f"transport {state.transport}: {state.waiting} waiting, {d.get('Queued', 0)} queued, "
          f"{d.get('Delivered', 0)} in the dumpster, {d.get('Poison', 0)} poison")  # fmt: skip
    for dump in state.dumpsters:
        print(f"  dumpster {dump.database}: {dump.messages} messages, {dump.bytes} bytes")
    return ExitCode.OK


def _cmd_poison(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    hub = _hub(config, args.via, args.config)
    status, body = asyncio.run(_call(config, hub, "GET", "/v1/poison"))
    if status != 200 or args.json:
        return _answer(status, body, as_json=True, ok="")
    for p in body["poison"]:
        print(f"{p['message_id']} -> {p['recipient']} after {p['tries']} tries: {p['reason']}")
    return ExitCode.OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="transport", description=__doc__.splitlines()[0])
    add_version(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run one transport until SIGTERM")
    add_config(serve)
    serve.add_argument("--name", required=True, help="the transport's name in the config")
    serve.add_argument("--listen-host", help="the address to bind (default: the url's host)")
    serve.set_defaults(func=_cmd_serve)
    submit = sub.add_parser("submit", help="give a transport one message")
    add_config(submit)
    submit.add_argument("--via", required=True, help="the transport to give it to")
    submit.add_argument("--to", required=True, action="append", help="a recipient mailbox")
    submit.add_argument("--message-id", required=True, help="the message's unique id")
    submit.add_argument("--folder", default="Inbox", help="the folder (default Inbox)")
    submit.add_argument("--subject", default="", help="the subject")
    text = submit.add_mutually_exclusive_group()
    text.add_argument("--body", default="", help="the body")
    text.add_argument("--body-file", help="read the body from this file")
    submit.set_defaults(func=_cmd_submit)
    for name, func, what in (
        ("status", _cmd_status, "a transport's queue and dumpsters"),
        ("poison", _cmd_poison, "a transport's poison queue"),
    ):
        cmd = sub.add_parser(name, help=what)
        add_config(cmd)
        cmd.add_argument("--via", required=True, help="the transport to ask")
        add_json(cmd)
        cmd.set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(_parser(), argv)


def entry() -> None:
    exit_now(lambda: main(sys.argv[1:]))


if __name__ == "__main__":
    entry()
