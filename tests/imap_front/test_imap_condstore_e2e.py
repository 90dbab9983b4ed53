"""CONDSTORE (RFC 7162, issue 50 step 10) over real processes (two TLS nodes and `python -m
imap_front serve`, the limits test's lab), with imaplib sending the raw commands: ENABLE,
SELECT (CONDSTORE) and HIGHESTMODSEQ, FETCH MODSEQ and CHANGEDSINCE, STORE UNCHANGEDSINCE
answered [MODIFIED] after another session's STORE (its flags kept), SEARCH MODSEQ, STATUS
HIGHESTMODSEQ; a session that enables nothing sees no MODSEQ; bad modseqs answered BAD with
nothing written."""

from __future__ import annotations

import asyncio
import imaplib
import re

import pytest

from tests.imap_front.test_imap_e2e import BOX, logged_in
from tests.imap_front.test_imap_limits_e2e import lab  # noqa: F401 (the fixture)

pytestmark = pytest.mark.slow


def cmd(m: imaplib.IMAP4, *args: str) -> tuple[str, list[bytes]]:
    """A raw command: its result and every untagged line it drew."""
    m.untagged_responses.clear()
    try:
        typ, _ = m._simple_command(*args)
    except imaplib.IMAP4.abort:
        raise
    except imaplib.IMAP4.error as exc:
        return f"BAD {exc}", []
    lines = [bytes(v) if not isinstance(v, tuple) else v[0]
             for vals in m.untagged_responses.values() for v in vals if v]  # fmt: skip
    code = [k for k in m.untagged_responses if k.isupper()]
    return typ + " " + " ".join(code), lines


def modseqs(lines: list[bytes]) -> dict[int, int]:
    """UID -> MODSEQ of the FETCH lines."""
    out = {}
    for line in lines:
        uid, mod = re.search(rb"UID (\d+)", line), re.search(rb"MODSEQ \((\d+)\)", line)
        if uid and mod:
            out[int(uid.group(1))] = int(mod.group(1))
    return out


async def test_condstore_commands_a_conflict_and_bad_modseqs(lab):  # noqa: F811
    cluster, front, ca = lab

    def plain() -> dict:
        m = logged_in(front.port, ca)
        for i in range(3):
            m.append("INBOX", None, None, b"Subject: m%d\r\n\r\nbody\r\n" % i)
        out = {"select": m.select("INBOX"), "untagged": dict(m.untagged_responses)}
        out["fetch"] = m.uid("FETCH", "1:*", "(FLAGS)")
        out["store"] = m.uid("STORE", "1", "+FLAGS", "(\\Seen)")
        m.logout()
        return out

    out = await asyncio.to_thread(plain)
    assert "HIGHESTMODSEQ" not in str(out), out  # nothing enabled: no MODSEQ anywhere
    assert "MODSEQ" not in str(out["fetch"]) and "MODSEQ" not in str(out["store"])

    def condstore() -> dict:
        out: dict = {}
        m, other = logged_in(front.port, ca), logged_in(front.port, ca)
        out["enable"] = cmd(m, "ENABLE", "CONDSTORE")
        assert m._simple_command("SELECT", "INBOX", "(CONDSTORE)")[0] == "OK"
        m.state = "SELECTED"  # imaplib's own SELECT takes no modifier
        out["highest"] = m.untagged_responses.get("HIGHESTMODSEQ")
        out["fetch"] = cmd(m, "UID", "FETCH", "1:*", "(FLAGS MODSEQ)")
        out["status"] = cmd(m, "STATUS", "INBOX", "(MESSAGES HIGHESTMODSEQ)")
        held = int(out["highest"][0])
        # another session changes message 2: the conditional STORE of 1:3 leaves it alone
        other.select("INBOX")
        out["other"] = other.uid("STORE", "2", "+FLAGS", "(\\Flagged)")
        out["changed"] = cmd(m, "UID", "FETCH", "1:*", "(FLAGS)", f"(CHANGEDSINCE {held})")
        out["store"] = cmd(m, "UID", "STORE", "1:3", f"(UNCHANGEDSINCE {held})", "+FLAGS",
                           "(\\Answered)")  # fmt: skip
        out["after"] = cmd(other, "UID", "FETCH", "1:*", "(FLAGS)")
        out["search"] = cmd(m, "UID", "SEARCH", "MODSEQ", str(held + 1))
        out["search_all"] = cmd(m, "SEARCH", "MODSEQ", "1", "UNSEEN")
        before = cmd(m, "UID", "FETCH", "1:*", "(FLAGS MODSEQ)")[1]
        bad = {}
        for args in (
            ("UID", "FETCH", "1:*", "(FLAGS)", "(CHANGEDSINCE 0)"),
            ("UID", "FETCH", "1:*", "(FLAGS)", "(CHANGEDSINCE x)"),
            ("UID", "FETCH", "1:*", "(FLAGS)", f"(CHANGEDSINCE {2**63})"),
            ("UID", "FETCH", "1:*", "(FLAGS)", "(VANISHED)"),
            ("UID", "STORE", "1:3", "(UNCHANGEDSINCE x)", "+FLAGS", "(\\Deleted)"),
            ("UID", "STORE", "1:3", f"(UNCHANGEDSINCE {2**63})", "+FLAGS", "(\\Deleted)"),
            ("UID", "STORE", "1:3", "(UNCHANGEDSINCE -1)", "+FLAGS", "(\\Deleted)"),
            ("UID", "SEARCH", "MODSEQ", str(2**63)),
            ("UID", "SEARCH", "MODSEQ", "x"),
            ("SELECT", "INBOX", "(QRESYNC)"),
        ):
            bad[args] = cmd(m, *args)[0]
            m.noop()  # pymap closes a connection after 5 BADs in a row
        out["bad"] = bad
        out["zero"] = cmd(m, "UID", "STORE", "1:3", "(UNCHANGEDSINCE 0)", "+FLAGS", "(\\Deleted)")
        out["unchanged"] = before == cmd(m, "UID", "FETCH", "1:*", "(FLAGS MODSEQ)")[1]
        m.logout()
        other.logout()
        return out

    out = await asyncio.to_thread(condstore)
    assert out["enable"][1] == [b"CONDSTORE"], out["enable"]
    held = int(out["highest"][0])
    seqs = modseqs(out["fetch"][1])
    assert sorted(seqs) == [1, 2, 3] and max(seqs.values()) == held >= 1, out["fetch"]
    assert re.search(rb"HIGHESTMODSEQ %d" % held, b" ".join(out["status"][1])), out["status"]
    changed = out["changed"][1]
    assert len(changed) == 1 and b"UID 2" in changed[0] and b"MODSEQ" in changed[0], changed
    typ, lines = out["store"]
    assert typ.startswith("OK") and "MODIFIED" in typ, out["store"]
    assert sorted(modseqs(lines)) == [1, 3], lines  # 2 left as the other session set it
    flags = {int(re.search(rb"UID (\d+)", x).group(1)): x for x in out["after"][1]}
    assert b"\\Answered" in flags[1] and b"\\Answered" in flags[3]
    assert b"\\Answered" not in flags[2] and b"\\Flagged" in flags[2]
    hits = out["search"][1][0]
    assert re.fullmatch(rb"1 2 3 \(MODSEQ \d+\)", hits), hits  # all changed since
    assert b"MODSEQ" in out["search_all"][1][0]
    assert all(v.startswith("BAD") for v in out["bad"].values()), out["bad"]
    assert "MODIFIED" in out["zero"][0] and out["unchanged"], out["zero"]
    items = await cluster.ok("GET", "mbx1", f"{BOX}/folders/Inbox/uids")
    assert not any("\\Deleted" in m[2] for m in items["messages"])
