"""The admin calls under `replication-node db`: roll-log, mount, dismount, suspend, resume,
reseed, activate and switchover, each asked of the node that must act, and its answer turned
into an exit code (0 ok, 1 failed or refused by the cluster's state, 2 bad input).

A success prints one line saying what happened (`--json`: the node's whole answer); a
failure one `error:` line on stderr.  A token the nodes refuse is "authentication failed
(check the token)", exit 2, however the command found out."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import aiohttp

from dag_common.cli import add_config
from dag_common.config import ClusterConfig, load_config, load_token
from dag_common.errors import TokenRefused
from dag_common.model import AutoDatabaseMountDial, CopyRole, ExitCode, NodeStatus
from dag_common.node_status import AUTH_FAILED, post_admin
from replication_node.cli.status import client_ssl, fetch_statuses, token_refused


async def admin_call(
    config: ClusterConfig, url: str, path: str, body: dict[str, Any]
) -> tuple[int, Any]:
    """POST an admin call to the node at `url`: (HTTP status, its JSON answer)."""
    conn = aiohttp.TCPConnector(ssl=client_ssl(config))
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
                if c.database == db.name and c.role is CopyRole.ACTIVE
            ),
            None,
        )
        if active is None:
            if token_refused(statuses):
                raise TokenRefused(AUTH_FAILED)
            print(f"error: no reachable active copy of {db.name}", file=sys.stderr)
            return ExitCode.FAILED
        code, body = asyncio.run(
            admin_call(
                config, config.node(active).url, f"/v1/databases/{db.name}/{args.db_cmd}", {}
            )
        )
    elif args.db_cmd == "switchover":
        if db.copy_on(args.to) is None:
            print(f"error: {db.name} has no copy on {args.to!r}", file=sys.stderr)
            return ExitCode.BAD_INPUT
        code, body = asyncio.run(
            admin_call(
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
            admin_call(
                config, config.node(args.node).url, f"/v1/databases/{db.name}/activate", body
            )
        )
    else:
        path = f"/v1/databases/{db.name}/copies/{args.node}/{args.db_cmd}"
        code, body = asyncio.run(
            admin_call(config, config.node(args.node).url, path, {"reason": args.reason or ""})
        )
    return _report_admin(args, db.name, code, body)


def summary(command: str, database: str, body: dict[str, Any]) -> str:
    """One line saying what an admin call did, from the node's answer."""
    if command == "roll-log":
        return f"{database}: generation {body['closed_generation']} closed (epoch {body['epoch']})"
    if command == "activate":
        line = (
            f"{database}: activated on {body['node']} at epoch {body['epoch']} "
            f"(was {body['previous_node']}); {body['lost_logs']} log(s) lost"
        )
        return line + (f"; {body['last_logs']}" if body.get("last_logs") else "")
    if command == "switchover":
        return (
            f"{database}: switched over to {body.get('node', '?')} at epoch "
            f"{body.get('epoch', '?')} (was {body.get('previous_node', '?')}); "
            f"{body.get('lost_logs', 0)} log(s) lost"
        )
    if command in ("mount", "dismount"):
        return f"{database}: {'mounted' if body.get('mounted') else 'dismounted'}"
    # suspend, resume, reseed: the copy's status after it
    copy = f"{database}\\{body.get('node', '?')}"
    done = {"suspend": "suspended", "resume": "resumed", "reseed": "reseed started"}[command]
    status = body.get("status", "?")
    why = f" ({body['error']})" if body.get("error") else ""
    return f"{copy}: {done}; now {status}{why}"


def _report_admin(
    args: argparse.Namespace, database: str, code: int, body: dict[str, Any]
) -> ExitCode:
    """An admin call's answer: one line (the node's JSON with --json) on stdout; a failure
    one `error:` line on stderr (and its JSON with --json, e.g. a refused activation's loss)."""
    as_json = getattr(args, "json", False)
    result = exit_code(code)
    if result is ExitCode.OK:
        print(json.dumps(body, indent=2) if as_json else summary(args.db_cmd, database, body))
        return result
    if code == 401:
        raise TokenRefused(AUTH_FAILED)
    if as_json and set(body) - {"error"}:
        print(json.dumps(body, indent=2))
    print(f"error: {body.get('error') or f'HTTP {code}'}", file=sys.stderr)
    return result


def exit_code(status: int) -> ExitCode:
    """The exit code of an admin call by its HTTP status: a refusal by the cluster's state
    (409: an activation over too many lost logs, a running active) is a failed operation,
    1, like a node that fails or cannot be reached; any other 4xx is bad input, 2."""
    if status < 300:
        return ExitCode.OK
    if status == 409 or status >= 500:
        return ExitCode.FAILED
    return ExitCode.BAD_INPUT


DATABASE = "the database, as named in the config (e.g. DB1)"


def register_db(db_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Admin calls under `replication-node db`."""
    roll = db_sub.add_parser("roll-log", help="close the active copy's open log now")
    roll.add_argument("database", help=DATABASE)
    add_config(roll)
    _json_flag(roll)
    roll.set_defaults(func=cmd_db_admin)
    for action, text in (
        ("mount", "re-mount the active copy now, through crash recovery (after a failure)"),
        ("dismount", "dismount the active copy cleanly; no failover until `db mount`"),
    ):
        p = db_sub.add_parser(action, help=text)
        p.add_argument("database", help=DATABASE)
        add_config(p)
        _json_flag(p)
        p.set_defaults(func=cmd_db_admin)
    for action in ("suspend", "resume", "reseed"):
        p = db_sub.add_parser(action, help=f"{action} a passive copy")
        p.add_argument("database", help=DATABASE)
        p.add_argument("--node", required=True, help="the node of the passive copy")
        add_config(p)
        p.add_argument("--reason", default=None, help="why (shown in status; optional)")
        _json_flag(p)
        p.set_defaults(func=cmd_db_admin)
    act = db_sub.add_parser(
        "activate", help="mount a passive copy after the active is lost (AutoDatabaseMountDial)"
    )
    act.add_argument("database", help=DATABASE)
    act.add_argument("--node", required=True, help="the node of the copy to activate")
    add_config(act)
    act.add_argument(
        "--mount-dial",
        choices=[d.value for d in AutoDatabaseMountDial],
        default=None,
        help="accept this many lost logs for this activation only",
    )
    _json_flag(act)
    act.set_defaults(func=cmd_db_admin)
    switch = db_sub.add_parser(
        "switchover", help="move the active copy to another copy, losing nothing"
    )
    switch.add_argument("database", help=DATABASE)
    switch.add_argument("--to", required=True, help="the node whose copy becomes active")
    add_config(switch)
    _json_flag(switch)
    switch.set_defaults(func=cmd_db_admin)


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the node's whole answer as JSON")
