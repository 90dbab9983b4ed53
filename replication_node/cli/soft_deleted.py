"""`replication-node mailbox soft-deleted|purge|restore`: the operator's tools for the
soft-deleted mailboxes a move leaves in its source database (Exchange's
`Get-MailboxStatistics … DisconnectReason SoftDeleted`, `Remove-StoreMailbox` and
`Connect-Mailbox`), over the node API of the database's active copy (the operator role).

    mailbox soft-deleted --database DB [--json]
    mailbox purge NAME --database DB
    mailbox restore NAME --database DB [--replace DB2]

`purge` removes a soft-deleted copy with its items (a live mailbox, or one the mailbox
directory places in that database, is refused).  `restore` makes it live, unlocked, and the
directory name that database for it; when the directory places the mailbox in another
database, `--replace` that database says its copy is lost: that database is asked first,
and a live copy there is refused (move the mailbox instead: `mrs move`).  Purge and restore
are log writes: every copy of the database replays them.  Exit codes as `mailbox`'s."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dag_common.cli import ExitCode, add_config, add_json, add_timeout, database_named
from dag_common.config import ClusterConfig
from dag_common.errors import BadInput, NodeCallError
from dag_common.mailbox_answers import SoftDeletedMailboxes
from dag_common.node_client import NodeStoreClient
from dag_common.store_api import Written


def soft_deleted_lines(answer: SoftDeletedMailboxes) -> list[str]:
    """A database's soft-deleted mailboxes as a table, and a closing line."""
    database, mailboxes, epoch = answer.database, answer.mailboxes, answer.epoch
    if not mailboxes:
        return [f"no soft-deleted mailbox in {database} (epoch {epoch})"]
    lines = [f"{'Mailbox':<24} {'Display name':<24} {'Change':>8}  Directory places it in"]
    for m in mailboxes:
        placed = m.directory_database or "no database"
        lines.append(f"{m.mailbox:<24} {m.display_name[:24]:<24} {m.change_number:>8}  {placed}")
    lines.append(f"{len(mailboxes)} soft-deleted mailbox(es) in {database} (epoch {epoch})")
    return lines


async def list_soft_deleted(
    config: ClusterConfig, client: NodeStoreClient, args: argparse.Namespace
) -> int:
    _, answer = await client.call("GET", args.database, "/soft-deleted-mailboxes")
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        listed = SoftDeletedMailboxes.model_validate(answer)
        print("\n".join(soft_deleted_lines(listed)))
    return ExitCode.OK


async def purge(config: ClusterConfig, client: NodeStoreClient, args: argparse.Namespace) -> int:
    db, name = args.database, args.name
    _, answer = await client.call("POST", db, f"/mailboxes/{name}/purge")
    written = Written.model_validate(answer)
    print(
        f"{db}\\{name}: purged (the soft-deleted copy removed with its items); change number "
        f"{written.change_number}, epoch {written.epoch}"
    )
    return ExitCode.OK


async def _replaced_copy(client: NodeStoreClient, database: str, name: str) -> str:
    """What `--replace DATABASE` finds there: BadInput for a live copy (restoring would
    lose what it holds), else a few words for the report."""
    try:
        there = await client.mailbox(database, name)
    except NodeCallError as exc:
        return f"{database} could not be asked ({exc}): restored on your word that its copy is lost"
    if there is None:
        return f"{database} holds no {name}"
    if not there.soft_deleted:
        raise BadInput(
            f"{database} holds {name} live (change number {there.change_number}): restoring "
            f"another copy would lose what it holds; move it instead (`mrs move --mailbox {name} "
            f"--to DB`)"
        )
    return f"{database}'s copy is soft-deleted too"


async def restore(config: ClusterConfig, client: NodeStoreClient, args: argparse.Namespace) -> int:
    db, name = args.database, args.name
    found = ""
    if args.replace is not None:
        database_named(config, args.replace, args.config)
        if args.replace == db:
            raise BadInput(f"--replace {db}: the database the copy is restored in")
        found = await _replaced_copy(client, args.replace, name)
    body = {} if args.replace is None else {"replace": args.replace}
    _, answer = await client.call("POST", db, f"/mailboxes/{name}/restore", json=body)
    written = Written.model_validate(answer)
    print(
        f"{db}\\{name}: restored (live, unlocked; the mailbox directory places it in {db}); "
        f"change number {written.change_number}, epoch {written.epoch}"
    )
    if found:
        print(f"replaced {args.replace} in the mailbox directory: {found}")
    return ExitCode.OK


COMMANDS = {"soft-deleted": list_soft_deleted, "purge": purge, "restore": restore}


def register(mailbox: argparse._SubParsersAction[argparse.ArgumentParser], func: Any) -> None:
    """Add `soft-deleted`, `purge` and `restore` under `mailbox` (each run by `func`)."""

    def database(p: argparse.ArgumentParser) -> None:
        p.add_argument("--database", required=True, help="the database, as named in the config")
        add_config(p)
        add_timeout(p, "15s", waits="the answer to each call")
        p.set_defaults(func=func)

    lst = mailbox.add_parser(
        "soft-deleted",
        help="the database's soft-deleted mailboxes (a move's sources) and where the "
        "directory places each",
    )
    database(lst)
    add_json(lst, "print the node's answer as JSON")

    gone = mailbox.add_parser(
        "purge", help="remove a soft-deleted mailbox with its items (Remove-StoreMailbox)"
    )
    gone.add_argument("name", help="the mailbox's name (e.g. alice)")
    database(gone)

    back = mailbox.add_parser(
        "restore",
        help="make a soft-deleted mailbox live there, and the directory name it (Connect-Mailbox)",
    )
    back.add_argument("name", help="the mailbox's name (e.g. alice)")
    database(back)
    back.add_argument(
        "--replace",
        metavar="DB",
        default=None,
        help="the database the directory places the mailbox in now, whose copy is lost "
        "(refused if it holds the mailbox live)",
    )
