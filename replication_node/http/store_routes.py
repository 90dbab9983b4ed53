"""The store routes of the node's HTTP API: mailboxes, folders and items, and where the
mailbox directory places a mailbox.

Thin handlers: writes go to the active instance's `MailboxStore` (answered once durable),
reads to whatever copy answers here (the active merges its LLR overlay), each read with the
epoch of the stream it reflects; the directory is read from the cluster store, which every
node shares.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass

from aiohttp import web

from dag_common.counted_text import counted
from dag_common.credentials import Role
from dag_common.http_body import (
    BodyLimit,
    body_share,
    check_item_sizes,
    expect_within,
    items_limit,
    max_item_size_for,
)
from dag_common.mailbox_answers import MailboxPlace, MovingTo
from dag_common.mailbox_digest import rows_digest
from dag_common.route_roles import add_route, require
from dag_common.store_api import Digest, ItemsAnswer, Mailbox
from replication_node.errors import BadRequest, Conflict, NotFound
from replication_node.http.context import (
    active_for_write,
    epoch_for,
    flag,
    json_body,
    mailbox_name,
    node_of,
    reader_for,
    store_for_write,
    store_of,
)
from replication_node.http.directory_claim import claim_new
from replication_node.http.items_body import items_json, with_bodies
from replication_node.http.items_stream import Listing, stream_items
from replication_node.http.message_get import get_message
from replication_node.http.models import FolderIn, ItemIn, ItemsIn, MailboxIn, parse
from replication_node.storage.reader import ItemsPage

MAX_CHANGE_NUMBER = 2**63 - 1  # SQLite's INTEGER: a larger number overflowed into a 500
MAX_ITEMS_PAGE = 100_000  # a page of the items listing (`limit`), at most
# The bodies a page of the items listing holds, at most (past one item): `limit` counts
# changes, and 2,000 items of 30 MiB were a 60 GB answer, built whole in the node's memory and
# read whole by the mover before it wrote the first (`more` says the rest is to come).  A
# client may ask for less (`page_bytes`): the mover bounds what it holds by it.
ITEMS_PAGE_BYTES = 64 * 1024 * 1024


def overriding(request: web.Request) -> bool:
    """`?override_lock=true`: a move's own write to the mailbox it locked, which only the
    `mover` role may make (403 otherwise)."""
    if not flag(request, "override_lock"):
        return False
    require(request, Role.MOVER, "a write with override_lock")
    return True


async def put_mailbox(request: web.Request) -> web.Response:
    """Create a mailbox.  A new mailbox enters the mailbox directory first, refused (409
    naming the database the directory holds) if it places the mailbox elsewhere
    (`directory_claim`: why first).  A move's target copy is created locked and does not:
    the directory names the source until the move's step 8; it may replace a soft-deleted
    copy an earlier move left there (`replace_soft_deleted`, in the same transaction)."""
    body = parse(MailboxIn, await json_body(request))
    if body.locked:  # a move's target, created locked
        require(request, Role.MOVER, "creating a locked mailbox")
    if body.replace_soft_deleted and not body.locked:
        raise BadRequest("replace_soft_deleted is a move's, for its target: with locked")
    mailbox = mailbox_name(request)
    instance = active_for_write(request)
    directory = node_of(request).cluster_store
    result = await store_of(instance).create_mailbox(
        mailbox,
        display_name=body.display_name,
        folders=body.folders,
        locked=body.locked,
        replace_soft_deleted=body.replace_soft_deleted,
        claim=None
        if body.locked
        else functools.partial(claim_new, directory, mailbox, instance.database),
    )
    return web.json_response(result.wire(), status=201)


async def delete_mailbox(request: web.Request) -> web.Response:
    """Remove a mailbox the mailbox directory does not place in this database: a move's
    target copy before the move's step 8 (`mrs cancel`).  A mailbox its users reach here
    is refused (409): this route never deletes a live mailbox."""
    mailbox = mailbox_name(request)
    instance = active_for_write(request)
    placed = await node_of(request).cluster_store.mailbox_database(mailbox)
    if placed == instance.database:
        raise Conflict(
            f"the mailbox directory places {mailbox!r} in {instance.database}: only a copy it "
            "does not name (a move's target) can be removed"
        )
    result = await store_of(instance).delete_mailbox(mailbox)
    return web.json_response(result.wire())


async def list_mailboxes(request: web.Request) -> web.Response:
    mailboxes = [row._asdict() for row in reader_for(request).mailboxes()]
    return web.json_response({"mailboxes": mailboxes, "epoch": epoch_for(request)})


async def get_mailbox(request: web.Request) -> web.Response:
    name = mailbox_name(request)
    reader = reader_for(request)
    row = reader.mailbox(name)
    if row is None:
        raise NotFound(f"no mailbox {name!r}")
    status = reader.folder_status(name)
    answer = Mailbox(
        name=row.mailbox,
        display_name=row.display_name,
        folders=tuple(f.folder for f in status),
        folder_status=tuple(status),
        locked=row.locked,
        soft_deleted=row.soft_deleted,
        change_number=row.change_number,
        epoch=epoch_for(request),
        uidvalidity_next=row.uidvalidity_next,
    )
    return web.json_response(answer.wire())


async def mailbox_digest_route(request: web.Request) -> web.Response:
    """Item count and digest of a mailbox's live items, as this copy serves them."""
    name = mailbox_name(request)
    reader = reader_for(request)
    epoch = epoch_for(request)
    if reader.mailbox(name) is None:
        raise NotFound(f"no mailbox {name!r}")
    # The rows are read on the loop (the active merges its LLR overlay, which only the
    # loop touches), bodies by the hash each row keeps; summing the terms (and hashing the
    # overlay's few bodies) does not hold the loop.
    digest = await asyncio.to_thread(rows_digest, name, reader.digest_rows(name))
    answer = Digest(
        mailbox=name,
        item_count=digest.item_count,
        digest=digest.digest,
        last_change_number=digest.last_change_number,
        epoch=epoch,
    )
    return web.json_response(answer.wire())


async def where_mailbox(request: web.Request) -> web.Response:
    """Where the mailbox directory places a mailbox: its database, that database's active
    (node, url, epoch; null while none was chosen) and the move holding it (any node
    answers: they share the cluster store)."""
    name = mailbox_name(request)
    node = node_of(request)
    entry = await node.cluster_store.mailbox_entry(name)
    if entry is None:
        raise NotFound(f"no mailbox {name!r} in the mailbox directory")
    active = await node.cluster_store.active(entry.database)
    url = None
    if active is not None:
        url = next((n.url for n in node.config.nodes if n.name == active.node), None)
    moving = entry.moving
    place = MailboxPlace(
        mailbox=name,
        database=entry.database,
        active_node=active.node if active else None,
        active_url=url,
        epoch=active.epoch if active else None,
        moving=MovingTo(move_id=moving.move_id, target_database=moving.target_database)
        if moving
        else None,
    )
    return web.json_response(place.wire())


async def create_folder(request: web.Request) -> web.Response:
    body = parse(FolderIn, await json_body(request))
    counters = None
    if body.uidvalidity is not None:
        counters = (body.uidvalidity, body.uid_next, body.highest_modseq)
    result = await store_for_write(request).create_folder(
        request.match_info["mailbox"],
        body.folder,
        override_lock=overriding(request),
        counters=counters,
    )
    return web.json_response(result.wire(), status=201)


@dataclass(frozen=True, slots=True)
class ItemWrite:
    """A write of items to a database: its max_item_size in the config as it is now (a
    refreshed config's limit holds from the next request), and what the body may carry."""

    database: str
    max_item_size: int
    limit: BodyLimit


def item_write(request: web.Request) -> ItemWrite:
    """The limits of a write of items to the request's database (`ItemWrite`)."""
    db = request.match_info["db"]
    max_item_size = max_item_size_for(node_of(request).config, db)
    return ItemWrite(db, max_item_size, items_limit(db, max_item_size))


def _items_limit(request: web.Request) -> BodyLimit:
    """What a write of items to the request's database may carry (`item_write`)."""
    return item_write(request).limit


async def post_items(request: web.Request) -> web.Response:
    """Write one item, or several as one transaction.  The body is read within what a write
    to the database may carry, and each item checked against its max_item_size (413 naming
    it), before anything is looked up or written."""
    write = item_write(request)
    # The body's share of the node's memory budget, taken before a byte of it is read and
    # held until the write is answered: its declared length, or what the limit lets a
    # chunked one grow to.  Past the budget the write waits, then is refused with 503.
    size = body_share(request, write.limit)
    async with node_of(request).memory.share(size, f"a write of items to {write.database}"):
        # A large body is taken out of the JSON in place and carried as its bytes
        # (`items_body.py`): the request's bytes are its only copy here.
        raw, taken = await items_json(request, write.limit)
        # Several items ({"items": [...]}, one transaction) or one item as the body itself.
        batch = "items" in raw
        items = parse(ItemsIn, raw).items if batch else [parse(ItemIn, raw)]
        del raw  # the items hold their text; the parsed JSON's copy goes now
        items = [_counted(item) for item in with_bodies(items, taken)]
        check_item_sizes(
            items, database=write.database, max_item_size=write.max_item_size, batch=batch
        )
        result = await store_for_write(request).put_items(
            request.match_info["mailbox"],
            items,
            override_lock=overriding(request),
        )
    return web.json_response(result.wire(), status=201)


# A body this large or larger is counted once here (`counted_text`): each stage after would
# otherwise encode it to UTF-8 again to count or hash it.
COUNTED_FROM = 64 * 1024


def _counted(item: ItemIn) -> ItemIn:
    """`item` with its body counted once, if it is large (the item is the request's own)."""
    if len(item.body) >= COUNTED_FROM:
        object.__setattr__(item, "body", counted(item.body))  # frozen: set where it is built
    return item


def _whole_number(request: web.Request, name: str, least: int, most: int) -> int | None:
    """The query parameter `name` as an integer within least..most (None: not given)."""
    if name not in request.query:
        return None
    try:
        value = int(request.query[name])
    except ValueError as exc:
        raise BadRequest(f"{name} must be an integer") from exc
    if not least <= value <= most:
        raise BadRequest(f"{name} must be within {least}..{most}")
    return value


def _listing_bodies(request: web.Request) -> bool:
    """`?bodies=false`: the items without their bodies, each with its body's hash."""
    value = request.query.get("bodies", "true").lower()
    if value not in ("true", "false", "1", "0"):
        raise BadRequest("bodies must be true or false")
    return value in ("true", "1")


async def get_items(request: web.Request) -> web.StreamResponse:
    name = mailbox_name(request)
    reader = reader_for(request)
    since = _whole_number(request, "since_change", 0, MAX_CHANGE_NUMBER) or 0
    limit = _whole_number(request, "limit", 1, MAX_ITEMS_PAGE)
    page_bytes = _whole_number(request, "page_bytes", 1, ITEMS_PAGE_BYTES)
    bodies = _listing_bodies(request)
    if page_bytes is not None and limit is None:
        limit = MAX_ITEMS_PAGE  # a page cut by bytes
    elif limit is not None and page_bytes is None:
        page_bytes = ITEMS_PAGE_BYTES
    if reader.mailbox(name) is None:
        raise NotFound(f"no mailbox {name!r}")
    # Read before the listing begins: an error here is still an answer of its own.
    epoch = epoch_for(request)
    live_count = reader.live_count(name, since) if flag(request, "count") else None

    def answer(page: ItemsPage) -> ItemsAnswer:
        return ItemsAnswer(
            mailbox=name,
            since_change=since,
            items=[],
            last_change_number=page.through,
            more=not page.complete,
            epoch=epoch,
            live_count=live_count,  # live items changed after since_change, in every page
        )

    # Written as it is read (`items_stream.py`): without `limit` or `page_bytes` every change
    # (never more than one body held at a time), with either a page cut at `page_bytes`
    # (ITEMS_PAGE_BYTES at most).
    return await stream_items(
        request,
        Listing(
            reader,
            mailbox=name,
            since=since,
            limit=limit,
            page_bytes=page_bytes,
            answer=answer,
            bodies=bodies,
        ),
    )


async def delete_item(request: web.Request) -> web.Response:
    result = await store_for_write(request).delete_item(
        request.match_info["mailbox"],
        request.match_info["item_id"],
        override_lock=overriding(request),
    )
    return web.json_response(result.wire())


async def mailbox_action(request: web.Request) -> web.Response:
    action = request.match_info["action"]
    changes = {
        "lock": {"locked": True},
        "unlock": {"locked": False},
        "soft-delete": {"soft_deleted": True},
    }[action]
    result = await store_for_write(request).set_mailbox(request.match_info["mailbox"], **changes)
    return web.json_response(result.wire())


def add_store_routes(app: web.Application) -> None:
    """Mailboxes, folders and items of each database; the mailbox directory."""
    mbx = "/v1/databases/{db}/mailboxes/{mailbox}"
    add_route(app, "PUT", mbx, put_mailbox, Role.STORE)
    add_route(app, "GET", "/v1/databases/{db}/mailboxes", list_mailboxes, Role.STORE)
    add_route(app, "GET", mbx, get_mailbox, Role.STORE)
    add_route(app, "DELETE", mbx, delete_mailbox, Role.MOVER, audited=True)
    add_route(app, "GET", mbx + "/digest", mailbox_digest_route, Role.MOVER)
    add_route(app, "POST", mbx + "/folders", create_folder, Role.STORE)
    # A body over the limit is refused before the client sends it (no 100 Continue).
    add_route(
        app,
        "POST",
        mbx + "/items",
        post_items,
        Role.STORE,
        expect_handler=expect_within(_items_limit),
    )
    add_route(app, "GET", mbx + "/items", get_items, Role.STORE)
    add_route(app, "DELETE", mbx + "/items/{item_id}", delete_item, Role.STORE)
    add_route(app, "GET", mbx + "/items/{item_id}/message", get_message, Role.STORE)
    add_route(
        app,
        "POST",
        mbx + "/{action:lock|unlock|soft-delete}",
        mailbox_action,
        Role.MOVER,
        audited=True,
    )
    add_route(app, "GET", "/v1/mailboxes/{mailbox}", where_mailbox, Role.STORE)
