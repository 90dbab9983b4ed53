"""The cluster store in etcd (v3), for nodes on several hosts.

Spoken over etcd's JSON gateway (`/v3/kv/range`, `/v3/kv/txn`) with aiohttp: no client
library to pin.  Keys live under `/dag/<cluster>/`:

    active/<database>    {"node", "epoch", "last_log_generated", "open_generation",
                          "change_number_ceiling", "updated"} (JSON)
    history/<database>/<epoch, 20 digits>
                         {"node", "start_generation", "kept_through", "began", "cause",
                          "mount_dial", "lost_logs"}: put in the same transaction that moves
                         active/<database> to that epoch (a record from before the last four
                         were kept reads them as unknown)
    mailbox/<mailbox>    the database holding the mailbox
    failover_pause       {"since", "by", "reason"}: automatic failover is paused while it
                         exists; an automatic failover's transaction compares it absent
    redelivery/<database>
                         {"epochs", "start", "end", "servers", "answered", "requested",
                          "ended"}: the transport dumpster's redelivery request of the
                         database (RedeliveryRecord JSON)

and, read only, the move store's claims and requests (`moves/mailbox/<mailbox>`,
`moves/req/<move id>`: the layout named in the package, `MOVE_CLAIMS_KEY`…), for the move
holding a mailbox of the directory.

Every decision is an etcd transaction that compares the key's mod_revision (or, for a key
that must not exist yet, its create_revision with 0) with what was read, so two writers can
never both win; a writer that loses reads again (publish, a change of the redelivery record)
or reports that it lost.
The gateway (`etcd_gateway.py`) tries the endpoints in order and carries TLS and the token;
an etcd that cannot be reached or refuses us is `ClusterStoreError`.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from datetime import datetime

from dag_common.clock import Clock, SystemClock
from dag_common.cluster_store.engine import b64, prefix_end, unb64
from dag_common.cluster_store.etcd_gateway import EtcdGateway
from dag_common.cluster_store.interface import (
    MOVE_CLAIMS_KEY,
    MOVE_REQUESTS_KEY,
    ActivationCause,
    ActiveRecord,
    ClusterStore,
    DirectoryEntry,
    EpochRecord,
    FailoverPause,
    LeaseRecord,
    RedeliveryChange,
    RedeliveryRecord,
    SetActive,
    known_member,
    move_hold,
)
from dag_common.errors import ClusterStoreError, FailoverPaused, LeaseHeld
from dag_common.model import AutoDatabaseMountDial

_PAUSE = "failover_pause"


class EtcdClusterStore(ClusterStore):
    """ClusterStore over an etcd cluster's v3 JSON gateway."""

    def __init__(self, gateway: EtcdGateway, *, cluster: str, clock: Clock | None = None) -> None:
        self._gateway = gateway
        self._clock: Clock = clock or SystemClock()  # the records' stamps (leases are etcd's)
        self._prefix = f"/dag/{cluster}/"
        # The etcd leases this store granted: database -> (lease ID, node, epoch).
        self._leases: dict[str, tuple[str, str, int]] = {}

    async def _get(self, key: str) -> tuple[str | None, int]:
        """The value of `key` and its mod_revision (None, 0 if absent)."""
        data = await self._gateway.call("/v3/kv/range", {"key": b64(self._prefix + key)})
        kvs = data.get("kvs") or []
        if not kvs:
            return None, 0
        return unb64(kvs[0].get("value", "")), int(kvs[0]["mod_revision"])

    async def _get_all(self, *keys: str) -> list[str | None]:
        """The values of `keys` (None: absent), read in one transaction: one snapshot."""
        ranges = [{"request_range": {"key": b64(self._prefix + key)}} for key in keys]
        data = await self._gateway.call("/v3/kv/txn", {"success": ranges})
        values: list[str | None] = []
        for answer in data.get("responses") or []:
            kvs = (answer.get("response_range") or {}).get("kvs") or []
            values.append(unb64(kvs[0].get("value", "")) if kvs else None)
        if len(values) != len(keys):
            raise ClusterStoreError(f"etcd: a read of {len(keys)} keys answered {len(values)}")
        return values

    def _unchanged(self, key: str, mod_revision: int) -> dict[str, str]:
        """The txn compare that `key` is still at `mod_revision` (0: still absent)."""
        k = b64(self._prefix + key)
        if mod_revision == 0:
            return {"key": k, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
        return {"key": k, "target": "MOD", "result": "EQUAL", "mod_revision": str(mod_revision)}

    async def _put_if(
        self,
        key: str,
        value: str,
        mod_revision: int,
        *,
        also: dict[str, str] | None = None,
        unchanged: dict[str, int] | None = None,
        lease: str | None = None,
    ) -> bool:
        """Put `value` (and the `also` keys, in the same transaction) only if `key` is still
        at `mod_revision` (0: still absent), and each of the `unchanged` keys at its own;
        `lease`: the etcd lease the put key is attached to."""
        k = b64(self._prefix + key)
        compare = [self._unchanged(key, mod_revision)] + [
            self._unchanged(other, rev) for other, rev in (unchanged or {}).items()
        ]
        put = {"key": k, "value": b64(value)} | ({"lease": lease} if lease else {})
        puts = [{"request_put": put}] + [
            {"request_put": {"key": b64(self._prefix + other), "value": b64(v)}}
            for other, v in (also or {}).items()
        ]
        data = await self._gateway.call("/v3/kv/txn", {"compare": compare, "success": puts})
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

    def _value(
        self, node: str, epoch: int, generated: int, open_generation: int = 0, ceiling: int = 0
    ) -> str:
        return json.dumps(
            {
                "node": node,
                "epoch": epoch,
                "last_log_generated": generated,
                "open_generation": open_generation,
                "change_number_ceiling": ceiling,
                "updated": self._clock.now().isoformat(),
            }
        )

    @staticmethod
    def _history_key(database: str, epoch: int) -> str:
        return f"history/{database}/{epoch:020d}"

    async def active(self, database: str) -> ActiveRecord | None:
        value, _ = await self._get(f"active/{database}")
        return self._record(database, value) if value is not None else None

    async def _activate(self, new: SetActive) -> ActiveRecord | None:
        database = new.database
        value, revision = await self._get(f"active/{database}")
        current = self._record(database, value) if value is not None else None
        if not new.follows(current):
            return None
        held, lease_revision = await self._lease_key(database)
        if held is not None and held.node != new.node:
            raise LeaseHeld(database, held.node, held.expires_in)
        unchanged = {f"lease/{database}": lease_revision}  # no lease taken meanwhile
        if new.automatic:
            await self._refuse_if_paused()
            unchanged[_PAUSE] = 0  # and no pause taken meanwhile
        ceiling = current.change_number_ceiling if current else 0
        record = self._value(new.node, new.epoch, new.last_log_generated(current), 0, ceiling)
        history = json.dumps(
            {
                "node": new.node,
                "start_generation": new.recorded_start,
                "kept_through": new.kept_through,
                "began": json.loads(record)["updated"],
                "cause": new.cause,
                "mount_dial": new.mount_dial,
                "lost_logs": new.lost_logs,
            }
        )
        if not await self._put_if(
            f"active/{database}",
            record,
            revision,
            also={self._history_key(database, new.epoch): history},
            unchanged=unchanged,
        ):
            if new.automatic:
                await self._refuse_if_paused()  # lost to a pause, said as such
            return None
        return self._record(database, record)

    async def _refuse_if_paused(self) -> None:
        pause = await self.failover_pause()
        if pause is not None:
            raise FailoverPaused(pause)

    async def _lease_key(self, database: str) -> tuple[LeaseRecord | None, int]:
        """The live lease on the role (None: none) and its key's mod_revision (0: absent)."""
        data = await self._gateway.call(
            "/v3/kv/range", {"key": b64(self._prefix + f"lease/{database}")}
        )
        kvs = data.get("kvs") or []
        if not kvs:
            return None, 0
        revision = int(kvs[0]["mod_revision"])
        left = await self._gateway.call("/v3/lease/timetolive", {"ID": kvs[0].get("lease", "0")})
        ttl = int(left.get("TTL", -1))
        if ttl <= 0:  # expired: etcd deletes the key at once
            return None, revision
        holder = json.loads(unb64(kvs[0].get("value", "")))
        return LeaseRecord(database, holder["node"], int(holder["epoch"]), float(ttl)), revision

    async def lease(self, database: str) -> LeaseRecord | None:
        held, _ = await self._lease_key(database)
        return held

    async def _active_of(
        self, database: str, node: str, epoch: int
    ) -> tuple[ActiveRecord, int] | None:
        """The active record of `database` and its revision while it names `node` at
        `epoch`; None if there is none, or it names another active."""
        value, revision = await self._get(f"active/{database}")
        if value is None:
            return None
        current = self._record(database, value)
        if (current.node, current.epoch) != (node, epoch):
            return None
        return current, revision

    async def renew_lease(self, database: str, node: str, epoch: int, ttl: float) -> bool:
        held_by = await self._active_of(database, node, epoch)
        if held_by is None:
            return False
        _, revision = held_by
        mine = self._leases.get(database)
        if mine is not None and mine[1:] == (node, epoch):
            kept = await self._gateway.call("/v3/lease/keepalive", {"ID": mine[0]})
            if int((kept.get("result") or {}).get("TTL", 0)) > 0:
                return True
            del self._leases[database]  # expired: etcd deleted the key, grant another
        held, lease_revision = await self._lease_key(database)
        if held is not None and held.node != node:
            return False
        granted = await self._gateway.call("/v3/lease/grant", {"TTL": max(1, math.ceil(ttl))})
        lease_id = str(granted["ID"])
        key_value = json.dumps({"node": node, "epoch": epoch})
        # Only while the record still names this node at this epoch, and no one else put
        # the lease key since it was read.
        if not await self._put_if(
            f"lease/{database}",
            key_value,
            lease_revision,
            unchanged={f"active/{database}": revision},
            lease=lease_id,
        ):
            await self._revoke(lease_id)
            return False
        self._leases[database] = (lease_id, node, epoch)
        return True

    async def _revoke(self, lease_id: str) -> None:
        # Gone already, or unreachable: it expires by its TTL anyway.
        with contextlib.suppress(ClusterStoreError):
            await self._gateway.call("/v3/lease/revoke", {"ID": lease_id})

    async def release_lease(self, database: str, node: str, epoch: int) -> None:
        mine = self._leases.get(database)
        if mine is not None and mine[1:] == (node, epoch):
            del self._leases[database]
            await self._revoke(mine[0])

    async def history(self, database: str) -> list[EpochRecord]:
        prefix = self._prefix + f"history/{database}/"
        data = await self._gateway.call(
            "/v3/kv/range", {"key": b64(prefix), "range_end": prefix_end(prefix)}
        )
        records = []
        for kv in data.get("kvs") or []:
            epoch = int(unb64(kv["key"])[len(prefix) :])
            value = json.loads(unb64(kv.get("value", "")))
            kept, began, lost = (value.get(k) for k in ("kept_through", "began", "lost_logs"))
            records.append(
                EpochRecord(
                    database,
                    epoch,
                    value["node"],
                    int(value["start_generation"]),
                    int(kept) if kept is not None else None,
                    began=datetime.fromisoformat(began) if began else None,
                    cause=known_member(ActivationCause, value.get("cause")),
                    mount_dial=known_member(AutoDatabaseMountDial, value.get("mount_dial")),
                    lost_logs=int(lost) if lost is not None else None,
                )
            )
        return sorted(records, key=lambda r: r.epoch)

    async def _publish(
        self, database: str, node: str, epoch: int, change: Callable[[ActiveRecord], str | None]
    ) -> bool | None:
        """Compare-and-set the active record of `database` while it still names `node` at
        `epoch`: `change` gives its new value (None: it says this already).  False if the
        record names another active; None if ten writers in a row won the race."""
        for _ in range(10):  # lost races against another publish: read again
            found = await self._active_of(database, node, epoch)
            if found is None:
                return False
            current, revision = found
            new = change(current)
            if new is None or await self._put_if(f"active/{database}", new, revision):
                return True
        return None

    async def publish_last_log_generated(
        self, database: str, node: str, epoch: int, generation: int
    ) -> bool:
        def change(current: ActiveRecord) -> str | None:
            if current.last_log_generated >= generation:
                return None
            return self._value(
                node, epoch, generation, current.open_generation, current.change_number_ceiling
            )

        return bool(await self._publish(database, node, epoch, change))

    async def publish_open_generation(
        self, database: str, node: str, epoch: int, generation: int, change_number_ceiling: int
    ) -> bool:
        def change(current: ActiveRecord) -> str | None:
            if (
                current.open_generation >= generation
                and current.change_number_ceiling >= change_number_ceiling
            ):
                return None
            return self._value(
                node,
                epoch,
                current.last_log_generated,
                max(current.open_generation, generation),
                max(current.change_number_ceiling, change_number_ceiling),
            )

        published = await self._publish(database, node, epoch, change)
        if published is None:
            raise ClusterStoreError(f"etcd: {database}: publishing the open generation kept racing")
        return published

    async def failover_pause(self) -> FailoverPause | None:
        value, _ = await self._get(_PAUSE)
        return FailoverPause.model_validate_json(value) if value is not None else None

    async def pause_failover(self, pause: FailoverPause) -> bool:
        return await self._put_if(_PAUSE, pause.model_dump_json(), 0)

    async def resume_failover(self) -> FailoverPause | None:
        for _ in range(10):  # paused again between the read and the delete: read again
            value, revision = await self._get(_PAUSE)
            if value is None:
                return None
            data = await self._gateway.call(
                "/v3/kv/txn",
                {
                    "compare": [self._unchanged(_PAUSE, revision)],
                    "success": [{"request_delete_range": {"key": b64(self._prefix + _PAUSE)}}],
                },
            )
            if data.get("succeeded"):
                return FailoverPause.model_validate_json(value)
        raise ClusterStoreError("etcd: resuming automatic failover kept racing")

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
        data = await self._gateway.call(
            "/v3/kv/range", {"key": b64(prefix), "range_end": prefix_end(prefix)}
        )
        return {
            unb64(kv["key"])[len(prefix) :]: unb64(kv.get("value", ""))
            for kv in data.get("kvs") or []
        }

    async def mailbox_entry(self, mailbox: str) -> DirectoryEntry | None:
        # The directory and the claim in one snapshot: a move finishing between two reads
        # would show the database it left, and no move.
        database, move_id = await self._get_all(f"mailbox/{mailbox}", MOVE_CLAIMS_KEY + mailbox)
        if database is None:
            return None
        request = None
        if move_id is not None:  # a move's target never changes, and its request outlives it
            request, _ = await self._get(MOVE_REQUESTS_KEY + move_id)
        return DirectoryEntry(mailbox, database, move_hold(move_id, request))

    async def redelivery(self, database: str) -> RedeliveryRecord | None:
        value, _ = await self._get(f"redelivery/{database}")
        return RedeliveryRecord.from_json(database, value) if value is not None else None

    async def _change_redelivery(
        self, database: str, change: RedeliveryChange
    ) -> RedeliveryRecord | None:
        key = f"redelivery/{database}"
        for _ in range(10):  # another writer between the read and the write: read again
            value, revision = await self._get(key)
            current = RedeliveryRecord.from_json(database, value) if value is not None else None
            new = change(current)
            if new is None or new == current or await self._put_if(key, new.to_json(), revision):
                return new
        raise ClusterStoreError(f"etcd: {database}: changing the redelivery record kept racing")

    def close(self) -> None:
        self._gateway.close()

    async def aclose(self) -> None:
        await self._gateway.aclose()
