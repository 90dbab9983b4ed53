"""IDLE on a folder that stops existing under its name, over real processes (the lab of
test_imap_e2e.py): another session renames the idled folder's PARENT away, or deletes the
folder itself, and the idling client is told at once, `* BYE [NONEXISTENT]` and the
connection closed (as Dovecot does, RFC 2180 3.2), not left idling on a name that is gone.
A rename of a folder whose name only starts like the parent's wakes nobody.

The front's IDLE long-polls the change feed 25 s at a time (`folders.FEED_WAIT`), and a poll
that missed the change answers later at a cursor past it: a missed wake-up is never told.
Each answer is read with a socket timeout of `SAY`, under one poll's wait, that only bounds
a failure; no sleeps."""

from __future__ import annotations

import asyncio

import pytest

from imap_front.folders import FEED_WAIT
from tests.imap_front.test_imap_e2e import MIME, lab, logged_in  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow

SAY = 15.0  # seconds an idler waits to be told; under one feed poll's wait
assert SAY < FEED_WAIT


class Idler:
    """An imaplib session selected on `folder`, in IDLE, its untagged answers read."""

    def __init__(self, port: int, ca, folder: str) -> None:
        self.m = logged_in(port, ca)
        typ, data = self.m.select(folder)
        assert typ == "OK", data
        self.tag = self.m._new_tag()
        self.m.send(self.tag + b" IDLE\r\n")
        self.m.sock.settimeout(SAY)
        said = self.m.readline()
        assert said.startswith(b"+"), said

    def until(self, start: bytes) -> list[bytes]:
        """The lines up to the first that starts with `start` (TimeoutError past SAY)."""
        lines: list[bytes] = []
        while not lines or not lines[-1].startswith(start):
            line = self.m.readline()
            assert line, ("the front closed the connection", lines)
            lines.append(line.rstrip())
        return lines

    def closed(self) -> bool:
        """Whether the front closed the connection (EOF) rather than saying more."""
        return self.m.readline() == b""


def _run(port: int, ca) -> dict:
    out: dict = {}
    b = logged_in(port, ca)
    for name in ("P", "P/child", "Px"):
        assert b.create(name)[0] == "OK", name
    assert b.append("P/child", None, None, MIME)[0] == "OK"

    # The parent renamed away: told at once, the connection closed.
    idler = Idler(port, ca, "P/child")
    assert b.rename("P", "Q")[0] == "OK"
    out["renamed"] = idler.until(b"* ")
    out["renamed_closed"] = idler.closed()
    # A's next session: the folder is gone under its old name, there under the new one.
    a = logged_in(port, ca)
    out["old_name"] = a.select("P/child")[0]
    out["new_name"] = a.select("Q/child")
    a.logout()

    # A rename of a folder whose name starts like the parent's (`Px`, not `P/…`, nor
    # `Q/…`) tells nothing: the next thing the idler is told is the append after it.
    idler = Idler(port, ca, "Q/child")
    assert b.rename("Px", "Qx")[0] == "OK"
    assert b.append("Q/child", None, None, MIME)[0] == "OK"
    out["sibling"] = idler.until(b"* 2 EXISTS")
    # The folder itself deleted: told at once too.
    assert b.delete("Q/child")[0] == "OK"
    out["deleted"] = idler.until(b"* BYE")
    out["deleted_closed"] = idler.closed()
    b.logout()
    return out


async def test_an_idler_is_told_when_its_folder_or_a_parent_goes(lab):  # noqa: F811
    _, _, front, ca = lab
    out = await asyncio.to_thread(_run, front.port, ca)
    assert len(out["renamed"]) == 1, out  # the first thing it is told
    assert out["renamed"][0].startswith(b"* BYE [NONEXISTENT]"), out
    assert out["renamed_closed"], out
    assert out["old_name"] == "NO", out
    assert out["new_name"] == ("OK", [b"1"]), out
    assert out["sibling"] == [b"* 2 EXISTS"], out
    assert out["deleted"][-1].startswith(b"* BYE [NONEXISTENT]"), out
    assert out["deleted_closed"], out
