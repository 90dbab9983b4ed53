"""Hypothesis strategies shared by the property tests of the store's operations, and
`numbered`, which turns a drawn history into the transactions a log carries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from replication_node.log.events import Transaction
from replication_node.log.operations import decode

T0 = datetime(2026, 11, 23, tzinfo=UTC)

MAILBOXES = ["alice", "bob"]
ITEM_IDS = [f"i{n}" for n in range(6)]
text = st.text(alphabet="ab\u00e9\U0001f600", max_size=6)


@st.composite
def operation(draw):
    """One operation as the log carries it (a JSON object without its change number)."""
    mailbox = draw(st.sampled_from(MAILBOXES))
    kinds = ["create_mailbox", "set_mailbox", "create_folder", "put", "put", "del", "drop"]
    kind = draw(st.sampled_from([*kinds, "backup"]))
    if kind == "backup":  # the active's stamp of a completed backup: no mailbox, no number
        return {
            "op": "record_backup",
            "kind": draw(st.sampled_from(["full", "incremental"])),
            "generation": draw(st.integers(1, 50)),
            "time": (T0 + timedelta(minutes=draw(st.integers(0, 60)))).isoformat(),
        }
    if kind == "drop":
        return {"op": "delete_mailbox", "mailbox": mailbox}
    if kind == "create_mailbox":
        return {"op": "create_mailbox", "mailbox": mailbox, "display_name": draw(text)}
    if kind == "set_mailbox":
        flag = draw(st.sampled_from(["locked", "soft_deleted"]))
        return {"op": "set_mailbox", "mailbox": mailbox, flag: draw(st.booleans())}
    if kind == "create_folder":
        return {"op": "create_folder", "mailbox": mailbox, "folder": draw(text)}
    item = {"mailbox": mailbox, "item_id": draw(st.sampled_from(ITEM_IDS))}
    if kind == "del":
        return {"op": "delete_item", **item}
    folder = draw(st.sampled_from(["Inbox", "Projects"]))
    put = {"op": "put_item", **item, "folder": folder, "subject": draw(text), "body": draw(text)}
    # a text item's record says no format; a message's does (dag_common.rfc822)
    fmt = draw(st.sampled_from([None, None, "message", "message-8bit"]))
    return put if fmt is None else {**put, "format": fmt}


# generations of transactions of operations
history = st.lists(st.lists(st.lists(operation(), min_size=1, max_size=4), max_size=3), max_size=6)


def numbered(generations: list[list[list[dict[str, Any]]]]) -> list[Transaction]:
    """Transactions with change numbers in log order, one generation per list, their
    operations typed as the log's reader decodes them."""
    out, cn = [], 0
    for g, txns in enumerate(generations, start=1):
        for offset, ops in enumerate(txns):
            numbered_ops = []
            for op in ops:
                if op["op"] == "record_backup":
                    numbered_ops.append(decode(op))
                    continue
                cn += 1
                numbered_ops.append(decode({**op, "cn": cn}))
            txn = Transaction(g, 512 + offset, T0 + timedelta(seconds=cn), tuple(numbered_ops))
            out.append(txn)
    return out
