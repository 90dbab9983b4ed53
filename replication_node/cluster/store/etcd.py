"""The cluster store in etcd (v3), for nodes on several hosts.

Spoken over etcd's JSON gateway (`/v3/kv/range`, `/v3/kv/txn`) with aiohttp: no client
library to pin.  Keys live under `/dag/<cluster>/`:

    active/<database>    {"node", "epoch", "last_log_generated", "open_generation",
                          "change_number_ceiling", "updated"} (JSON)
    history/<database>/<epoch, 20 digits>
                         {"node", "start_generation"}: put in the same transaction that
                         moves active/<database> to that epoch
    mailbox/<mailbox>    the database holding the mailbox

Every decision is an etcd transaction that compares the key's mod_revision (or, for a key
that must not exist yet, its create_revision with 0) with what was read, so two writers can
never both win; a writer that loses reads again (publish) or reports that it lost.
Endpoints are tried in order; an unreachable etcd is `ClusterStoreError`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson

from replication_node.cluster.store import ActiveRecord, ClusterStore, EpochRecord
from replication_node.errors import ClusterStoreError


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _unb64(text: str) -> str:
    return base64.b64decode(text).decode()


def _prefix_end(prefix: str) -> str:
    """The range end that selects every key starting with `prefix`."""
    raw = prefix.encode()
    return base64.b64encode(raw[:-1] + bytes([raw[-1] + 1])).decode()


class EtcdClusterStore(ClusterStore):
    """ClusterStore over an etcd cluster's v3 JSON gateway."""

    def __init__(self, endpoints: list[str], *, cluster: str, timeout: float = 5.0) -> None:
        self._endpoints = [e.rstrip("/") for e in endpoints]
        self._prefix = f"/dag/{cluster}/"
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        errors = []
        # Every endpoint in turn: one that cannot be reached, or answers anything but 200
        # (a member without quorum, a proxy's error page), is passed over for the next.
        for endpoint in self._endpoints:
            try:
                async with self._session.post(f"{endpoint}{path}", json=body) as resp:
                    raw = await resp.read()
                    if resp.status != 200:
                        text = raw[:200].decode(errors="replace")
                        errors.append(f"{endpoint}: HTTP {resp.status} {text}")
                        continue
                    data = orjson.loads(raw)
                    if not isinstance(data, dict):
                        raise ValueError(f"not a JSON object: {raw[:100]!r}")
                    return data
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                errors.append(f"{endpoint}: {exc!r}")
        raise ClusterStoreError(f"no etcd endpoint answered {path}: {'; '.join(errors)}")

    async def _get(self, key: str) -> tuple[str | None, int]:
        """The value of `key` and its mod_revision (None, 0 if absent)."""
        data = await self._call("/v3/kv/range", {"key": _b64(self._prefix + key)})
        kvs = data.get("kvs") or []
        if not kvs:
            return None, 0
        return _unb64(kvs[0].get("value", "")), int(kvs[0]["mod_revision"])

    async def _put_if(
        self, key: str, value: str, mod_revision: int, *, also: dict[str, str] | None = None
    ) -> bool:
        """Put `value` (and the `also` keys, in the same transaction) only if `key` is still
        at `mod_revision` (0: still absent)."""
        k = _b64(self._prefix + key)
        compare = (
            {"key": k, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
            if mod_revision == 0
            else {"key": k, "target": "MOD", "result": "EQUAL", "mod_revision": str(mod_revision)}
        )
        puts = [{"request_put": {"key": k, "value": _b64(value)}}] + [
            {"request_put": {"key": _b64(self._prefix + other), "value": _b64(v)}}
            for other, v in (also or {}).items()
        ]
        data = await self._call("/v3/kv/txn", {"compare": [compare], "success": puts})
        return bool(data.get("succeeded"))

    @staticmethod
    def _record(database: str, value: str) -> ActiveRecord:
        data = json.loads(value)
        return ActiveRecord(
            database,
            data["node"],
            int(data["epoch"]),
            int(data["last_log_generated"]),
            datetime.fromisoformat(data["updated"]),
            open_generation=int(data.get("open_generation", 0)),
            change_number_ceiling=int(data.get("change_number_ceiling", 0)),
        )

    @staticmethod
    def _value(
        node: str, epoch: int, generated: int, open_generation: int = 0, ceiling: int = 0
    ) -> str:
        return json.dumps(
            {
                "node": node,
                "epoch": epoch,
                "last_log_generated": generated,
                "open_generation": open_generation,
                "change_number_ceiling": ceiling,
                "updated": datetime.now(UTC).isoformat(),
            }
        )

    @staticmethod
    def _history_key(database: str, epoch: int) -> str:
        return f"history/{database}/{epoch:020d}"

    async def active(self, database: str) -> ActiveRecord | None:
        value, _ = await self._get(f"active/{database}")
        return self._record(database, value) if value is not None else None

    async def set_active(
        self,
        database: str,
        node: str,
        *,
        expected_epoch: int,
        start_generation: int | None = None,
    ) -> ActiveRecord | None:
        value, revision = await self._get(f"active/{database}")
        current = self._record(database, value) if value is not None else None
        if (current.epoch if current else 0) != expected_epoch:
            return None
        generated = current.last_log_generated if current else 0
        if start_generation is not None:
            generated = start_generation - 1
        ceiling = current.change_number_ceiling if current else 0
        epoch = expected_epoch + 1
        new = self._value(node, epoch, generated, 0, ceiling)
        history = json.dumps({"node": node, "start_generation": start_generation or 1})
        if not await self._put_if(
            f"active/{database}",
            new,
            revision,
            also={self._history_key(database, epoch): history},
        ):
            return None
        return self._record(database, new)

    async def history(self, database: str) -> list[EpochRecord]:
        prefix = self._prefix + f"history/{database}/"
        data = await self._call(
            "/v3/kv/range", {"key": _b64(prefix), "range_end": _prefix_end(prefix)}
        )
        records = []
        for kv in data.get("kvs") or []:
            epoch = int(_unb64(kv["key"])[len(prefix) :])
            value = json.loads(_unb64(kv.get("value", "")))
            records.append(
                EpochRecord(database, epoch, value["node"], int(value["start_generation"]))
            )
        return sorted(records, key=lambda r: r.epoch)

    async def publish_last_log_generated(
        self, database: str, node: str, epoch: int, generation: int
    ) -> bool:
        for _ in range(10):  # lost races against another publish: read again
            value, revision = await self._get(f"active/{database}")
            if value is None:
                return False
            current = self._record(database, value)
            if (current.node, current.epoch) != (node, epoch):
                return False
            if current.last_log_generated >= generation:
                return True
            new = self._value(
                node, epoch, generation, current.open_generation, current.change_number_ceiling
            )
            if await self._put_if(f"active/{database}", new, revision):
                return True
        return False

    async def publish_open_generation(
        self, database: str, node: str, epoch: int, generation: int, change_number_ceiling: int
    ) -> bool:
        for _ in range(10):  # lost races against another publish: read again
            value, revision = await self._get(f"active/{database}")
            if value is None:
                return False
            current = self._record(database, value)
            if (current.node, current.epoch) != (node, epoch):
                return False
            if (
                current.open_generation >= generation
                and current.change_number_ceiling >= change_number_ceiling
            ):
                return True
            new = self._value(
                node,
                epoch,
                current.last_log_generated,
                max(current.open_generation, generation),
                max(current.change_number_ceiling, change_number_ceiling),
            )
            if await self._put_if(f"active/{database}", new, revision):
                return True
        raise ClusterStoreError(f"etcd: {database}: publishing the open generation kept racing")

    async def mailbox_database(self, mailbox: str) -> str | None:
        value, _ = await self._get(f"mailbox/{mailbox}")
        return value

    async def set_mailbox_database(
        self, mailbox: str, database: str, *, expected: str | None
    ) -> bool:
        value, revision = await self._get(f"mailbox/{mailbox}")
        if value != expected:
            return False
        return await self._put_if(f"mailbox/{mailbox}", database, revision)

    async def mailboxes(self) -> dict[str, str]:
        prefix = self._prefix + "mailbox/"
        data = await self._call(
            "/v3/kv/range", {"key": _b64(prefix), "range_end": _prefix_end(prefix)}
        )
        return {
            _unb64(kv["key"])[len(prefix) :]: _unb64(kv.get("value", ""))
            for kv in data.get("kvs") or []
        }

    def close(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            # close() is synchronous (the embedded store's is); let the loop finish it.
            # (no loop left: the process is ending and the socket goes with it)
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(session.close())
