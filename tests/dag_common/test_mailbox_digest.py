"""The mailbox digest: equal exactly when the live items (ids, folders, contents) are equal."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dag_common import mailbox_digest as mailbox_digest_module
from dag_common.mailbox_digest import (
    body_hash,
    folder_term,
    item_term,
    item_term_of_hash,
    mailbox_digest,
    mailbox_term,
    text_terms,
    to_hex,
)


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
    assert not mailbox_digest("m", [item("x", subject="ab", body="c")]).matches(
        mailbox_digest("m", [item("x", subject="a", body="bc")])
    )


def test_count_and_last_change_number_include_what_they_should():
    d = mailbox_digest("m", [*BASE, item("c", cn=11, deleted=True)])
    assert (d.item_count, d.last_change_number) == (2, 11)
    empty = mailbox_digest("m", [])
    assert (empty.item_count, empty.last_change_number) == (0, 0)
    assert empty.digest == mailbox_digest("m", [item("z", deleted=True)]).digest


def test_the_terms_are_pinned():
    """The digest's definition never moves (copies, backups and moves compare digests made
    by different versions): these values were computed before the terms were hashed in one
    call (issue 33)."""
    assert to_hex(item_term("alice", "i1", "Inbox", "s\u00e9", "body \U0001f600")) == (
        "a59123f5099ce528f862edc56e7de90d706f80207fb198d3cc327a04cd513c88"
    )
    assert to_hex(mailbox_term("alice", "Alice", 1, 0)) == (
        "52b40627a5b6d644f43f33a859d087cafb8bf750cf46d437a77b200d72c6b0cc"
    )
    assert to_hex(folder_term("alice", "Inbox")) == (
        "9da234cd7563c4edc2ce7f7d76b87fba306bb35802670e5d53e566acad4822d9"
    )


@settings(max_examples=200, deadline=None)
@given(fields=st.lists(st.text(alphabet="ab\u00e9\U0001f600\ud800", max_size=40), max_size=6))
def test_a_term_hashed_in_one_call_is_the_term_hashed_a_slice_at_a_time(fields):
    """The one-call hash and the slice-by-slice one read the same bytes (lone surrogates
    too); with a slice of 7 code points, the slice path splits the fields drawn, and a
    field longer than a slice makes `_term` take it."""
    one_call = mailbox_digest_module._term(*fields)
    five = (fields + [""] * 5)[:5]
    assert item_term_of_hash(*five) == mailbox_digest_module._term("item", *five)
    body = "".join(fields)
    whole = body_hash(body)
    with patch.object(mailbox_digest_module, "_SLICE", 7):
        assert mailbox_digest_module._term_by_slices(tuple(fields)) == one_call
        assert body_hash(body) == whole
        longer = [*fields, "x" * 8]
        assert mailbox_digest_module._term(*longer) == (
            mailbox_digest_module._term_by_slices(tuple(longer))
        )
    assert mailbox_digest_module._term(*longer) == mailbox_digest_module._term_by_slices(
        tuple(longer)
    )


@settings(max_examples=200, deadline=None)
@given(
    fields=st.lists(
        st.text(alphabet="ab\u00e9\U0001f600\ud800", max_size=12), min_size=5, max_size=5
    )
)
def test_a_folders_text_terms_are_its_items_terms(fields):
    """`text_terms` (the mailbox's and folder's fields encoded once for a run of puts) hashes
    the bytes `item_term_of_hash` does, lone surrogates too; a field longer than a slice (7
    code points here) takes `item_term_of_hash` itself."""
    mailbox, item_id, folder, subject, hashed = fields
    expected = item_term_of_hash(mailbox, item_id, folder, subject, hashed)
    assert text_terms(mailbox, folder)(item_id, subject, hashed) == expected
    with patch.object(mailbox_digest_module, "_SLICE", 7):
        assert text_terms(mailbox, folder)(item_id, subject, hashed) == expected
