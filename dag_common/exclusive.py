"""Taking what a server needs before it opens anything: its data directory, by an exclusive
lock a second process cannot take (`lock_directory`), and its listening port
(`bind_port`).  Either refusal is `InUse`, naming who holds what; nothing else was touched.

The lock is `flock` on `<dir>/node.lock`, holding the holder's pid: the kernel releases it
when the holder exits, however it exits, so a crashed node never leaves a stale lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path

from dag_common.errors import InUse

LOCK_NAME = "node.lock"


def lock_directory(path: Path, what: str) -> int:
    """Lock `path` (created if missing) for this process; the lock's file descriptor, to
    keep open as long as the lock is wanted.  InUse naming the holder's pid if it is held."""
    path.mkdir(parents=True, exist_ok=True)
    lock = path / LOCK_NAME
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise InUse(f"{what} is already running: pid {holder} holds {lock}") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def bind_port(host: str, port: int, what: str) -> list[socket.socket]:
    """Listening sockets on `host`:`port`, one per address the host name has (as aiohttp's
    TCPSite binds them), without SO_REUSEPORT, so that a second listener is refused: InUse
    if another process has the port (nothing is left bound then)."""
    bound: list[socket.socket] = []
    seen = set()
    for family, kind, proto, _, address in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    ):
        if (family, address) in seen:
            continue
        seen.add((family, address))
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            sock.close()
            for other in bound:
                other.close()
            if exc.errno == errno.EADDRINUSE:
                raise InUse(f"{what}: {host}:{port} is already in use by another process") from None
            raise
        sock.listen(512)
        sock.setblocking(False)
        bound.append(sock)
    return bound
