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
from collections.abc import Callable
from datetime import UTC
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from dag_common.cli import ExitCode, add_config, add_timeout, database_named
from dag_common.command_calls import CallFailed, Calls, Change
from dag_common.config import ClusterConfig, load_config, load_token
from dag_common.echo import quoted
from dag_common.errors import BadInput, CommandFailed, TokenRefused, failure
from dag_common.incarnation import ActivationCause
from dag_common.json_object import JsonObject
from dag_common.model import AutoDatabaseMountDial, CopyRole, NodeStatus
from dag_common.node_status import AUTH_FAILED, StatusUnavailable
from replication_node.admin_api import ActivationAnswer, EpochEntry, History, SwitchoverAnswer
from replication_node.cli.reseed_wait import (
    SeedDisplay,
    WatchLost,
    follow_reseed,
    seed_display,
)
from replication_node.cli.status import STATUS_TIMEOUT, fetch_statuses, refusal, token_refused

# How long each call waits for its node by default (`--timeout`): seconds for a call the
# node answers at once; a mount replays the logs since the checkpoint (crash recovery); a
# switchover waits up to a minute for its target to catch up, then mounts it.
QUICK = "15s"


async def admin_call(
    config: ClusterConfig,
    timeout: float,
    node: str,
    path: str,
    body: JsonObject,
    change: Change,
) -> tuple[int, JsonObject]:
    """POST an admin call to `node`, asking for `change`: (HTTP status, its JSON answer);
    CallFailed, one sentence naming the node, if it gives none within `timeout` seconds."""
    async with Calls(config, timeout=timeout) as calls:
        return await calls.post(calls.node(node), path, body, change=change)


async def get_from_first(
    config: ClusterConfig, timeout: float, nodes: list[str], path: str
) -> tuple[int, Any]:
    """GET `path` from the first of `nodes` that answers (any HTTP status is an answer):
    (HTTP status, its JSON answer); CommandFailed naming each node if none does."""
    failed = []
    async with Calls(config, timeout=timeout) as calls:
        for name in nodes:
            try:
                return await calls.get(calls.node(name), path)
            except CallFailed as exc:
                failed.append(str(exc))
    raise CommandFailed("no node answered: " + "; ".join(failed))


async def _history(config: ClusterConfig, timeout: float, database: str) -> tuple[int, Any]:
    """GET the history of `database` from the first node that answers: its copies' nodes
    by activation preference, then the others (every node reads the same cluster store)."""
    db = config.database(database)
    order = [c.node for c in sorted(db.copies, key=lambda c: c.activation_preference)]
    order += [n.name for n in config.nodes if n.name not in order]
    return await get_from_first(config, timeout, order, f"/v1/databases/{database}/history")


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
    code, body = asyncio.run(_history(config, args.timeout.total_seconds(), db.name))
    return _report_admin(args, db.name, code, body)


def status_check(database: str) -> str:
    """How an operator sees whether a call to a copy of `database` was carried out."""
    return f"`replication-node status --database {database}` shows whether it was"


def _no_active(database: str, statuses: dict[str, NodeStatus | StatusUnavailable]) -> str:
    """Why no active copy of `database` was found: the nodes that could not say."""
    silent = [
        f"node {n} cannot be reached ({st})" if st.status is None else f"node {n}: {st}"
        for n, st in statuses.items()
        if isinstance(st, StatusUnavailable)
    ]
    return f"no reachable active copy of {database}" + (f": {'; '.join(silent)}" if silent else "")


def cmd_db_admin(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    db = database_named(config, args.database, args.config)
    timeout = args.timeout.total_seconds()
    check = status_check(db.name)
    if args.db_cmd in ("roll-log", "mount", "dismount"):
        # The node holding the active copy, mounted or not (a failed or dismounted active
        # still reports the role).
        statuses = asyncio.run(
            fetch_statuses(config, load_token(config), timeout=min(timeout, STATUS_TIMEOUT))
        )
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
            raise CommandFailed(_no_active(db.name, statuses))
        what = {"roll-log": f"the roll of {db.name}'s open log"}.get(
            args.db_cmd, f"the {args.db_cmd} of {db.name}"
        )
        code, body = asyncio.run(
            admin_call(
                config, timeout, active, f"/v1/databases/{db.name}/{args.db_cmd}", {},
                Change(what, check),
            )
        )  # fmt: skip
    elif args.db_cmd == "switchover":
        if db.copy_on(args.to) is None:
            raise BadInput(f"{db.name} has no copy on {quoted(args.to)}")
        code, body = asyncio.run(
            admin_call(
                config,
                timeout,
                args.to,
                f"/v1/databases/{db.name}/switchover",
                {"target": args.to},
                Change(f"the switchover of {db.name} to {args.to}", check),
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
                config, timeout, args.node, f"/v1/databases/{db.name}/activate", body,
                Change(f"the activation of {db.name}\\{args.node}", check),
            )
        )  # fmt: skip
    elif args.db_cmd == "reseed" and args.wait:
        return asyncio.run(_reseed_and_wait(args, config, db.name))
    else:
        path = f"/v1/databases/{db.name}/copies/{args.node}/{args.db_cmd}"
        body = {"reason": args.reason or ""}
        what = f"the {args.db_cmd} of {db.name}\\{args.node}"
        if getattr(args, "activation_only", False):
            body["activation_only"] = True
            what += "'s activation"
        code, body = asyncio.run(
            admin_call(config, timeout, args.node, path, body, Change(what, check))
        )
    return _report_admin(args, db.name, code, body)


async def _reseed_and_wait(args: argparse.Namespace, config: ClusterConfig, database: str) -> int:
    """Ask for the reseed, then follow the copy until it is Healthy again (0) or the
    reseed fails (1); with --json, the copy's last report instead of the progress."""
    path = f"/v1/databases/{database}/copies/{args.node}/reseed"
    change = Change(f"the reseed of {database}\\{args.node}", status_check(database))
    async with Calls(config, timeout=args.timeout.total_seconds()) as calls:
        node = calls.node(args.node)
        code, body = await calls.post(node, path, {"reason": args.reason or ""}, change=change)
        if exit_code(code) is not ExitCode.OK:
            return _report_admin(args, database, code, body)
        display: SeedDisplay = _Quiet() if args.json else seed_display(sys.stdout, time.monotonic)
        try:
            outcome, report = await follow_reseed(
                calls.session, node.url, calls.token, database, args.node, display
            )
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


def summary(command: str, database: str, body: JsonObject, *, activation_only: bool = False) -> str:
    """One line saying what an admin call did, from the node's answer (history: its table),
    read as the model of that command's answer where the line needs more than a field."""
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


def _report_admin(args: argparse.Namespace, database: str, code: int, body: JsonObject) -> ExitCode:
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


def _database_call(
    p: argparse.ArgumentParser, timeout: str, func: Callable[[argparse.Namespace], int]
) -> None:
    """A command on one database and nothing more: its name, the config, the timeout and
    --json; `func` carries it out."""
    p.add_argument("database", help=DATABASE)
    add_config(p)
    add_timeout(p, timeout)
    _json_flag(p)
    p.set_defaults(func=func)


def _active_call(p: argparse.ArgumentParser, timeout: str) -> None:
    """roll-log, mount, dismount: asked of the node of the active copy."""
    _database_call(p, timeout, cmd_db_admin)


def build_roll_log(p: argparse.ArgumentParser) -> None:
    """`db roll-log`."""
    _active_call(p, QUICK)


def build_mount(p: argparse.ArgumentParser) -> None:
    """`db mount`: crash recovery replays the logs since the checkpoint first."""
    _active_call(p, "5m")


def build_dismount(p: argparse.ArgumentParser) -> None:
    """`db dismount`."""
    _active_call(p, "1m")


def _copy_call(p: argparse.ArgumentParser, switch: str, switch_help: str) -> None:
    """suspend, resume, reseed: asked of the node of the passive copy; `switch`, the
    command's own on/off option."""
    p.add_argument("database", help=DATABASE)
    p.add_argument("--node", required=True, help="the node of the passive copy")
    add_config(p)
    p.add_argument("--reason", default=None, help="why (shown in status; optional)")
    add_timeout(p, QUICK)
    _json_flag(p)
    p.add_argument(switch, action="store_true", help=switch_help)
    p.set_defaults(func=cmd_db_admin)


# The passive-copy commands' own on/off options.
SUSPEND_ACTIVATION_ONLY = (
    "suspend only the copy's activation: it replicates on but is never activated "
    "(failover, switchover, activate) until resumed"
)
RESUME_ACTIVATION_ONLY = "allow the copy's activation again; its replication is left as it is"
RESEED_WAIT = (
    "follow the reseed (bytes, rate, time left) until the copy is Healthy again "
    "(exit 0) or the reseed fails (exit 1)"
)


def build_suspend(p: argparse.ArgumentParser) -> None:
    """`db suspend`."""
    _copy_call(p, "--activation-only", SUSPEND_ACTIVATION_ONLY)


def build_resume(p: argparse.ArgumentParser) -> None:
    """`db resume`."""
    _copy_call(p, "--activation-only", RESUME_ACTIVATION_ONLY)


def build_reseed(p: argparse.ArgumentParser) -> None:
    """`db reseed`."""
    _copy_call(p, "--wait", RESEED_WAIT)


def build_activate(act: argparse.ArgumentParser) -> None:
    """`db activate`."""
    act.add_argument("database", help=DATABASE)
    act.add_argument("--node", required=True, help="the node of the copy to activate")
    add_config(act)
    act.add_argument(
        "--mount-dial",
        choices=[d.value for d in AutoDatabaseMountDial],
        default=None,
        help="accept this many lost logs for this activation only",
    )
    add_timeout(act, "2m")
    _json_flag(act)
    act.set_defaults(func=cmd_db_admin)


def build_switchover(switch: argparse.ArgumentParser) -> None:
    """`db switchover`."""
    switch.add_argument("database", help=DATABASE)
    switch.add_argument("--to", required=True, help="the node whose copy becomes active")
    add_config(switch)
    add_timeout(switch, "2m")
    _json_flag(switch)
    switch.set_defaults(func=cmd_db_admin)


def build_history(history: argparse.ArgumentParser) -> None:
    """`db history`."""
    _database_call(history, QUICK, cmd_db_history)


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the node's whole answer as JSON")
