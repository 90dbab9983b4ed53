"""The admin calls under `replication-node db`: roll-log, mount, dismount, suspend, resume,
reseed, activate and switchover, each asked of the node that must act, and history (the
role changes, asked of any node: they share the cluster store), and its answer turned into
an exit code (0 ok, 1 failed or refused by the cluster's state, 2 bad input).

A success prints one line saying what happened (history: one line per epoch, under a
heading; `--json`: the node's whole answer); a failure one `error:` line on stderr.
`suspend`/`resume --activation-only` bar or allow a copy's activation only; `reseed --wait`
follows the reseed to its end (`reseed_wait`).  A token the nodes refuse is "authentication
failed (check the token)", exit 2, however the command found out."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import UTC
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from dag_common.admin_api import ActivationAnswer, EpochEntry, History, SwitchoverAnswer
from dag_common.cli import add_config, database_named
from dag_common.config import ClusterConfig, load_config, load_token
from dag_common.echo import quoted
from dag_common.errors import BadInput, CommandFailed, TokenRefused, failure
from dag_common.http_client import client_session
from dag_common.incarnation import ActivationCause
from dag_common.model import AutoDatabaseMountDial, CopyRole, ExitCode, NodeStatus
from dag_common.node_status import AUTH_FAILED, UNREACHABLE, get_admin, post_admin
from replication_node.cli.reseed_wait import (
    SeedDisplay,
    WatchLost,
    follow_reseed,
    seed_display,
)
from replication_node.cli.status import fetch_statuses, refusal, token_refused


async def admin_call(
    config: ClusterConfig, url: str, path: str, body: dict[str, Any]
) -> tuple[int, Any]:
    """POST an admin call to the node at `url`: (HTTP status, its JSON answer)."""
    async with client_session(config) as session:
        return await post_admin(session, f"{url}{path}", load_token(config), body, timeout=600)


async def get_from_first(config: ClusterConfig, nodes: list[str], path: str) -> tuple[int, Any]:
    """GET `path` from the first of `nodes` that answers (any HTTP status is an answer):
    (HTTP status, its JSON answer); UNREACHABLE saying why of each node if none does."""
    token = load_token(config)
    unreachable = []
    async with client_session(config) as session:
        for name in nodes:
            code, body = await get_admin(session, f"{config.node(name).url}{path}", token)
            if code != UNREACHABLE:
                return code, body
            unreachable.append(f"{name}: {body.get('error')}")
    return UNREACHABLE, {"error": "no node answered (" + "; ".join(unreachable) + ")"}


async def _history(config: ClusterConfig, database: str) -> tuple[int, Any]:
    """GET the history of `database` from the first node that answers: its copies' nodes
    by activation preference, then the others (every node reads the same cluster store)."""
    db = config.database(database)
    order = [c.node for c in sorted(db.copies, key=lambda c: c.activation_preference)]
    order += [n.name for n in config.nodes if n.name not in order]
    return await get_from_first(config, order, f"/v1/databases/{database}/history")


_CAUSE_WORDS = {
    ActivationCause.FIRST_MOUNT: "first mount",
    ActivationCause.SWITCHOVER: "switchover",
    ActivationCause.AUTOMATIC_FAILOVER: "automatic failover",
    ActivationCause.MANUAL_ACTIVATION: "manual activation (db activate)",
    ActivationCause.CONFIG_CHANGE: "config change (the active's copy was removed)",
}


def _cause(epoch: EpochEntry) -> str:
    cause = epoch.cause or "unknown"
    words = next((w for c, w in _CAUSE_WORDS.items() if c == cause), cause)  # a newer node's
    return f"{words} under {epoch.mount_dial}" if epoch.mount_dial else words


def _began(epoch: EpochEntry) -> str:
    if epoch.began is None:
        return "unknown"
    return epoch.began.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _stream(epoch: EpochEntry) -> str:
    start, kept = epoch.start_generation, epoch.kept_through
    if kept is None:
        return f"generation {start}"
    return f"generation {start} ({start - 1} kept through byte {kept})"


def history_lines(history: History) -> list[str]:
    """The epochs of a `GET …/history` answer as an aligned table under one heading line."""
    epochs, database = history.epochs, history.database
    if not epochs:
        return [f"{database}: no active chosen yet (no epoch recorded)"]
    header = ("Epoch", "Active", "Began (UTC)", "Cause", "Stream from", "LostLogs")
    rows = [header] + [
        (
            str(e.epoch),
            e.node,
            _began(e),
            _cause(e),
            _stream(e),
            "unknown" if e.lost_logs is None else str(e.lost_logs),
        )
        for e in epochs
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    newest = epochs[-1]
    lines = [f"{database}: {len(epochs)} epoch(s); {newest.node} active since epoch {newest.epoch}"]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if history.redelivery is not None:
        lines.append(f"{database}: {history.redelivery.summary}")
    return lines


def cmd_db_history(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    db = database_named(config, args.database, args.config)
    code, body = asyncio.run(_history(config, db.name))
    return _report_admin(args, db.name, code, body)


def cmd_db_admin(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    db = database_named(config, args.database, args.config)
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
                raise TokenRefused(refusal(statuses))
            raise CommandFailed(f"no reachable active copy of {db.name}")
        code, body = asyncio.run(
            admin_call(
                config, config.node(active).url, f"/v1/databases/{db.name}/{args.db_cmd}", {}
            )
        )
    elif args.db_cmd == "switchover":
        if db.copy_on(args.to) is None:
            raise BadInput(f"{db.name} has no copy on {quoted(args.to)}")
        code, body = asyncio.run(
            admin_call(
                config,
                config.node(args.to).url,
                f"/v1/databases/{db.name}/switchover",
                {"target": args.to},
            )
        )
    elif db.copy_on(args.node) is None:
        raise BadInput(f"{db.name} has no copy on {quoted(args.node)}")
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
    elif args.db_cmd == "reseed" and args.wait:
        return asyncio.run(_reseed_and_wait(args, config, db.name))
    else:
        path = f"/v1/databases/{db.name}/copies/{args.node}/{args.db_cmd}"
        body = {"reason": args.reason or ""}
        if getattr(args, "activation_only", False):
            body["activation_only"] = True
        code, body = asyncio.run(admin_call(config, config.node(args.node).url, path, body))
    return _report_admin(args, db.name, code, body)


async def _reseed_and_wait(args: argparse.Namespace, config: ClusterConfig, database: str) -> int:
    """Ask for the reseed, then follow the copy until it is Healthy again (0) or the
    reseed fails (1); with --json, the copy's last report instead of the progress."""
    url, token = config.node(args.node).url, load_token(config)
    path = f"/v1/databases/{database}/copies/{args.node}/reseed"
    async with client_session(config) as session:
        code, body = await post_admin(
            session, f"{url}{path}", token, {"reason": args.reason or ""}, timeout=600
        )
        if exit_code(code) is not ExitCode.OK:
            return _report_admin(args, database, code, body)
        display: SeedDisplay = _Quiet() if args.json else seed_display(sys.stdout, time.monotonic)
        try:
            outcome, report = await follow_reseed(session, url, token, database, args.node, display)
        except WatchLost as exc:
            display.close(None)
            raise CommandFailed(
                f"lost the reseed of {database}\\{args.node} from sight: {exc}; "
                "it may go on (see replication-node status)"
            ) from None
        display.close(outcome)
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), indent=2))
    if not outcome.ok:
        raise CommandFailed(outcome.sentence)
    return ExitCode.OK


class _Quiet:
    """No progress shown (--json prints the copy's last report at the end)."""

    def show(self, report: Any) -> None:
        pass

    def close(self, outcome: Any) -> None:
        pass


A = TypeVar("A", bound=BaseModel)


def _answer(model: type[A], database: str, command: str, body: object) -> A:
    """The node's answer to `command` as its model; CommandFailed if it is not one."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise CommandFailed(
            f"{database}: the node's {command} answer is malformed: {exc}"
        ) from None


def summary(
    command: str, database: str, body: dict[str, Any], *, activation_only: bool = False
) -> str:
    """One line saying what an admin call did, from the node's answer (history: its table)."""
    if command == "history":
        return "\n".join(history_lines(_answer(History, database, command, body)))
    if command == "roll-log":
        return f"{database}: generation {body['closed_generation']} closed (epoch {body['epoch']})"
    if command == "activate":
        won = _answer(ActivationAnswer, database, command, body)
        line = (
            f"{database}: activated on {won.node} at epoch {won.epoch} "
            f"(was {won.previous_node}); {won.lost_logs} log(s) lost"
        )
        return line + (f"; {won.last_logs}" if won.last_logs else "")
    if command == "switchover":
        moved = _answer(SwitchoverAnswer, database, command, body)
        return (
            f"{database}: switched over to {moved.node} at epoch {moved.epoch} "
            f"(was {moved.previous_node}); {moved.lost_logs} log(s) lost"
        )
    if command in ("mount", "dismount"):
        return f"{database}: {'mounted' if body.get('mounted') else 'dismounted'}"
    # suspend, resume, reseed: the copy's status after it
    copy = f"{database}\\{body.get('node', '?')}"
    if activation_only:
        done = "activation suspended" if command == "suspend" else "activation resumed"
        goes_on = "; it replicates on" if command == "suspend" else ""
        return f"{copy}: {done}{goes_on}; now {body.get('status', '?')}"
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
        activation_only = getattr(args, "activation_only", False)
        print(
            json.dumps(body, indent=2)
            if as_json
            else summary(args.db_cmd, database, body, activation_only=activation_only)
        )
        return result
    if code == 401:
        raise TokenRefused(AUTH_FAILED)
    if as_json and set(body) - {"error"}:
        print(json.dumps(body, indent=2))
    raise failure(result, body.get("error") or f"HTTP {code}")


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


def register_db(db_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        if action == "reseed":
            p.add_argument(
                "--wait",
                action="store_true",
                help="follow the reseed (bytes, rate, time left) until the copy is Healthy "
                "again (exit 0) or the reseed fails (exit 1)",
            )
        else:
            p.add_argument(
                "--activation-only",
                action="store_true",
                help=(
                    "suspend only the copy's activation: it replicates on but is never "
                    "activated (failover, switchover, activate) until resumed"
                    if action == "suspend"
                    else "allow the copy's activation again; its replication is left as it is"
                ),
            )
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
    history = db_sub.add_parser(
        "history",
        help="the role changes of a database: each epoch's active, when, why, and the logs lost",
    )
    history.add_argument("database", help=DATABASE)
    add_config(history)
    _json_flag(history)
    history.set_defaults(func=cmd_db_history)


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the node's whole answer as JSON")
