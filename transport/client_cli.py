"""`transport submit`, `status` and `poison`: give a transport a message, see its queue and
its poison queue, over its API (`transport.cli` says the exit codes)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from urllib.parse import urlencode

from pydantic import ValidationError

from dag_common.cli import ExitCode, add_config, add_json, add_timeout, transport_named
from dag_common.command_calls import Callee, CalleeKind, Calls, Change, credential_refused, get_now
from dag_common.config import ClusterConfig, load_config
from dag_common.errors import CommandFailed, DagError, failure
from dag_common.json_object import JsonObject
from transport.messages import QueueState

TIMEOUT = "15s"  # a transport answers at once: a submission once its queue holds it durably


async def _call(
    config: ClusterConfig, via: str, timeout: float, path: str, message: JsonObject
) -> tuple[int, JsonObject]:
    """POST `message` to `path` of the transport `via`: (HTTP status, its JSON answer);
    CallFailed naming the transport if it gives none within `timeout` seconds."""
    async with Calls(config, timeout=timeout) as calls:
        hub = calls.transport(via)
        change = Change(
            f"the submission of message {message['message_id']}",
            "`transport submit` again with the same --message-id queues it once at most",
        )
        return await calls.post(hub, path, message, change=change)


def _refused(hub: str, status: int, body: JsonObject) -> DagError:
    """A transport's answer that is not a success, as the error that ends the command: a
    credential refused (401, 403) exit 2 as every command says it, the rest by its status."""
    if status in (401, 403):
        return credential_refused(status, body)
    code = ExitCode.BAD_INPUT if 400 <= status < 500 else ExitCode.FAILED
    return failure(code, f"HTTP {status}: {body.get('error') or 'no reason given'}")


def network_lines(raw: bytes) -> bytes:
    """A message file as SMTP carries it: a file of LF lines alone (a Unix .eml) gets CRLF
    ones, as `sendmail` does; a file with any CR is sent as it is."""
    if b"\r" in raw:
        return raw
    return raw.replace(b"\n", b"\r\n")


async def _post_message(
    config: ClusterConfig, via: str, timeout: float, raw: bytes, to: list[str], folder: str
) -> tuple[int, JsonObject]:
    query = urlencode([*(("to", r) for r in to), ("folder", folder)])
    async with Calls(config, timeout=timeout) as calls:
        change = Change(
            "the submission of the message",
            "`transport submit --file` again queues it once at most (its Message-ID)",
        )
        return await calls.post(calls.transport(via), f"/v1/messages?{query}", change=change,
                                data=(raw, "message/rfc822"))  # fmt: skip


def _cmd_submit(args: argparse.Namespace) -> int:
    import asyncio  # a submission's calls only: the reads below run without a loop

    config = load_config(args.config)
    hub = transport_named(config, args.via, args.config)
    if args.file:
        raw = network_lines(Path(args.file).read_bytes())
        status, answer = asyncio.run(_post_message(
            config, hub.name, args.timeout.total_seconds(), raw, args.to, args.folder
        ))  # fmt: skip
        if status >= 300:
            raise _refused(hub.name, status, answer)
        said = "accepted" if status == 201 else "already accepted (nothing queued again)"
        print(f"{answer.get('message_id')}: {said}")
        return ExitCode.OK
    if not args.message_id:
        raise failure(ExitCode.BAD_INPUT, "--message-id is needed without --file")
    body = Path(args.body_file).read_text() if args.body_file else args.body
    message = {"message_id": args.message_id, "recipients": args.to, "folder": args.folder,
               "subject": args.subject, "body": body}  # fmt: skip
    status, answer = asyncio.run(
        _call(config, hub.name, args.timeout.total_seconds(), "/v1/messages", message)
    )
    if status == 200:
        print(f"{args.message_id}: already accepted (nothing queued again)")
        return ExitCode.OK
    if status >= 300:
        raise _refused(hub.name, status, answer)
    recipients = ", ".join(answer.get("recipients") or args.to)
    print(f"{answer.get('message_id', args.message_id)}: accepted for {recipients}")
    return ExitCode.OK


def _read(args: argparse.Namespace, path: str) -> tuple[str, JsonObject]:
    """GET `path` of the transport `args.via` with the blocking client (a read needs neither
    aiohttp nor an event loop): the transport's name and its answer, a refusal raised."""
    config = load_config(args.config)
    hub = transport_named(config, args.via, args.config)
    callee = Callee(CalleeKind.TRANSPORT, hub.name, hub.url)
    status, body = get_now(config, callee, path, timeout=args.timeout.total_seconds())
    if status != 200:
        raise _refused(hub.name, status, body)
    return hub.name, body


def _cmd_status(args: argparse.Namespace) -> int:
    name, body = _read(args, "/v1/queue")
    if args.json:
        print(json.dumps(body, indent=2))
        return ExitCode.OK
    try:
        state = QueueState.model_validate(body)
    except ValidationError as exc:
        raise CommandFailed(
            f"transport {name}: its queue answer is malformed ({exc.error_count()} errors)"
        ) from None
    d = state.deliveries
    print(f"transport {state.transport}: {state.waiting} waiting, {d.get('Queued', 0)} queued, "
          f"{d.get('Delivered', 0)} in the dumpster, {d.get('Poison', 0)} poison")  # fmt: skip
    for dump in state.dumpsters:
        print(f"  dumpster {dump.database}: {dump.messages} messages, {dump.bytes} bytes")
    return ExitCode.OK


def _cmd_poison(args: argparse.Namespace) -> int:
    _, body = _read(args, "/v1/poison")
    if args.json:
        print(json.dumps(body, indent=2))
        return ExitCode.OK
    for p in body["poison"]:
        print(f"{p['message_id']} -> {p['recipient']} after {p['tries']} tries: {p['reason']}")
    return ExitCode.OK


def build_submit(submit: argparse.ArgumentParser) -> None:
    """`transport submit`."""
    add_config(submit)
    submit.add_argument("--via", required=True, help="the transport to give it to")
    submit.add_argument("--to", required=True, action="append", help="a recipient mailbox")
    submit.add_argument("--message-id", help="the message's unique id (not with --file)")
    submit.add_argument("--folder", default="Inbox", help="the folder (default Inbox)")
    submit.add_argument("--subject", default="", help="the subject")
    text = submit.add_mutually_exclusive_group()
    text.add_argument("--body", default="", help="the body")
    text.add_argument("--body-file", help="read the body from this file")
    text.add_argument(
        "--file",
        help="an RFC 5322 message (.eml) to submit as it is (its Message-ID, its subject)",
    )
    add_timeout(submit, TIMEOUT, waits="the transport's answer")
    submit.set_defaults(func=_cmd_submit)


def _asking(cmd: argparse.ArgumentParser) -> None:
    add_config(cmd)
    cmd.add_argument("--via", required=True, help="the transport to ask")
    add_timeout(cmd, TIMEOUT, waits="the transport's answer")
    add_json(cmd)


def build_status(cmd: argparse.ArgumentParser) -> None:
    """`transport status`."""
    _asking(cmd)
    cmd.set_defaults(func=_cmd_status)


def build_poison(cmd: argparse.ArgumentParser) -> None:
    """`transport poison`."""
    _asking(cmd)
    cmd.set_defaults(func=_cmd_poison)
