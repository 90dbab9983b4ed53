"""The JSON of etcd's v3 gateway as the stores read and write it: a key's kv, a range's and
a transaction's answers, a transaction's operations.  TypedDicts over what the gateway sends
(proto3 JSON: 64-bit numbers as strings, a zero or an empty field left out), so each field
read is named and typed, and a missing one is visible at the `.get`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict, cast


class KeyValue(TypedDict, total=False):
    """One key as a range answers it (its key and value base64)."""

    key: str
    value: str
    lease: str
    create_revision: str
    mod_revision: str
    version: str


class RangeResponse(TypedDict, total=False):
    """POST /v3/kv/range's answer (and a transaction's `response_range`)."""

    kvs: list[KeyValue]
    count: str
    more: bool


class TxnResponse(TypedDict, total=False):
    """One operation's answer in a transaction's `responses`."""

    response_range: RangeResponse


class TxnAnswer(TypedDict, total=False):
    """POST /v3/kv/txn's answer."""

    succeeded: bool
    responses: list[TxnResponse]


# A transaction's comparison ({"key", "target", "result", and the value compared}) and
# operation ({"request_put": {...}}, {"request_range": {...}}, {"request_delete_range": ...},
# or a nested {"request_txn": {"compare": [...], "success": [...]}}).
Compare = dict[str, str]
TxnOp = Mapping[str, Mapping[str, object]]


def as_range(data: dict[str, object]) -> RangeResponse:
    """A range's answer, as the gateway's JSON object came."""
    return cast(RangeResponse, data)


def as_txn(data: dict[str, object]) -> TxnAnswer:
    """A transaction's answer, as the gateway's JSON object came."""
    return cast(TxnAnswer, data)
