"""The move store in etcd (v3), for workers on several hosts.

Spoken over etcd's JSON gateway, as the cluster store is (`etcd_gateway.py`: endpoints in
order, TLS, the token).  Keys live under the cluster's prefix, `/dag/<cluster>/moves/`:

    req/<move id>        the move request (MoveRecord JSON)
    mailbox/<mailbox>    the move id of the unfinished move that claimed the mailbox
    lease/<move id>      {"worker", "token"}: the move lease, attached to an etcd lease of
                         its ttl, so it runs out by etcd's leader's clock (which deletes the
                         key once it revoked the lease: up to half a second later)
    stop/<move id>       {"action", "requested"}: an operator's request to stop the move
    answer/<move id>/<time_ns, 20 digits>-<random>
                         one guarantee answer (answer_row JSON); kept in etcd's create order
    batch/<name>         the batch (BatchRecord JSON)

Every decision is one etcd transaction: `create` compares every key it puts absent
(create_revision 0) and reads them back in the same transaction when it loses; `save`
compares the lease key's value with the caller's lease, so a lease released, expired or
claimed again by another worker writes nothing (LeaseLost).  A finished move's mailbox
claims are deleted in the same transaction, each only while it still names the move (a
nested transaction), as is a suspend request by a save Suspended (compared at the
mod_revision it was read at).

etcd takes at most 128 operations in one transaction (its --max-txn-ops default).  Single
requests never need more.  A batch that does is created in parts, and never half: its
record is written first, suspended (no worker starts a move of a suspended batch), then its
requests a transaction of at most 128 keys at a time, each compared absent; a part that
loses (a mailbox taken meanwhile) deletes every key written so far, batch included, and the
create is refused.  Only when all are in is the batch written as asked.  A process killed
in the middle leaves the batch suspended with the requests written so far, for `mrs batch
cancel` (or resume, to run those).

An etcd lease lasts whole seconds, at least etcd's minimum (2 s with its default timing): a
move lease lasts at least its ttl, never less, so its holder always gives up first.  This
store counts each lease it claimed or renewed by its own monotonic clock from before it
asked, as the holder does (`lease.LeaseKeeper`), and refuses a save or renewal once that
runs out: before etcd's leader lets the lease go, never after.  A lease it does not know
(claimed through another store object) is checked against etcd before each save.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from dag_common.cluster_store.engine import b64, prefix_end, unb64
from dag_common.cluster_store.etcd_gateway import EtcdGateway
from dag_common.cluster_store.etcd_json import (
    Compare,
    KeyValue,
    TxnOp,
    TxnResponse,
    as_range,
    as_txn,
)
from dag_common.errors import ClusterStoreError
from mrs_client.errors import MoveRejected
from mrs_client.move_store.interface import (
    ANSWERS_KEPT,
    AnswerRow,
    BatchExists,
    BatchRecord,
    LeaseLost,
    MoveHolder,
    MoveLease,
    MoveRecord,
    MoveStore,
)
from mrs_client.policy import FINISHED, MoveState, StopRequest

# etcd's --max-txn-ops default: compares, and operations of either branch, per transaction.
MAX_TXN_OPS = 128


def _lease_value(lease: MoveLease) -> str:
    """The lease key's value for `lease` (compared byte for byte by `save`)."""
    return json.dumps({"worker": lease.worker, "token": lease.token})


class EtcdMoveStore(MoveStore):
    """MoveStore over an etcd cluster's v3 JSON gateway."""

    def __init__(self, gateway: EtcdGateway, *, cluster: str) -> None:
        self._gateway = gateway
        self._prefix = f"/dag/{cluster}/moves/"
        # The move leases this store claimed or renewed, by token: (etcd lease ID, when they
        # run out by this process's monotonic clock), until released.
        self._leases: dict[str, tuple[str, float]] = {}

    # ---- etcd ---------------------------------------------------------------------------

    def _key(self, key: str) -> str:
        return b64(self._prefix + key)

    async def _get_kv(self, key: str) -> KeyValue | None:
        """The key's kv as etcd's gateway gives it (base64 value, revisions, lease), or None."""
        data = as_range(await self._gateway.call("/v3/kv/range", {"key": self._key(key)}))
        kvs = data.get("kvs") or []
        return kvs[0] if kvs else None

    async def _get(self, key: str) -> tuple[str | None, int]:
        """The value of `key` and its mod_revision (None, 0 if absent)."""
        kv = await self._get_kv(key)
        if kv is None:
            return None, 0
        return unb64(kv.get("value", "")), int(kv["mod_revision"])

    async def _range(self, under: str, **options: object) -> list[KeyValue]:
        """Every kv whose key starts with `under` (options: etcd's range fields)."""
        prefix = self._prefix + under
        body = {"key": b64(prefix), "range_end": prefix_end(prefix)} | options
        data = as_range(await self._gateway.call("/v3/kv/range", body))
        return list(data.get("kvs") or [])

    def _absent(self, key: str) -> Compare:
        """The txn compare that `key` does not exist."""
        return self._created(key, "EQUAL")

    def _present(self, key: str) -> Compare:
        """The txn compare that `key` exists."""
        return self._created(key, "GREATER")

    def _created(self, key: str, result: str) -> Compare:
        """The txn compare of `key`'s create revision with 0 (a key never created: 0)."""
        return {"key": self._key(key), "target": "CREATE", "result": result, "create_revision": "0"}

    def _holds(self, key: str, value: str) -> Compare:
        """The txn compare that `key` holds `value` (false when the key is absent)."""
        return {"key": self._key(key), "target": "VALUE", "result": "EQUAL", "value": b64(value)}

    def _unchanged(self, key: str, mod_revision: int) -> Compare:
        """The txn compare that `key` is still at `mod_revision`."""
        return {
            "key": self._key(key),
            "target": "MOD",
            "result": "EQUAL",
            "mod_revision": str(mod_revision),
        }

    def _put(self, key: str, value: str, lease: str | None = None) -> TxnOp:
        put = {"key": self._key(key), "value": b64(value)} | ({"lease": lease} if lease else {})
        return {"request_put": put}

    def _delete(self, key: str) -> TxnOp:
        return {"request_delete_range": {"key": self._key(key)}}

    def _read(self, key: str) -> TxnOp:
        return {"request_range": {"key": self._key(key)}}

    async def _txn(
        self,
        compare: Sequence[Compare],
        success: Sequence[TxnOp],
        failure: Sequence[TxnOp] | None = None,
    ) -> tuple[bool, list[TxnResponse]]:
        """One transaction: whether its compares held, and the responses of the branch run."""
        body: dict[str, object] = {"compare": compare, "success": success}
        if failure:
            body["failure"] = failure
        data = as_txn(await self._gateway.call("/v3/kv/txn", body))
        return bool(data.get("succeeded")), list(data.get("responses") or [])

    @staticmethod
    def _read_value(response: TxnResponse) -> str | None:
        """The value a `request_range` of one key found (None: absent)."""
        kvs = (response.get("response_range") or {}).get("kvs") or []
        return unb64(kvs[0].get("value", "")) if kvs else None

    async def _revoke(self, lease_id: str) -> None:
        # Gone already, or unreachable: it expires by its TTL anyway.
        with contextlib.suppress(ClusterStoreError):
            await self._gateway.call("/v3/lease/revoke", {"ID": lease_id})

    async def _time_to_live(self, kv: KeyValue) -> int:
        """The whole seconds left to the etcd lease `kv` is attached to; -1: not found (run
        out and revoked, its keys deleted with it).

        etcd truncates: 0 is less than a second left, or run out but not revoked yet (the
        leader revokes run-out leases every half second): live still, as its key is, so that
        no claim takes a lease whose holder may still save.  The gateway leaves a 0 out of
        its answer: no TTL is 0."""
        left = await self._gateway.call("/v3/lease/timetolive", {"ID": str(kv.get("lease", "0"))})
        return int(left.get("TTL", 0))

    # ---- requests ---------------------------------------------------------------------

    async def create(self, records: list[MoveRecord], batch: BatchRecord | None = None) -> None:
        keys: dict[str, str] = {}  # key -> value, every one compared absent
        named = [m for record in records for m in record.mailboxes]
        twice = sorted(m for m, n in Counter(named).items() if n > 1)
        if twice:
            raise MoveRejected(f"a mailbox is named twice: {', '.join(map(repr, twice))}")
        ids = [record.id for record in records]
        again = sorted(i for i, n in Counter(ids).items() if n > 1)
        if again:
            raise MoveRejected(f"a move request id is given twice: {', '.join(again)}")
        for record in records:
            keys |= {f"mailbox/{m}": record.id for m in record.mailboxes}
            keys[f"req/{record.id}"] = record.to_json()
        if batch is not None:
            keys[f"batch/{batch.name}"] = batch.to_json()
        if len(keys) <= MAX_TXN_OPS:
            refusal = await self._put_absent(keys)
            if refusal is not None:
                raise refusal
            return
        if batch is None:
            raise MoveRejected(
                f"etcd takes at most {MAX_TXN_OPS} keys in one transaction: these "
                f"{len(records)} requests need {len(keys)}; record fewer at once, or a batch"
            )
        await self._create_in_parts(records, batch)

    async def _put_absent(self, keys: dict[str, str]) -> MoveRejected | None:
        """Put every key if none exists, in one transaction; else why not (nothing put)."""
        order = list(keys)
        won, responses = await self._txn(
            [self._absent(k) for k in order],
            [self._put(k, v) for k, v in keys.items()],
            [self._read(k) for k in order],  # lost: what is there, read in the same txn
        )
        if won:
            return None
        found = {k: self._read_value(r) for k, r in zip(order, responses, strict=True)}
        taken: list[str] = []
        for key, value in found.items():
            if value is None:
                continue
            kind, _, name = key.partition("/")
            if kind == "batch":
                return BatchExists.named(name)
            if kind == "mailbox":
                taken.append(f"mailbox {name!r} is already being moved (request {value})")
            else:
                taken.append(f"a move request {name} exists already")
        return MoveRejected("; ".join(taken))

    async def _create_in_parts(self, records: list[MoveRecord], batch: BatchRecord) -> None:
        """A batch too large for one transaction (module docstring)."""
        key = f"batch/{batch.name}"
        refusal = await self._put_absent({key: replace(batch, suspended=True).to_json()})
        if refusal is not None:
            raise refusal
        written: list[str] = [key]
        part: dict[str, str] = {}
        try:
            for record in [*records, None]:
                keys = {} if record is None else {
                    **{f"mailbox/{m}": record.id for m in record.mailboxes},
                    f"req/{record.id}": record.to_json(),
                }  # fmt: skip
                if part and (record is None or len(part) + len(keys) > MAX_TXN_OPS):
                    refusal = await self._put_absent(part)
                    if refusal is not None:
                        raise refusal
                    written += part
                    part = {}
                part |= keys
        except BaseException:
            for start in range(0, len(written), MAX_TXN_OPS):
                await self._txn([], [self._delete(k) for k in written[start : start + MAX_TXN_OPS]])
            raise
        await self._txn([], [self._put(key, batch.to_json())])

    async def get(self, move_id: str) -> MoveRecord | None:
        value, _ = await self._get(f"req/{move_id}")
        return MoveRecord.from_json(value) if value is not None else None

    async def list(
        self, *, states: Iterable[MoveState] | None = None, batch: str | None = None
    ) -> list[MoveRecord]:
        wanted = None if states is None else {str(s) for s in states}
        records = [
            MoveRecord.from_json(unb64(kv.get("value", ""))) for kv in await self._range("req/")
        ]
        return sorted(
            (
                r
                for r in records
                if (wanted is None or str(r.state) in wanted)
                and (batch is None or r.batch == batch)
            ),
            key=lambda r: (r.created, r.id),
        )

    async def save(
        self, record: MoveRecord, now: datetime, *, lease: MoveLease, durable: bool = True
    ) -> MoveRecord:
        # durable: etcd commits every transaction to a quorum's disks; there is no cheaper
        # save to choose.
        record = replace(record, updated=now)
        lease_key, req_key, stop_key = (f"{k}/{record.id}" for k in ("lease", "req", "stop"))
        # etcd deletes an expired lease's key only once its leader revoked it: a lease run
        # out is refused before that too (by this process's count for a lease it claimed or
        # renewed, else by etcd's), and the value compared below orders any save before
        # another worker's claim.
        known = lease.token in self._leases
        if not known or self._over(lease):
            kv = await self._get_kv(lease_key)
            live = unb64(kv.get("value", "")) if kv is not None else None
            if (
                known
                or kv is None
                or live != _lease_value(lease)
                or await self._time_to_live(kv) < 0
            ):
                raise self._lost(record.id, lease, live)
        success = [self._put(req_key, record.to_json())]
        if record.state in FINISHED:
            # each claim only while it names this move: a mailbox freed before (a finished
            # record saved again) may be another move's by now
            success += [
                {
                    "request_txn": {
                        "compare": [self._holds(f"mailbox/{m}", record.id)],
                        "success": [self._delete(f"mailbox/{m}")],
                    }
                }
                for m in record.mailboxes
            ]
            success.append(self._delete(stop_key))
        elif record.state is MoveState.SUSPENDED:
            value, revision = await self._get(stop_key)
            if value is not None and json.loads(value)["action"] == StopRequest.SUSPEND:
                # a suspend carried out; not a cancel asked since it was read
                unchanged = self._unchanged(stop_key, revision)
                success.append(
                    {"request_txn": {"compare": [unchanged], "success": [self._delete(stop_key)]}}
                )
        won, responses = await self._txn(
            [self._holds(lease_key, _lease_value(lease)), self._present(req_key)],
            success,
            [self._read(lease_key), self._read(req_key)],
        )
        if won:
            return record
        live = self._read_value(responses[0])
        if live != _lease_value(lease):
            self._run_out(lease)
            raise self._lost(record.id, lease, live)
        # The lease is ours but there is no such request: nothing to update (as the
        # embedded engine, which updates no row).
        return record

    @staticmethod
    def _lost(move_id: str, lease: MoveLease, live: str | None) -> LeaseLost:
        """The refusal of a save under `lease`; `live`: the lease key's value now."""
        holder = json.loads(live)["worker"] if live is not None else None
        return LeaseLost.saving(
            move_id, lease.worker, holder if live != _lease_value(lease) else None
        )

    # ---- leases -----------------------------------------------------------------------

    async def claim(self, move_id: str, worker: str, ttl: float) -> MoveLease | None:
        key = f"lease/{move_id}"
        kv = await self._get_kv(key)
        if kv is not None and await self._time_to_live(kv) >= 0:
            return None  # live (a lease is never taken twice, even by its worker)
        # (an etcd lease not found is revoked, its key deleted with it)
        asked = time.monotonic()
        granted = await self._gateway.call("/v3/lease/grant", {"TTL": max(1, math.ceil(ttl))})
        lease_id = str(granted["ID"])
        lease = MoveLease(move_id, worker, uuid.uuid4().hex)
        won, _ = await self._txn(
            [self._absent(key)], [self._put(key, _lease_value(lease), lease_id)]
        )
        if not won:  # claimed meanwhile
            await self._revoke(lease_id)
            return None
        self._leases[lease.token] = (lease_id, asked + int(granted["TTL"]))
        return lease

    def _over(self, lease: MoveLease) -> bool:
        """Whether `lease` ran out by this process's count (a lease it claimed or renewed):
        counted from before etcd was asked, it runs out here before it does in etcd, and
        stays run out (until `release` forgets it)."""
        mine = self._leases.get(lease.token)
        return mine is not None and time.monotonic() >= mine[1]

    def _run_out(self, lease: MoveLease) -> None:
        """Count `lease` run out from now on: etcd said it is over."""
        if lease.token in self._leases:
            self._leases[lease.token] = (self._leases[lease.token][0], -math.inf)

    async def _mine(self, lease: MoveLease) -> tuple[str, int] | None:
        """The etcd lease holding `lease`'s key and the key's mod_revision, while the key
        still names `lease` (None: released, expired or claimed again)."""
        kv = await self._get_kv(f"lease/{lease.move_id}")
        if kv is None or unb64(kv.get("value", "")) != _lease_value(lease):
            return None
        return str(kv.get("lease", "0")), int(kv["mod_revision"])

    async def renew(self, lease: MoveLease, ttl: float) -> bool:
        if self._over(lease):
            return False
        mine = await self._mine(lease)
        if mine is None:
            self._run_out(lease)
            return False
        lease_id, revision = mine
        asked = time.monotonic()
        kept = await self._gateway.call("/v3/lease/keepalive", {"ID": lease_id})
        granted = int((kept.get("result") or {}).get("TTL", 0))
        if granted <= 0:  # expired (etcd deletes the key)
            self._run_out(lease)
            return False
        if granted >= ttl:
            self._leases[lease.token] = (lease_id, asked + granted)
            return True
        # Asked for longer than the etcd lease lasts: attach the key to a longer one, while
        # it is still ours (the value stays: the lease is the same one for `save`).
        asked = time.monotonic()
        longer = await self._gateway.call("/v3/lease/grant", {"TTL": max(1, math.ceil(ttl))})
        longer_id = str(longer["ID"])
        key = f"lease/{lease.move_id}"
        won, _ = await self._txn(
            [self._unchanged(key, revision)], [self._put(key, _lease_value(lease), longer_id)]
        )
        if not won:
            await self._revoke(longer_id)
            self._run_out(lease)
            return False
        self._leases[lease.token] = (longer_id, asked + int(longer["TTL"]))
        await self._revoke(lease_id)  # no key is attached to it any more
        return True

    async def release(self, lease: MoveLease) -> None:
        self._leases.pop(lease.token, None)
        mine = await self._mine(lease)
        if mine is not None:
            await self._revoke(mine[0])  # etcd deletes the key with it

    async def _holder(self, kv: KeyValue) -> MoveHolder | None:
        left = await self._time_to_live(kv)
        if left < 0:  # run out: etcd deletes the key once its leader revoked the lease
            return None
        return MoveHolder(json.loads(unb64(kv.get("value", "")))["worker"], float(left))

    async def holder(self, move_id: str) -> MoveHolder | None:
        kv = await self._get_kv(f"lease/{move_id}")
        return await self._holder(kv) if kv is not None else None

    async def holders(self) -> dict[str, MoveHolder]:
        prefix = self._prefix + "lease/"
        found: dict[str, MoveHolder] = {}
        for kv in await self._range("lease/"):
            held = await self._holder(kv)
            if held is not None:
                found[unb64(kv["key"])[len(prefix) :]] = held
        return found

    # ---- stop requests ------------------------------------------------------------------

    async def request_stop(self, move_id: str, action: StopRequest, now: datetime) -> None:
        key = f"stop/{move_id}"
        value = json.dumps({"action": action.value, "requested": now.isoformat()})
        for _ in range(10):  # another request between the read and the put: read again
            current, revision = await self._get(key)
            if current is not None and json.loads(current)["action"] == StopRequest.CANCEL:
                return  # a cancel is not turned into a suspend (nor asked twice)
            compare = self._absent(key) if revision == 0 else self._unchanged(key, revision)
            won, _ = await self._txn([compare], [self._put(key, value)])
            if won:
                return
        raise ClusterStoreError(f"etcd: move {move_id}: requesting a stop kept racing")

    async def stop_requested(self, move_id: str) -> StopRequest | None:
        value, _ = await self._get(f"stop/{move_id}")
        return StopRequest(json.loads(value)["action"]) if value is not None else None

    async def clear_stop(self, move_id: str) -> None:
        await self._gateway.call("/v3/kv/deleterange", {"key": self._key(f"stop/{move_id}")})

    # ---- guarantee answers ----------------------------------------------------------------

    async def keep_answer(self, move_id: str, row: AnswerRow) -> None:
        under = f"answer/{move_id}/"
        key = f"{under}{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        await self._gateway.call(
            "/v3/kv/put", {"key": self._key(key), "value": b64(row.model_dump_json())}
        )
        # Then the oldest beyond those kept (etcd's create order: the hosts' clocks differ).
        count = await self._gateway.call(
            "/v3/kv/range",
            {
                "key": b64(self._prefix + under),
                "range_end": prefix_end(self._prefix + under),
                "count_only": True,
            },
        )
        extra = int(count.get("count", 0)) - ANSWERS_KEPT
        if extra <= 0:
            return
        oldest = await self._range(
            under, keys_only=True, sort_order="ASCEND", sort_target="CREATE", limit=extra
        )
        deletes = [{"request_delete_range": {"key": kv["key"]}} for kv in oldest]
        for start in range(0, len(deletes), MAX_TXN_OPS):
            await self._txn([], deletes[start : start + MAX_TXN_OPS])

    async def answers(self, move_id: str) -> list[AnswerRow]:
        kvs = await self._range(f"answer/{move_id}/", sort_order="ASCEND", sort_target="CREATE")
        return [AnswerRow.model_validate_json(unb64(kv.get("value", ""))) for kv in kvs]

    # ---- batches ------------------------------------------------------------------------

    async def batch(self, name: str) -> BatchRecord | None:
        value, _ = await self._get(f"batch/{name}")
        return BatchRecord.from_json(value) if value is not None else None

    async def batches(self) -> list[BatchRecord]:
        found = [
            BatchRecord.from_json(unb64(kv.get("value", ""))) for kv in await self._range("batch/")
        ]
        return sorted(found, key=lambda b: (b.created, b.name))

    async def save_batch(self, batch: BatchRecord) -> None:
        key = f"batch/{batch.name}"
        # replaces a batch only: none is created here (that is `create`'s, compared absent)
        await self._txn([self._present(key)], [self._put(key, batch.to_json())])

    # ---- closing --------------------------------------------------------------------------

    async def aclose(self) -> None:
        await self._gateway.aclose()
