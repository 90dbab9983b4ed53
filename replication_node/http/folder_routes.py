"""The IMAP state routes of the node's HTTP API: folders renamed and removed, flags set,
items moved, copied and expunged, and a folder's UIDs listed (what an IMAP front's SELECT,
NOOP and IDLE need, without a body).

Thin handlers, as the store routes are: writes go to the active's `MailboxStore` (answered
once durable, with the UIDs and modseqs they gave: APPENDUID, COPYUID), reads to whatever
copy answers here.  A folder is named in the path (`{folder:.+}`: a child's name holds
`/`); the item ids and UIDs a write acts on, in its body.
"""

from __future__ import annotations

from typing import Annotated

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dag_common.api_types import MAX_FLAGS, Flag, Folder, ItemId
from dag_common.credentials import Role
from dag_common.route_roles import add_route
from replication_node.errors import BadRequest, NotFound
from replication_node.http.context import (
    epoch_for,
    json_body,
    mailbox_name,
    reader_for,
    store_for_write,
)
from replication_node.http.folder_listing import dumps, folder_listing, message_rows
from replication_node.http.models import parse
from replication_node.http.store_routes import MAX_CHANGE_NUMBER, overriding
from replication_node.storage.ops import flags_after
from replication_node.storage.reader import ItemRow

MAX_NAMED = 1000  # items a write names, at most (one transaction)
Uid = Annotated[int, Field(strict=True, ge=1, le=2**32 - 1)]
Flags = Annotated[list[Flag], Field(max_length=MAX_FLAGS)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RenameIn(_Body):
    """POST …/folders/{folder}/rename."""

    to: Folder


class _Named(_Body):
    """Items of one folder, by UID or by item id (one of the two)."""

    folder: Folder
    uids: Annotated[list[Uid], Field(min_length=1, max_length=MAX_NAMED)] | None = None
    item_ids: Annotated[list[ItemId], Field(min_length=1, max_length=MAX_NAMED)] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> _Named:
        if (self.uids is None) == (self.item_ids is None):
            raise ValueError("name the items by uids or by item_ids (one of them)")
        return self


class FlagsIn(_Named):
    """POST …/items/flags: `replace` the flags, or `add` and `remove` some."""

    add: Flags = []
    remove: Flags = []
    replace: Flags | None = None
    # a move's copy of a flag change keeps the source's modseq (with override_lock)
    modseq: Annotated[int, Field(strict=True, ge=1, le=2**63 - 1)] | None = None
    # a conditional STORE (RFC 7162): only items whose modseq is at most this are changed
    unchanged_since: Annotated[int, Field(strict=True, ge=0, le=2**63 - 1)] | None = None

    @model_validator(mode="after")
    def _one_change(self) -> FlagsIn:
        if self.replace is not None and (self.add or self.remove):
            raise ValueError("replace the flags, or add and remove some: not both")
        if self.replace is None and not (self.add or self.remove):
            raise ValueError("no flags to add, remove or replace")
        if self.unchanged_since is not None and self.modseq is not None:
            raise ValueError("a move's modseq and unchanged_since do not go together")
        return self


class MoveIn(_Named):
    """POST …/items/move and …/items/copy."""

    to: Folder


class CountersIn(_Body):
    """POST …/folders/{folder}/counters: floors for the folder's counters and its mailbox's
    next UIDVALIDITY (a move's final sync)."""

    uid_next: Annotated[int, Field(strict=True, ge=1, le=2**32)] = 1
    highest_modseq: Annotated[int, Field(strict=True, ge=0, le=2**63 - 1)] = 0
    uidvalidity_next: Annotated[int, Field(strict=True, ge=0, le=2**32 - 1)] = 0
    # the source folder's (a lossy failover's): the target reports no item below it
    modseq_floor: Annotated[int, Field(strict=True, ge=0, le=2**63 - 1)] = 0


class ExpungeIn(_Body):
    """POST …/items/expunge: the folder's items flagged \\Deleted (those among `uids`)."""

    folder: Folder
    uids: Annotated[list[Uid], Field(min_length=1, max_length=MAX_NAMED)] | None = None


def _folder(request: web.Request) -> str:
    return request.match_info["folder"]


async def rename_folder(request: web.Request) -> web.Response:
    """Rename a folder and its children; their UIDVALIDITY, UIDs and flags kept."""
    body = parse(RenameIn, await json_body(request))
    folder = _folder(request)
    written = await store_for_write(request).rename_folder(
        mailbox_name(request), folder, body.to, override_lock=overriding(request)
    )
    return web.json_response({**written.wire(), "folder": folder, "to": body.to})


async def delete_folder(request: web.Request) -> web.Response:
    """Remove a folder and its items (409 while it has children, and for Inbox)."""
    folder = _folder(request)
    written = await store_for_write(request).delete_folder(
        mailbox_name(request), folder, override_lock=overriding(request)
    )
    return web.json_response({**written.wire(), "folder": folder})


async def set_folder_counters(request: web.Request) -> web.Response:
    """Lift a folder's UIDNEXT, HIGHESTMODSEQ and modseq floor and its mailbox's next
    UIDVALIDITY to at least those given (never lowered): a move's final sync, on its
    locked target."""
    body = parse(CountersIn, await json_body(request))
    folder = _folder(request)
    written = await store_for_write(request).set_folder_counters(
        mailbox_name(request),
        folder,
        uid_next=body.uid_next,
        highest_modseq=body.highest_modseq,
        uidvalidity_next=body.uidvalidity_next,
        modseq_floor=body.modseq_floor,
        override_lock=overriding(request),
    )
    return web.json_response({**written.wire(), "folder": folder})


async def set_flags(request: web.Request) -> web.Response:
    """A STORE: the items' flags as they are now, with the one modseq they took.  With
    `unchanged_since` (RFC 7162's UNCHANGEDSINCE), only the items whose modseq is at most
    that are changed; the others are answered in `modified` (their UIDs and item ids), and
    with none changed nothing is written (`modseq` null)."""
    body = parse(FlagsIn, await json_body(request))
    mailbox = mailbox_name(request)
    store = store_for_write(request)
    rows = {r.item_id: r for r in store.copy.folder_items(mailbox, body.folder)}
    if body.unchanged_since is not None and overriding(request):
        raise BadRequest("a conditional STORE is a client's: not with override_lock")
    written, op, skipped = await store.set_flags(
        mailbox,
        body.folder,
        uids=body.uids,
        item_ids=body.item_ids,
        add=body.add,
        remove=body.remove,
        replace=body.replace,
        modseq=body.modseq,
        override_lock=overriding(request),
        unchanged_since=body.unchanged_since,
    )
    modified = [{"uid": r.uid, "item_id": r.item_id} for r in skipped]
    if op is None or written is None:
        return web.json_response({"modseq": None, "items": [], "modified": modified})
    items = [
        {"uid": rows[i].uid, "item_id": i, "flags": list(flags_after(rows[i].flags, op))}
        for i in op.item_ids
        if i in rows
    ]
    answer = {**written.wire(), "modseq": op.modseq, "items": items, "modified": modified}
    return web.json_response(answer)


async def _move_or_copy(request: web.Request, *, copy: bool) -> web.Response:
    body = parse(MoveIn, await json_body(request))
    mailbox = mailbox_name(request)
    store = store_for_write(request)
    written, rows, new_uids = await store.move_or_copy_items(
        mailbox,
        body.folder,
        body.to,
        copy=copy,
        uids=body.uids,
        item_ids=body.item_ids,
        override_lock=overriding(request),
    )
    target = next(f for f in store.copy.folder_rows(mailbox) if f.folder == body.to)
    return web.json_response(
        {
            **written.wire(),
            "uidvalidity": target.uidvalidity,  # COPYUID's: the target folder's
            "uids": [[r.uid, u] for r, u in zip(rows, new_uids, strict=True)],
            "moved_item_ids" if not copy else "source_item_ids": [r.item_id for r in rows],
        }
    )


async def move_items(request: web.Request) -> web.Response:
    """MOVE: items to another folder, one operation; `uids`: [old, new] each."""
    return await _move_or_copy(request, copy=False)


async def copy_items(request: web.Request) -> web.Response:
    """COPY: items copied to a folder (new item ids, new UIDs); `uids`: [old, new] each."""
    return await _move_or_copy(request, copy=True)


async def expunge(request: web.Request) -> web.Response:
    """EXPUNGE (UID EXPUNGE with `uids`): the folder's items flagged \\Deleted removed."""
    body = parse(ExpungeIn, await json_body(request))
    written, gone = await store_for_write(request).expunge(
        mailbox_name(request), body.folder, uids=body.uids, override_lock=overriding(request)
    )
    acknowledged = written.wire() if written is not None else {}
    return web.json_response({**acknowledged, "expunged": [r.uid for r in gone]})


def _since_modseq(request: web.Request) -> int:
    raw = request.query.get("since_modseq", "0")
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest("since_modseq must be an integer") from None
    if not 0 <= value <= MAX_CHANGE_NUMBER:
        raise BadRequest(f"since_modseq must be within 0..{MAX_CHANGE_NUMBER}")
    return value


async def folder_uids(request: web.Request) -> web.Response:
    """A folder's messages by UID, without bodies: `[uid, item_id, flags, modseq, size,
    received, message_size]` each (`folder_listing.message_rows`), changed after
    `?since_modseq=N` (all without it), and the UIDs expunged since N, those moved out to
    another folder included."""
    mailbox = mailbox_name(request)
    folder = _folder(request)
    since = _since_modseq(request)
    reader = reader_for(request)
    epoch = epoch_for(request)
    if reader.mailbox(mailbox) is None:
        raise NotFound(f"no mailbox {mailbox!r}")
    row = next((f for f in reader.folder_rows(mailbox) if f.folder == folder), None)
    if row is None:
        raise NotFound(f"mailbox {mailbox!r} has no folder {folder!r}")
    # a message moved out keeps its row (in its new folder): recorded apart
    moved = reader.moved_out(mailbox, row.uidvalidity, since) if since else []

    def encode(items: list[ItemRow]) -> bytes:
        expunged = {r.uid for r in items if r.deleted and r.uid}
        expunged.update(moved)
        return dumps(
            {
                "mailbox": mailbox,
                "folder": folder,
                "uidvalidity": row.uidvalidity,
                "uid_next": row.uid_next,
                "highest_modseq": row.highest_modseq,
                "epoch": epoch,
                "messages": message_rows(items),
                "expunged": sorted(expunged),
            }
        )

    # Built off the loop where it can be (`folder_listing`): a large folder held it.
    body = await folder_listing(reader, mailbox, folder, since, encode)
    return web.Response(body=body, content_type="application/json")


def add_folder_routes(app: web.Application) -> None:
    """Folders renamed and removed, flags, moves, copies, expunges, a folder's UIDs, a
    folder's counters lifted (a move's)."""
    mbx = "/v1/databases/{db}/mailboxes/{mailbox}"
    add_route(app, "POST", mbx + "/folders/{folder:.+}/rename", rename_folder, Role.STORE)
    add_route(app, "GET", mbx + "/folders/{folder:.+}/uids", folder_uids, Role.STORE)
    add_route(app, "POST", mbx + "/folders/{folder:.+}/counters", set_folder_counters, Role.MOVER)
    add_route(app, "DELETE", mbx + "/folders/{folder:.+}", delete_folder, Role.STORE)
    add_route(app, "POST", mbx + "/items/flags", set_flags, Role.STORE)
    add_route(app, "POST", mbx + "/items/move", move_items, Role.STORE)
    add_route(app, "POST", mbx + "/items/copy", copy_items, Role.STORE)
    add_route(app, "POST", mbx + "/items/expunge", expunge, Role.STORE)
