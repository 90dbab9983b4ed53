"""A selected session's FETCHes over the front's shared rows and the change feed
(`folders.Folder.quiet`, `fetch_lines`), over real processes (the lab of test_imap_e2e.py):
another session's flags, appends and expunges are in the next FETCH's answers; a FETCH on a
folder whose parent was renamed by another session is answered NO, not from the rows kept."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.imap_front.test_imap_e2e import lab, logged_in  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow

MSG = b"From: a@example.org\r\nTo: alice@example.org\r\nSubject: s%d\r\n\r\nbody %d\r\n"


def _flags_by_uid(data: list) -> dict[int, bytes]:
    out = {}
    for line in data:
        text = line if isinstance(line, bytes) else line[0]
        m = re.search(rb"UID (\d+)", text)
        f = re.search(rb"FLAGS \(([^)]*)\)", text)
        if m and f:
            out[int(m.group(1))] = f.group(1)
    return out


def _run(lab_, ca) -> None:
    _, _, front, _ = lab_
    a = logged_in(front.port, ca)
    b = logged_in(front.port, ca)
    assert a.create("Work")[0] == "OK" and a.create("Work/Sub")[0] == "OK"
    for i in range(1, 4):
        assert a.append("INBOX", None, None, MSG % (i, i))[0] == "OK"
        assert a.append("Work/Sub", None, None, MSG % (i, i))[0] == "OK"
    assert a.select("INBOX") == ("OK", [b"3"])
    for _ in range(2):  # the second: nothing changed, one feed poll
        typ, data = a.uid("FETCH", "1:*", "(FLAGS)")
        assert typ == "OK" and _flags_by_uid(data) == {1: b"", 2: b"", 3: b""}, data

    assert b.select("INBOX")[0] == "OK"
    assert b.uid("STORE", "2", "+FLAGS", r"(\Flagged)")[0] == "OK"
    assert b.uid("STORE", "1", "+FLAGS", r"(\Deleted)")[0] == "OK"
    assert b.expunge()[0] == "OK"
    assert b.append("INBOX", None, None, MSG % (4, 4))[0] == "OK"

    typ, data = a.uid("FETCH", "1:*", "(FLAGS)")
    assert typ == "OK", data
    seen = _flags_by_uid(data)
    assert seen.get(2) == b"\\Flagged" and 1 not in seen, data
    assert a.response("EXPUNGE")[1] == [b"1"]
    a.noop()
    typ, data = a.uid("FETCH", "1:*", "(UID FLAGS)")
    assert typ == "OK" and _flags_by_uid(data) == {2: b"\\Flagged", 3: b"", 4: b""}, data
    typ, data = a.fetch("1:*", "(FLAGS)")
    assert typ == "OK" and len(data) == 3 and b"1 (FLAGS (\\Flagged))" in data, data
    # A SELECT in a session of its own, over the front's rows, after another change.
    assert b.uid("STORE", "3", "+FLAGS", r"(\Seen)")[0] == "OK"
    c = logged_in(front.port, ca)
    assert c.select("INBOX") == ("OK", [b"3"])
    typ, data = c.uid("FETCH", "1:*", "(FLAGS)")
    assert _flags_by_uid(data) == {2: b"\\Flagged", 3: b"\\Seen", 4: b""}, data
    c.response("UNSEEN")
    assert c.select("INBOX") == ("OK", [b"3"])  # again, nothing changed: no listing
    assert c.response("UNSEEN")[1] == [b"1"]
    c.logout()

    # CONDSTORE enabled: another session's flag change told at NOOP carries MODSEQ
    # (RFC 7162 3.1.4); a session that enabled nothing is told without it.
    assert a._simple_command("SELECT", "INBOX", "(CONDSTORE)")[0] == "OK"
    a.response("FETCH")
    c = logged_in(front.port, ca)
    assert c.select("INBOX")[0] == "OK"
    assert b.uid("STORE", "4", "+FLAGS", r"(\Answered)")[0] == "OK"
    a.noop()
    told = a.response("FETCH")[1]
    assert len(told) == 1 and re.fullmatch(
        rb"3 \(FLAGS \(\\Answered\) MODSEQ \(\d+\)\)", told[0]
    ), told
    c.noop()
    assert c.response("FETCH")[1] == [b"3 (FLAGS (\\Answered))"]
    c.logout()

    # The selected folder's parent renamed by another session: NO, not the rows kept.
    assert a.select("Work/Sub") == ("OK", [b"3"])
    assert len(a.uid("FETCH", "1:*", "(FLAGS)")[1]) == 3
    assert b.rename("Work", "Old")[0] == "OK"
    typ, data = a.uid("FETCH", "1:*", "(FLAGS)")
    assert typ == "NO", (typ, data)
    assert a.select("Old/Sub") == ("OK", [b"3"])
    assert len(a.uid("FETCH", "1:*", "(FLAGS)")[1]) == 3
    validity = a.response("UIDVALIDITY")[1]

    # A SELECT from the front's rows, no lookup of the folder (`Folder.select_kept`), sees
    # the folder as it is now: a message appended, the folder deleted and made again by
    # another session (another UIDVALIDITY, empty), its parent renamed away.
    assert a.select("INBOX")[0] == "OK"
    assert b.append("Old/Sub", None, None, MSG % (5, 5))[0] == "OK"
    assert a.select("Old/Sub") == ("OK", [b"4"])
    assert a.select("INBOX")[0] == "OK"
    assert b.delete("Old/Sub")[0] == "OK" and b.create("Old/Sub")[0] == "OK"
    assert a.select("Old/Sub") == ("OK", [b"0"])
    assert a.response("UIDVALIDITY")[1] != validity
    assert a.select("INBOX")[0] == "OK"
    assert b.rename("Old", "Older")[0] == "OK"
    assert a.select("Old/Sub")[0] == "NO"
    assert a.select("Older/Sub") == ("OK", [b"0"])

    # RFC822.SIZE is the length of the bytes served: from the listing for messages kept as
    # UTF-8 (non-ASCII included), read from the bytes for a Latin-1 one with 8-bit bytes.
    utf8 = "Subject: café\r\n\r\nnaïve\r\n".encode()
    latin1 = "Subject: caf\xe9\r\n\r\nna\xefve\r\n".encode("latin-1")
    for raw in (MSG % (6, 6), utf8, latin1):
        assert b.append("Older/Sub", None, None, raw)[0] == "OK"
    c = logged_in(front.port, ca)
    assert c.select("Older/Sub") == ("OK", [b"3"])
    for wanted, sizes in (("1:2", [len(MSG % (6, 6)), len(utf8)]),
                          ("1:*", [len(MSG % (6, 6)), len(utf8), len(latin1)])):  # fmt: skip
        typ, data = c.uid("FETCH", wanted, "(UID RFC822.SIZE)")
        assert typ == "OK", data
        got = [int(re.search(rb"RFC822.SIZE (\d+)", d).group(1)) for d in data]
        assert got == sizes, (wanted, data)
    c.logout()
    for m in (a, b):
        m.logout()


async def test_fetches_follow_other_sessions_and_a_parent_renamed(lab):  # noqa: F811
    await asyncio.to_thread(_run, lab, lab[3])
