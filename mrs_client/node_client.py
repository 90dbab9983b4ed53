"""The mover's client for the nodes' store API: finds each database's active copy and calls
it, following the active when it moves (a 409 naming another active, or an unreachable node)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from dag_common.auth import bearer
from dag_common.config import ClusterConfig
from mrs_client.errors import NodeCallError

logger = logging.getLogger(__name__)


class NodeStoreClient:
    """Store calls to the active copy of a database, over one aiohttp session."""

    def __init__(
        self, config: ClusterConfig, *, token: str, session: aiohttp.ClientSession
    ) -> None:
        self._config = config
        self._token = token
        self._session = session
        self._active: dict[str, str] = {}  # database -> node url

    async def _find_active(self, database: str) -> str:
        async def ask(url: str) -> str | None:
            try:
                async with self._session.get(
                    f"{url}/v1/status",
                    headers=bearer(self._token),
                    timeout=aiohttp.ClientTimeout(total=5),
                ) as resp:
                    if resp.status != 200:
                        return None
                    body = await resp.json()
            except (aiohttp.ClientError, TimeoutError):
                return None
            for copy in body.get("copies", []):
                if (
                    copy["database"] == database
                    and copy["role"] == "Active"
                    and (copy["status"] == "Mounted")
                ):
                    return url
            return None

        db = self._config.database(database)
        urls = [self._config.node(c.node).url for c in db.copies]
        for found in await asyncio.gather(*(ask(u) for u in urls)):
            if found:
                self._active[database] = found
                return found
        raise NodeCallError(f"no mounted active copy of {database} can be reached")

    async def call(
        self,
        method: str,
        database: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        ok: tuple[int, ...] = (200, 201),
    ) -> tuple[int, Any]:
        """Call `path` (below /v1/databases/{database}) on the active copy."""
        for attempt in range(2):
            url = self._active.get(database) or await self._find_active(database)
            try:
                async with self._session.request(
                    method,
                    f"{url}/v1/databases/{database}{path}",
                    json=json,
                    params=params,
                    headers=bearer(self._token),
                    timeout=aiohttp.ClientTimeout(total=120),
                ) as resp:
                    body = await resp.json(content_type=None)
                    if resp.status == 409 and isinstance(body, dict) and body.get("active_url"):
                        self._active.pop(database, None)  # the active moved: look again
                        if attempt == 0:
                            continue
                    if resp.status not in ok:
                        message = body.get("error") if isinstance(body, dict) else body
                        raise NodeCallError(
                            f"{method} {database}{path}: HTTP {resp.status}: {message}",
                            status=resp.status,
                        )
                    return resp.status, body
            except (aiohttp.ClientError, TimeoutError) as exc:
                self._active.pop(database, None)
                if attempt == 1:
                    raise NodeCallError(f"{method} {database}{path}: {exc!r}") from exc
        raise NodeCallError(f"{method} {database}{path}: the active copy kept moving")

    # ---- the store calls a move makes -----------------------------------------------------

    async def mailbox(self, database: str, mailbox: str) -> dict[str, Any] | None:
        status, body = await self.call("GET", database, f"/mailboxes/{mailbox}", ok=(200, 404))
        return body if status == 200 else None

    async def create_mailbox(
        self, database: str, mailbox: str, *, display_name: str, folders: list[str], locked: bool
    ) -> dict[str, Any]:
        _, body = await self.call(
            "PUT",
            database,
            f"/mailboxes/{mailbox}",
            json={"display_name": display_name, "folders": folders, "locked": locked},
        )
        return body

    async def create_folder(self, database: str, mailbox: str, folder: str) -> None:
        await self.call(
            "POST",
            database,
            f"/mailboxes/{mailbox}/folders",
            json={"folder": folder},
            params={"override_lock": "true"},
        )

    async def items(self, database: str, mailbox: str, since_change: int) -> list[dict[str, Any]]:
        _, body = await self.call(
            "GET",
            database,
            f"/mailboxes/{mailbox}/items",
            params={"since_change": str(since_change)},
        )
        return body["items"]

    async def put_items(
        self, database: str, mailbox: str, items: list[dict[str, Any]]
    ) -> dict[str, Any]:
        _, body = await self.call(
            "POST",
            database,
            f"/mailboxes/{mailbox}/items",
            json={"items": items},
            params={"override_lock": "true"},
        )
        return body

    async def delete_item(self, database: str, mailbox: str, item_id: str) -> bool:
        status, _ = await self.call(
            "DELETE",
            database,
            f"/mailboxes/{mailbox}/items/{item_id}",
            params={"override_lock": "true"},
            ok=(200, 404),
        )
        return status == 200

    async def set_state(self, database: str, mailbox: str, action: str) -> dict[str, Any]:
        _, body = await self.call("POST", database, f"/mailboxes/{mailbox}/{action}")
        return body

    async def roll_log(self, database: str) -> int:
        _, body = await self.call("POST", database, "/roll-log")
        return int(body["closed_generation"])
