"""The mailbox answers (`dag_common.mailbox_answers`) keep the wire format the routes wrote
as dict literals before they were models: the same bytes out (nulls included, in the same
order), and what an older node wrote reads back."""

from __future__ import annotations

import json

import pytest

from dag_common.mailbox_answers import (
    MailboxPlace,
    MovingTo,
    SoftDeletedMailbox,
    SoftDeletedMailboxes,
)

# GET /v1/mailboxes/{mailbox} as `where_mailbox` wrote it (aiohttp's json_response: json.dumps).
OLD_PLACES = [
    '{"mailbox": "alice", "database": "DB2", "active_node": "mbx3", "active_url": '
    '"https://mbx3:8443", "epoch": 4, "moving": null}',
    '{"mailbox": "alice", "database": "DB2", "active_node": null, "active_url": null, '
    '"epoch": null, "moving": {"move_id": "3fa2b1c4d5e6", "target_database": null}}',
    '{"mailbox": "bob", "database": "DB1", "active_node": "mbx1", "active_url": null, '
    '"epoch": 1, "moving": {"move_id": "m1", "target_database": "DB2"}}',
]


@pytest.mark.parametrize("old", OLD_PLACES)
def test_a_mailbox_place_writes_and_reads_the_bytes_of_before(old):
    place = MailboxPlace.model_validate_json(old)
    assert json.dumps(place.wire()) == old


def test_a_mailbox_place_built_by_the_route_is_the_dict_it_wrote():
    place = MailboxPlace(
        mailbox="bob", database="DB1", active_node="mbx1", active_url=None, epoch=1,
        moving=MovingTo(move_id="m1", target_database="DB2"),
    )  # fmt: skip
    assert json.dumps(place.wire()) == OLD_PLACES[2]


# GET …/soft-deleted-mailboxes as `list_soft_deleted` wrote it.
OLD_SOFT_DELETED = [
    '{"database": "DB1", "mailboxes": [], "epoch": 0}',
    '{"database": "DB1", "mailboxes": [{"mailbox": "alice", "display_name": "Alice", '
    '"change_number": 12, "directory_database": "DB2"}, {"mailbox": "bob", "display_name": '
    '"", "change_number": 3, "directory_database": null}], "epoch": 5}',
]


@pytest.mark.parametrize("old", OLD_SOFT_DELETED)
def test_a_soft_deleted_listing_writes_and_reads_the_bytes_of_before(old):
    listing = SoftDeletedMailboxes.model_validate_json(old)
    assert json.dumps(listing.wire()) == old


def test_a_soft_deleted_listing_built_by_the_route_is_the_dict_it_wrote():
    listing = SoftDeletedMailboxes(
        database="DB1",
        mailboxes=(
            SoftDeletedMailbox(
                mailbox="alice", display_name="Alice", change_number=12, directory_database="DB2"
            ),
            SoftDeletedMailbox(
                mailbox="bob", display_name="", change_number=3, directory_database=None
            ),
        ),
        epoch=5,
    )
    assert json.dumps(listing.wire()) == OLD_SOFT_DELETED[1]


def test_a_reader_ignores_a_field_it_does_not_know():
    newer = json.loads(OLD_PLACES[0]) | {"lease_expires_in": 3}
    assert MailboxPlace.model_validate(newer).active_node == "mbx3"
