"""The mover's client for the nodes' store API: finds each database's active copy and calls
it, following the active when it moves.

- A 409 naming another active (the copy asked is passive now): ask that one at once, by the
  url it names (its status may not say Mounted yet).
- No copy says it is the mounted active: if one says it is the active and not mounted yet
  (Active, Dismounted), a mount is under way: follow it as a switchover (below); if none
  does, it is an outage, and the call fails at once with that reason.
- A 409 from an active being switched over (it still names itself, and says `switching_to`),
  or from a copy changing role (naming itself or no active yet): a switchover takes a second
  or two, so ask again every `follow_interval` seconds, finding the active afresh each time,
  for up to `follow_timeout` seconds, rather than fail the call (a 30 s stall of the move).
- An unreachable node: look for the active again once, then fail the call (the move loop
  stalls and retries: a failover takes `failover_after`).
- Reads too go only to the mounted active (`ACTIVE_ONLY_HEADER`: `store_api` says why).

A listing's item that is not an item (a field missing or of another type, text UTF-8 cannot
carry) comes back unreadable (`Item.unreadable_at`), the rest of the page as it is: the
mover skips it as a bad item.

Following the active is safe only because every answer names the epoch of the copy that
gave it (`store_api`): the mover, not this client, decides what an epoch change means.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from orjson import dumps as json_dumps

from dag_common import deadline
from dag_common.auth import bearer
from dag_common.clock import Clock, SystemClock
from dag_common.config import ClusterConfig
from dag_common.errors import NodeCallError
from dag_common.items_payload import ItemsPayload
from dag_common.listing_bodies import NotTaken, answer_json, read_all
from dag_common.message_batch import MAX_ANSWER_BYTES, BatchError, parse_answer
from dag_common.message_body import CRC_HEADER, MessageBody, Parts
from dag_common.model import CopyRole, CopyStatus
from dag_common.node_status import StatusUnavailable, client_failure, fetch_node_status
from dag_common.store_answers import lenient_item
from dag_common.store_api import (
    ACTIVE_ONLY_HEADER,
    Changes,
    Digest,
    FolderStatus,
    FolderUids,
    Item,
    Items,
    ItemsAnswer,
    ItemsQuery,
    LogPosition,
    Mailbox,
    Rolled,
    Written,
)

logger = logging.getLogger(__name__)

CALL_TIMEOUT = 120.0  # seconds: a call, or the silence between two reads of its answer
BODY_RATE = 256 * 1024  # bytes a second a large body is given beyond CALL_TIMEOUT


def _total(size: int | None, call_timeout: float, bounded: bool) -> float | None:
    """How long a call may take in all: a write of `size` bytes `call_timeout`, and as long
    again as sending its body at BODY_RATE takes (a 36 MiB item: 144 s more).  An answer's
    size is not known ahead (a page of large items may be gigabytes), so a read is bounded
    only by the silence between its bytes, unless `bounded` (a command line's read:
    `--timeout`)."""
    if size is not None:
        return call_timeout + size / BODY_RATE
    return call_timeout if bounded else None


def _missing(status: int, body: Any) -> bool:
    """A 404 that says the mailbox (or item) is not there, not that the node has no readable
    copy of the database (a copy still mounting): only the first is an answer."""
    error = body.get("error", "") if isinstance(body, dict) else ""
    return status == 404 and not str(error).startswith("no readable copy")


class NoMountedActive(NodeCallError):
    """No copy of the database says it is the mounted active; `mounting` names the nodes
    whose copy is the active and not mounted yet (a mount under way); `silent` says of each
    node that could not be asked why ("node mbx1 cannot be reached (connection refused)")."""

    def __init__(
        self, database: str, mounting: tuple[str, ...], silent: tuple[str, ...] = ()
    ) -> None:
        said = f": {'; '.join(silent)}" if silent else ""
        super().__init__(f"no mounted active copy of {database} can be reached{said}")
        self.mounting = mounting


class NodeStoreClient:
    """Store calls to the active copy of a database, over one aiohttp session."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        token: str,
        session: aiohttp.ClientSession,
        clock: Clock | None = None,
        follow_interval: float = 0.25,
        follow_timeout: float = 60.0,
        call_timeout: float | None = None,
        poll_session: aiohttp.ClientSession | None = None,
        bodies_as_bytes: bool = False,
    ) -> None:
        """`call_timeout`: a command line's `--timeout`, which bounds each call whole (its
        reads too) and is sent as its deadline (`dag_common.deadline`); by default a write
        may take CALL_TIMEOUT and more for its body, a read as long as it keeps coming.
        `poll_session`: the change feed's long polls go over it, never holding the connections
        other calls need (the IMAP front's idlers); both follow the same actives.  With
        `bodies_as_bytes`, a listing's large bodies are bytes (the mover's: `listing_bodies`)."""
        self._config = config
        self._token = token
        self._session = session
        self._poll_session = poll_session or session
        self._clock = clock or SystemClock()
        self._follow_interval = follow_interval
        self._follow_timeout = follow_timeout
        self._call_timeout = call_timeout or CALL_TIMEOUT
        self._deadlines = call_timeout is not None
        self._active: dict[str, str] = {}  # database -> node url
        self._names = {n.url: n.name for n in config.nodes}
        self._bodies_as_bytes = bodies_as_bytes

    async def _find_active(self, database: str) -> str:
        refused: list[str] = []
        mounting: list[str] = []
        silent: list[str] = []

        async def ask(url: str) -> str | None:
            try:
                status = await fetch_node_status(self._session, url, self._token)
            except StatusUnavailable as exc:
                if exc.status == 401:
                    refused.append(url)
                elif exc.status is None:
                    silent.append(f"{self._callee(url)} cannot be reached ({exc})")
                return None  # unreachable, an error page, not a status: this node cannot say
            for copy in status.copies:
                if copy.database == database and copy.role is CopyRole.ACTIVE:
                    if copy.status is CopyStatus.MOUNTED:
                        return url
                    if copy.status is CopyStatus.DISMOUNTED:
                        mounting.append(copy.node)  # made active, not mounted yet
            return None

        db = self._config.database(database)
        urls = [self._config.node(c.node).url for c in db.copies]
        for found in await asyncio.gather(*(ask(u) for u in urls)):
            if found:
                self._active[database] = found
                return found
        if refused:
            raise NodeCallError(
                f"authentication failed at {', '.join(refused)} (check the token)", status=401
            )
        raise NoMountedActive(database, tuple(mounting), tuple(silent))

    def _failure(self, url: str, exc: BaseException, total: float | None) -> str:
        """Why a call to the node at `url` got no answer, naming the node."""
        who = f"{self._callee(url)} ({url})"
        if isinstance(exc, aiohttp.ClientConnectorError):
            return f"{who} cannot be reached: {client_failure(exc)}"
        if isinstance(exc, TimeoutError):
            return f"{who} did not answer within {total or self._call_timeout:g}s"
        return f"{who}: {client_failure(exc)}"

    def _callee(self, url: str) -> str:
        """A node by its name, as the config names its url (else the url)."""
        name = self._names.get(url)
        return f"node {name}" if name else url

    async def call(
        self,
        method: str,
        database: str,
        path: str,
        *,
        json: Any = None,
        payload: ItemsPayload | None = None,
        params: dict[str, str] | None = None,
        ok: tuple[int, ...] = (200, 201),
        raw: bool = False,
        message: bytes | bytearray | Parts | Path | None = None,
        long_poll: bool = False,
        take_bodies: bool = False,
    ) -> tuple[int, Any]:
        """Call `path` (below /v1/databases/{database}) on the active copy, with `json` or a
        `payload` for its body; a 404 in `ok` is returned only when it means "not there"
        (see `_missing`).  A NodeCallError names the database (a stalled move says which end
        it waits on).  `raw`: a 200's body is the bytes answered, not JSON (a message).
        `message`: the body is a message/rfc822, these bytes or the file's, sent a slice at a
        time and the answer's SHA-256 checked (`message_body`; `put_message`)."""
        try:
            return await self._call(
                method, database, path, json=json, payload=payload, params=params, ok=ok,
                raw=raw, message=message, long_poll=long_poll, take_bodies=take_bodies,
            )  # fmt: skip
        except NodeCallError as exc:
            exc.database = database
            raise

    async def _call(
        self,
        method: str,
        database: str,
        path: str,
        *,
        json: Any,
        payload: ItemsPayload | None,
        params: dict[str, str] | None,
        ok: tuple[int, ...],
        raw: bool = False,
        message: bytes | bytearray | Parts | Path | None = None,
        long_poll: bool = False,
        take_bodies: bool = False,
    ) -> tuple[int, Any]:
        what = f"{method} {database}{path}"
        # Encoded once, to bytes, with orjson (the standard library's encoder spends about
        # 3 ms on each 1 MB, and aiohttp's `json=` would encode a str to bytes again); a
        # write of items is a payload sent a slice at a time (`items_payload`).
        # Only the mounted active answers, a read too (a demoted copy refuses, naming it).
        headers = {**bearer(self._token), ACTIVE_ONLY_HEADER: "1"}
        data: bytes | ItemsPayload | None = payload
        upload = None if message is None else MessageBody(message)
        if json is not None:
            data = json_dumps(json)
            headers = {**headers, "Content-Type": "application/json"}
        size = None if data is None else len(data) if isinstance(data, bytes) else data.size
        if upload is not None:  # sent afresh at each attempt, with its length
            size = upload.size
            headers = {**headers, "Content-Type": "message/rfc822",
                       "Content-Length": str(upload.size)}  # fmt: skip
        total = _total(size, self._call_timeout, self._deadlines)
        timeout = aiohttp.ClientTimeout(
            total=total, sock_connect=self._call_timeout, sock_read=self._call_timeout
        )
        follow_until: float | None = None  # set while a switchover is followed
        moved_once = False
        unreachable_once = False
        while True:
            try:
                url = self._active.get(database) or await self._find_active(database)
            except NoMountedActive as exc:
                # Between the old active's dismount and the new one's mount nobody is
                # mounted: part of a switchover being followed, or, when a copy says it is
                # the active and not mounted yet, a mount under way that is followed from
                # here.  Nobody mounted and nobody mounting is an outage: fail at once.
                if follow_until is None and exc.mounting:
                    follow_until = self._clock.monotonic() + self._follow_timeout
                    logger.info(
                        "%s: following the mount of %s on %s", what, database,
                        ", ".join(exc.mounting),
                    )  # fmt: skip
                if follow_until is not None and self._clock.monotonic() < follow_until:
                    await self._clock.sleep(self._follow_interval)
                    continue
                raise
            try:
                sent = headers
                if self._deadlines and total is not None:
                    sent = {**headers, **deadline.header(self._clock.now().timestamp() + total)}
                session = self._poll_session if long_poll else self._session
                async with session.request(
                    method,
                    f"{url}/v1/databases/{database}{path}",
                    data=data if upload is None else upload.payload(),
                    params=params,
                    headers=sent,
                    timeout=timeout,
                ) as resp:
                    # Read from the stream, not `resp.read()`, which keeps its own reference
                    # to the bytes as long as the response lives.
                    read = read_all(resp.content) if take_bodies else resp.content.read()
                    status, answer = resp.status, await read
                    digest = resp.headers.get(CRC_HEADER)
            except (aiohttp.ClientError, TimeoutError) as exc:
                self._active.pop(database, None)
                if follow_until is not None and self._clock.monotonic() < follow_until:
                    await self._clock.sleep(self._follow_interval)
                    continue
                if not unreachable_once:
                    unreachable_once = True
                    continue
                raise NodeCallError(f"{what}: {self._failure(url, exc, total)}") from exc
            if upload is not None and status in ok and status < 300:
                mismatch = upload.check(digest)
                if mismatch is not None:  # written, but not as sent: a failure, sent again
                    self._active.pop(database, None)
                    raise NodeCallError(f"{what}: {mismatch}")
            if raw and status == 200:
                return status, answer
            head, held = answer[:120], [answer]
            del answer  # let go of where it is parsed
            body = await answer_json(held, take_bodies)
            if body is None:
                # An error page or a cut answer (a proxy, a crashing node): a failed call with
                # what came back, a 5xx or no status at all, so the move stalls and asks again.
                snippet = head.decode("utf-8", "replace").strip() or "an empty body"
                raise NodeCallError(
                    f"{what}: HTTP {status} with a body that is not JSON: {snippet!r}",
                    status=status if status >= 500 else None,
                )
            if status == 401:
                raise NodeCallError(f"{what}: authentication failed (check the token)", status=401)
            if status == 409 and isinstance(body, dict) and "active_url" in body:
                self._active.pop(database, None)  # the active moved, or is moving: look again
                # Switching over, or naming itself or nobody (its copy changing role, the
                # new active's record not there yet): the role is moving, follow it.
                if body.get("switching_to") or body["active_url"] in (url, None):
                    now = self._clock.monotonic()
                    if follow_until is None:
                        follow_until = now + self._follow_timeout
                        to = body.get("switching_to")
                        logger.info(
                            "%s: following a switchover of %s %s",
                            what,
                            database,
                            f"to {to}"
                            if to
                            else "(its copies changing role; the new active not named yet)",
                        )
                    if now < follow_until:
                        await self._clock.sleep(self._follow_interval)
                        continue
                elif not moved_once:
                    # Asked at once, by the url it names, not through the copies' statuses: the
                    # new active may not say Mounted yet (it then answers 409, followed above).
                    moved_once = True
                    self._active[database] = body["active_url"]
                    continue
            message = body.get("error") if isinstance(body, dict) else body
            if status == 404 and not _missing(status, body):
                # transient (no status: the move loop stalls and asks again)
                raise NodeCallError(f"{what}: HTTP {status}: {message}", detail=str(message))
            if status not in ok:
                if status >= 500:  # a dismounted or failing active: find it again next time
                    self._active.pop(database, None)
                raise NodeCallError(
                    f"{what}: HTTP {status}: {message}", status=status, detail=str(message)
                )
            return status, body

    # ---- the store calls a move makes (store_api.NodeStore) -------------------------------

    async def mailbox(self, database: str, mailbox: str) -> Mailbox | None:
        status, body = await self.call("GET", database, f"/mailboxes/{mailbox}", ok=(200, 404))
        if status != 200:
            return None
        return Mailbox.model_validate(body)

    async def create_mailbox(
        self,
        database: str,
        mailbox: str,
        *,
        display_name: str,
        folders: list[str],
        locked: bool,
        replace_soft_deleted: bool = False,
    ) -> Written:
        body: dict[str, object] = {"display_name": display_name, "folders": folders}
        body["locked"] = locked
        if replace_soft_deleted:  # said only when meant: a node before it refuses the field
            body["replace_soft_deleted"] = True
        _, answer = await self.call("PUT", database, f"/mailboxes/{mailbox}", json=body)
        return Written.model_validate(answer)

    async def create_folder(self, database: str, mailbox: str, folder: str) -> Written:
        _, body = await self.call(
            "POST",
            database,
            f"/mailboxes/{mailbox}/folders",
            json={"folder": folder},
            params={"override_lock": "true"},
        )
        return Written.model_validate(body)

    async def items(self, database: str, mailbox: str, query: ItemsQuery) -> Items:
        params, bodies = query.params(), query.bodies
        path, take = f"/mailboxes/{mailbox}/items", self._bodies_as_bytes and bodies
        try:
            _, body = await self.call("GET", database, path, params=params, take_bodies=take)
        except NotTaken:  # a large body that is not UTF-8 text: read as text, it is unreadable
            _, body = await self.call("GET", database, path, params=params)
        page = ItemsAnswer.model_validate(body)
        return Items(
            items=tuple(lenient_item(i, bodies) for i in page.items),
            last_change_number=(
                query.since_change if page.last_change_number is None else page.last_change_number
            ),
            epoch=page.epoch,
            more=page.more,
            live=page.live_count,
        )

    async def put_items(self, database: str, mailbox: str, items: list[Item]) -> Written:
        _, body = await self.call(
            "POST",
            database,
            f"/mailboxes/{mailbox}/items",
            payload=ItemsPayload(items),
            params={"override_lock": "true"},
        )
        return Written.model_validate(body)

    # ---- IMAP's state, copied by a move (writes with override_lock) ---------------------

    async def _moved(self, database: str, path: str, json: Any, method: str = "POST") -> Written:
        _, body = await self.call(
            method, database, path, json=json, params={"override_lock": "true"}
        )
        return Written.model_validate(body)

    async def create_folder_as(self, database: str, mailbox: str, folder: FolderStatus) -> Written:
        body = {
            "folder": folder.folder,
            "uidvalidity": folder.uidvalidity,
            "uid_next": folder.uid_next,
            "highest_modseq": folder.highest_modseq,
        }
        return await self._moved(database, f"/mailboxes/{mailbox}/folders", body)

    async def rename_folder(self, database: str, mailbox: str, folder: str, to: str) -> Written:
        path = f"/mailboxes/{mailbox}/folders/{_path(folder)}/rename"
        return await self._moved(database, path, {"to": to})

    async def delete_folder(self, database: str, mailbox: str, folder: str) -> Written:
        path = f"/mailboxes/{mailbox}/folders/{_path(folder)}"
        return await self._moved(database, path, None, method="DELETE")

    async def set_flags(
        self,
        database: str,
        mailbox: str,
        folder: str,
        item_ids: list[str],
        flags: tuple[str, ...],
        modseq: int,
    ) -> Written:
        body: dict[str, object] = {"folder": folder, "item_ids": item_ids, "replace": list(flags)}
        if modseq:
            body["modseq"] = modseq
        return await self._moved(database, f"/mailboxes/{mailbox}/items/flags", body)

    async def set_folder_counters(
        self, database: str, mailbox: str, folder: FolderStatus, uidvalidity_next: int
    ) -> Written:
        body = {
            "uid_next": folder.uid_next,
            "highest_modseq": folder.highest_modseq,
            "uidvalidity_next": uidvalidity_next,
        }
        if folder.modseq_floor:  # a node from before the floor refuses the field
            body["modseq_floor"] = folder.modseq_floor
        path = f"/mailboxes/{mailbox}/folders/{_path(folder.folder)}/counters"
        return await self._moved(database, path, body)

    async def folder_uids(self, database: str, mailbox: str, folder: str) -> FolderUids | None:
        status, body = await self.call(
            "GET", database, f"/mailboxes/{mailbox}/folders/{_path(folder)}/uids", ok=(200, 404)
        )
        return FolderUids.model_validate(body) if status == 200 else None

    async def delete_item(self, database: str, mailbox: str, item_id: str) -> Written | None:
        status, body = await self.call(
            "DELETE",
            database,
            f"/mailboxes/{mailbox}/items/{item_id}",
            params={"override_lock": "true"},
            ok=(200, 404),
        )
        return Written.model_validate(body) if status == 200 else None

    async def delete_mailbox(self, database: str, mailbox: str) -> bool:
        status, _ = await self.call("DELETE", database, f"/mailboxes/{mailbox}", ok=(200, 404))
        return status == 200

    async def set_state(self, database: str, mailbox: str, action: str) -> Written:
        _, body = await self.call("POST", database, f"/mailboxes/{mailbox}/{action}")
        return Written.model_validate(body)

    async def roll_log(self, database: str) -> Rolled:
        _, body = await self.call("POST", database, "/roll-log")
        return Rolled.model_validate(body)

    async def log_position(self, database: str) -> LogPosition:
        _, body = await self.call("GET", database, "/log/position")
        return LogPosition.model_validate(body)

    async def digest(self, database: str, mailbox: str) -> Digest | None:
        status, body = await self.call(
            "GET", database, f"/mailboxes/{mailbox}/digest", ok=(200, 404)
        )
        if status != 200:
            return None
        return Digest.model_validate(body)

    # ---- what an IMAP front follows ---------------------------------------------------------

    async def put_message(
        self, database: str, mailbox: str, item_id: str, raw: bytes | bytearray | Parts | Path,
        *, folder: str = "Inbox",
    ) -> Written:  # fmt: skip
        """Write the message `raw` (its bytes, their parts, or a file holding them) as item
        `item_id` (created or replaced), as its bytes (PUT …/items/{id}/message): the node
        reads, counts and stages them as they are; sent a slice at a time (`message_body`)."""
        _, body = await self.call(
            "PUT", database, f"/mailboxes/{mailbox}/items/{item_id}/message", message=raw,
            params={"folder": folder},
        )  # fmt: skip
        return Written.model_validate(body)

    async def message(self, database: str, mailbox: str, item_id: str) -> bytes | None:
        """An item as the message it is (GET …/items/{id}/message): its bytes as written;
        None if the mailbox has no such item."""
        status, body = await self.call(
            "GET", database, f"/mailboxes/{mailbox}/items/{item_id}/message", ok=(200, 404),
            raw=True,
        )  # fmt: skip
        return body if status == 200 else None

    async def messages(
        self, database: str, mailbox: str, item_ids: Sequence[str], *,
        max_bytes: int = MAX_ANSWER_BYTES,
    ) -> dict[str, memoryview | None] | None:  # fmt: skip
        """Many items as their messages in one answer (POST …/items/messages,
        `dag_common.message_batch`): views of it by id as asked, None for an item the
        mailbox does not have; the ids after the message that reached `max_bytes` are absent
        (ask again).  None if there is no such mailbox."""
        path = f"/mailboxes/{mailbox}/items/messages"
        status, body = await self.call(
            "POST", database, path, json={"item_ids": list(item_ids), "max_bytes": max_bytes},
            ok=(200, 404), raw=True,
        )  # fmt: skip
        if status != 200:
            return None
        try:
            return parse_answer(body)
        except BatchError as exc:
            raise NodeCallError(f"POST {database}{path}: {exc}") from exc

    async def changes(
        self,
        database: str,
        mailbox: str,
        since_change: int,
        *,
        wait: float = 25.0,
        epoch: int | None = None,
    ) -> Changes | None:
        """The mailbox's change feed (GET …/changes): answered once the mailbox has a change
        above `since_change`, or after `wait` seconds (0..60) unchanged; None if the active
        has no such mailbox.  `epoch`: the one the caller last saw; a switchover or failover
        ends the wait (the old active answers 409, followed here to the new one, which
        answers at once with its own epoch)."""
        params = {"since_change": str(since_change), "wait": f"{wait:g}"}
        if epoch is not None:
            params["epoch"] = str(epoch)
        status, body = await self.call(
            "GET", database, f"/mailboxes/{mailbox}/changes", params=params, ok=(200, 404),
            long_poll=wait > 0,
        )  # fmt: skip
        if status != 200:
            return None
        return Changes.model_validate(body)


def _path(folder: str) -> str:
    """A folder's name in a path (a child's `/` kept: the routes take `{folder:.+}`)."""
    return quote(folder, safe="/")
