"""The IMAP front's Prometheus metrics, in a registry of its own (one per front), served
with `/healthz` on the front's small HTTP listener (`serve --metrics-port`)."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)
from pymap.context import current_command
from pymap.parsing.response import CommandResponse, Response


class FrontMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sessions = Gauge(
            "imap_front_sessions", "Logged-in sessions open now, by state (authenticated, "
            "idle: in IDLE)", ["state"], registry=r,
        )  # fmt: skip
        self.commands = Counter(
            "imap_front_commands", "Commands answered, by name and result (ok, no, bad)",
            ["command", "result"], registry=r,
        )  # fmt: skip
        self.idle_wakeups = Counter(
            "imap_front_idle_wakeups",
            "Change-feed answers that named an idling session's folder (it lists it again)",
            registry=r,
        )
        self.feed_polls = Counter(
            "imap_front_feed_polls", "Change-feed calls, by outcome (changed, quiet, failed, "
            "epoch: the active changed)", ["outcome"], registry=r,
        )  # fmt: skip
        self.resyncs = Counter(
            "imap_front_folder_resyncs",
            "Selected folders listed again from the node, by listing (whole, or since the "
            "modseq shown; shared: since the modseq shown, from the front's rows, read once "
            "for all the idling sessions one change woke)", ["listing"], registry=r,
        )  # fmt: skip
        self.folder_lookups = Counter(
            "imap_front_folder_lookups",
            "Selected folders found before an IDLE's wait, by source (rows: the front's, "
            "current as of what the session was shown; node: looked up there)",
            ["source"], registry=r,
        )  # fmt: skip
        self.follows = Counter(
            "imap_front_follows", "Sessions that followed their mailbox to another database "
            "(move), or ended BYE [UNAVAILABLE] because they could not (bye)", ["cause"],
            registry=r,
        )  # fmt: skip

    def answered(self, response: Response) -> None:
        """Count a command's tagged answer (OK, NO, BAD), by the command pymap is running."""
        if not isinstance(response, CommandResponse) or response.tag in (b"*", b"+"):
            return
        if response.condition not in (b"OK", b"NO", b"BAD"):
            return
        cmd = current_command.get(None)
        name = cmd.command.decode("ascii", "replace").upper() if cmd is not None else "?"
        self.commands.labels(name, response.condition.decode().lower()).inc()


async def start_http(metrics: FrontMetrics, host: str, port: int) -> web.AppRunner:
    """`GET /metrics` and `GET /healthz` on `host:port` (0: any free port)."""

    async def scrape(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(metrics.registry),
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


def bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        return int(address[1])
    raise RuntimeError("the metrics listener has no address")
