"""Taking a data directory and a port before anything is opened (dag_common.exclusive)."""

from __future__ import annotations

import os
import socket

import pytest

from dag_common.errors import InUse
from dag_common.exclusive import LOCK_NAME, bind_port, lock_directory


def test_a_locked_directory_is_refused_naming_the_holder(tmp_path):
    fd = lock_directory(tmp_path / "mbx1", "node mbx1")
    try:
        with pytest.raises(InUse) as err:
            lock_directory(tmp_path / "mbx1", "node mbx1")
        assert str(err.value) == (
            f"node mbx1 is already running: pid {os.getpid()} holds {tmp_path / 'mbx1' / LOCK_NAME}"
        )
    finally:
        os.close(fd)
    # Released with its holder: taken again at once.
    os.close(lock_directory(tmp_path / "mbx1", "node mbx1"))


def test_a_port_in_use_is_refused_and_nothing_is_left_bound():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        with pytest.raises(InUse, match=f"node mbx1: 127.0.0.1:{port} is already in use"):
            bind_port("127.0.0.1", port, "node mbx1")
    finally:
        holder.close()
    (sock,) = bind_port("127.0.0.1", port, "node mbx1")
    try:
        # No SO_REUSEPORT: a second listener, even one asking to share, is refused.
        other = socket.socket()
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        with pytest.raises(OSError):
            other.bind(("127.0.0.1", port))
        other.close()
    finally:
        sock.close()
