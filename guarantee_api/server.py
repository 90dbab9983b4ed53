"""Wires the Data Guarantee service together; it holds no rules of its own.

Parts: the poller and one status-stream watcher per node (aiohttp, one session) feeding the
live view; after each round, the metrics and the Parquet history; the grpc.aio server with
the DataGuarantee servicer, grpc.health.v1 (SERVING once the first poll round is done) and
server reflection, behind an optional bearer-token interceptor and optional TLS; an aiohttp
app on `http_listen` serving /metrics and /healthz without a credential, and the status page
(`/`, `/status`: `status_page.py`) to the `monitor` role when the service checks
credentials; over TLS when the service has TLS (as gRPC).  `stop()` is the graceful
shutdown: health NOT_SERVING, then `server.stop(grace)`, then the poller, the last history
flush and the HTTP side.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
from dag_common.clock import Clock, SystemClock
from dag_common.cluster_store import open_cluster_store
from dag_common.cluster_store.interface import ClusterStore
from dag_common.config import ClusterConfig
from dag_common.credentials import Credentials, Role, cluster_only, from_header
from dag_common.errors import InUse
from dag_common.exclusive import bind_port
from dag_common.guarantee.values import Limits
from dag_common.http_client import client_session
from dag_common.route_roles import PUBLIC, Call, add_route, refusal, role_middleware
from guarantee_api import reflection
from guarantee_api.averages import CopyQueueAverages
from guarantee_api.errors import HistoryWriteError
from guarantee_api.health import HealthServicer
from guarantee_api.history import HistoryWriter
from guarantee_api.last_answers import LastAnswers
from guarantee_api.metrics import CONTENT_TYPE, Metrics
from guarantee_api.poller import Poller
from guarantee_api.servicer import DataGuaranteeServicer
from guarantee_api.status_page import render, take_snapshot
from guarantee_api.view import LiveView
from guarantee_api.watcher import NodeWatcher

logger = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["DataGuarantee"].full_name
# A health "service" that is SERVING from start to shutdown whatever the cluster does: for a
# liveness probe (Kubernetes' native gRPC probe), which must not restart a replica because
# no node can be polled ("" and SERVICE_NAME say NOT_SERVING then: the readiness probe).
LIVENESS = "liveness"
_EXEMPT = ("/grpc.health.v1.Health/", "/grpc.reflection.")
_METHODS = set(pb.DESCRIPTOR.services_by_name["DataGuarantee"].methods_by_name)
_METRICS_KEY = web.AppKey("metrics", Metrics)
_SERVICE_KEY: web.AppKey[GuaranteeService] = web.AppKey("service")


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files for serving gRPC and the HTTP side (/metrics, /healthz, the status page)
    over TLS."""

    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx


class RoleInterceptor(grpc.aio.ServerInterceptor):
    """The DataGuarantee calls need a credential holding the `mover` role (the movers ask
    them): UNAUTHENTICATED without a known one (`authorization: Bearer <secret>`),
    PERMISSION_DENIED naming the role for one without it.

    Health checks and reflection are exempt, so probes and tools need no secret.  Every
    refusal is counted in `dataguarantee_requests_total` by its code.
    """

    def __init__(
        self,
        credentials: Callable[[], Credentials],
        *,
        metrics: Metrics,
        role: Role = Role.MOVER,
    ) -> None:
        self._credentials = credentials
        self._metrics = metrics
        self._role = role

    def _deny(self, method: str, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
        # A method of the API by its name; any other path is the caller's own: not a label.
        name = method.rpartition("/")[2]
        self._metrics.refused(name if name in _METHODS else "other", code.name)

        async def abort(request: object, context: grpc.aio.ServicerContext) -> None:
            await context.abort(code, message)

        return grpc.unary_unary_rpc_method_handler(abort)

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        if method.startswith(_EXEMPT):
            return await continuation(handler_call_details)
        secret = None
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                secret = from_header(value)
        who = self._credentials().identify(secret)
        if who is None:
            return self._deny(
                method, grpc.StatusCode.UNAUTHENTICATED, "missing or unknown credential"
            )
        if not who.holds(self._role):
            return self._deny(
                method, grpc.StatusCode.PERMISSION_DENIED, refusal(self._role, who, method)
            )
        return await continuation(handler_call_details)


class GuaranteeService:
    """The running service: start it, read its ports, stop it."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        node_token: str,
        client_token: str | None = None,
        clients: Callable[[], Credentials] | None = None,
        clock: Clock | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        self.config = config
        api = config.guarantee_api
        self.clock = clock or SystemClock()
        self.metrics = Metrics()
        interval = api.poll_interval.total_seconds()
        self.view = LiveView(config, stale_after=interval * api.stale_after_polls)
        self.history = HistoryWriter(
            api.history_dir, clock=self.clock, flush_every=api.history_flush_every.total_seconds()
        )
        self.health = HealthServicer()
        self.last_answers = LastAnswers()
        self._node_token = node_token
        # Who may ask: `clients` (a service's accepted credentials), or one `client_token`
        # holding every role; neither: anyone (`--no-client-token`, development only).
        if clients is None and client_token is not None:
            clients = cluster_only(client_token)
        self._clients = clients
        self._tls = tls
        self._interval = interval
        self._servicer = DataGuaranteeServicer(
            view=self.view,
            averages=CopyQueueAverages(
                window=api.limits.average_window,
                span=api.limits.average_window_time.total_seconds(),
                clock=self.clock,
            ),
            limits=Limits.from_config(api.limits),
            constraints={db.name: config.constraint_of(db) for db in config.databases},
            clock=self.clock,
            metrics=self.metrics,
            max_wait=api.max_wait.total_seconds(),
            last_answers=self.last_answers,
        )
        self._session: aiohttp.ClientSession | None = None
        self._grpc: grpc.aio.Server | None = None
        self._runner: web.AppRunner | None = None
        self._poll_task: asyncio.Task[None] | None = None
        self._watch_tasks: list[asyncio.Task[None]] = []
        self._cluster_store: ClusterStore | None = None
        self.poller: Poller | None = None
        self.grpc_port = 0
        self.http_port = 0
        self.serving = False

    async def start(self) -> None:
        """Bind both listeners, start polling; health says SERVING after the first round."""
        api = self.config.guarantee_api
        interceptors = (
            [RoleInterceptor(self._clients, metrics=self.metrics)] if self._clients else []
        )
        # No SO_REUSEPORT (gRPC's default): a second service on the same port is refused
        # instead of sharing its calls.  Asked first with a plain bind, so that the refusal
        # is one line (InUse) rather than gRPC's own log.
        host, _, port = api.listen.rpartition(":")
        if int(port):
            for sock in bind_port(host or "0.0.0.0", int(port), "guarantee API (gRPC)"):
                sock.close()
        self._grpc = grpc.aio.server(interceptors=interceptors, options=[("grpc.so_reuseport", 0)])
        pb_grpc.add_DataGuaranteeServicer_to_server(self._servicer, self._grpc)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._grpc)
        reflection.enable(
            self._grpc, (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name)
        )
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
        try:
            if self._tls:
                creds = grpc.ssl_server_credentials(
                    [(self._tls.key.read_bytes(), self._tls.cert.read_bytes())]
                )
                self.grpc_port = self._grpc.add_secure_port(api.listen, creds)
            else:
                self.grpc_port = self._grpc.add_insecure_port(api.listen)
        except RuntimeError as exc:  # taken between the check above and now
            raise InUse(f"guarantee API (gRPC): cannot listen on {api.listen}: {exc}") from None
        await self._grpc.start()
        try:
            await self._start_rest(api.http_listen)
        except BaseException:  # e.g. the HTTP port is taken: nothing is left running
            await self.stop(0)
            raise
        logger.info("guarantee API on %s (gRPC) and port %d (HTTP)", self.grpc_port, self.http_port)

    async def _start_rest(self, http_listen: str) -> None:
        api = self.config.guarantee_api
        await self._start_http(http_listen)
        # No pool limit: each node holds its status stream open, and aiohttp's default of
        # 100 connections would leave the 101st node's stream (and every poll) waiting
        # (found by bench/guarantee_scale.py at 200 nodes).  At most two per node.
        self._session = client_session(self.config, limit=0)
        # The stream history (epochs and their fork points) is the cluster store's: read it
        # from there, the authority, not from what some node last heard.
        self._cluster_store = open_cluster_store(self.config)
        self.poller = Poller(
            nodes=list(self.config.nodes),
            view=self.view,
            session=self._session,
            clock=self.clock,
            interval=self._interval,
            token=self._node_token,
            metrics=self.metrics,
            on_round=self._after_round,
            history_source=self._cluster_store.history,
        )
        self._poll_task = asyncio.create_task(self.poller.run(), name="guarantee-poller")
        if api.watch:
            # A heartbeat is what keeps a quiet node's pushed status fresh: at least three
            # of them within the freshness limit (3 polls), whatever watch_heartbeat says,
            # else a node with nothing to say would count as stale between two of them.
            stale_after = self._interval * api.stale_after_polls
            heartbeat = max(0.05, min(api.watch_heartbeat.total_seconds(), stale_after / 3))
            silence = max(api.watch_silence.total_seconds(), 3 * heartbeat)
            for node in self.config.nodes:
                watcher = NodeWatcher(
                    node=node,
                    view=self.view,
                    session=self._session,
                    clock=self.clock,
                    token=self._node_token,
                    heartbeat=heartbeat,
                    silence=silence,
                    metrics=self.metrics,
                )
                self._watch_tasks.append(
                    asyncio.create_task(watcher.run(), name=f"watch {node.name}")
                )

    async def _start_http(self, listen: str) -> None:
        host, _, port = listen.rpartition(":")
        sockets = bind_port(host or "127.0.0.1", int(port), "guarantee API (HTTP)")
        app = http_app(self, self._clients)
        self._runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=5.0
        )  # as the gRPC grace
        await self._runner.setup()
        # With TLS, the HTTP side too: the status page shows callers and reasons.
        ssl_ctx = self._tls.server_context() if self._tls else None
        for sock in sockets:
            await web.SockSite(self._runner, sock, ssl_context=ssl_ctx).start()
        self.http_port = sockets[0].getsockname()[1]

    async def _after_round(self) -> None:
        now = self.clock.monotonic()
        copies = [c for db in self.view.databases for c in self.view.snapshot(db, now).copies]
        self.metrics.observe_copies(copies)
        self.history.add_round(self.clock.now(), copies)
        if self.history.due:
            await self.flush_history()
        # SERVING while the last round reached at least one node: with none, every answer
        # would be Retry, and a load balancer should send movers to a replica that sees the
        # cluster (answers stay correct either way: nothing unknown is ever Satisfied).
        serving = self.view.reachable_nodes > 0
        if serving != self.serving and self._grpc is not None:
            self.serving = serving
            self.metrics.serving.set(1 if serving else 0)
            state = health_pb2.HealthCheckResponse
            for name in ("", SERVICE_NAME):
                await self.health.set(name, state.SERVING if serving else state.NOT_SERVING)
            if serving:
                logger.info("poll round reached %d node(s): SERVING", self.view.reachable_nodes)
            else:
                logger.warning("no node could be polled: NOT_SERVING")

    async def flush_history(self) -> None:
        """Write the buffered history samples (in a thread: fsync must not stall answers)."""
        rounds = self.history.pending_rounds
        rows = self.history.drain()
        if not rows:
            return
        try:
            await asyncio.to_thread(self.history.write, rows)
            self.metrics.history_samples.inc(len(rows))
        except HistoryWriteError as exc:
            logger.error("%s", exc)
            self.metrics.history_errors.inc()
            self.history.give_back(rows, rounds)

    async def stop(self, grace: float = 5.0) -> None:
        """Graceful shutdown: NOT_SERVING, drain in-flight calls for `grace`, then the rest."""
        self.serving = False
        self.metrics.serving.set(0)
        await self.health.enter_graceful_shutdown()
        if self._grpc is not None:
            await self._grpc.stop(grace)
        tasks = [t for t in (self._poll_task, *self._watch_tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.flush_history()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        if self._cluster_store is not None:
            await self._cluster_store.aclose()


def http_app(
    service: GuaranteeService, clients: Callable[[], Credentials] | None
) -> web.Application:
    """The HTTP side: /metrics and /healthz for anyone (Prometheus, probes); the status page,
    which shows caller ids and reasons, for the `monitor` role whenever the service checks
    credentials (`clients`; none: anyone, as on the gRPC side).  Refusals are counted."""

    def refused(call: Call) -> None:  # the middleware tells every refusal
        if call.status in (401, 403):
            service.metrics.http_refused.labels(call.role or "none", str(call.status)).inc()

    middlewares = [role_middleware(clients, refused)] if clients is not None else []
    app = web.Application(middlewares=middlewares)
    app[_METRICS_KEY] = service.metrics
    app[_SERVICE_KEY] = service
    add_route(app, "GET", "/metrics", _metrics_handler, PUBLIC)
    add_route(app, "GET", "/healthz", _healthz_handler, PUBLIC)
    add_route(app, "GET", "/", _status_page_handler, Role.MONITOR)
    add_route(app, "GET", "/status", _status_page_handler, Role.MONITOR)
    return app


async def _metrics_handler(request: web.Request) -> web.Response:
    body = request.app[_METRICS_KEY].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def _healthz_handler(request: web.Request) -> web.Response:
    if request.app[_SERVICE_KEY].serving:
        return web.Response(text="ok\n")
    return web.Response(status=503, text="not serving\n")


async def _status_page_handler(request: web.Request) -> web.Response:
    service = request.app[_SERVICE_KEY]
    snapshot = take_snapshot(
        cluster=service.config.cluster,
        view=service.view,
        answers=service.last_answers,
        clock=service.clock,
        serving=service.serving,
        nodes=len(service.config.nodes),
    )
    return web.Response(
        text=render(snapshot),
        content_type="text/html",
        charset="utf-8",
        headers={"Cache-Control": "no-store"},
    )
