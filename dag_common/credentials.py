"""Who may call what: roles, the credentials that hold them, and telling them apart.

Every route of every service declares the one role it needs (`Role`); a credential holds a
set of roles.  The config names the credentials a service accepts (`credentials:`, each with
a name, its roles, and where its secrets are: a file, or an environment variable; never the
config itself).  A file may hold several secrets, one a line, each valid: a credential is
rotated by adding the new secret, rolling it out to its holders, and removing the old one,
without a restart (`Credentials.reload`, on SIGHUP and when a file changes).

The cluster token of before (`auth_token_file`, `$DG_AUTH_TOKEN`) is still accepted, as the
credential `cluster` holding every role, so that a cluster configured as before works as
before; a cluster drawing the lines leaves it out and gives each process its own
credential (`$DG_CREDENTIAL_FILE`, `--credential-file`).

A service may hold only the SHA-256 digests of the secrets it accepts (a line
`sha256:<64 hex digits>`): then it cannot present them.  A presented secret is compared
with every accepted one in constant time (`hmac.compare_digest`
over SHA-256 digests, every one compared whatever matched), so neither a secret nor which
credential it is leaks through timing.  Secrets are never logged: a `Credential` prints
only its name and roles.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

logger = logging.getLogger(__name__)

MIN_SECRET = 16  # characters: a guessable secret is refused at load
CLUSTER_CREDENTIAL = "cluster"  # the cluster token, as a credential: every role
TOKEN_ENV = "DG_AUTH_TOKEN"  # the cluster token, where no file names it
CREDENTIAL_FILE_ENV = "DG_CREDENTIAL_FILE"  # the credential this process presents


class Role(StrEnum):
    """What a call does, as a credential may be allowed to do it."""

    REPLICATION = "replication"  # node to node: log share, seed, hand-over, coordination
    OPERATOR = "operator"  # activate, switchover, suspend/resume/reseed, mount, backup
    MOVER = "mover"  # a move's writes: locks, override_lock, roll-log, digest, directory
    STORE = "store"  # mail clients and the transport: unlocked mailboxes
    MONITOR = "monitor"  # status, watch, history, queues


class CredentialError(ValueError):
    """A credential that cannot be loaded (a missing file, a short secret)."""


@dataclass(frozen=True)
class Credential:
    """A named holder of roles.  Its secrets are kept as SHA-256 digests only."""

    name: str
    roles: frozenset[Role]
    digests: tuple[bytes, ...] = field(repr=False, default=())

    def holds(self, role: Role) -> bool:
        return role in self.roles

    def describe(self) -> str:
        return f"{self.name!r} ({', '.join(sorted(self.roles)) or 'no role'})"


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


DIGEST_LINE = re.compile(r"^sha256:([0-9a-f]{64})$")


def accepted_digest(line: str) -> bytes:
    """What a line of an accepting side's credential file stands for: `sha256:<64 hex>` is
    the digest of a secret (so a service can accept a credential without holding it:
    `printf %s "$SECRET" | sha256sum`), anything else the secret itself."""
    found = DIGEST_LINE.match(line)
    return bytes.fromhex(found.group(1)) if found else digest(line)


def read_secrets(path: Path) -> list[str]:
    """The secrets of a credential file: one a line, blank lines and `#` comments skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CredentialError(f"cannot read credential file {path}: {exc.strerror}") from None
    secrets = [
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    ]
    for secret in secrets:
        if len(secret) < MIN_SECRET:
            raise CredentialError(f"{path}: a secret shorter than {MIN_SECRET} characters")
    return secrets


class Credentials:
    """The credentials a service accepts, as last loaded."""

    def __init__(self, credentials: Iterable[Credential]) -> None:
        self._all = tuple(credentials)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self._all]

    def identify(self, secret: str | None) -> Credential | None:
        """The credential `secret` belongs to (None: none).  Every accepted digest is
        compared, whatever matched first."""
        if not secret:
            return None
        presented = digest(secret)
        found = None
        for credential in self._all:
            for known in credential.digests:
                if hmac.compare_digest(presented, known) and found is None:
                    found = credential
        return found

    def holders(self, role: Role) -> list[str]:
        return [c.name for c in self._all if c.holds(role)]


def cluster_only(token: str) -> Callable[[], Credentials]:
    """What a service accepts when it is given only the cluster token: that one secret,
    holding every role (the in-process services of the tests, and clusters as before)."""
    accepted = Credentials([Credential(CLUSTER_CREDENTIAL, frozenset(Role), (digest(token),))])
    return lambda: accepted


def from_header(value: str | None) -> str | None:
    """The secret of an `Authorization: Bearer …` header (None: no bearer secret)."""
    if not value or not value.startswith("Bearer "):
        return None
    return value[7:]


def environment_secret(variable: str) -> list[str]:
    value = os.environ.get(variable, "").strip()
    if value and len(value) < MIN_SECRET:
        raise CredentialError(f"${variable}: a secret shorter than {MIN_SECRET} characters")
    return [value] if value else []


class Accepted:
    """The credentials a running service accepts: loaded by `load`, again on `reload()`
    (SIGHUP) and whenever one of `files()` changes (`watch`: its size, mtime or inode,
    looked at every `interval` seconds).  A load that fails keeps the credentials as they
    were, and says why: a half-written file never locks everyone out."""

    def __init__(
        self,
        load: Callable[[], Credentials],
        files: Callable[[], list[Path]],
        *,
        interval: float = 2.0,
        on_reload: Callable[[], None] | None = None,
    ) -> None:
        self._load = load
        self._files = files
        self._interval = interval
        self._on_reload = on_reload  # what else reloads with them (certificates)
        self.current = load()
        self._seen = self._stamps()

    def __call__(self) -> Credentials:
        return self.current

    def _stamps(self) -> dict[Path, tuple[int, int, int] | None]:
        out: dict[Path, tuple[int, int, int] | None] = {}
        for path in self._files():
            try:
                st = path.stat()
                out[path] = (st.st_ino, st.st_size, st.st_mtime_ns)
            except OSError:
                out[path] = None
        return out

    def reload(self) -> bool:
        """Load again; False (and the old ones kept) if that fails."""
        self._seen = self._stamps()
        if self._on_reload is not None:
            try:
                self._on_reload()
            except Exception as exc:  # a certificate half written: the old one kept
                logger.error("certificates not reloaded, the previous ones kept: %s", exc)
        try:
            loaded = self._load()
        except Exception as exc:  # ConfigError, CredentialError: said, the old ones kept
            logger.error("credentials not reloaded, the previous ones kept: %s", exc)
            return False
        before = set(self.current.names)
        self.current = loaded
        logger.warning(
            "credentials reloaded: %s%s",
            ", ".join(loaded.names),
            f" (removed: {', '.join(sorted(before - set(loaded.names)))})"
            if before - set(loaded.names)
            else "",
        )
        return True

    async def watch(self, sleep: Callable[[float], Awaitable[None]]) -> None:
        """Reload whenever a credential file changes (until cancelled)."""
        while True:
            await sleep(self._interval)
            if self._stamps() != self._seen:
                self.reload()
