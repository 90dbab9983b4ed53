"""The `replication-node` commands that run or talk to nodes: serve, cluster up, status and
the admin calls (roll-log, suspend, resume, reseed)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from dag_common.clock import SystemClock
from dag_common.config import ClusterConfig, load_config, load_token
from dag_common.durations import parse_duration
from dag_common.errors import ConfigError
from dag_common.model import AutoDatabaseMountDial, ExitCode, NodeStatus
from dag_common.node_status import StatusUnavailable, fetch_node_status, post_admin


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def ensure_token_file(config: ClusterConfig) -> None:
    """Create the token file (0600) the first time a local cluster starts, if none exists."""
    if os.environ.get("DG_AUTH_TOKEN") or config.auth_token_file is None:
        return
    path = config.auth_token_file
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")


# ---- serve ---------------------------------------------------------------------------------


async def _serve(
    config_path: Path, node_name: str, refresh: float, listen_host: str | None = None
) -> int:
    from replication_node.cluster.store import open_cluster_store
    from replication_node.node import Node, build_app

    config = load_config(config_path)
    try:
        node_config = config.node(node_name)
    except KeyError:
        raise ConfigError(f"{config_path}: no node named {node_name!r}") from None
    token = load_token(config)
    store = open_cluster_store(config)
    node = Node(
        config=config,
        name=node_name,
        token=token,
        clock=SystemClock(),
        cluster_store=store,
        config_path=config_path,
        config_refresh=refresh,
    )
    app = build_app(node)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    ssl_ctx = config.tls.server_context() if config.tls else None
    # The url's host by default; a pod binds every address (`--listen-host 0.0.0.0`), since
    # its url names a DNS record that points at it only once it runs.
    host = listen_host or node_config.host
    site = web.TCPSite(runner, host, node_config.port, ssl_context=ssl_ctx)
    await node.start()
    await site.start()
    print(f"node {node_name} listening on {node_config.url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger(__name__).info("node %s stopping", node_name)
    await site.stop()
    await node.stop()
    await runner.cleanup()
    store.close()
    return ExitCode.OK


def cmd_serve(args: argparse.Namespace) -> int:
    _setup_logging(args.verbose)
    return asyncio.run(
        _serve(
            Path(args.config),
            args.node,
            parse_duration(args.config_refresh).total_seconds(),
            args.listen_host,
        )
    )


# ---- cluster up ----------------------------------------------------------------------------


def cmd_cluster_up(args: argparse.Namespace) -> int:
    """Start every node of the config as a local process; stop them all on Ctrl-C/SIGTERM."""
    config = load_config(args.config)
    ensure_token_file(config)
    load_token(config)
    procs: list[subprocess.Popen[bytes]] = []
    for node in config.nodes:
        cmd = [
            sys.executable,
            "-m",
            "replication_node.cli.main",
            "serve",
            "--config",
            args.config,
            "--node",
            node.name,
            "--config-refresh",
            args.config_refresh,
        ]
        node.data_dir.mkdir(parents=True, exist_ok=True)
        log_dir = Path(args.log_dir) if args.log_dir else node.data_dir.parent
        log = open(log_dir / f"{node.name}.log", "ab")  # noqa: SIM115 - the child owns it
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        print(f"{node.name:<10} {node.site:<10} {node.url:<28} log {log.name}", flush=True)
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = ExitCode.OK
    try:
        while not stopping:
            for proc in procs:
                if proc.poll() is not None:
                    print(
                        f"a node exited with code {proc.returncode}; stopping the cluster",
                        file=sys.stderr,
                    )
                    stopping, code = True, ExitCode.FAILED
            if not stopping:
                time.sleep(0.2)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    return code


# ---- client commands -----------------------------------------------------------------------


def _client_ssl(config: ClusterConfig) -> Any:
    return config.tls.client_context() if config.tls else None


async def fetch_statuses(config: ClusterConfig, token: str) -> dict[str, NodeStatus | str]:
    """Every node's /v1/status, or the error that kept us from it."""
    out: dict[str, NodeStatus | str] = {}
    conn = aiohttp.TCPConnector(ssl=_client_ssl(config))
    async with aiohttp.ClientSession(connector=conn) as s:

        async def one(name: str, url: str) -> None:
            try:
                out[name] = await fetch_node_status(s, url, token, expect_node=name)
            except StatusUnavailable as exc:
                out[name] = str(exc) if exc.status else f"unreachable: {exc}"

        await asyncio.gather(*(one(n.name, n.url) for n in config.nodes))
    return out


def _fmt_time(value: Any) -> str:
    return value.strftime("%H:%M:%S") if value else "-"


def cmd_status(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    token = load_token(config)
    statuses = asyncio.run(fetch_statuses(config, token))
    rows = []
    for db in config.databases:
        for copy in sorted(db.copies, key=lambda c: c.activation_preference):
            st = statuses.get(copy.node)
            report = None
            if isinstance(st, NodeStatus):
                report = next((c for c in st.copies if c.database == db.name), None)
            rows.append((db.name, copy.node, report, st if isinstance(st, str) else None))
    if args.json:
        print(
            json.dumps(
                [
                    r.model_dump(mode="json")
                    if r
                    else {"database": d, "node": n, "error": e or "no status"}
                    for d, n, r, e in rows
                ],
                indent=2,
            )
        )
    else:
        print(
            f"{'Name':<20}{'Status':<24}{'CopyQueue':>10}{'ReplayQueue':>12}  "
            f"{'LastInspectedLogTime':<22}{'ContentIndex/Error'}"
        )
        for db, node, report, err in rows:
            name = f"{db}\\{node}"
            if report is None:
                print(f"{name:<20}{'Unknown':<24}{'-':>10}{'-':>12}  {'-':<22}{err or 'no status'}")
                continue
            print(
                f"{name:<20}{report.status:<24}{report.copy_queue_length:>10}"
                f"{report.replay_queue_length:>12}  {_fmt_time(report.last_inspected_log_time):<22}"
                f"{report.error or ''}"
            )
        for note in asyncio.run(_unmounted_notes(config, rows)):
            print(note)
    return (
        ExitCode.OK
        if all(isinstance(v, NodeStatus) for v in statuses.values())
        else ExitCode.FAILED
    )


async def _unmounted_notes(config: ClusterConfig, rows: list[Any]) -> list[str]:
    """For each database no node reports mounted: what mounting its best copy now would
    lose, counting the open log (the same computation as an activation)."""
    from dag_common.model import CopyStatus
    from replication_node.cluster.activation import assess_loss, best_copy, generations_at_risk

    reports: dict[str, list[Any]] = {}
    for db, _, report, _ in rows:
        reports.setdefault(db, []).append(report)
    lost = [
        db
        for db, rs in reports.items()
        if not any(r is not None and r.status is CopyStatus.MOUNTED for r in rs)
    ]
    if not lost:
        return []
    records = await _active_records(config, lost)
    notes = []
    for db in lost:
        known = [r for r in reports[db] if r is not None]
        record = records.get(db)
        at_risk = generations_at_risk(
            last_log_generated=record.last_log_generated if record else 0,
            open_generation=record.open_generation if record else 0,
            reports=known,
        )
        chosen, _ = best_copy(known)
        if chosen is None:
            notes.append(f"{db}: no copy is mounted, and no passive copy can be")
            continue
        copy = next(r for r in known if r.node == chosen)
        loss = assess_loss(
            at_risk=at_risk,
            last_log_inspected=copy.last_log_inspected,
            dial=config.mount_dial_of(config.database(db)),
            node=chosen,
            active_node=record.node if record else "the active",
        )
        unknown = "" if record else " (the cluster store could not be read)"
        notes.append(f"{db}: no copy is mounted; mounting {chosen} now: {loss.sentence}{unknown}")
    return notes


async def _active_records(config: ClusterConfig, databases: list[str]) -> dict[str, Any]:
    """The cluster store's active records of `databases`; {} if the store cannot be read."""
    from replication_node.cluster.store import open_cluster_store

    try:
        store = open_cluster_store(config)
    except Exception:
        return {}
    try:
        return {db: await store.active(db) for db in databases}
    except Exception:
        return {}
    finally:
        store.close()
        await asyncio.sleep(0)  # let an etcd session finish closing


async def _admin(
    config: ClusterConfig, url: str, path: str, body: dict[str, Any]
) -> tuple[int, Any]:
    conn = aiohttp.TCPConnector(ssl=_client_ssl(config))
    async with aiohttp.ClientSession(connector=conn) as session:
        return await post_admin(session, f"{url}{path}", load_token(config), body, timeout=600)


def cmd_db_admin(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    try:
        db = config.database(args.database)
    except KeyError:
        print(f"error: no database {args.database!r} in {args.config}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if args.db_cmd in ("roll-log", "mount", "dismount"):
        # The node holding the active copy, mounted or not (a failed or dismounted active
        # still reports the role).
        statuses = asyncio.run(fetch_statuses(config, load_token(config)))
        active = next(
            (
                n
                for n, st in statuses.items()
                if isinstance(st, NodeStatus)
                for c in st.copies
                if c.database == db.name and c.role == "Active"
            ),
            None,
        )
        if active is None:
            print(f"error: no reachable active copy of {db.name}", file=sys.stderr)
            return ExitCode.FAILED
        code, body = asyncio.run(
            _admin(config, config.node(active).url, f"/v1/databases/{db.name}/{args.db_cmd}", {})
        )
    elif args.db_cmd == "switchover":
        if db.copy_on(args.to) is None:
            print(f"error: {db.name} has no copy on {args.to!r}", file=sys.stderr)
            return ExitCode.BAD_INPUT
        code, body = asyncio.run(
            _admin(
                config,
                config.node(args.to).url,
                f"/v1/databases/{db.name}/switchover",
                {"target": args.to},
            )
        )
    elif db.copy_on(args.node) is None:
        print(f"error: {db.name} has no copy on {args.node!r}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    elif args.db_cmd == "activate":
        body = {"node": args.node}
        if args.mount_dial:
            body["mount_dial_override"] = args.mount_dial
        # Asked of the copy's own node: it is the one that must be up to be activated.
        code, body = asyncio.run(
            _admin(config, config.node(args.node).url, f"/v1/databases/{db.name}/activate", body)
        )
    else:
        path = f"/v1/databases/{db.name}/copies/{args.node}/{args.db_cmd}"
        code, body = asyncio.run(
            _admin(config, config.node(args.node).url, path, {"reason": args.reason or ""})
        )
    print(json.dumps(body, indent=2))
    return exit_code(code)


def exit_code(status: int) -> ExitCode:
    """The exit code of an admin call by its HTTP status: a refusal by the cluster's state
    (409: an activation over too many lost logs, a running active) is a failed operation,
    1, like a node that fails or cannot be reached; any other 4xx is bad input, 2."""
    if status < 300:
        return ExitCode.OK
    if status == 409 or status >= 500:
        return ExitCode.FAILED
    return ExitCode.BAD_INPUT


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the node commands to the parser."""
    serve = sub.add_parser("serve", help="run one node")
    serve.add_argument("--config", required=True)
    serve.add_argument("--node", required=True)
    serve.add_argument("--config-refresh", default="30s", help="configupdater period")
    serve.add_argument(
        "--listen-host",
        default=None,
        help="address to bind (default: the host of the node's url; 0.0.0.0 in a container)",
    )
    serve.add_argument("-v", "--verbose", action="store_true")
    serve.set_defaults(func=cmd_serve)

    cluster = sub.add_parser("cluster", help="run every node of a config locally")
    csub = cluster.add_subparsers(dest="cluster_cmd", required=True)
    up = csub.add_parser("up", help="start all nodes as local processes; Ctrl-C stops them")
    up.add_argument("--config", required=True)
    up.add_argument("--config-refresh", default="30s")
    up.add_argument("--log-dir", default=None)
    up.set_defaults(func=cmd_cluster_up)

    status = sub.add_parser("status", help="copy status of the whole cluster")
    status.add_argument("--config", required=True)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)


def register_db(db_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Admin calls under `replication-node db`."""
    roll = db_sub.add_parser("roll-log", help="close the active copy's open log now")
    roll.add_argument("database")
    roll.add_argument("--config", required=True)
    roll.set_defaults(func=cmd_db_admin)
    for action, text in (
        ("mount", "re-mount the active copy now, through crash recovery (after a failure)"),
        ("dismount", "dismount the active copy cleanly; no failover until `db mount`"),
    ):
        p = db_sub.add_parser(action, help=text)
        p.add_argument("database")
        p.add_argument("--config", required=True)
        p.set_defaults(func=cmd_db_admin)
    for action in ("suspend", "resume", "reseed"):
        p = db_sub.add_parser(action, help=f"{action} a passive copy")
        p.add_argument("database")
        p.add_argument("--node", required=True)
        p.add_argument("--config", required=True)
        p.add_argument("--reason", default=None)
        p.set_defaults(func=cmd_db_admin)
    act = db_sub.add_parser(
        "activate", help="mount a passive copy after the active is lost (AutoDatabaseMountDial)"
    )
    act.add_argument("database")
    act.add_argument("--node", required=True)
    act.add_argument("--config", required=True)
    act.add_argument(
        "--mount-dial",
        choices=[d.value for d in AutoDatabaseMountDial],
        default=None,
        help="accept this many lost logs for this activation only",
    )
    act.set_defaults(func=cmd_db_admin)
    switch = db_sub.add_parser(
        "switchover", help="move the active copy to another copy, losing nothing"
    )
    switch.add_argument("database")
    switch.add_argument("--to", required=True, help="the node whose copy becomes active")
    switch.add_argument("--config", required=True)
    switch.set_defaults(func=cmd_db_admin)
