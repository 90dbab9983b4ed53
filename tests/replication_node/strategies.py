"""Hypothesis strategies shared by the property tests of the store's operations, and
`numbered`, which turns a drawn history into the transactions a log carries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from dag_common.model import Position
from replication_node.log.events import Transaction
from replication_node.log.operations import decode, last_cn

T0 = datetime(2026, 11, 23, tzinfo=UTC)

MAILBOXES = ["alice", "bob"]
ITEM_IDS = [f"i{n}" for n in range(6)]
# folders with children ("Projects/a"), so that a rename or a deletion meets them
FOLDERS = ["Inbox", "Projects", "Projects/a", "Archive", "Archive/b", "\u00e9t\u00e9"]
FLAGS = ["\\Seen", "\\Flagged", "\\Deleted", "$Junk", "work"]
text = st.text(alphabet="ab\u00e9\U0001f600", max_size=6)
# Now and then a body a file keeps apart from its item's row (`storage/bodies.py`: 1 MiB of
# UTF-8 or more), so that every operation meets one: two of them, so that one replaces the
# other.
LARGE_BODIES = ["x" * (1 << 20), "\u00e9" * (1 << 19) + "y"]
uids = st.integers(1, 40)
modseqs = st.integers(1, 40)
flag_sets = st.lists(st.sampled_from(FLAGS), max_size=3, unique=True).map(sorted)
item_ids = st.lists(st.sampled_from(ITEM_IDS), max_size=4)


@st.composite
def operation(draw, kind: str | None = None):
    """One operation as the log carries it (a JSON object without its change number); of
    `kind` when given."""
    mailbox = draw(st.sampled_from(MAILBOXES))
    kinds = ["create_mailbox", "set_mailbox", "create_folder", "put", "put", "del", "drop"]
    imap = ["rename", "delete_folder", "flags", "move", "copy", "counters", "assign", "reserve"]
    kind = kind or draw(st.sampled_from([*kinds, *kinds, *imap, "backup"]))
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
        made = {"op": "create_mailbox", "mailbox": mailbox, "display_name": draw(text)}
        if draw(st.booleans()):  # a log from before UIDs has none
            made["uidvalidity"] = draw(st.integers(1, 100))
        if draw(st.booleans()):
            made["folders"] = draw(st.lists(st.sampled_from(FOLDERS), max_size=3, unique=True))
        return made
    if kind == "assign":
        return {"op": "assign_uids", "uidvalidity": draw(st.integers(1, 100))}
    if kind == "reserve":  # a lossy activation's; near and past the counters' ceilings too
        by = draw(st.one_of(st.integers(1, 100), st.sampled_from([2**32 - 5, 2**32, 2**62])))
        return {"op": "reserve_lost", "by": by}
    folder = draw(st.sampled_from(FOLDERS))
    to = draw(st.sampled_from(FOLDERS))
    if kind == "rename":
        return {"op": "rename_folder", "mailbox": mailbox, "folder": folder, "to": to}
    if kind == "delete_folder":
        return {"op": "delete_folder", "mailbox": mailbox, "folder": folder,
                "item_ids": draw(item_ids), "modseq": draw(modseqs)}  # fmt: skip
    if kind == "flags":
        flags = {"op": "set_flags", "mailbox": mailbox, "folder": folder,
                 "item_ids": draw(item_ids), "modseq": draw(modseqs)}  # fmt: skip
        if draw(st.booleans()):
            return {**flags, "replace": draw(flag_sets)}
        return {**flags, "add": draw(flag_sets), "remove": draw(flag_sets)}
    if kind == "move":
        moved = [[i, draw(uids)] for i in draw(item_ids)]
        return {"op": "move_items", "mailbox": mailbox, "folder": folder, "to": to,
                "items": moved, "modseq": draw(modseqs)}  # fmt: skip
    if kind == "copy":
        copied = [[i, draw(st.sampled_from(ITEM_IDS)), draw(uids)] for i in draw(item_ids)]
        return {"op": "copy_items", "mailbox": mailbox, "folder": folder, "to": to,
                "items": copied, "modseq": draw(modseqs)}  # fmt: skip
    if kind == "counters":
        counters = {"op": "set_folder_counters", "mailbox": mailbox, "folder": folder,
                    "uid_next": draw(uids), "highest_modseq": draw(modseqs),
                    "uidvalidity_next": draw(st.integers(0, 100))}  # fmt: skip
        # a move's from a source with a floor (none: a log from before, or a floor of 0, which
        # the log does not carry)
        if draw(st.booleans()) and counters["highest_modseq"] > 0:
            counters["modseq_floor"] = draw(st.integers(1, counters["highest_modseq"]))
        return counters
    if kind == "set_mailbox":
        flag = draw(st.sampled_from(["locked", "soft_deleted"]))
        return {"op": "set_mailbox", "mailbox": mailbox, flag: draw(st.booleans())}
    if kind == "create_folder":
        made = {"op": "create_folder", "mailbox": mailbox,
                "folder": draw(st.one_of(st.sampled_from(FOLDERS), text))}  # fmt: skip
        if draw(st.booleans()):
            made |= {"uidvalidity": draw(st.integers(1, 100)), "uid_next": draw(uids),
                     "highest_modseq": draw(modseqs)}  # fmt: skip
        return made
    item = {"mailbox": mailbox, "item_id": draw(st.sampled_from(ITEM_IDS))}
    if kind == "del":
        return {"op": "delete_item", **item, "modseq": draw(modseqs)}
    body = draw(text) if draw(st.integers(0, 11)) else draw(st.sampled_from(LARGE_BODIES))
    put = {"op": "put_item", **item, "folder": folder, "subject": draw(text), "body": body}
    # a text item's record says no format; a message's does (dag_common.rfc822)
    fmt = draw(st.sampled_from([None, None, "message", "message-8bit"]))
    if fmt is not None:
        put["format"] = fmt
    if draw(st.booleans()):  # a put of a log from before UIDs has none
        put |= {"uid": draw(uids), "modseq": draw(modseqs)}
        flags = draw(flag_sets)
        if flags:
            put["flags"] = flags
        if draw(st.booleans()):
            put["received"] = (T0 + timedelta(days=draw(st.integers(0, 9)))).isoformat()
    return put


# generations of transactions of operations; some transactions of puts alone, as nearly every
# one the active commits is (the database applies them apart: `tables.TableWriter.apply`)
transaction = st.one_of(
    st.lists(operation(), min_size=1, max_size=4),
    st.lists(operation(kind="put"), min_size=2, max_size=6),
)
history = st.lists(st.lists(transaction, max_size=3), max_size=6)


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
                typed = decode({**op, "cn": cn})
                numbered_ops.append(typed)
                cn = last_cn(typed)  # one number per item it names
            txn = Transaction(
                Position(g, 512 + offset), T0 + timedelta(seconds=cn), tuple(numbered_ops)
            )
            out.append(txn)
    return out
