"""The active's backup routes, called by the node taking a backup (`backup.ActiveCalls`
over HTTP): each answer's status becomes the domain error it stands for, so the backing-up
node's own answer carries the active's refusal as it was (409, 400, 404) and anything else
(the active unreachable, not mounted) as a failed backup."""

from __future__ import annotations

from datetime import datetime
from typing import TypeVar

import aiohttp
from pydantic import BaseModel, ValidationError

from dag_common.json_object import JsonObject
from dag_common.node_status import post_admin
from replication_node.admin_api import BackupLease, BackupStamp
from replication_node.errors import BackupError, BadRequest, Conflict, NotFound
from replication_node.storage.ops import BackupKind

M = TypeVar("M", bound=BaseModel)


class HttpActiveCalls:
    """`POST /v1/databases/{db}/backups…` on the active's node."""

    def __init__(
        self, *, session: aiohttp.ClientSession, url: str, token: str, database: str, active: str
    ) -> None:
        self._session = session
        self._base = f"{url}/v1/databases/{database}/backups"
        self._token = token
        self._active = active

    async def _post(self, path: str, body: JsonObject | None = None) -> JsonObject:
        code, answer = await post_admin(
            self._session, self._base + path, self._token, body, timeout=60
        )
        if code < 300:
            return answer
        message = f"the active on {self._active}: {answer.get('error') or f'HTTP {code}'}"
        if code == 409:
            raise Conflict(message)
        if code == 400:
            raise BadRequest(message)
        if code == 404:
            raise NotFound(message)
        raise BackupError(message)

    def _parsed(self, model: type[M], answer: JsonObject, what: str) -> M:
        """The active's `answer` as `model`; BackupError naming `what` if it is not one."""
        try:
            return model.model_validate(answer)
        except ValidationError as exc:
            why = f"the active on {self._active} answered a malformed {what}: {exc}"
            raise BackupError(why) from None

    async def begin(self, node: str, kind: BackupKind) -> BackupLease:
        answer = await self._post("", {"node": node, "kind": str(kind)})
        return self._parsed(BackupLease, answer, "lease")

    async def renew(self, backup_id: str) -> None:
        await self._post(f"/{backup_id}/renew")

    async def roll(self, backup_id: str) -> int:
        return int((await self._post(f"/{backup_id}/roll"))["last_generation"])

    async def end(self, backup_id: str, generation: int, ended: datetime) -> BackupStamp:
        answer = await self._post(
            f"/{backup_id}/end", {"generation": generation, "ended_at": ended.isoformat()}
        )
        return self._parsed(BackupStamp, answer, "stamp")

    async def abort(self, backup_id: str) -> None:
        await self._post(f"/{backup_id}/abort")
