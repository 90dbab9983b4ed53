"""Real mail servers for the tests, bench/lmtp.py and bench/imap.py (issues 49, 50): a private
Postfix that relays everything it receives to an LMTP address, and a private Dovecot taking
final delivery by LMTP into Maildirs and, if asked, serving them over IMAP (STARTTLS, its
users' passwords in its own passwd-file).  Debian's `postfix`, `dovecot-core`,
`dovecot-lmtpd` and `dovecot-imapd` (the Makefile's MAIL_PACKAGES); no system service is used
or touched: each server has its own configuration, queue, state and logs under a directory of
its own, listens on a free loopback port, and is ready once it answers there (its 220
greeting, IMAP's `* OK`), never after a fixed sleep.

Both run as root here and hand work to unprivileged users (Postfix to `postfix`, Dovecot's
mail to Debian's `mail` user), which must reach their directories: pytest's tmp_path sits
under a 0700 directory, so each server's directory is a 0755 one of its own in the system's
temporary directory (`private_dir`), removed when the server stops.  Its log is copied into
the directory the caller names (`logs`), kept for a failed test.

Loaded by tests/conftest.py as a plugin: the `mail_servers` fixture starts them from a test
and stops every one it started at teardown, even when the test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tools.ports import free_port

HOST = "127.0.0.1"
MAIL_USER = "mail"  # Debian's: what Dovecot writes the Maildirs as
STOP_TIMEOUT = 30.0
INSTALL = (
    "install Debian's postfix, dovecot-core, dovecot-lmtpd and dovecot-imapd "
    "(make system-deps does)"
)


def _require(command: str) -> str:
    found = shutil.which(command, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    assert found, f"{command} is missing: {INSTALL}"
    return found


def private_dir(prefix: str) -> Path:
    """A new 0755 directory in the system's temporary directory, for a server's files."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def greeting(host: str, port: int, timeout: float = 2.0) -> bytes:
    """The first line a server at (host, port) sends: its 220 greeting."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        return s.makefile("rb").readline()


def wait_for_greeting(
    name: str,
    port: int,
    proc: subprocess.Popen[bytes],
    log: Path,
    timeout: float = 60,
    expect: bytes = b"220",
) -> None:
    """Until the server at `port` greets with `expect` (SMTP's and LMTP's 220, IMAP's
    `* OK`); fail at once if `proc` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited ({proc.returncode}): {_tail(log)}")
        with contextlib.suppress(OSError):
            if greeting(HOST, port).startswith(expect):
                return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{name} did not greet on port {port} in {timeout:g}s: {_tail(log)}"
            )
        time.sleep(0.02)  # the next look at the port


def _tail(log: Path, n: int = 3000) -> str:
    return log.read_text(errors="replace")[-n:] if log.exists() else "(no log)"


def _stop(proc: subprocess.Popen[bytes], name: str, log: Path) -> None:
    """Wait for `proc` to end (it was asked to); kill its process group if it will not."""
    try:
        proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(f"{name} did not stop in {STOP_TIMEOUT:g}s: {_tail(log)}") from None


# ---- Dovecot ---------------------------------------------------------------------------------


@dataclass
class Dovecot:
    """A private Dovecot: LMTP on `port`, one Maildir per user under `root`/mail; IMAP on
    `imap_port` if started with one (0: none)."""

    root: Path
    port: int
    users: tuple[str, ...]
    proc: subprocess.Popen[bytes]
    logs: Path
    imap_port: int = 0

    @property
    def log_path(self) -> Path:
        return self.root / "dovecot.log"

    def log(self) -> str:
        return _tail(self.log_path, 1 << 30)

    def maildir(self, user: str) -> Path:
        return self.root / "mail" / user / "Maildir"

    def messages(self, user: str) -> list[bytes]:
        """The messages delivered to `user`'s inbox, in their files' name order."""
        box = self.maildir(user)
        files = [p for sub in ("new", "cur") if (box / sub).is_dir() for p in (box / sub).iterdir()]
        return [p.read_bytes() for p in sorted(files)]

    def stop(self) -> None:
        """SIGTERM to Dovecot's master (it stops its services), its log kept in `logs`."""
        try:
            if self.proc.poll() is None:
                self.proc.terminate()
            _stop(self.proc, "dovecot", self.log_path)
        finally:
            _keep(self.log_path, self.logs)
            shutil.rmtree(self.root, ignore_errors=True)


def dovecot_config(
    root: Path,
    port: int,
    users_file: Path,
    *,
    imap_port: int = 0,
    tls: tuple[Path, Path] | None = None,
    max_clients: int = 0,
) -> str:
    """Dovecot's whole configuration: LMTP on loopback, Maildirs fsync'd always; with an
    `imap_port`, IMAP there too (STARTTLS with `tls`'s certificate and key; Dovecot 2.3
    counts a peer on its own address as secured, so a loopback client may log in without
    it: the bench's clients start TLS, as the front requires).  `max_clients`: sessions
    it must hold at once, past its default process limit of 100 (an `imap` process each,
    and an `imap-login` each proxying its TLS)."""
    imap = ""
    if max_clients:
        imap = (f"default_process_limit = {max_clients + 50}\n"
                f"default_client_limit = {4 * max_clients + 200}\n")  # fmt: skip
    if imap_port:
        imap += f"""\
auth_mechanisms = plain login
disable_plaintext_auth = yes
mail_max_userip_connections = 10000
service imap-login {{
  inet_listener imap {{
    address = {HOST}
    port = {imap_port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
"""
    ssl = f"ssl = required\nssl_cert = <{tls[0]}\nssl_key = <{tls[1]}" if tls else "ssl = no"
    return f"""\
# A private Dovecot (tests/mail_servers.py): nothing of /etc/dovecot is read.
instance_name = dovecot-{root.name}
base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
protocols = lmtp{" imap" if imap_port else ""}
listen = {HOST}
{ssl}
{imap}default_internal_user = dovecot
default_login_user = dovenull
mail_location = maildir:~/Maildir
mail_fsync = always
first_valid_uid = 1
first_valid_gid = 1
passdb {{
  driver = passwd-file
  args = {users_file}
}}
userdb {{
  driver = passwd-file
  args = {users_file}
}}
service lmtp {{
  inet_listener lmtp {{
    address = {HOST}
    port = {port}
  }}
}}
"""


def start_dovecot(
    users: list[str] | tuple[str, ...],
    logs: Path,
    *,
    port: int = 0,
    imap_port: int | None = None,
    password: str = "",
    tls: tuple[Path, Path] | None = None,
    max_clients: int = 0,
) -> Dovecot:
    """A private Dovecot taking LMTP for `users` (full addresses), ready to deliver; with an
    `imap_port` (0: a free one) serving their Maildirs over IMAP too, each logging in as
    its address with `password`, over STARTTLS with `tls` (certificate, key)."""
    binary = _require("dovecot")
    assert Path("/usr/lib/dovecot/lmtp").exists(), f"dovecot's lmtp is missing: {INSTALL}"
    if imap_port is not None:
        assert Path("/usr/lib/dovecot/imap").exists(), f"dovecot's imap is missing: {INSTALL}"
        assert password and ":" not in password, "an IMAP user needs a password (no ':')"
        imap_port = imap_port or free_port()
    mail = pwd.getpwnam(MAIL_USER)
    root = private_dir("dovecot-")
    port = port or free_port()
    for sub in ("run", "state"):
        (root / sub).mkdir()
    (root / "mail").mkdir()
    os.chown(root / "mail", mail.pw_uid, mail.pw_gid)
    users_file = root / "users"
    # passwd-file: user:password:uid:gid:(gecos):home:(shell):(extra)
    secret = f"{{PLAIN}}{password}" if password else ""
    entries = (f"{u}:{secret}:{mail.pw_uid}:{mail.pw_gid}::{root}/mail/{u}::\n" for u in users)
    users_file.write_text("".join(entries))
    conf = root / "dovecot.conf"
    conf.write_text(
        dovecot_config(
            root, port, users_file, imap_port=imap_port or 0, tls=tls, max_clients=max_clients
        )
    )
    out = root / "dovecot.log"
    proc = subprocess.Popen(
        [binary, "-c", str(conf), "-F"],
        stdout=subprocess.DEVNULL, stderr=open(out, "ab"),  # noqa: SIM115 - the child owns it
        start_new_session=True,
    )  # fmt: skip
    server = Dovecot(root, port, tuple(users), proc, logs, imap_port or 0)
    try:
        wait_for_greeting("dovecot", port, proc, out)
        if imap_port:
            wait_for_greeting("dovecot imap", imap_port, proc, out, expect=b"* OK")
    except BaseException:
        server.stop()
        raise
    return server


# ---- Postfix ---------------------------------------------------------------------------------

# Only the services a relay to LMTP uses, none chrooted (the queue is a private directory).
MASTER_CF = """\
{listen} inet n - n - - smtpd
pickup    unix  n - n 60 1 pickup
cleanup   unix  n - n -  0 cleanup
qmgr      unix  n - n 300 1 qmgr
rewrite   unix  - - n -  - trivial-rewrite
bounce    unix  - - n -  0 bounce
defer     unix  - - n -  0 bounce
trace     unix  - - n -  0 bounce
verify    unix  - - n -  1 verify
flush     unix  n - n 1000? 0 flush
proxymap  unix  - - n -  - proxymap
showq     unix  n - n -  - showq
error     unix  - - n -  - error
retry     unix  - - n -  - error
discard   unix  - - n -  - discard
lmtp      unix  - - n -  - lmtp
anvil     unix  - - n -  1 anvil
scache    unix  - - n -  1 scache
postlog   unix-dgram n - n - 1 postlogd
"""


@dataclass
class Postfix:
    """A private Postfix: SMTP on `port`, relaying every recipient to `lmtp` (host, port)."""

    root: Path
    port: int
    lmtp: tuple[str, int]
    proc: subprocess.Popen[bytes]
    logs: Path
    stopped: bool = field(default=False)

    @property
    def conf(self) -> Path:
        return self.root / "conf"

    @property
    def log_path(self) -> Path:
        return self.root / "postfix.log"

    def log(self) -> str:
        return _tail(self.log_path, 1 << 30)

    def command(self, *argv: str) -> str:
        """A Postfix command (`postqueue`, `postsuper`, ...) run against this instance."""
        done = subprocess.run(
            [_require(argv[0]), "-c", str(self.conf), *argv[1:]],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.returncode} {done.stdout}{done.stderr}")
        return done.stdout

    def flush(self) -> None:
        """Attempt every deferred message now (`postqueue -f`), as an operator would."""
        self.command("postqueue", "-f")

    def queued(self) -> list[str]:
        """The ids of the messages still in Postfix's queue (`postqueue -j`)."""
        return [
            json.loads(line)["queue_id"] for line in self.command("postqueue", "-j").splitlines()
        ]

    def stop(self) -> None:
        """`postfix stop` (master stops its daemons), then the foreground `postfix` ends."""
        if self.stopped:
            return
        self.stopped = True
        try:
            if self.proc.poll() is None:
                with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                    self.command("postfix", "stop")
            _stop(self.proc, "postfix", self.log_path)
        finally:
            _kill_master(self.root / "queue" / "pid" / "master.pid")
            _keep(self.log_path, self.logs)
            shutil.rmtree(self.root, ignore_errors=True)


def _kill_master(pidfile: Path) -> None:
    """Postfix's master, should it outlive its `postfix start-fg` (it is its own group)."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(pidfile.read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"master" in cmdline:
            os.kill(pid, signal.SIGKILL)


def postfix_main_cf(root: Path, lmtp: tuple[str, int], **settings: str) -> str:
    """Postfix's main.cf: accept from loopback for any domain, hand all to `lmtp`; retries
    within a second or two (`settings` add to or override any line)."""
    host, port = lmtp
    lines = {
        "compatibility_level": "3.6",
        "queue_directory": f"{root}/queue",
        "data_directory": f"{root}/data",
        "mail_owner": "postfix",
        "setgid_group": "postdrop",
        "syslog_name": f"postfix-{root.name}",
        "maillog_file": "/dev/stdout",  # the foreground master's output: postfix.log
        "myhostname": "postfix.test",
        "mydestination": "",
        "alias_maps": "",
        "alias_database": "",
        "local_recipient_maps": "",
        "inet_interfaces": HOST,
        "inet_protocols": "ipv4",
        "mynetworks": "127.0.0.0/8",
        "smtpd_relay_restrictions": "permit_mynetworks, reject",
        "default_transport": f"lmtp:inet:{host}:{port}",
        "relay_transport": f"lmtp:inet:{host}:{port}",
        "biff": "no",
        # a message deferred (the LMTP server gone) is tried again within seconds
        "queue_run_delay": "1s",
        "minimal_backoff_time": "1s",
        "maximal_backoff_time": "2s",
        "message_size_limit": str(64 << 20),
        **settings,
    }
    return "".join(f"{k} = {v}\n" for k, v in lines.items())


def start_postfix(lmtp: tuple[str, int], logs: Path, *, port: int = 0, **settings: str) -> Postfix:
    """A private Postfix relaying to `lmtp`, ready (its smtpd greets on `port`)."""
    binary = _require("postfix")
    root = private_dir("postfix-")
    port = port or free_port()
    conf = root / "conf"
    for sub in ("conf", "queue", "data"):
        (root / sub).mkdir()
    postfix_user = pwd.getpwnam("postfix")
    os.chown(root / "data", postfix_user.pw_uid, postfix_user.pw_gid)
    (conf / "main.cf").write_text(postfix_main_cf(root, lmtp, **settings))
    (conf / "master.cf").write_text(MASTER_CF.format(listen=f"{HOST}:{port}"))
    log = root / "postfix.log"
    # `check` makes the queue's directories with their owners and modes.
    checked = subprocess.run(
        [binary, "-c", str(conf), "check"], capture_output=True, text=True, timeout=60, check=False
    )
    if checked.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"postfix check: {checked.stdout}{checked.stderr}")
    proc = subprocess.Popen(
        [binary, "-c", str(conf), "start-fg"],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115 - the child owns it
        start_new_session=True,
    )  # fmt: skip
    server = Postfix(root, port, lmtp, proc, logs)
    try:
        wait_for_greeting("postfix", port, proc, log)
    except BaseException:
        server.stop()
        raise
    return server


def _keep(log: Path, logs: Path) -> None:
    with contextlib.suppress(OSError):
        logs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, logs / log.name)


# ---- the fixture -----------------------------------------------------------------------------


class MailServers:
    """What a test starts (`dovecot`, `postfix`); every one stopped at its teardown."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[Dovecot | Postfix] = []

    def dovecot(self, users: list[str] | tuple[str, ...], *, port: int = 0, **imap: Any) -> Dovecot:
        server = start_dovecot(users, self.logs, port=port, **imap)
        self.started.append(server)
        return server

    def postfix(self, lmtp: tuple[str, int], *, port: int = 0, **settings: str) -> Postfix:
        server = start_postfix(lmtp, self.logs, port=port, **settings)
        self.started.append(server)
        return server

    def stop_all(self) -> None:
        """Stop every server, the last started first; the first failure raised at the end."""
        failure: BaseException | None = None
        for server in reversed(self.started):
            try:
                server.stop()
            except BaseException as exc:  # the others still stop
                failure = failure or exc
        self.started.clear()
        if failure is not None:
            raise failure


@pytest.fixture
def mail_servers(tmp_path: Path) -> Iterator[MailServers]:
    """Start a private Dovecot or Postfix from a test; all stopped at teardown."""
    servers = MailServers(tmp_path / "mail-server-logs")
    try:
        yield servers
    finally:
        servers.stop_all()
