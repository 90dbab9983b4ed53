"""Real IMAP clients no one here wrote, against the front over real processes (the lab of
test_imap_e2e: two TLS nodes, a transport with LMTP, `python -m imap_front serve`):

- `curl imap://` through STARTTLS (`--ssl-reqd`, `--cacert`): LIST, a message fetched by
  UID byte for byte, an upload (APPEND), `UID SEARCH`;
- `mbsync` (Debian isync) syncing the mailbox to a local Maildir: a full sync, then mail
  delivered by the transport's LMTP and a message written into the Maildir, flags changed
  on both sides, a folder renamed on the server (`Remove Both`): after each sync the
  Maildir and the mailbox hold the same messages with the same flags in the same folders.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import smtplib
import subprocess
from pathlib import Path

import pytest

from tests.cluster_harness import wait_until
from tests.imap_front.test_imap_e2e import (  # noqa: F401 - lab is a fixture
    MIME,
    PASSWORD,
    lab,
    logged_in,
    node_items,
    node_message,
)

pytestmark = pytest.mark.slow


def curl(port: int, ca: Path, path: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    binary = shutil.which("curl")
    assert binary, "curl is missing"
    return subprocess.run(
        [binary, "--silent", "--show-error", "--ssl-reqd", "--cacert", str(ca),
         "--user", f"alice:{PASSWORD}", "--max-time", "60",
         f"imap://127.0.0.1:{port}/{path}", *args],
        capture_output=True, timeout=90,
    )  # fmt: skip


def ok(done: subprocess.CompletedProcess[bytes]) -> bytes:
    assert done.returncode == 0, (done.returncode, done.stderr.decode(errors="replace"))
    return done.stdout


async def test_curl_lists_fetches_uploads_and_searches(lab, tmp_path):  # noqa: F811
    cluster, _, front, ca = lab
    eml = tmp_path / "up.eml"
    eml.write_bytes(MIME)
    uploaded = await asyncio.to_thread(curl, front.port, ca, "INBOX", "-T", str(eml))
    ok(uploaded)
    rows = await node_items(cluster, "Inbox")
    assert [row[0] for row in rows] == [1], rows
    assert await node_message(cluster, rows[0][1]) == MIME, "APPEND kept the bytes"

    await asyncio.to_thread(
        lambda: ok(curl(front.port, ca, "", "-X", "CREATE Work"))  # a folder to list
    )
    listing = ok(await asyncio.to_thread(curl, front.port, ca, ""))
    names = {line.rpartition(b'"/" ')[2].strip() for line in listing.splitlines()}
    assert {b"INBOX", b"Work"} <= names, listing

    out = tmp_path / "got.eml"
    ok(await asyncio.to_thread(curl, front.port, ca, "INBOX;UID=1", "-o", str(out)))
    assert out.read_bytes() == MIME, "fetched by UID byte for byte"

    found = ok(await asyncio.to_thread(
        curl, front.port, ca, "INBOX", "-X", "UID SEARCH SUBJECT report FROM bob"
    ))  # fmt: skip
    assert re.search(rb"^\* SEARCH 1\s*$", found, re.M), found
    none = ok(
        await asyncio.to_thread(curl, front.port, ca, "INBOX", "-X", "UID SEARCH SUBJECT nope")
    )
    assert re.search(rb"^\* SEARCH\s*$", none, re.M), none
    missing = await asyncio.to_thread(curl, front.port, ca, "INBOX;UID=7")
    assert missing.returncode != 0 and missing.stdout == b"", "no such UID: nothing fetched"


# --- mbsync ---------------------------------------------------------------------------------

MAILDIR_FLAGS = {"D": "\\Draft", "F": "\\Flagged", "R": "\\Answered", "S": "\\Seen",
                 "T": "\\Deleted"}  # fmt: skip
State = dict[str, list[tuple[bytes, frozenset[str]]]]


def mbsync_config(root: Path, port: int, ca: Path) -> Path:
    """mbsync 1.4 matches a certificate's DNS names only, not an IP address: the front's own
    certificate is pinned instead (a peer certificate found in CertificateFile is trusted)."""
    (root / "md").mkdir()
    config = root / "mbsyncrc"
    config.write_text(
        f"IMAPAccount front\nHost 127.0.0.1\nPort {port}\nUser alice\nPass {PASSWORD}\n"
        f"SSLType STARTTLS\nCertificateFile {ca.parent / 'imap1.pem'}\n"
        "SystemCertificates no\nAuthMechs PLAIN\n\n"
        "IMAPStore remote\nAccount front\n\n"
        f"MaildirStore local\nPath {root}/md/\nInbox {root}/inbox\nSubFolders Verbatim\n\n"
        "Channel all\nFar :remote:\nNear :local:\nPatterns *\nCreate Both\nRemove Both\n"
        f"Expunge Both\nSyncState *\n"
    )
    return config


def mbsync(config: Path) -> str:
    binary = shutil.which("mbsync")
    assert binary, "mbsync is missing: install Debian's 'isync' package (make system-deps does)"
    done = subprocess.run([binary, "-c", str(config), "-V", "-a"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


_TUID = re.compile(rb"^X-TUID: [^\n]*\n", re.M)


def _tuidless(message: bytes) -> bytes:
    """A message with LF line ends (as mbsync's Maildir keeps them) and without the
    `X-TUID:` header mbsync writes into every message it copies, either way (its journal's
    tag to find a copy again after an interrupted run): what else differs is a real one."""
    return _TUID.sub(b"", message.replace(b"\r\n", b"\n"), count=1)


def maildir_state(root: Path) -> State:
    """Each folder's messages and flags, mbsync's `X-TUID` header taken out (see `_tuidless`)."""
    folders = {"INBOX": root / "inbox"}
    for sub in (root / "md").iterdir():
        if (sub / "cur").is_dir():
            folders[sub.name] = sub
    state: State = {}
    for name, path in folders.items():
        msgs = []
        for f in [*(path / "cur").iterdir(), *(path / "new").iterdir()]:
            letters = f.name.partition(":2,")[2]
            msgs.append((_tuidless(f.read_bytes()), frozenset(MAILDIR_FLAGS[c] for c in letters)))
        state[name] = sorted(msgs, key=repr)
    return state


def server_state(port: int, ca: Path) -> State:
    m = logged_in(port, ca)
    state: State = {}
    for line in m.list()[1]:
        name = line.rpartition(b'"/" ')[2].strip(b'"').decode()
        assert m.select(f'"{name}"', readonly=True)[0] == "OK", (name, line)
        msgs = []
        for part in m.uid("FETCH", "1:*", "(FLAGS BODY.PEEK[])")[1]:
            if isinstance(part, tuple):
                flags = re.search(rb"FLAGS \(([^)]*)\)", part[0])
                assert flags, part[0]
                names = frozenset(f.decode() for f in flags.group(1).split() if f != b"\\Recent")
                msgs.append((_tuidless(part[1]), names))
        state[name] = sorted(msgs, key=repr)
    m.logout()
    return state


def maildir_file(root: Path, folder: str, needle: bytes) -> Path:
    base = root / "inbox" if folder == "INBOX" else root / "md" / folder
    hits = [f for d in ("cur", "new") for f in (base / d).iterdir() if needle in f.read_bytes()]
    assert len(hits) == 1, (folder, needle, hits)
    return hits[0]


async def test_mbsync_keeps_a_maildir_and_the_mailbox_in_agreement(lab, tmp_path):  # noqa: F811
    cluster, hubs, front, ca = lab
    local = tmp_path / "mbsync"
    local.mkdir()
    config = mbsync_config(local, front.port, ca)

    def seed() -> None:
        m = logged_in(front.port, ca)
        m.create("Work")
        m.append("INBOX", r"(\Flagged)", None, MIME)
        m.append("INBOX", None, None, b"Subject: two\r\n\r\nsecond\r\n")
        m.append("Work", r"(\Seen)", None, b"Subject: work\r\n\r\nwork item\r\n")
        m.logout()

    def deliver(message_id: str) -> None:
        with smtplib.LMTP("127.0.0.1", hubs.lmtp_ports["hub1"]) as lmtp:
            lmtp.sendmail("bob@example.org", ["alice"],
                          MIME.replace(b"<m1@", f"<{message_id}@".encode()))  # fmt: skip

    async def agree(step: str) -> State:
        said = await asyncio.to_thread(mbsync, config)
        server = await asyncio.to_thread(server_state, front.port, ca)
        assert maildir_state(local) == server, f"{step}: mbsync said\n{said[-4000:]}"
        return server

    await asyncio.to_thread(seed)
    first = await agree("the full sync")
    assert {"INBOX", "Work"} <= set(first) and "Jobs" not in first and len(first["INBOX"]) == 2, (
        first
    )

    # new mail by LMTP and a message written into the Maildir; a flag set on each side
    await asyncio.to_thread(deliver, "lmtp-1")
    await wait_until("the LMTP message", lambda: _count(cluster, "Inbox", 3), timeout=60,
                     every=0.05)  # fmt: skip
    (local / "inbox" / "new" / "1.local.eml").write_bytes(b"Subject: local\n\nfrom the Maildir\n")
    two = maildir_file(local, "INBOX", b"second")
    two.rename(two.with_name(two.name.partition(":2,")[0] + ":2,S"))

    def flag_on_server() -> None:
        m = logged_in(front.port, ca)
        m.select("Work")
        m.uid("STORE", "1", "+FLAGS", r"(\Answered)")
        m.logout()

    await asyncio.to_thread(flag_on_server)
    second = await agree("new mail and flags on both sides")
    inbox = {body.split(b"\n", 1)[0]: flags for body, flags in second["INBOX"]}
    assert len(second["INBOX"]) == 4, second["INBOX"]
    assert inbox[b"Subject: two"] == {"\\Seen"}, "the Maildir's flag reached the server"
    assert inbox[b"Subject: local"] == frozenset(), "the Maildir's message was uploaded"
    assert second["Work"][0][1] == {"\\Seen", "\\Answered"}

    # a folder renamed on the server: mbsync creates the new name in the Maildir; the old
    # one, not empty, it keeps and warns (its `Remove` never deletes a box holding mail):
    # once its messages are gone locally, the next run removes the box.
    def rename() -> None:
        m = logged_in(front.port, ca)
        assert m.rename("Work", "Jobs")[0] == "OK"
        m.logout()

    await asyncio.to_thread(rename)
    said = await asyncio.to_thread(mbsync, config)
    assert "far side box Work cannot be opened and near side box Work is not empty" in said
    server = await asyncio.to_thread(server_state, front.port, ca)
    assert "Jobs" in server and "Work" not in server, server
    local_state = maildir_state(local)
    assert local_state.pop("Work") == server["Jobs"] == second["Work"], "kept, flags and all"
    assert local_state == server, "the rest agrees, Jobs included"
    for f in [
        *(local / "md" / "Work" / "cur").iterdir(),
        *(local / "md" / "Work" / "new").iterdir(),
    ]:
        f.unlink()
    third = await agree("the old folder's copies removed locally")
    assert not (local / "md" / "Work").exists() and "Jobs" in third
    assert await agree("a sync with nothing new") == third


async def _count(cluster, folder: str, n: int) -> bool:
    return len(await node_items(cluster, folder)) == n
