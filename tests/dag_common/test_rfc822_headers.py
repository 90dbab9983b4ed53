"""The plain header fast path against the `email` package: for any header section it
answers, the same Subject (policy.default) and Message-ID (compat32) the parser reads."""

from __future__ import annotations

from email.parser import BytesHeaderParser
from email.policy import compat32, default

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dag_common.rfc822 import ABSENT, MAX_SUBJECT, header_block, plain_header, subject_of


def parsed_subject(raw: bytes) -> str:
    """subject_of as it was: the `email` package alone."""
    headers = BytesHeaderParser(policy=default).parsebytes(header_block(raw))
    try:
        subject = headers.get("Subject")
    except (ValueError, TypeError, IndexError):
        subject = None
    return "" if subject is None else " ".join(str(subject).split())[:MAX_SUBJECT]


def parsed(raw: bytes, name: str) -> str | None:
    value = BytesHeaderParser(policy=compat32).parsebytes(header_block(raw)).get(name)
    return None if value is None else "".join(str(value).split())


names = st.sampled_from([b"Subject", b"SUBJECT", b"subject", b"From", b"To", b"Message-ID",
                         b"X-Y", b"Subject ", b"", b"Sub ject", b"Received"])  # fmt: skip
printable = st.text(st.sampled_from([chr(c) for c in range(0x20, 0x7F)] + ["\t"] * 4),
                    max_size=40).map(str.encode)  # fmt: skip
anything = st.binary(max_size=40).map(lambda b: bytes(c % 128 for c in b))
texts = printable | printable | anything | st.sampled_from([
    b"hello world", b"  lead", b"=?utf-8?q?caf=C3=A9?=", b"a\tb", b"(comment) \"q\" \\x",
    b"<a@b>", b"x=?y", b"", b"caf\xc3\xa9",
])  # fmt: skip
leads = st.sampled_from([b""] * 4 + [b" ", b"\t"])  # a field, or a continuation
seps = st.sampled_from([b":", b": ", b""])
lines = st.tuples(leads, names, seps, texts).map(
    lambda t: (t[1] + t[2] + t[3]) if not t[0] else t[0] + t[3]
)
ends = st.sampled_from([b"\r\n"] * 12 + [b"\n", b"\r", b""])


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.tuples(lines, ends), max_size=8), st.sampled_from([b"\r\n", b"", b"\n"]))
def test_the_fast_path_reads_what_the_email_package_reads(fields, blank):
    raw = b"".join(line + end for line, end in fields) + blank + b"body\r\n"
    assert subject_of(raw) == parsed_subject(raw)
    found = plain_header(header_block(raw), b"message-id")
    if found is not None:
        want = parsed(raw, "Message-ID")
        assert (None if found is ABSENT else "".join(found.decode().split())) == want


@pytest.mark.parametrize("raw", [
    b"From: a@b\r\nSubject: Weekly status #00000001\r\nMessage-ID: <x@y>\r\n\r\nbody",
    b"Subject: folded\r\n  over\r\n\tlines\r\nTo: b\r\n\r\n",
    b"To: b\r\n\r\n",  # none
])  # fmt: skip
def test_the_headers_of_ordinary_mail_take_the_fast_path(raw):
    assert plain_header(header_block(raw), b"subject") is not None
    assert subject_of(raw) == parsed_subject(raw)


plain_names = st.sampled_from([b"Subject", b"SUBJECT", b"subject", b"From", b"Message-ID",
                               b"Message-Id", b"X-Y", b"Received"])  # fmt: skip
plain_field = st.tuples(plain_names, st.sampled_from([b":", b": ", b":\t"]), printable,
                        st.lists(st.tuples(st.sampled_from([b" ", b"\t"]), printable),
                                 max_size=2))  # fmt: skip


@settings(max_examples=1000, deadline=None)
@given(st.lists(plain_field, min_size=1, max_size=8))
def test_plain_sections_take_the_fast_path_and_read_the_same(fields):
    raw = b"".join(
        name + sep + text + b"\r\n" + b"".join(lead + more + b"\r\n" for lead, more in folds)
        for name, sep, text, folds in fields
    ) + b"\r\nbody\r\n"  # fmt: skip
    assert plain_header(header_block(raw), b"subject") is not None
    assert subject_of(raw) == parsed_subject(raw)
    found = plain_header(header_block(raw), b"message-id")
    assert (None if found is ABSENT else "".join(found.decode().split())) == parsed(
        raw, "Message-ID"
    )
