"""The large bodies of a write of items taken out of its JSON in place (`json_bodies.py`):
the same bytes as `json.loads` then UTF-8 gives, whatever the escapes and wherever a slice
ends (a slice of a few KiB here, so that every kind of escape and character meets a cut)."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from dag_common import json_bodies
from dag_common.json_bodies import BadBody, take_out

# Every kind of escape JSON has (two-byte, \uXXXX, a surrogate pair), and characters of one
# to four bytes in UTF-8 written as themselves.
ALPHABET = 'abc\n\r"\\/\té€😀\x01\u2028'


@pytest.fixture(autouse=True)
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_bodies, "SLICE", 4096)
    monkeypatch.setattr(json_bodies, "LARGE", 1000)


@pytest.mark.parametrize("seed", range(60))
def test_bodies_taken_out_are_the_bytes_json_gives(seed: int) -> None:
    rng = random.Random(seed)
    chars = "".join(rng.choices(ALPHABET, k=rng.choice([1000, 5000, 3 * 4096 + 7])))
    other = chars[::-1] + "x" * rng.randint(0, 30)
    doc = {
        "items": [
            {"item_id": "a", "subject": "body", "body": "small"},
            {"item_id": "b", "body": chars, "flags": ["\\Seen"]},
            {"body": other},
        ]
    }
    separators = rng.choice([(",", ":"), (", ", ": ")])
    raw = bytearray(
        json.dumps(doc, ensure_ascii=rng.random() < 0.5, separators=separators).encode()
    )
    taken = take_out(raw)
    assert taken is not None
    parsed = json.loads(taken.json)
    assert [i["body"] for i in parsed["items"]] == ["small", *taken.placeholders]
    assert parsed["items"][1]["flags"] == ["\\Seen"]
    for body, text in zip(taken.bodies, [chars, other], strict=True):
        assert bytes(body.utf8) == text.encode()
        assert body.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert taken.bodies[1].utf8 is raw  # the last body is the request's own buffer


def test_a_request_without_a_large_body_is_left_alone() -> None:
    raw = bytearray(json.dumps({"subject": "x" * 5000, "body": "small"}).encode())
    assert take_out(raw) is None


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        ("\\ud800", "not valid UTF-8 text"),
        ("\\ude00", "not valid UTF-8 text"),
        ("\x01", "Invalid control character at byte 2000"),
        ("\\q", "Invalid \\escape at byte 2000"),
        ("\\u12", "Invalid \\uXXXX escape"),
    ],
)
def test_a_large_body_that_is_not_a_json_string_of_text_is_refused(tail: str, why: str) -> None:
    raw = bytearray(('{"body": "' + "a" * 2000 + tail + '"}').encode())
    with pytest.raises(BadBody, match=why.replace("\\", "\\\\")):
        take_out(raw)


def test_a_large_body_not_utf8_is_refused() -> None:
    raw = bytearray(b'{"body": "' + b"a" * 2000 + b'\xff"}')
    with pytest.raises(BadBody, match="not UTF-8"):
        take_out(raw)
