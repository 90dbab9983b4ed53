"""The mail listeners' pure rules, table by table: a line's faults, the mailboxes an address
may be, the trusted networks, and what a message becomes (its trace header, its id)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transport import mail_policy as policy
from transport.messages import Queued

HOP = policy.Hop(
    helo="mx.example", peer="10.0.0.7", by="hub1.test", protocol="LMTP",
    when=datetime(2026, 11, 29, 5, 0, tzinfo=UTC), recipient="bob@example.org",
)  # fmt: skip


LINES = [
    (b"hello\r\n", None),
    (b"x" * 998 + b"\r\n", None),
    (b"." + b"x" * 998 + b"\r\n", None),  # dot-stuffed: 998 octets once unstuffed
    (b"x" * 999 + b"\r\n", policy.LINE_TOO_LONG),
    (b"x" * 5000 + b"\r\n", policy.LINE_TOO_LONG),
    (b"one\ntwo\r\n", policy.BARE_LINE_END),
    (b"one\rtwo\r\n", policy.BARE_LINE_END),
    (b"one\r\r\n", policy.BARE_LINE_END),
    (b"\n\r\n", policy.BARE_LINE_END),
    (b"\r\n", None),
]


@pytest.mark.parametrize(("line", "fault"), LINES)
def test_a_line_of_data_and_what_is_wrong_with_it(line, fault):
    assert policy.lines_fault(line, stuffed=True) == fault


@pytest.mark.parametrize(("line", "fault"), LINES)
@pytest.mark.parametrize("where", ["first", "among others", "last"])
def test_content_fed_in_pieces_cut_anywhere_finds_the_same_fault(line, fault, where):
    """A DATA's content however its pieces are cut: the same fault, or the same lines with
    their dot-stuffing undone."""
    good = b"Subject: s\r\n\r\n..a stuffed line\r\n.x\r\n" + b"z" * 998 + b"\r\n"
    content = {"first": line + good, "among others": good + line + good,
               "last": good + line}[where]  # fmt: skip
    unstuffed = b"\r\n".join(x[1:] if x[:1] == b"." else x for x in content.split(b"\r\n"))
    for cuts in ([], *([n] for n in range(1, len(content))), list(range(1, len(content)))):
        c = policy.Content()
        kept, at = [], 0
        for cut in [*cuts, len(content)]:
            kept.append(c.feed(content[at:cut]))
            at = cut
        assert c.end() == fault, cuts
        if fault is None:
            assert b"".join(kept) == unstuffed, cuts


RUN = b"QUJD" * 19 + b"\r\n"  # an attachment's base64 line: 76 octets and CRLF


@pytest.mark.parametrize(("line", "fault"), LINES)
@pytest.mark.parametrize("where", ["first", "among others", "last", "in place of one"])
def test_a_fault_in_a_run_of_lines_of_one_length_is_found(line, fault, where):
    """A large message's lines are mostly of one length (its attachment's base64), which
    `lines_fault` checks by their columns: a fault among them, at their edges, or in a line
    of the same length is found as line by line."""
    run = RUN * 40
    block = {"first": line + run, "among others": run + line + run, "last": run + line,
             "in place of one": run + (line * 78)[:76] + b"\r\n" + run}[where]  # fmt: skip
    assert policy.lines_fault(block, stuffed=True) == policy._lines_fault(block, stuffed=True)
    if where != "in place of one":
        assert policy.lines_fault(block, stuffed=True) == fault


@pytest.mark.parametrize(("width", "fault"), [
    (998, None), (999, policy.LINE_TOO_LONG), (1000, policy.LINE_TOO_LONG),
])  # fmt: skip
@pytest.mark.parametrize("stuffed", [True, False])
def test_a_run_of_lines_at_the_bound(width, fault, stuffed):
    lines = b"x" * width + b"\r\n"
    assert policy.lines_fault(lines * 20, stuffed=stuffed) == fault
    dotted = b"." + b"x" * (width - 1) + b"\r\n"  # one octet less once unstuffed
    assert policy.lines_fault(dotted * 20, stuffed=stuffed) == (
        policy.LINE_TOO_LONG if width - stuffed > 998 else None
    )


_LINE = st.builds(
    lambda width, fill, end: fill * width + end,
    st.sampled_from([0, 1, 75, 76, 997, 998, 999]),
    st.sampled_from([b"A", b".", b"\r", b"\n", b" "]),
    st.sampled_from([b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r", b""]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_LINE, st.integers(1, 30)), max_size=5),
       st.integers(0, 10**6), st.sampled_from([b"", b"\r", b"\n", b"x", b"."]))  # fmt: skip
def test_lines_fault_by_columns_is_the_line_by_line_check(runs, at, extra):
    """Whatever the lines: runs of one line repeated, and one octet changed anywhere."""
    block = bytearray(b"".join(line * n for line, n in runs))
    if block:
        block[at % len(block) : at % len(block) + 1] = extra
    block = bytes(block)
    for stuffed in (True, False):
        assert policy.lines_fault(block, stuffed=stuffed) == policy._lines_fault(
            block, stuffed=stuffed
        )


@pytest.mark.parametrize(("raw", "fault"), [
    (b"Subject: s\r\n\r\nbody", None),  # over HTTP a last line may lack its CRLF
    (b"Subject: s\r\n\r\n." + b"x" * 998 + b"\r\n", policy.LINE_TOO_LONG),  # not stuffed
    (b"Subject: s\r\n\r\nbody\r", policy.BARE_LINE_END),
    (b"Subject: s\r\n\r\nbody\n", policy.BARE_LINE_END),
    (b"a\r\n" * 40_000 + b"x" * 999, policy.LINE_TOO_LONG),  # past the first piece
    (b"a\r\n" * 40_000, None),
])  # fmt: skip
def test_a_message_submitted_whole_and_what_is_wrong_with_it(raw, fault):
    assert policy.message_fault(raw) == fault


@pytest.mark.parametrize(("address", "names"), [
    ("bob@example.org", ["bob@example.org", "bob"]),
    ("bob", ["bob"]),
    ("a.b+tag@x", ["a.b+tag@x", "a.b+tag"]),
    ("'quoted'@x", []),  # no mailbox is named so
    ("@x", []),
])  # fmt: skip
def test_the_mailboxes_an_address_may_be(address, names):
    assert policy.mailboxes_of(address) == names


@pytest.mark.parametrize(("peer", "trusted"), [
    ("127.0.0.1", True), ("10.1.2.3", True), ("::ffff:10.1.2.3", True), ("::1", True),
    ("192.168.1.1", False), ("not an address", False), ("", False),
])  # fmt: skip
def test_trusted_networks(peer, trusted):
    assert policy.trusted(peer, ["127.0.0.0/8", "10.0.0.0/8", "::1/128"]) is trusted


def test_a_message_with_its_own_id_keeps_it_after_one_trace_header():
    raw = b"Subject: x\r\nMessage-ID:\r\n <a@b>\r\n\r\nbody\r\n"
    prepared = policy.prepare(raw, HOP, sender="s@x", recipients=["bob@example.org"])
    assert prepared.message_id == "<a@b>", "unfolded"
    assert prepared.raw == (
        b"Received: from mx.example ([10.0.0.7])\r\n\tby hub1.test with LMTP id <a@b>\r\n"
        b"\tfor <bob@example.org>; Sun, 29 Nov 2026 05:00:00 +0000\r\n" + raw
    )


def test_a_message_without_an_id_gets_one_made_of_its_bytes_and_envelope():
    raw = b"Subject: x\r\n\r\nbody\r\n"
    one = policy.prepare(raw, HOP, sender="s@x", recipients=["bob"])
    again = policy.prepare(raw, HOP, sender="s@x", recipients=["bob"])
    other = policy.prepare(raw, HOP, sender="s@x", recipients=["alice"])
    assert one == again and one.message_id != other.message_id
    assert one.raw.endswith(f"Message-ID: {one.message_id}\r\n".encode() + raw)
    broken = b"Message-ID: two words\r\n\r\nbody\r\n"  # one it has, unusable: not a second
    assert policy.prepare(broken, HOP, sender="", recipients=["bob"]).raw.count(b"Message-ID") == 1


@pytest.mark.parametrize(
    "raw",
    [
        b"Subject: x\r\nMessage-ID:\r\n <a@b>\r\n\r\nbody\r\nmore\r\n",
        b"Subject: x\r\n\r\nbody\r\nmore\r\n",  # no id: one made of its bytes
        b"Message-ID: two words\r\n\r\nbody\r\n",  # one it has, unusable
        b"Subject: all header\r\nX: y\r\n",  # no header section's end
    ],
)
def test_a_message_in_pieces_is_prepared_as_the_same_message_whole(raw):
    """A DATA's pieces, never joined, cut anywhere (the header section's end among them):
    the same id, trace, subject and bytes as the message whole."""
    whole = policy.prepare(raw, HOP, sender="s@x", recipients=["bob"])
    as_whole = Queued.of_message(whole.head, raw, message_id=whole.message_id,
                                 recipients=["bob"], folder="Inbox")  # fmt: skip
    for cuts in ([n] for n in range(1, len(raw))):
        pieces = tuple(raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True))
        prepared = policy.prepare(pieces, HOP, sender="s@x", recipients=["bob"])
        assert prepared.raw == whole.raw and prepared.message_id == whole.message_id, cuts
        queued = Queued.of_message(prepared.head, prepared.body, message_id=prepared.message_id,
                                   recipients=["bob"], folder="Inbox")  # fmt: skip
        assert b"".join(queued.chunks()) == whole.raw, cuts
        assert (queued.subject, queued.size, queued.format) == (
            as_whole.subject, as_whole.size, as_whole.format
        ), cuts  # fmt: skip


def test_sessions_per_client_are_bounded_and_given_back():
    count = policy.SessionCount(2)
    assert [count.admit("a"), count.admit("a"), count.admit("a"), count.admit("b")] == [
        True, True, False, True
    ]  # fmt: skip
    count.leave("a")
    assert count.admit("a") and count.total == 3
