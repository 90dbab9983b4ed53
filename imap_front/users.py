"""The IMAP front's users: each one's mailbox and password hash, read from the users file
(`imap.users_file`), and the bounded verification of a password against them.

The file is YAML, a mapping of user name to entry:

    alice:
      mailbox: alice                  # the one mailbox the user sees
      password: $argon2id$v=19$...    # or a list of hashes (a rotation: either is accepted)

Hashes are argon2id, made and checked with argon2-cffi (`python -m imap_front passwd`
prints one).  The file is read again when it changes (looked at on each login; a read that
fails keeps the users read before, and says why in the log); the front never writes it.

An argon2 verification takes 64 MiB and about 150 ms at the library's defaults, so they
run in threads `login_concurrency` at a time: a flood of logins waits for a turn instead of
taking the front's memory, and one that waits longer than `LOGIN_WAIT` is refused
(Unavailable) rather than held.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from dag_common.api_types import NAME_PATTERN
from dag_common.yaml_file import read_yaml
from imap_front.errors import Unavailable, UsersFileError

logger = logging.getLogger(__name__)

LOGIN_WAIT = 10.0  # seconds a login waits for a verification's turn, at most
HASHER = PasswordHasher()  # argon2id, the library's defaults (RFC 9106's second choice)


@dataclass(frozen=True, slots=True)
class User:
    """A user: their name, their mailbox, the hashes their password may match."""

    name: str
    mailbox: str
    hashes: tuple[str, ...]


def parse_users(data: object, source: str) -> dict[str, User]:
    """The users a users file's YAML holds; UsersFileError saying what is wrong."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsersFileError(f"{source}: a mapping of user name to entry is expected")
    users = {}
    for name, entry in data.items():
        if not isinstance(name, str) or not name or len(name) > 255 or not name.isprintable():
            raise UsersFileError(f"{source}: a user's name must be printable text: {name!r}")
        if not isinstance(entry, dict) or set(entry) - {"mailbox", "password"}:
            raise UsersFileError(f"{source}: user {name!r}: give its mailbox and password only")
        mailbox = entry.get("mailbox")
        if not isinstance(mailbox, str) or not re.fullmatch(NAME_PATTERN, mailbox):
            raise UsersFileError(f"{source}: user {name!r}: mailbox is not a mailbox name")
        hashes = entry.get("password")
        hashes = [hashes] if isinstance(hashes, str) else hashes
        if (
            not isinstance(hashes, list)
            or not hashes
            or not all(isinstance(h, str) and h.startswith("$argon2id$") for h in hashes)
        ):
            raise UsersFileError(
                f"{source}: user {name!r}: password must be an argon2id hash ($argon2id$…) "
                "or a list of them"
            )
        users[name] = User(name, mailbox, tuple(hashes))
    return users


def read_users(path: Path) -> dict[str, User]:
    """The users of the file at `path`."""
    return parse_users(read_yaml(path, "users file", UsersFileError), str(path))


def matches(user: User, password: str) -> bool:
    """Whether `password` matches one of the user's hashes (CPU and 64 MiB: in a thread)."""
    for stored in user.hashes:
        try:
            if HASHER.verify(stored, password):
                return True
        except (VerificationError, InvalidHashError):
            continue
    return False


class Users:
    """The users file as it is now, and the logins checked against it."""

    def __init__(self, path: Path | None, *, concurrency: int) -> None:
        self._path = path
        self._stamp: tuple[int, int] | None = None
        self._users: dict[str, User] = {}
        self._turns = asyncio.Semaphore(concurrency)
        if path is not None:
            self._reload(first=True)

    def _reload(self, *, first: bool = False) -> None:
        assert self._path is not None
        try:
            st = self._path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            self._users = read_users(self._path)
            self._stamp = stamp
            logger.info("users file %s read: %d users", self._path, len(self._users))
        except (OSError, UsersFileError) as exc:
            if first:
                raise UsersFileError(str(exc)) from None
            logger.warning("users file %s not read again, the users before kept: %s",
                           self._path, exc)  # fmt: skip

    def user(self, name: str) -> User | None:
        """The user called `name` (the file read again if it changed)."""
        if self._path is not None:
            self._reload()
        return self._users.get(name)

    async def verify(self, name: str, password: str) -> User | None:
        """The user, if `password` is theirs; None otherwise.  Unavailable if no turn to
        verify came within LOGIN_WAIT."""
        user = self.user(name)
        try:
            await asyncio.wait_for(self._turns.acquire(), LOGIN_WAIT)
        except TimeoutError:
            raise Unavailable("too many logins at once: try again") from None
        try:
            if user is None:  # the same work for a user that does not exist: no oracle
                await asyncio.to_thread(matches, _nobody(), password)
                return None
            return user if await asyncio.to_thread(matches, user, password) else None
        finally:
            self._turns.release()


@functools.cache
def _nobody() -> User:
    return User("", "", (HASHER.hash("no user has this password"),))
