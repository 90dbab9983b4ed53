"""The mailbox digest: equal exactly when the live items (ids, folders, contents) are equal."""

from __future__ import annotations

import pytest

from dag_common.mailbox_digest import content_hash, mailbox_digest


def item(item_id, folder="Inbox", subject="s", body="b", cn=1, deleted=False):
    return {
        "item_id": item_id,
        "folder": folder,
        "subject": subject,
        "body": body,
        "change_number": cn,
        "deleted": deleted,
    }


BASE = [item("a", cn=3), item("b", folder="Projects", cn=5)]


@pytest.mark.parametrize(
    ("other", "equal"),
    [
        ([item("b", folder="Projects", cn=9), item("a", cn=1)], True),  # order, numbers
        ([*BASE, item("c", cn=7, deleted=True)], True),  # a tombstone is not an item
        ([item("a"), item("b", folder="Inbox")], False),  # another folder
        ([item("a", body="B"), BASE[1]], False),  # another body
        ([item("a", subject="x"), BASE[1]], False),  # another subject
        ([BASE[0]], False),  # one missing
        ([*BASE, item("c")], False),  # one extra
        ([item("a"), item("c", folder="Projects")], False),  # another id
    ],
)
def test_digest_equal_exactly_when_the_live_items_are(other, equal):
    assert mailbox_digest("m", BASE).matches(mailbox_digest("m", other)) is equal


def test_fields_are_length_prefixed():
    # "ab" + "c" and "a" + "bc" are different contents, and so are the items they make
    assert content_hash("ab", "c") != content_hash("a", "bc")
    assert not mailbox_digest("m", [item("x", subject="ab", body="c")]).matches(
        mailbox_digest("m", [item("x", subject="a", body="bc")])
    )


def test_count_and_last_change_number_include_what_they_should():
    d = mailbox_digest("m", [*BASE, item("c", cn=11, deleted=True)])
    assert (d.item_count, d.last_change_number) == (2, 11)
    empty = mailbox_digest("m", [])
    assert (empty.item_count, empty.last_change_number) == (0, 0)
    assert empty.digest == mailbox_digest("m", [item("z", deleted=True)]).digest
