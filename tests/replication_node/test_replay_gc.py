"""A replay batch leaves Python's garbage collector nothing to walk per put.

A batch holds tens of thousands of puts from its read until its COMMIT: every one the
collector tracks is walked by each collection it lives through, and enough of them set off
full collections of the whole process (issue 51: a put tracked since it held its format, an
enum member, and a (row, term) pair per put, cost the replay 2-3 full collections a round;
bench/README.md).  What the read makes per put, the operation decoded from the log and its
row, must not stay tracked once a collection has seen it.
"""

from __future__ import annotations

import gc
from datetime import UTC, datetime

import orjson

from dag_common.model import Position
from dag_common.rfc822 import BodyFormat
from replication_node.log.events import Transaction
from replication_node.log.operations import PutItem, decode_payload, encode_record_ops
from replication_node.storage.tables import put_rows

T0 = datetime(2026, 11, 29, tzinfo=UTC)
PUTS = 2000


def record(n: int) -> bytes:
    """A TRANSACTION record's JSON of `n` puts, each with its UID, modseq and flags, some
    of them messages."""
    puts = [
        PutItem(
            "m", i + 1, f"item-{i:05d}", "Inbox", "subject", "body " * 50,
            BodyFormat.MESSAGE if i % 3 == 0 else BodyFormat.TEXT,
            uid=i + 1, modseq=i + 1, flags=("\\Seen",) if i % 2 else (),
        )
        for i in range(n)
    ]  # fmt: skip
    return orjson.dumps({"ops": encode_record_ops(puts)})


def test_a_decoded_put_is_not_tracked():
    (op,) = decode_payload(record(1))
    assert type(op) is PutItem and op.format is BodyFormat.MESSAGE
    assert not gc.is_tracked(op)


def test_a_batch_of_puts_and_their_rows_leaves_nothing_tracked_per_put():
    payload = record(PUTS)
    gc.collect()
    before = len(gc.get_objects())
    txn = Transaction(Position(1, 512), T0, decode_payload(payload))
    rows, terms, _ = put_rows(txn)
    assert len(rows) == len(terms) == PUTS
    gc.collect()  # one collection: what it can stop tracking, it has
    assert len(gc.get_objects()) - before < PUTS // 20
