"""`guarantee-api serve`: the Data Guarantee service until SIGTERM (`guarantee_api.cli` says
the exit codes)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from dag_common.cli import ExitCode, add_config
from dag_common.config import accepted_credentials, load_config, load_token
from dag_common.credentials import Accepted
from dag_common.errors import ConfigError
from dag_common.memory import bound_allocator
from guarantee_api.errors import GuaranteeError
from guarantee_api.server import GuaranteeService, TlsFiles

logger = logging.getLogger(__name__)


async def _serve(service: GuaranteeService, grace: float, clients: Accepted | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if clients is not None:  # credentials rotate without a restart
        loop.add_signal_handler(signal.SIGHUP, clients.reload)
        watching = asyncio.create_task(clients.watch(asyncio.sleep), name="credentials")
    await service.start()
    try:
        print(
            f"guarantee-api serving gRPC on port {service.grpc_port}, "
            f"HTTP on port {service.http_port}",
            flush=True,
        )
        await stop.wait()
        logger.info("shutting down: NOT_SERVING, draining for up to %gs", grace)
    finally:
        # Whatever ends the wait (a signal, an error, the task cancelled): a grpc.aio server
        # left running when the loop closes can never be stopped, and the process then
        # hangs in grpc's shutdown instead of exiting.
        if clients is not None:
            watching.cancel()
        await service.stop(grace)


def _serve_command(args: argparse.Namespace) -> int:
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConfigError("--tls-cert and --tls-key go together")
    config = load_config(args.config)
    token = load_token(config)
    tls = TlsFiles(args.tls_cert, args.tls_key) if args.tls_cert else None
    if tls is None and config.tls is not None:  # the cluster's TLS section serves gRPC too
        tls = TlsFiles(config.tls.cert_file, config.tls.key_file)
    for path in (tls.cert, tls.key) if tls else ():
        if not path.is_file():
            raise ConfigError(f"TLS file {path} does not exist")
    # Its own credential to the nodes (`monitor`), and the movers' it accepts (`mover`),
    # reloaded on SIGHUP and when a credential file changes.
    clients = None if args.no_client_token else accepted_credentials(args.config)
    service = GuaranteeService(config, node_token=token, clients=clients, tls=tls)
    try:
        bound_allocator()  # freed bodies back to the kernel (dag_common/memory.py)
        asyncio.run(_serve(service, args.grace, clients))
    except (OSError, RuntimeError) as exc:  # e.g. the port is taken
        raise GuaranteeError(f"guarantee-api failed: {exc}") from exc
    return ExitCode.OK


def build(serve: argparse.ArgumentParser) -> None:
    """`guarantee-api serve`."""
    add_config(serve, type=Path)
    serve.add_argument(
        "--no-client-token",
        action="store_true",
        help="accept gRPC calls without the cluster token (development only)",
    )
    serve.add_argument("--tls-cert", type=Path, help="PEM certificate: serve gRPC over TLS")
    serve.add_argument("--tls-key", type=Path, help="PEM private key for --tls-cert")
    serve.add_argument("--grace", type=float, default=5.0, help="seconds to drain on SIGTERM")
    serve.add_argument(
        "--log-level", default="INFO", type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="the log's level (default INFO)",
    )  # fmt: skip
    serve.set_defaults(func=_serve_command)
