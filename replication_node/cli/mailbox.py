"""`replication-node mailbox create|put|list|where`: try a cluster without curl (and
`soft-deleted|purge|restore`, the operator's tools for soft-deleted mailboxes:
`cli/soft_deleted.py`).  Every call
but `where` goes to the node API of the database's active copy, found and followed as the
mover finds it (`dag_common.node_client.NodeStoreClient`: the active through a switchover,
the token).

    mailbox create NAME --database DB [--folders F …]
    mailbox put NAME --database DB [--count N] [--size BYTES | --mix] [--seed S] [--folder F]
    mailbox list NAME --database DB [--since N] [--json]
    mailbox where NAME [--json]

`where` says where the mailbox directory places a mailbox (its database, that database's
active and the move holding the mailbox), asked of the nodes in config order, the first that
answers (every node reads the same cluster store).

`put` writes N items of generated text in batches (each one transaction, acknowledged once
durable) and says the rate.  `--mix` draws the sizes of real mail (`cli/mail_mix.py`: most
of a few KB, about one in 200 of 1-30 MiB, which the node stages across log generations); a
batch is cut at half a log file and an item larger than that goes alone.
A failure is one `error:` line: exit 2 for what the request got wrong (an unknown database
or mailbox, a mailbox that exists, a folder it lacks, a locked mailbox), 1 for a cluster
that cannot answer (no mounted active copy reachable; for `where`, no node)."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Iterator
from typing import TypedDict
from urllib.parse import quote

from dag_common.cli import ExitCode, add_config, add_json, add_timeout, database_named
from dag_common.clock import SystemClock
from dag_common.config import ClusterConfig, load_config, load_token
from dag_common.errors import (
    BadArgument,
    BadInput,
    CommandFailed,
    NodeCallError,
    TokenRefused,
    failure,
)
from dag_common.http_client import client_session
from dag_common.items_query import ItemsQuery
from dag_common.mailbox_answers import MailboxPlace
from dag_common.node_client import NodeStoreClient
from dag_common.node_status import AUTH_FAILED
from dag_common.store_api import Written
from replication_node.cli import soft_deleted
from replication_node.cli.admin import exit_code, get_from_first
from replication_node.cli.mail_mix import mail_sizes

BATCH_ITEMS = 200  # items per write (the node takes at most 1000 in one transaction)
PAGE = 1000  # items per page of the listing

_WORDS = (
    "replication", "log", "generation", "copy", "passive", "active", "inspect", "replay",
    "truncate", "seed", "waypoint", "checkpoint", "mailbox", "folder", "move", "flush",
    "guarantee", "database", "signature", "lag", "queue", "healthy",
)  # fmt: skip


def generated_text(k: int, size: int) -> str:
    """`size` bytes of plain words, different for each `k` (ASCII: a byte a character)."""
    words: list[str] = []
    length, i = -1, k  # the joined length: a space between each two words
    while length < size:
        word = _WORDS[(i * 7 + k) % len(_WORDS)]
        words.append(word)
        length += len(word) + 1
        i += 1
    return " ".join(words)[:size]


def generated_items(count: int, size: int | list[int], folder: str) -> Iterator[dict[str, str]]:
    """The items `put` writes (`size` bytes of body each, or the sizes given one by one):
    ids are the node's to choose."""
    for k in range(1, count + 1):
        yield {
            "folder": folder,
            "subject": f"load item {k} of {count}",
            "body": generated_text(k, size if isinstance(size, int) else size[k - 1]),
        }


def batches(
    items: Iterator[dict[str, str]], *, max_items: int, max_bytes: int
) -> Iterator[list[dict[str, str]]]:
    """`items` in writes of at most `max_items` items and about `max_bytes` bytes of bodies
    (a single larger item goes alone)."""
    batch: list[dict[str, str]] = []
    size = 0
    for item in items:
        item_size = len(item["body"]) + len(item["subject"])
        if batch and (len(batch) >= max_items or size + item_size > max_bytes):
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += item_size
    if batch:
        yield batch


def _database(config: ClusterConfig, args: argparse.Namespace) -> str:
    return database_named(config, args.database, args.config).name


def _failed(database: str, exc: NodeCallError) -> int:
    """A failed store call as one line and its exit code."""
    if exc.status == 401:
        raise TokenRefused(AUTH_FAILED)
    if exc.status is not None and 400 <= exc.status < 500 and exc.detail:
        raise BadInput(f"{database}: {exc.detail}")
    raise CommandFailed(str(exc))


async def _create(config: ClusterConfig, client: NodeStoreClient, args: argparse.Namespace) -> int:
    db, name = args.database, args.name
    folders = {"folders": args.folders} if args.folders else {}
    body = {"display_name": args.display_name or name, **folders}
    _, answer = await client.call("PUT", db, f"/mailboxes/{name}", json=body)
    written = Written.model_validate(answer)
    mailbox = await client.mailbox(db, name)
    print(
        f"{db}\\{name}: created (folders {', '.join(mailbox.folders) if mailbox else '?'}); "
        f"change number {written.change_number}, epoch {written.epoch}"
    )
    return ExitCode.OK


async def _put(config: ClusterConfig, client: NodeStoreClient, args: argparse.Namespace) -> int:
    if args.count < 1:
        raise BadArgument(f"--count: {args.count}: at least 1 item")
    if args.size < 0:
        raise BadArgument(f"--size: {args.size}: a number of bytes, 0 or more")
    db, name = args.database, args.name
    max_bytes = config.log_file_size_of(config.database(db)) // 2
    sizes = mail_sizes(args.count, seed=args.seed) if args.mix else args.size
    clock = SystemClock()
    started = clock.monotonic()
    written: Written | None = None
    done = size = 0
    for batch in batches(
        generated_items(args.count, sizes, args.folder),
        max_items=BATCH_ITEMS,
        max_bytes=max_bytes,
    ):
        _, answer = await client.call("POST", db, f"/mailboxes/{name}/items", json={"items": batch})
        written = Written.model_validate(answer)
        done += len(batch)
        size += sum(len(i["body"]) for i in batch)
    took = max(clock.monotonic() - started, 1e-6)
    print(
        f"{db}\\{name}: {done:,} items ({size / 1e6:,.1f} MB of bodies) put in {took:.2f}s: "
        f"{done / took:,.0f} items/s; last change number "
        f"{written.change_number if written else None}, epoch {written.epoch if written else None}"
    )
    return ExitCode.OK


class _Listed(TypedDict):
    """An item as `mailbox list` shows it (and `--json` prints it)."""

    item_id: str
    folder: str
    subject: str
    size: int
    change_number: int


async def _list(config: ClusterConfig, client: NodeStoreClient, args: argparse.Namespace) -> int:
    if args.since < 0:
        raise BadArgument(f"--since: {args.since}: a change number, 0 or more")
    db, name = args.database, args.name
    rows: list[_Listed] = []
    deleted = 0
    since = args.since
    while True:
        page = await client.items(db, name, ItemsQuery(since, PAGE))
        for item in page.items:
            if item.deleted:
                deleted += 1
                continue
            rows.append(
                _Listed(
                    item_id=item.item_id,
                    folder=item.folder,
                    subject=item.subject,
                    size=len(item.body.encode()),
                    change_number=item.change_number,
                )
            )
        since = page.last_change_number
        if not page.more:
            break
    if args.json:
        print(
            json.dumps(
                {
                    "database": db,
                    "mailbox": name,
                    "since_change": args.since,
                    "last_change_number": since,
                    "epoch": page.epoch,
                    "items": rows,
                    "deleted": deleted,
                },
                indent=2,
            )
        )
        return ExitCode.OK
    print(f"{'Item':<34} {'Folder':<14} {'Subject':<28} {'Size':>8} {'Change':>8}")
    for r in rows:
        print(
            f"{r['item_id']:<34} {r['folder'][:14]:<14} {r['subject'][:28]:<28} "
            f"{r['size']:>8} {r['change_number']:>8}"
        )
    gone = f", {deleted} deleted" if deleted else ""
    total = sum(r["size"] for r in rows)
    print(
        f"{len(rows):,} item(s){gone}, {total:,} bytes of bodies, changed after {args.since} "
        f"through change number {since} (epoch {page.epoch})"
    )
    return ExitCode.OK


_COMMANDS = {"create": _create, "put": _put, "list": _list, **soft_deleted.COMMANDS}


async def _run(config: ClusterConfig, args: argparse.Namespace) -> int:
    async with client_session(config) as session:
        client = NodeStoreClient(
            config,
            token=load_token(config),
            session=session,
            call_timeout=args.timeout.total_seconds(),
        )
        try:
            return await _COMMANDS[args.mailbox_cmd](config, client, args)
        except NodeCallError as exc:
            return _failed(args.database, exc)


def cmd_mailbox(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    _database(config, args)
    return asyncio.run(_run(config, args))


def where_line(place: MailboxPlace) -> str:
    """A `GET /v1/mailboxes/{mailbox}` answer as one line."""
    line = f"{place.mailbox}: {place.database}, "
    if place.active_node:
        line += f"active on {place.active_node} (epoch {place.epoch})"
    else:
        line += "no active copy chosen yet"
    moving = place.moving
    if moving:
        target = moving.target_database
        where = f"moving to {target}" if target else "moving (its target unknown)"
        line += f"; {where} (move {moving.move_id})"
    return line


def cmd_where(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    path = f"/v1/mailboxes/{quote(args.name, safe='')}"
    nodes = [n.name for n in config.nodes]
    code, answer = asyncio.run(get_from_first(config, args.timeout.total_seconds(), nodes, path))
    if code == 401:
        raise TokenRefused(AUTH_FAILED)
    if code != 200:
        raise failure(exit_code(code), answer.get("error") or f"HTTP {code}")
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        print(where_line(MailboxPlace.model_validate(answer)))
    return ExitCode.OK


def register(parser: argparse.ArgumentParser) -> None:
    """`mailbox create|put|list|where|soft-deleted|purge|restore`."""
    mailbox = parser.add_subparsers(dest="mailbox_cmd", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("name", help="the mailbox's name (e.g. alice)")
        p.add_argument("--database", required=True, help="the database, as named in the config")
        add_config(p)
        add_timeout(p, "15s", waits="the answer to each call")
        p.set_defaults(func=cmd_mailbox)

    create = mailbox.add_parser("create", help="create a mailbox on the database's active copy")
    common(create)
    create.add_argument(
        "--folders",
        nargs="+",
        default=None,
        metavar="FOLDER",
        help="its folders (default: Inbox, Sent Items, Deleted Items)",
    )
    create.add_argument("--display-name", default=None, help="its display name (default: NAME)")

    put = mailbox.add_parser("put", help="write items of generated text, in batches; says items/s")
    common(put)
    put.add_argument("--count", type=int, default=100, help="how many items (default 100)")
    sized = put.add_mutually_exclusive_group()
    sized.add_argument(
        "--size", type=int, default=1000, help="bytes of body text per item (default 1000)"
    )
    sized.add_argument(
        "--mix",
        action="store_true",
        help="sizes of real mail: most a few KB, about 1 in 200 of 1-30 MiB (seeded)",
    )
    put.add_argument("--seed", type=int, default=0, help="the seed of --mix's sizes (default 0)")
    put.add_argument("--folder", default="Inbox", help="the folder to write to (default Inbox)")

    lst = mailbox.add_parser("list", help="the mailbox's items: id, folder, subject, size, change")
    common(lst)
    lst.add_argument(
        "--since",
        type=int,
        default=0,
        help="only items changed after this change number (default 0: all)",
    )
    lst.add_argument("--json", action="store_true", help="print the items as JSON")

    soft_deleted.register(mailbox, cmd_mailbox)

    where = mailbox.add_parser(
        "where", help="the mailbox's database, its active copy and the move holding it"
    )
    where.add_argument("name", help="the mailbox's name (e.g. alice)")
    add_config(where)
    add_timeout(where, "15s")
    add_json(where, "print the node's answer as JSON")
    where.set_defaults(func=cmd_where)
