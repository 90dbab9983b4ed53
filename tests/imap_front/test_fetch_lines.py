"""A FETCH of listing items written from the rows (`imap_front.fetch_lines`) against pymap's
own path for the same messages: the same bytes, item for item, for any mix of UID, FLAGS,
INTERNALDATE and MODSEQ, keywords and session flags (\\Recent) included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st
from pymap.flags import PermanentFlags, SessionFlags
from pymap.parsing.primitives import List, Number
from pymap.parsing.response import ResponseOk
from pymap.parsing.response.specials import FetchResponse
from pymap.parsing.specials import FetchAttribute, FetchValue, ObjectId
from pymap.parsing.specials.flag import Deleted, Flagged, Seen
from pymap.selected import SelectedMailbox

from dag_common.store_api import Listed
from imap_front.condstore import ModseqAttributes, ModseqFetchAttribute
from imap_front.fetch_lines import ListedLines, answerable, listed_only, render
from imap_front.folders import Message
from imap_front.listing import Ordered
from imap_front.selected import CompactSelected

NAMES = ["\\Seen", "\\Flagged", "\\Deleted", "\\Answered", "work", "$Label1", "Zeta"]


def _attr(name: bytes) -> FetchAttribute:
    return ModseqFetchAttribute(name) if name == b"MODSEQ" else FetchAttribute(name)


def pymaps(rows: list[tuple[int, Listed]], attrs: list[FetchAttribute], selected) -> bytes:
    out = b""
    for seq, row in rows:
        msg = Message.listed(row, api=None)  # type: ignore[arg-type]
        out += bytes(FetchResponse(seq, ModseqAttributes(msg, selected, attrs)))
    return out


rows_st = st.lists(
    st.tuples(
        st.lists(st.sampled_from(NAMES), unique=True, max_size=4),
        st.integers(0, 2**40),
        st.one_of(st.none(), st.integers(0, 2**31)),
        st.integers(-12, 12),
    ),
    max_size=12,
)
items_st = st.lists(
    st.sampled_from([b"UID", b"FLAGS", b"INTERNALDATE", b"MODSEQ"]), min_size=1, max_size=5
)


@settings(max_examples=200, deadline=None)
@given(rows_st, items_st, st.sets(st.integers(1, 12)))
def test_the_lines_are_pymaps(spec, items, recent) -> None:
    selected = CompactSelected(
        ObjectId(b"F1"), False, PermanentFlags([Seen, Flagged, Deleted]), SessionFlags([])
    )
    for uid in recent:
        selected.session_flags.add_recent(uid)
    rows = []
    for i, (flags, modseq, when, tz) in enumerate(spec, 1):
        received = None if when is None else datetime.fromtimestamp(when, UTC)
        if received is not None:
            received = received.astimezone(timezone(timedelta(hours=tz)))
        rows.append((i, Listed(i, f"id{i}", tuple(flags), modseq, 100, received)))
    attrs = [_attr(name) for name in items]
    wanted = listed_only(attrs)
    assert wanted is not None
    ours = render(wanted, rows, selected.session_flags)
    assert ours == pymaps(rows, attrs, selected)
    assert bytes(ListedLines(wanted, rows, selected.session_flags)) == ours or not rows
    # `UID FETCH 1:*` of the rows shown: the same lines rendered from the rows' arrays
    whole = Ordered.of({row.uid: row for _, row in rows})
    assert render(wanted, whole, selected.session_flags) == ours
    assert bytes(ListedLines(wanted, whole, selected.session_flags)) == ours or not rows


def test_anything_else_goes_pymaps_way() -> None:
    assert listed_only([FetchAttribute(b"UID"), FetchAttribute(b"RFC822")]) is None
    assert listed_only([FetchAttribute(b"BODY")]) is None
    assert listed_only([FetchAttribute(b"ENVELOPE")]) is None
    assert listed_only([FetchAttribute(b"FLAGS"), FetchAttribute(b"UID")]) == (b"FLAGS", b"UID")
    assert listed_only([FetchAttribute(b"UID"), FetchAttribute(b"UID")]) == (b"UID",)


def test_a_flag_of_its_own_is_rendered_as_pymap_orders_it() -> None:
    row = Listed(3, "x", ("zeta", "\\Seen", "alpha"), 5, 1, None)
    selected = CompactSelected(ObjectId(b"F1"), False, PermanentFlags([]), SessionFlags([]))
    attrs = [FetchAttribute(b"FLAGS")]
    assert render((b"FLAGS",), [(1, row)], selected.session_flags) == pymaps(
        [(1, row)], attrs, selected
    )


@settings(max_examples=100, deadline=None)
@given(rows_st, items_st, st.sets(st.integers(1, 14)), st.booleans())
def test_an_unsolicited_fetch_is_merged_as_pymap_merges_it(spec, items, changed, uid) -> None:
    """The flag changes the command's update brings (another session's STORE) merged into
    the lines, as pymap's `FetchResponse.merge` merges them into its own answers."""
    selected = CompactSelected(ObjectId(b"F1"), False, PermanentFlags([]), SessionFlags([]))
    rows = [(i, Listed(i, f"id{i}", tuple(f), m, 1, None)) for i, (f, m, _, _) in
            enumerate(spec, 1)]  # fmt: skip
    attrs = [_attr(name) for name in items]
    news = []
    for seq in sorted(changed):
        data = [FetchValue.of(FetchAttribute(b"FLAGS"), List([Flagged], sort=True))]
        if uid:
            data.append(FetchValue.of(FetchAttribute(b"UID"), Number(seq)))
        news.append(FetchResponse(seq, data))
    other = SelectedMailbox(ObjectId(b"F1"), False, PermanentFlags([]), SessionFlags([]))
    theirs = ResponseOk(b"t", b"done")
    for seq, row in rows:
        msg = Message.listed(row, api=None)  # type: ignore[arg-type]
        theirs.add_untagged(FetchResponse(seq, ModseqAttributes(msg, other, attrs)))
    theirs.add_untagged(*news)
    for chosen in (rows, Ordered.of({row.uid: row for _, row in rows})):
        lines = ListedLines(listed_only(attrs), chosen, selected.session_flags)  # type: ignore[arg-type]
        ours = ResponseOk(b"t", b"done")
        ours.add_untagged(lines, *lines.absorb(list(news)))
        assert bytes(ours) == bytes(theirs)


def test_rfc822_size_is_the_served_length_the_listing_gives() -> None:
    """RFC822.SIZE from the listing's `message_size` (the bytes GET …/message serves) where
    every row chosen has one, as pymap renders the number; a row without one (a text item
    presented as mail) sends the FETCH down pymap's path, which reads the bytes."""
    selected = CompactSelected(ObjectId(b"F1"), False, PermanentFlags([]), SessionFlags([]))
    sized = [(i, Listed(i, f"id{i}", (), i, 100, None, 4091 + i)) for i in (1, 2)]
    attrs = [FetchAttribute(b"UID"), FetchAttribute(b"RFC822.SIZE"), FetchAttribute(b"FLAGS")]
    items = listed_only(attrs)
    assert items == (b"UID", b"RFC822.SIZE", b"FLAGS")
    theirs = b"".join(
        bytes(FetchResponse(seq, [FetchValue.of(attrs[0], Number(row.uid)),
                                  FetchValue.of(attrs[1], Number(row.message_size)),
                                  FetchValue.of(attrs[2], List([], sort=True))]))
        for seq, row in sized
    )  # fmt: skip
    whole = Ordered.of({row.uid: row for _, row in sized})
    for chosen in (sized, whole):
        assert answerable(items, chosen)
        assert render(items, chosen, selected.session_flags) == theirs
    selected.session_flags.add_recent(2)  # the per-line path too
    assert b"RFC822.SIZE 4093" in render(items, sized, selected.session_flags)
    text = [*sized, (3, Listed(3, "id3", (), 3, 100, None))]
    assert not answerable(items, text)
    assert not answerable(items, Ordered.of({row.uid: row for _, row in text}))
    assert answerable((b"UID",), text)
