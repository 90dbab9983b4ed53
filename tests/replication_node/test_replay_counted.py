"""A staged body replayed is counted from the bytes read back (`counted_text`) and carried as
them alone, no text made (`BodyReader(as_bytes=True)`; one of 1 MiB or more as its parts, read
again from the log as its row is written: `storage/body_parts.py`), and written to its row
from them: the row holds the same text, its size and hash are the body's, and the copy's
digest is the active's."""

from __future__ import annotations

import hashlib
import sqlite3
import uuid

from dag_common.counted_text import CountedText
from dag_common.rfc822 import BodyFormat
from dag_common.store_api import ItemIn
from replication_node.active.mailbox_store import MailboxStore
from replication_node.log.logfile import closed_log_name, verify_closed
from replication_node.log.operations import PutItem
from replication_node.log.spanning import BodyParts
from replication_node.passive.replayer import read_batch
from replication_node.storage.bodies import BODY_TEXT, ITEMS
from replication_node.storage.database import Database
from tests.replication_node.helpers import mount

LOG = 64 * 1024


async def test_a_staged_body_replayed_is_counted_from_its_bytes_and_stored_as_the_same_text(
    tmp_path,
):
    copy = await mount(tmp_path, log_file_size=LOG, llr_depth=1)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    bodies = {
        "latin": "Caf\xe9 cr\xe8me, s'il vous pla\xeet.\r\n" * 4000,  # not ASCII, staged
        "ascii": "plain text, seven bits.\r\n" * 5000,  # ASCII, staged
        "small": "petit caf\xe9",  # in the commit record
        # 1 MiB or more: given as its parts, written into its row from the log
        "large": "grand caf\xe9 \U0001f600 au lait\r\n" * 50_000,
    }
    for item_id, body in bodies.items():
        await store.put_items("m", [ItemIn(item_id=item_id, body=body, format=BodyFormat.TEXT)])
    await copy.roll()
    await copy._flush_llr()
    active_digest, waypoint = copy.db.content_digest, copy.db.header.waypoint
    logs = copy.paths.logs
    gens = list(range(1, waypoint + 1))
    first = verify_closed((logs / closed_log_name(1)).read_bytes(), 1).header
    await copy.dismount()

    batch = read_batch(logs, gens, prev=None, log_signature=first.log_signature)
    replayed = {
        op.item_id: op.body for txn in batch.transactions for op in txn.ops if type(op) is PutItem
    }
    for item_id in ("latin", "ascii", "large"):
        body = replayed[item_id]
        assert type(body) is CountedText and body == "", "no text made of it"
        assert body.utf8_size == len(bodies[item_id].encode())
        assert body.sha256 == hashlib.sha256(bodies[item_id].encode()).hexdigest()
    rows = {row[1]: row for puts in batch.puts for row in puts.rows}
    assert rows["latin"][4] == bodies["latin"].encode(), "its bytes, for SQLite to cast"
    assert rows["ascii"][4] == bodies["ascii"].encode(), "an ASCII one's bytes too"
    large = rows["large"][4]  # not read whole: its parts, read again as its row is written
    assert type(large) is BodyParts and large.size == len(bodies["large"].encode())
    assert b"".join(large.parts()) == bodies["large"].encode()

    path = tmp_path / f"replay-{uuid.uuid4().hex}.sqlite"
    db = Database.create(
        path, database_signature=first.database_signature, log_signature=first.log_signature
    )
    db.apply(batch.transactions, waypoint=gens[-1], committed=gens[-1],
             last_log_time=batch.close_time, puts=batch.puts)  # fmt: skip
    assert db.content_digest == active_digest
    assert db.recompute_digest()[1] == active_digest, "the rows add up to the same digest"
    db.close()
    with sqlite3.connect(path) as conn:
        stored = dict(
            (item_id, (kind, body, size))
            for item_id, kind, body, size in conn.execute(
                f"SELECT item_id, typeof({BODY_TEXT}), {BODY_TEXT}, size FROM {ITEMS}"
                " WHERE deleted = 0"
            )
        )
        # the large one's bytes kept apart, in `bodies` (`body_parts.py`)
        where = dict(conn.execute("SELECT of_item_id, 'blob' FROM bodies"))
    for item_id, body in bodies.items():
        assert stored[item_id] == ("text", body, len(body.encode())), item_id
    assert where == {"large": "blob"}
