"""The operator's routes for soft-deleted mailboxes (Exchange's tools for them): list a
database's (`Get-MailboxStatistics … | ? DisconnectReason -eq SoftDeleted`), purge one
(`Remove-StoreMailbox -MailboxState SoftDeleted`), restore one (`Connect-Mailbox`).

A move soft-deletes its source (the seeds' step 10), kept so that the mailbox can be
recovered from its previous database should the target be lost.  Purge and restore are
store writes like any other: committed to the log by the active, replayed by every passive
copy.  The mailbox directory is claimed before the store is written (`directory_claim`).
"""

from __future__ import annotations

import functools

from aiohttp import web

from dag_common.credentials import Role
from dag_common.mailbox_answers import SoftDeletedMailbox, SoftDeletedMailboxes
from dag_common.route_roles import add_route
from replication_node.http.context import (
    active_for_write,
    epoch_for,
    json_body,
    mailbox_name,
    node_of,
    reader_for,
    store_of,
)
from replication_node.http.directory_claim import check_purgeable, claim_restored
from replication_node.http.models import RestoreIn, parse


async def list_soft_deleted(request: web.Request) -> web.Response:
    """The database's soft-deleted mailboxes, each with where the mailbox directory places
    that mailbox now (null: nowhere)."""
    reader = reader_for(request)
    rows = [row for row in reader.mailboxes() if row.soft_deleted]
    directory = await node_of(request).cluster_store.mailboxes() if rows else {}
    answer = SoftDeletedMailboxes(
        database=request.match_info["db"],
        mailboxes=tuple(
            SoftDeletedMailbox(
                mailbox=row.mailbox,
                display_name=row.display_name,
                change_number=row.change_number,
                directory_database=directory.get(row.mailbox),
            )
            for row in rows
        ),
        epoch=epoch_for(request),
    )
    return web.json_response(answer.wire())


async def purge_mailbox(request: web.Request) -> web.Response:
    """Remove a soft-deleted mailbox with its items; 409 for a live one, or one the
    mailbox directory places here (restore it instead)."""
    mailbox = mailbox_name(request)
    instance = active_for_write(request)
    check = functools.partial(
        check_purgeable, node_of(request).cluster_store, mailbox, instance.database
    )
    result = await store_of(instance).purge_mailbox(mailbox, claim=check)
    return web.json_response(result.wire())


async def restore_mailbox(request: web.Request) -> web.Response:
    """Make a soft-deleted mailbox live (unlocked) and the directory name this database for
    it; 409 for a live one, while a move holds it, or when the directory places it in
    another database that `{"replace": DB}` does not name."""
    body = parse(RestoreIn, await json_body(request))
    mailbox = mailbox_name(request)
    instance = active_for_write(request)
    claim = functools.partial(
        claim_restored,
        node_of(request).cluster_store,
        mailbox,
        instance.database,
        replace=body.replace,
    )
    result = await store_of(instance).restore_mailbox(mailbox, claim=claim)
    return web.json_response(result.wire())


def add_soft_deleted_routes(app: web.Application) -> None:
    """List, purge and restore soft-deleted mailboxes: an operator's, every call audited."""
    db = "/v1/databases/{db}"
    add_route(app, "GET", db + "/soft-deleted-mailboxes", list_soft_deleted, Role.OPERATOR)
    mbx = db + "/mailboxes/{mailbox}"
    add_route(app, "POST", mbx + "/purge", purge_mailbox, Role.OPERATOR, audited=True)
    add_route(app, "POST", mbx + "/restore", restore_mailbox, Role.OPERATOR, audited=True)
