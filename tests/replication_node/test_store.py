"""The mailbox store's checks: a bad request is refused and changes nothing."""

from __future__ import annotations

import pytest

from replication_node.errors import BadRequest
from replication_node.storage.mailbox_store import MailboxStore
from tests.replication_node.helpers import mount

LONE = "\ud800"  # a lone surrogate: valid in JSON text, not in UTF-8


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.put_items("m", [{"subject": LONE}]), "subject"),
        (lambda s: s.put_items("m", [{"body": "ok " + LONE}]), "body"),
        (lambda s: s.create_mailbox("n", display_name=LONE), "display_name"),
        (lambda s: s.create_mailbox("n", folders=["Inbox", LONE]), "folder"),
        (lambda s: s.create_folder("m", "x" + LONE), "folder"),
    ],
    ids=["subject", "body", "display name", "folder of a new mailbox", "new folder"],
)
async def test_text_that_is_not_utf8_is_refused_and_changes_nothing(tmp_path, call, field):
    copy = await mount(tmp_path)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    before = (copy.stream.generation, copy.stream.open_record_count, copy.items("m"))
    with pytest.raises(BadRequest, match=f"{field} is not valid UTF-8"):
        await call(store)
    assert (copy.stream.generation, copy.stream.open_record_count, copy.items("m")) == before
    assert copy.mailbox("n") is None
    await copy.crash_close()
