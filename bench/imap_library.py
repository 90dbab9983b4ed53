"""The IMAP server library evaluation (issue 50): pymap with a backend of our own, driven by
real clients, and its memory per idle session measured.

Not product code: the spike that docs/concepts/imap.md's choice rests on, kept so the figures
can be taken again.  The backend here is in memory, shaped like the one the design describes
(per-folder UIDVALIDITY, UIDNEXT that only grows, a change number per folder feeding IDLE), with
argon2 credentials checked by argon2-cffi rather than pymap's passlib.

    python bench/imap_library.py serve [--port N] [--cert C --key K]   # a server, for curl/mbsync
    python bench/imap_library.py check                                 # the feature probe
    python bench/imap_library.py idle --sessions 1000 [--messages N]    # RSS per idle session

Needs `pymap` (and `argon2-cffi`): pip install 'pymap==0.36.7' argon2-cffi.
"""

from __future__ import annotations

import argparse
import asyncio
import imaplib
import json
import logging
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from argparse import Namespace
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from argon2 import PasswordHasher
from argon2.exceptions import VerificationError
from proxyprotocol.reader import ProxyProtocolReader
from proxyprotocol.version import ProxyProtocolVersion
from pymap.backend.mailbox import MailboxDataInterface, MailboxSetInterface
from pymap.backend.session import BaseSession
from pymap.config import BackendCapability, IMAPConfig
from pymap.context import subsystem
from pymap.exceptions import InvalidAuth
from pymap.flags import FlagOp
from pymap.health import HealthStatus
from pymap.imap import IMAPServer
from pymap.interfaces.backend import BackendInterface
from pymap.interfaces.login import IdentityInterface, LoginInterface
from pymap.listtree import ListTree
from pymap.mailbox import MailboxSnapshot
from pymap.message import BaseLoadedMessage, BaseMessage
from pymap.mime import MessageContent
from pymap.parsing.specials import ObjectId
from pymap.parsing.specials.flag import Flag, Seen
from pymap.selected import SelectedMailbox, SelectedSet
from pymap.token import AllTokens

USER, PASSWORD = "alice", "s3cret-pass"
HASHER = PasswordHasher()  # argon2id, the library's defaults (RFC 9106's second choice)


# --- the backend: what a node-backed one must supply, in memory -------------------------------


class Message(BaseMessage):
    __slots__ = ["_data"]

    def __init__(self, uid: int, when: datetime, flags: Iterable[Flag], data: bytes,
                 *, expunged: bool = False) -> None:  # fmt: skip
        super().__init__(uid, when, flags, expunged=expunged)
        self._data = data

    async def load_content(self, requirement: Any) -> BaseLoadedMessage:
        # The node-backed backend fetches GET …/items/{id}/message here, only when the
        # requirement asks for content (FLAGS / UID alone never reach it).
        return BaseLoadedMessage(self, requirement, MessageContent.parse(self._data))


class Folder(MailboxDataInterface[Message]):
    """One folder: UIDs from a counter that only grows, a change number per change."""

    def __init__(self, uid_validity: int) -> None:
        self._id = ObjectId.random_mailbox_id()
        self._uid_validity = uid_validity
        self._uid_next = 1
        self._messages: dict[int, Message] = {}
        self._changes: list[tuple[int, int, bool]] = []  # (change number, uid, expunged)
        self._changed = subsystem.get().new_event()
        self._selected = SelectedSet()

    mailbox_id = property(lambda self: self._id)
    readonly = property(lambda self: False)
    uid_validity = property(lambda self: self._uid_validity)
    selected_set = property(lambda self: self._selected)

    def _change(self, uids: Iterable[int], expunged: bool = False) -> None:
        base = self._changes[-1][0] if self._changes else 0
        self._changes.extend((base + 1, uid, expunged) for uid in uids)
        self._changed.set()  # IDLE wakes on this: the node's change feed would set it

    async def update_selected(self, selected: SelectedMailbox, *, wait_on: Any = None
                              ) -> SelectedMailbox:  # fmt: skip
        if wait_on is not None:
            await wait_on.or_event(self._changed).wait()
        since = selected.mod_sequence
        selected.mod_sequence = self._changes[-1][0] if self._changes else 0
        if since is None:
            selected.add_updates(list(self._messages.values()), [])
        else:
            newer = [(uid, gone) for n, uid, gone in self._changes if n > since]
            updated = [self._messages[u] for u, gone in newer if not gone and u in self._messages]
            selected.add_updates(updated, [u for u, gone in newer if gone])
        return selected

    def _add(self, msg_data: bytes, when: datetime | None, flags: Iterable[Flag]) -> Message:
        uid, self._uid_next = self._uid_next, self._uid_next + 1
        msg = Message(uid, when or datetime.now(UTC), flags, msg_data)
        self._messages[uid] = msg
        self._change([uid])
        return msg

    async def append(self, append_msg: Any, *, recent: bool = False) -> Message:
        return self._add(bytes(append_msg.literal), append_msg.when, append_msg.flag_set)

    async def copy(self, uid: int, destination: Folder, *, recent: bool = False) -> int | None:
        msg = self._messages.get(uid)
        if msg is None:
            return None
        return destination._add(msg._data, msg.internal_date, msg.permanent_flags).uid

    async def move(self, uid: int, destination: Folder, *, recent: bool = False) -> int | None:
        new_uid = await self.copy(uid, destination)
        if new_uid is not None:
            await self.delete([uid])
        return new_uid

    async def get(self, uid: int, cached_msg: Any) -> Message:
        msg = self._messages.get(uid)
        if msg is None:
            return Message(uid, cached_msg.internal_date, cached_msg.permanent_flags, b"",
                           expunged=True)  # fmt: skip
        return msg

    async def update(self, uid: int, cached_msg: Any, flag_set: frozenset[Flag], mode: FlagOp
                     ) -> Message:  # fmt: skip
        msg = await self.get(uid, cached_msg)
        if not msg.expunged:
            msg.permanent_flags = mode.apply(msg.permanent_flags, flag_set)
            self._change([uid])
        return msg

    async def delete(self, uids: Iterable[int]) -> None:
        gone = [uid for uid in uids if self._messages.pop(uid, None) is not None]
        self._change(gone, expunged=True)

    async def claim_recent(self, selected: SelectedMailbox) -> None:
        pass  # \Recent is gone from IMAP4rev2; we keep none

    async def cleanup(self) -> None:
        pass

    async def snapshot(self) -> MailboxSnapshot:
        unseen = [i for i, m in enumerate(self._messages.values(), 1)
                  if Seen not in m.permanent_flags]  # fmt: skip
        return MailboxSnapshot(self._id, False, self._uid_validity, self.permanent_flags,
                               self.session_flags, len(self._messages), 0, len(unseen),
                               unseen[0] if unseen else None, self._uid_next)  # fmt: skip

    async def messages(self) -> AsyncIterable[Message]:
        for msg in list(self._messages.values()):
            yield msg


class Folders(MailboxSetInterface[Folder]):
    def __init__(self) -> None:
        self._next_validity = int(time.time())
        self._folders: dict[str, Folder] = {"INBOX": self._new()}

    def _new(self) -> Folder:
        self._next_validity += 1
        return Folder(self._next_validity)

    delimiter = property(lambda self: "/")

    async def set_subscribed(self, name: str, subscribed: bool) -> None:
        pass

    async def list_subscribed(self) -> ListTree:
        return await self.list_mailboxes()

    async def list_mailboxes(self) -> ListTree:
        return ListTree("/").update(*self._folders)

    async def get_mailbox(self, name: str) -> Folder:
        return self._folders["INBOX" if name.upper() == "INBOX" else name]

    async def add_mailbox(self, name: str) -> ObjectId:
        if name in self._folders:
            raise ValueError(name)
        self._folders[name] = folder = self._new()
        return folder.mailbox_id

    async def delete_mailbox(self, name: str) -> None:
        del self._folders[name]

    async def rename_mailbox(self, before: str, after: str) -> None:
        if before not in self._folders:
            raise KeyError(before)
        if after in self._folders:
            raise ValueError(after)
        tree = ListTree("/").update(*self._folders)
        for old, new in tree.get_renames(before, after):
            self._folders[new] = self._folders.pop(old)


class Session(BaseSession[Message]):
    def __init__(self, owner: str, config: Config, folders: Folders) -> None:
        super().__init__(owner)
        self._config, self._folders = config, folders

    config = property(lambda self: self._config)
    mailbox_set = property(lambda self: self._folders)


class Identity(IdentityInterface):
    def __init__(self, name: str, login: Login) -> None:
        self._name, self._login = name, login

    name = property(lambda self: self._name)
    roles = property(lambda self: frozenset())

    # pysasl's PLAIN/LOGIN credentials verify against these (its Identity protocol)
    authcid = property(lambda self: self._name)

    def compare_authcid(self, authcid: str) -> bool:
        return authcid == self._name

    def compare_secret(self, value: str) -> bool:
        stored = self._login.users.get(self._name)
        try:
            return stored is not None and HASHER.verify(stored, value)
        except VerificationError:
            return False

    def get_clear_secret(self) -> None:
        return None

    @asynccontextmanager
    async def new_session(self) -> AsyncIterator[Session]:
        folders = self._login.mailboxes.setdefault(self._name, Folders())
        yield Session(self._name, self._login.config, folders)

    async def new_token(self, *, expiration: Any = None) -> None:
        return None

    async def get(self) -> Any:
        raise NotImplementedError

    async def set(self, metadata: Any) -> None:
        raise NotImplementedError

    async def delete(self) -> None:
        raise NotImplementedError


class Login(LoginInterface):
    def __init__(self, config: Config) -> None:
        self.config = config
        self.users = {USER: HASHER.hash(PASSWORD)}
        self.mailboxes: dict[str, Folders] = {}
        self._tokens = AllTokens(config)

    tokens = property(lambda self: self._tokens)

    async def authenticate(self, credentials: Any) -> Identity:
        identity = Identity(credentials.authcid, self)
        # argon2 costs ~50 ms of CPU: off the loop, as pymap's own Passwords does
        ok = await asyncio.to_thread(credentials.verify, identity)
        if not ok:
            await asyncio.sleep(self.config.invalid_user_sleep)
            raise InvalidAuth()
        return identity

    async def authorize(self, authenticated: IdentityInterface, authzid: str) -> Identity:
        if authzid != authenticated.name:
            raise InvalidAuth()
        return Identity(authzid, self)


class Config(IMAPConfig):
    @property
    def backend_capability(self) -> BackendCapability:
        return BackendCapability(idle=True, object_id=True, multi_append=True)


class Backend(BackendInterface):
    def __init__(self, config: Config) -> None:
        self._config, self._login, self._status = config, Login(config), HealthStatus()

    login = property(lambda self: self._login)
    config = property(lambda self: self._config)
    status = property(lambda self: self._status)

    @classmethod
    def add_subparser(cls, name: str, subparsers: Any) -> Any:
        raise NotImplementedError

    @classmethod
    async def init(cls, args: Namespace, **overrides: Any) -> Any:
        raise NotImplementedError

    async def start(self, stack: AsyncExitStack) -> None:
        pass


def make_config(cert: str | None, key: str | None, *, max_append: int) -> Config:
    args = Namespace(passlib_cfg=None, proxy_protocol=None, inherited_sockets=None)
    return Config(args, host="127.0.0.1", port=0, cert_file=cert, key_file=key,
                  tls_enabled=cert is not None, max_append_len=max_append,
                  reject_dnsbl=False, invalid_user_sleep=0.3)  # fmt: skip


async def serve(port: int, cert: str | None, key: str | None, max_append: int) -> None:
    config = make_config(cert, key, max_append=max_append)
    config.apply_context()
    backend = Backend(config)
    handler = ProxyProtocolReader(ProxyProtocolVersion.get(None)).get_callback(
        IMAPServer(backend.login, config)
    )
    server = await asyncio.start_server(handler, "127.0.0.1", port, backlog=2048)
    print(json.dumps({"port": server.sockets[0].getsockname()[1], "pid": os.getpid()}), flush=True)
    async with server:
        await server.serve_forever()


# --- the clients -------------------------------------------------------------------------------

MIME = (
    b"From: Bob Example <bob@example.org>\r\nTo: alice@example.org\r\n"
    b"Subject: =?utf-8?q?Gr=C3=BC=C3=9Fe?= report\r\nDate: Mon, 02 Nov 2026 10:00:00 +0000\r\n"
    b"Message-ID: <m1@example.org>\r\nMIME-Version: 1.0\r\n"
    b'Content-Type: multipart/mixed; boundary="b1"\r\n\r\n'
    b"--b1\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
    b"Hello \xc3\xa4\r\n--b1\r\nContent-Type: application/pdf; name=a.pdf\r\n"
    b"Content-Transfer-Encoding: base64\r\nContent-Disposition: attachment; filename=a.pdf\r\n\r\n"
    b"JVBERi0xLjQK\r\n--b1--\r\n"
)


def start_server(*extra: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, __file__, "serve", *extra],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())["port"]


def self_signed(tmp: Path) -> tuple[str, str]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)  # fmt: skip
    return str(cert), str(key)


def raw(port: int, payload: bytes, *, read_for: float = 1.0) -> bytes:
    """Send bytes after the greeting, read what comes back until quiet or closed."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(read_for)
        s.recv(4096)
        s.sendall(payload)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return out


def check() -> dict[str, Any]:
    res: dict[str, Any] = {}
    imaplib.Commands.setdefault("ID", ("NONAUTH", "AUTH", "SELECTED"))
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = self_signed(Path(tmp))
        proc, port = start_server("--cert", cert, "--key", key, "--max-append", "1000000")
        try:
            m = imaplib.IMAP4("127.0.0.1", port)
            res["capability_before_tls"] = m.capabilities
            ctx = ssl.create_default_context(cafile=cert)
            ctx.check_hostname = False
            m.starttls(ctx)
            m.authenticate("PLAIN", lambda _: f"\0{USER}\0{PASSWORD}".encode())
            res["capability_after_login"] = m.capabilities
            for cmd in ("ENABLE", "NAMESPACE", "ID"):
                try:
                    res[cmd] = str(
                        m._simple_command(
                            cmd,
                            *(["CONDSTORE"] if cmd == "ENABLE" else ["NIL"] if cmd == "ID" else []),
                        )
                    )
                except imaplib.IMAP4.error as exc:
                    res[cmd] = f"error: {exc}"
            res["append"] = str(m.append("INBOX", r"(\Flagged)", None, MIME))
            res["create_rename"] = [str(m.create("Work")), str(m.rename("Work", "Jobs")),
                                    str(m.list())]  # fmt: skip
            m.select("INBOX")
            res["fetch_body_exact"] = m.uid("FETCH", "1", "(BODY.PEEK[])")[1][0][1] == MIME
            res["bodystructure"] = str(m.uid("FETCH", "1", "(BODYSTRUCTURE ENVELOPE)")[1][0])
            res["header_fields"] = str(
                m.uid("FETCH", "1", "(BODY.PEEK[HEADER.FIELDS (SUBJECT FROM)])")[1]
            )
            res["partial"] = str(m.uid("FETCH", "1", "(BODY.PEEK[1]<0.5>)")[1])
            res["search"] = {q: str(m.uid("SEARCH", q)[1]) for q in
                             ("FROM bob", "SUBJECT report", "SINCE 1-Nov-2026", "UNSEEN",
                              "UID 1:*")}  # fmt: skip
            m.literal = "Grüße".encode()
            res["search"]["CHARSET UTF-8 SUBJECT {literal}"] = str(
                m.uid("SEARCH", "CHARSET", "UTF-8", "SUBJECT")[1]
            )
            res["uidplus_copy"] = str(m.uid("COPY", "1", "Jobs"))
            res["move"] = str(m.uid("MOVE", "1", "Jobs"))
            res["status"] = str(m.status("Jobs", "(MESSAGES UIDNEXT UIDVALIDITY UNSEEN)"))
            m.logout()
            # LOGIN in clear before STARTTLS
            m = imaplib.IMAP4("127.0.0.1", port)
            try:
                res["login_in_clear"] = str(m.login(USER, PASSWORD))
            except imaplib.IMAP4.error as exc:
                res["login_in_clear"] = f"refused: {exc}"
            # bad input, raw
            res["bad_command"] = raw(port, b"a1 FROB\r\n").decode()
            res["literal_plus_over_limit"] = raw(port, b"a1 LOGIN {2000000000+}\r\nxx\r\n"
                                                 ).decode(errors="replace")  # fmt: skip
            res["literal_sync_over_limit"] = raw(port, b"a1 LOGIN {2000000000}\r\n"
                                                 ).decode(errors="replace")  # fmt: skip
            res["long_line_100k"] = raw(port, b"a1 NOOP " + b"x" * 100_000 + b"\r\n"
                                        ).decode(errors="replace")[:300]  # fmt: skip
            res["server_alive_after"] = proc.poll() is None
        finally:
            proc.terminate()
            proc.wait()
            res["server_stderr_tracebacks"] = "see terminal"
    return res


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def settled_rss_kib(pid: int, every: float = 0.1, timeout: float = 30.0) -> int:
    """The server's RSS once it stops moving (two reads `every` seconds apart agree): the
    sessions have had their answers, what the server frees or touches after comes first."""
    deadline = time.monotonic() + timeout
    last = rss_kib(pid)
    while time.monotonic() < deadline:
        time.sleep(every)
        now = rss_kib(pid)
        if now == last:
            return now
        last = now
    return last


async def idle_sessions(port: int, n: int) -> list[asyncio.StreamWriter]:
    """n sessions, each LOGIN, SELECT INBOX, IDLE (one after another: argon2 is the cost)."""
    writers = []
    login = f"a LOGIN {USER} {PASSWORD}\r\nb SELECT INBOX\r\nc IDLE\r\n".encode()
    for i in range(n):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        writers.append(w)
        await asyncio.wait_for(r.readline(), 30)
        w.write(login)
        while True:
            line = await asyncio.wait_for(r.readline(), 30)
            if not line:
                raise RuntimeError(f"session {i}: closed before IDLE")
            if line.startswith(b"+ "):
                break
    return writers


def fill(port: int, messages: int) -> None:
    """INBOX given `messages` small messages (MULTIAPPEND of a thousand at a time)."""
    m = imaplib.IMAP4("127.0.0.1", port)
    m.login(USER, PASSWORD)
    for n in range(0, messages, 1000):
        batch = range(n, min(n + 1000, messages))
        lits = [b"Subject: m%d\r\nMessage-ID: <%d@x>\r\n\r\nbody\r\n" % (i, i) for i in batch]
        cmd = b" ".join(b"{%d+}\r\n%s" % (len(lit), lit) for lit in lits)
        tag = m._new_tag()
        m.send(tag + b" APPEND INBOX " + cmd + b"\r\n")
        while not (line := m.readline()).startswith(tag):
            pass
        assert b" OK " in line, line
    m.logout()


def idle(sessions: int, messages: int = 0) -> dict[str, Any]:
    proc, port = start_server("--max-append", "1000000")
    try:
        if messages:
            fill(port, messages)
        loop = asyncio.new_event_loop()
        # one warm-up session: imports, argon2, the folder, first-use caches
        warm = loop.run_until_complete(idle_sessions(port, 1))
        before = settled_rss_kib(proc.pid)
        t0 = time.monotonic()
        writers = loop.run_until_complete(idle_sessions(port, sessions))
        took = time.monotonic() - t0
        after = settled_rss_kib(proc.pid)
        for w in writers + warm:
            w.close()
        loop.close()
        return {
            "sessions": sessions,
            "messages_in_inbox": messages,
            "rss_before_kib": before,
            "rss_after_kib": after,
            "kib_per_idle_session": round((after - before) / sessions, 1),
            "login_select_idle_per_s": round(sessions / took, 1),
        }
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--cert")
    s.add_argument("--key")
    s.add_argument("--max-append", type=int, default=50_000_000)
    sub.add_parser("check")
    i = sub.add_parser("idle")
    i.add_argument("--sessions", type=int, default=1000)
    i.add_argument("--messages", type=int, default=0, help="messages in the INBOX selected")
    args = parser.parse_args()
    if args.cmd == "serve":
        logging.basicConfig(level=os.environ.get("LOG", "WARNING"), stream=sys.stderr)
        asyncio.run(serve(args.port, args.cert, args.key, args.max_append))
    elif args.cmd == "check":
        print(json.dumps(check(), indent=1))
    else:
        print(json.dumps(idle(args.sessions, args.messages)))


if __name__ == "__main__":
    main()
