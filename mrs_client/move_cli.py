"""`mrs move`, `resume`, `serve`, `suspend` and `cancel`: run moves, in the foreground or as
a worker, and stop them (`mrs_client.cli` says the exit codes).  `connected` opens what a
mover needs (the move store, the directory, the nodes, the guarantee service), for the
batch commands too."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dag_common.cli import (
    Command,
    ExitCode,
    add_config,
    add_duration,
    add_json,
    whole_number,
)
from dag_common.clock import SystemClock
from dag_common.config import ClusterConfig, load_config, load_token
from dag_common.echo import quoted
from dag_common.http_client import client_session
from dag_common.memory import bound_allocator
from mrs_client.body_budget import BodyBudget
from mrs_client.errors import MoveRejected
from mrs_client.move_store import open_move_store
from mrs_client.move_store.interface import AnswerRow, MoveRecord, MoveStore
from mrs_client.policy import MoveSettings, MoveState, StopRequest
from mrs_client.progress import Progress
from mrs_client.scheduling import MoveLimits

if TYPE_CHECKING:
    from mrs_client.metrics import MoveMetricsFile
    from mrs_client.mover import Mover
    from mrs_client.stopping import Stopped

SWITCH_INTERVAL = 0.001  # seconds: `mrs serve`'s GIL switch interval (cmd_serve says why)

# The MoveSettings durations a command line may set (`--stall-limit 2s`, …).
TIMING_HELP = {
    "health_check_interval": "how often CheckReplicationHealth is asked during the syncs",
    "stall_retry_interval": "how long each health question of a stalled move may wait",
    "stall_limit": "how long a move may stay stalled before it fails",
    "flush_retry_interval": "how long each flush question may wait",
    "flush_limit": "how long the final flush may take before the move fails",
    "block_flush_wait": "how long a flush inside the open log (block mode) may take before "
    "the target's log is rolled instead",
}
TIMINGS = tuple(TIMING_HELP)


def _default(name: str) -> str:
    """A timing's default, as a duration is written (the seed's values: MoveSettings)."""
    seconds = int(getattr(MoveSettings(), name).total_seconds())
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def settings_from(args: argparse.Namespace, config: ClusterConfig) -> MoveSettings:
    base = MoveSettings()
    smallest_log = min(config.log_file_size_of(db) for db in config.databases)
    changes: dict[str, object] = {
        # Small items are cut so that a write of them fits in one generation; an item larger
        # than the cut is written alone (batching.BatchCutter), up to the target's
        # max_item_size (a larger one is a large item: item_limits).
        "sync_batch_bytes": smallest_log // 2,
        # No head start before the first flush question: the service waits for the answer
        # (`wait`) and hears of the copies' progress as it happens.  (A service without
        # `wait` answers at once; the mover then asks every flush_retry_interval.)
        # a flush inside the open log is asked at least twice before the mover rolls instead
        "block_flush_wait": max(base.block_flush_wait, 4 * config.guarantee_api.poll_interval),
    }
    for name in TIMINGS:
        value = getattr(args, name, None)
        if value is not None:
            changes[name] = value
    if getattr(args, "sync_batch", None):
        changes["sync_batch"] = args.sync_batch
    if getattr(args, "memory_budget", None):
        changes["memory_budget"] = args.memory_budget
    if getattr(args, "unsafe_skip_verification", False):
        changes["verify"] = False
    return replace(base, **changes)


@dataclass
class Connected:
    """What a mover needs, opened once per command: the move store, the mailbox directory,
    the nodes and the guarantee service (`connected`)."""

    config: ClusterConfig
    args: argparse.Namespace
    store: MoveStore
    directory: Any
    nodes: Any
    guarantee: Any

    def __post_init__(self) -> None:
        # The bodies every mover of this process holds (`mrs serve` runs many).
        self.budget = BodyBudget(settings_from(self.args, self.config).memory_budget)

    def mover(self, *, progress: Callable[[MoveRecord, str], None] | None = None,
              worker: str | None = None) -> Mover:  # fmt: skip
        from mrs_client.mover import Mover

        config = self.config
        return Mover(
            requests=self.store,
            nodes=self.nodes,
            guarantee=self.guarantee,
            directory=self.directory,
            databases={d.name for d in config.databases},
            clock=SystemClock(),
            settings=settings_from(self.args, config),
            budget=self.budget,
            caller_id=getattr(self.args, "caller_id", "mrs"),
            worker=worker,
            progress=progress,
            max_item_sizes={db.name: config.max_item_size_of(db) for db in config.databases},
        )


@contextlib.asynccontextmanager
async def connected(args: argparse.Namespace, config: ClusterConfig) -> AsyncIterator[Connected]:
    """Open the move store, the directory, an HTTP session to the nodes and the guarantee
    client; close them all at the end."""
    from dag_common.cluster_store import open_cluster_store
    from dag_common.node_client import NodeStoreClient
    from mrs_client.guarantee_client import GrpcGuaranteeClient

    token = load_token(config)
    store = open_move_store(config)
    directory = open_cluster_store(config)
    try:
        async with client_session(config) as session:
            guarantee = GrpcGuaranteeClient.from_config(config, token=token)
            try:
                yield Connected(
                    config,
                    args,
                    store,
                    directory,
                    NodeStoreClient(config, token=token, session=session, bodies_as_bytes=True),
                    guarantee,
                )
            finally:
                await guarantee.close()
    finally:
        directory.close()
        await store.aclose()


async def _run_move(args: argparse.Namespace, config: ClusterConfig, move_id: str | None) -> int:
    clock = SystemClock()
    textfile: MoveMetricsFile | None = None
    answers: list[AnswerRow] = []  # the move's guarantee answers, for the textfile
    if args.metrics_textfile:
        from mrs_client.metrics import MoveMetricsFile  # prometheus_client: only when asked

        path = Path(args.metrics_textfile)
        if not path.parent.is_dir():
            raise MoveRejected(f"--metrics-textfile: no directory {path.parent}")
        textfile = MoveMetricsFile(path, answers=lambda _: answers, clock=clock)
    progress = Progress()

    def report(record: MoveRecord, line: str) -> None:
        progress(record, line)
        if textfile is not None:
            textfile(record, line)

    async with connected(args, config) as on:
        requests = on.store
        mover = on.mover(progress=report)
        try:
            if move_id is None:
                record = await mover.request(
                    args.mailbox,
                    args.to,
                    with_archive=args.with_archive,
                    large_item_limit=args.large_item_limit,
                    bad_item_limit=args.bad_item_limit,
                )
                await mover.submit(record)
                move_id = record.id
            else:
                existing = await requests.get(move_id)
                if existing is None:
                    raise MoveRejected(f"no move request {quoted(move_id)}")
                if existing.state is MoveState.COMPLETED:
                    raise MoveRejected(f"move {move_id} is already completed")
                answers[:] = await requests.answers(move_id)
            mover.gates.on_answer = lambda _, row: answers.append(row)
            final = await mover.run(
                move_id,
                large_item_limit=args.large_item_limit,
                bad_item_limit=args.bad_item_limit,
                # a resume after a kill -9 waits for the dead client's lease to run out
                wait_for_dead_holder=args.command == "resume",
                notify=lambda line: print(line, file=sys.stderr, flush=True),
            )
        finally:
            progress.close()
            if textfile is not None:
                textfile.write(await requests.get(move_id) if move_id else None)
            stop = await requests.stop_requested(move_id) if move_id else None
    line = f"move {final.id}: {final.state}" + (f": {final.failure}" if final.failure else "")
    if final.state is MoveState.SUSPENDED:
        line += (
            f" at step {int(final.step)} for `mrs cancel`"
            if stop is StopRequest.CANCEL
            else f" at step {int(final.step)}; `mrs resume {final.id}` goes on"
        )
    print(line)
    return ExitCode.OK if final.state is MoveState.COMPLETED else ExitCode.FAILED


async def _serve(args: argparse.Namespace, config: ClusterConfig) -> int:
    import signal

    from mrs_client.lease import worker_id
    from mrs_client.worker import Worker

    me = worker_id("mrs-serve")

    def log_line(record: MoveRecord, line: str) -> None:
        if line:
            logging.getLogger("mrs.move").info("move %s: %s", record.id, line)

    async with connected(args, config) as on:

        async def active_node(database: str) -> str | None:
            record = await on.directory.active(database)
            return record.node if record else None

        worker = Worker(
            store=on.store,
            make_mover=lambda: on.mover(progress=log_line, worker=me),
            active_node=active_node,
            clock=SystemClock(),
            limits=MoveLimits(**{field: getattr(args, field) for _, field, _ in _LIMITS}),
            poll=args.poll.total_seconds(),
            grace=args.grace.total_seconds(),
            worker=me,
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        runner = (
            await _serve_http(args.http_listen, worker, config, on.budget)
            if args.http_listen
            else None
        )
        where = f"; metrics and status page on {args.http_listen}" if runner else ""
        print(f"mrs worker {me} running (at most {args.per_worker} moves){where}", flush=True)
        try:
            await worker.run()
        finally:
            if runner is not None:
                await runner.cleanup()
    ended = ", ".join(f"{n} {state}" for state, n in sorted(worker.stats.ended.items()))
    print(f"mrs worker {me} stopped: {ended or 'no move ended'}", flush=True)
    return ExitCode.OK


async def _serve_http(listen: str, worker: Any, config: ClusterConfig, budget: BodyBudget) -> Any:
    """/metrics, the status page and /batches of `mrs serve` (fleet_view), TLS as the
    cluster config says."""
    from aiohttp import web

    from dag_common.exclusive import bind_port
    from mrs_client.fleet_view import app

    host, _, port = listen.rpartition(":")
    if not port.isdigit():
        raise MoveRejected(f"--http-listen {quoted(listen)}: not HOST:PORT")
    sockets = bind_port(host or "127.0.0.1", int(port), "mrs serve (HTTP)")
    runner = web.AppRunner(app(worker, budget.budget), access_log=None)
    await runner.setup()
    ssl = config.tls.server_context() if config.tls else None
    for sock in sockets:
        await web.SockSite(runner, sock, ssl_context=ssl).start()
    return runner


def cmd_serve(args: argparse.Namespace) -> int:
    """A worker: runs the cluster's queued moves (and takes over those of a lost worker)."""
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    for handler in root.handlers:  # a long-running service: every line time-stamped
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    config = load_config(args.config)
    # The move store's SQLite calls run in a thread that gives up the GIL at each statement
    # and must take it back from the event loop: at the default switch interval (5 ms) a
    # loop kept busy by many moves makes every statement of every save wait up to 5 ms.
    sys.setswitchinterval(SWITCH_INTERVAL)
    bound_allocator()  # freed bodies back to the kernel (dag_common/memory.py)
    return asyncio.run(_serve(args, config))


def cmd_move(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    bound_allocator()  # freed bodies back to the kernel (dag_common/memory.py)
    return asyncio.run(_run_move(args, config, None))


def cmd_resume(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    bound_allocator()  # freed bodies back to the kernel (dag_common/memory.py)
    return asyncio.run(_run_move(args, config, args.id))


def _stopped(args: argparse.Namespace, stopped: Stopped) -> int:
    if args.json:
        print(json.dumps(stopped.record.as_dict(), indent=2))
    else:
        print(stopped.line)
    return ExitCode.OK if stopped.done else ExitCode.FAILED


def cmd_suspend(args: argparse.Namespace) -> int:
    """Like Suspend-MoveRequest: the move stops at its next safe point, resumable."""
    from mrs_client import stopping

    config = load_config(args.config)

    async def suspend() -> Stopped:
        requests = open_move_store(config)
        try:
            return await stopping.suspend(requests, args.id, clock=SystemClock(), wait=args.wait)
        finally:
            await requests.aclose()

    return _stopped(args, asyncio.run(suspend()))


async def _cancel(args: argparse.Namespace, config: ClusterConfig) -> Stopped:
    from dag_common.cluster_store import open_cluster_store
    from dag_common.node_client import NodeStoreClient
    from mrs_client import stopping

    requests = open_move_store(config)
    try:
        await stopping.cancellable(requests, args.id)  # refused before a token or node is needed
    except BaseException:
        await requests.aclose()
        raise
    token = load_token(config)
    directory = open_cluster_store(config)
    try:
        async with client_session(config) as session:
            return await stopping.cancel(
                requests,
                args.id,
                nodes=NodeStoreClient(config, token=token, session=session, bodies_as_bytes=True),
                directory=directory,
                clock=SystemClock(),
                wait=args.wait,
            )
    finally:
        directory.close()
        await requests.aclose()


def cmd_cancel(args: argparse.Namespace) -> int:
    """Like Remove-MoveRequest before completion: the target copy removed, the source
    unlocked, the mailbox free to move again."""
    config = load_config(args.config)
    return _stopped(args, asyncio.run(_cancel(args, config)))


# ---- the commands' arguments (`mrs_client.cli` names them) ---------------------------------

_positive = whole_number(1, "moves")  # a limit of concurrent moves
_count = whole_number(0, "items")  # an item limit
MIB = 1024 * 1024


def _byte_size(text: str) -> int:
    """An argparse type: a positive size in bytes, as the config writes one (256MiB)."""
    from pydantic import ByteSize, TypeAdapter, ValidationError

    try:
        value = int(TypeAdapter(ByteSize).validate_python(text))
    except ValidationError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f"{quoted(text)} is not a size in bytes (256MiB, 1GB, ...)"
        )
    return value


def _common(p: argparse.ArgumentParser) -> None:
    add_config(p)
    add_json(p, "print the record(s) as JSON")


def timings(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--caller-id",
        default="mrs",
        help="who asks the guarantee service (it keeps an average copy queue per caller)",
    )
    for name in TIMINGS:
        add_duration(
            p,
            "--" + name.replace("_", "-"),
            dest=name,
            default=None,
            help=f"{TIMING_HELP[name]}; default {_default(name)}",
        )
    p.add_argument("--sync-batch", type=int, default=None, help="items per write")
    p.add_argument(
        "--memory-budget",
        type=_byte_size,
        default=None,
        metavar="SIZE",
        help="the item bodies the moves of this process may hold at once (past it, the next "
        f"page waits for bodies to be written); default {MoveSettings().memory_budget // MIB}MiB",
    )


def _item_limits(p: argparse.ArgumentParser, default: int | None) -> None:
    keep = "; default: the request's" if default is None else f"; default {default}"
    p.add_argument(
        "--large-item-limit",
        type=_count,
        default=default,
        metavar="N",
        help="skip and report up to N items larger than the target database's "
        f"max_item_size; more fails the move before step 8{keep}",
    )
    p.add_argument(
        "--bad-item-limit",
        type=_count,
        default=default,
        metavar="N",
        help=f"skip and report up to N source items that cannot be read; more fails the "
        f"move before step 8{keep}",
    )
    p.add_argument(
        "--metrics-textfile",
        default=None,
        metavar="FILE.prom",
        help="keep the move's counters in this node_exporter textfile (one file per move)",
    )
    # bench/move.py's same-run comparison only: skips the digest comparison before step
    # 8 (epochs are still checked).  Never for a real move, so not in --help.
    p.add_argument(
        "--unsafe-skip-verification",
        dest="unsafe_skip_verification",
        action="store_true",
        help=argparse.SUPPRESS,
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")


def build_move(move: argparse.ArgumentParser) -> None:
    """`mrs move`."""
    _common(move)
    timings(move)
    move.add_argument("--mailbox", required=True, help="the mailbox to move")
    move.add_argument("--to", required=True, help="target database")
    move.add_argument(
        "--with-archive",
        action="store_true",
        help="move the mailbox's archive (<mailbox>.archive) with it",
    )
    _item_limits(move, 0)
    move.set_defaults(func=cmd_move)


def build_resume(resume: argparse.ArgumentParser) -> None:
    """`mrs resume`."""
    _common(resume)
    timings(resume)
    _item_limits(resume, None)
    resume.add_argument("id", help="the move request's id (mrs list)")
    resume.set_defaults(func=cmd_resume)


def _stop_command(p: argparse.ArgumentParser, func: Command) -> None:
    _common(p)
    p.add_argument("id", help="the move request's id (mrs list)")
    add_duration(
        p,
        "--wait",
        default="60s",
        help="how long to wait for an mrs process running the move to stop at its next safe point",
    )
    p.set_defaults(func=func)


def build_suspend(p: argparse.ArgumentParser) -> None:
    """`mrs suspend`."""
    _stop_command(p, cmd_suspend)


def build_cancel(p: argparse.ArgumentParser) -> None:
    """`mrs cancel`."""
    _stop_command(p, cmd_cancel)


# `mrs serve`'s limits: each one's flag, the `MoveLimits` field it sets (and takes its default
# from), and what it counts.
_LIMITS = (
    ("--max-moves", "per_worker", "moves this worker runs at once"),
    ("--max-per-source-database", "per_source_database",
     "moves running at once from one source database (every worker counted)"),
    ("--max-per-target-database", "per_target_database",
     "moves running at once into one target database"),
    ("--max-per-source-node", "per_source_node",
     "moves running at once from databases active on one node"),
    ("--max-per-target-node", "per_target_node",
     "moves running at once into databases active on one node"),
)  # fmt: skip


def build_serve(serve: argparse.ArgumentParser) -> None:
    """`mrs serve`."""
    _common(serve)
    timings(serve)
    limits = MoveLimits()
    for flag, field, text in _LIMITS:
        default = getattr(limits, field)
        serve.add_argument(flag, dest=field, type=_positive, default=default, metavar="N",
                           help=f"{text}; default {default}")  # fmt: skip
    add_duration(serve, "--poll", default="1s", help="how often the move store is read")
    serve.add_argument(
        "--http-listen",
        metavar="HOST:PORT",
        default=None,
        help="serve /metrics, a status page of the batches (/) and /batches (JSON) here",
    )
    add_duration(
        serve,
        "--grace",
        default="30s",
        help="on SIGTERM, how long moves may take to reach a safe point and be given back",
    )
    serve.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    serve.set_defaults(func=cmd_serve)
