"""etcd's v3 JSON gateway, spoken with aiohttp: endpoints in order, TLS, authentication.

`EtcdGateway.call(path, body)` POSTs to each endpoint in turn until one answers 200; one
that cannot be reached, or answers anything else (a member without quorum, a proxy's error
page), is passed over for the next, and when none answers the call is a
`ClusterStoreError` that says, endpoint by endpoint, why (with what to check for TLS).

TLS (`cluster_store` in the config): https:// endpoints are verified against `ca_file`
(else the system's CAs), with a client certificate when etcd asks for one.  With
`username` and `password_file` the gateway authenticates (`/v3/auth/authenticate`) and sends
the token as the `Authorization` header (the bare token: etcd refuses `Bearer <token>`).
What etcd's gateway answers when it no longer takes a token (etcd 3.4, seen on a real one):

    401 {"error": "etcdserver: invalid auth token", "code": 16}
        expired (simple token TTL, JWT exp), or revoked: auth disabled and enabled again,
        or the user's password changed
    400 {"error": "etcdserver: revision of auth store is old", "code": 3}
        a JWT issued before the last change to users or roles
    400 {"error": "etcdserver: user name is empty", "code": 3}
        no token sent while auth is on (it was off when the gateway authenticated)

On any of these the gateway authenticates again, once per call, and retries the call.
Wrong credentials (400 "etcdserver: authentication failed, invalid user ID or password")
are a `ClusterStoreError` at once: every member would say the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import orjson

from dag_common.config_store import EtcdStore
from dag_common.errors import ClusterStoreError, ConfigError
from dag_common.json_object import JsonObject

logger = logging.getLogger(__name__)

_TOKEN_REFUSED = frozenset(
    {
        "etcdserver: invalid auth token",
        "etcdserver: revision of auth store is old",
        "etcdserver: user name is empty",
    }
)
_BAD_CREDENTIALS = "etcdserver: authentication failed, invalid user ID or password"
_AUTH_OFF = "etcdserver: authentication is not enabled"


@dataclass(frozen=True, slots=True)
class EtcdCredentials:
    """An etcd user; its password is read from `password_file` at each authentication, so a
    rotated Secret is used without a restart."""

    username: str
    password_file: Path

    def password(self) -> str:
        """The password: the file's text without its line end (a password may hold spaces)."""
        try:
            text = self.password_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ClusterStoreError(
                f"cannot read cluster_store.password_file {self.password_file}: "
                f"{exc.strerror or exc}"
            ) from exc
        password = text.rstrip("\r\n")
        if not password:
            raise ClusterStoreError(f"cluster_store.password_file {self.password_file} is empty")
        return password


@dataclass(frozen=True, slots=True)
class _Answer:
    """One endpoint's answer: the JSON object of a 200, else why not (`problem`, for the
    error message) and etcd's own error sentence when it gave one (`refusal`)."""

    data: JsonObject | None
    problem: str = ""
    refusal: str = ""


def _ssl_error(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error under an aiohttp connection error, if there is one."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return seen
        os_error = getattr(seen, "os_error", None)
        if isinstance(os_error, ssl.SSLError):
            return os_error
        seen = seen.__cause__
    return None


def _unreachable(endpoint: str, exc: BaseException) -> str:
    """Why `endpoint` could not be asked, in one sentence with what to check."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        cert_error = exc.certificate_error
        reason = getattr(cert_error, "verify_message", "") or str(cert_error)
        return (
            f"its TLS certificate is not trusted ({reason}): cluster_store.ca_file must name "
            "the CA that signed it (without ca_file, the system's CAs are used)"
        )
    tls = _ssl_error(exc)
    alert = tls.reason or "" if tls is not None else ""
    if "_ALERT_" in alert and ("CERTIFICATE" in alert or "UNKNOWN_CA" in alert):
        # The server's alert about our certificate (none sent, or one it does not trust).
        return (
            f"etcd refused the TLS handshake ({tls.reason}): it wants a client certificate it "
            "trusts (cluster_store.cert_file and key_file)"
        )
    if tls is not None:
        return f"TLS failed: {tls.reason or tls}"
    if isinstance(exc, aiohttp.ServerDisconnectedError) and endpoint.startswith("http://"):
        return "the server closed the connection (if this etcd serves TLS, name it https://)"
    if isinstance(exc, TimeoutError):
        return "no answer in time (cluster_store.timeout)"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _etcd_error(raw: bytes) -> str:
    """etcd's error sentence in a gateway error answer ({"error": ..., "code": ...})."""
    try:
        data = orjson.loads(raw)
    except ValueError:
        return ""
    if isinstance(data, dict):
        for key in ("error", "message"):
            if isinstance(data.get(key), str):
                return str(data[key])
    return ""


def _check_file(field: str, path: Path | None) -> None:
    if path is not None and not path.is_file():
        raise ConfigError(f"cluster_store.{field}: {path}: no such file")


def _ssl_context(settings: EtcdStore) -> ssl.SSLContext | None:
    """The TLS context for https:// endpoints (None: plain http only)."""
    if not any(urlsplit(e).scheme == "https" for e in settings.endpoints):
        return None
    try:
        ctx = ssl.create_default_context(
            cafile=str(settings.ca_file) if settings.ca_file is not None else None
        )
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
        raise ConfigError(
            f"cluster_store.ca_file: {settings.ca_file}: not a PEM CA certificate ({reason})"
        ) from exc
    if settings.cert_file is not None and settings.key_file is not None:
        try:
            ctx.load_cert_chain(settings.cert_file, settings.key_file)
        except (OSError, ssl.SSLError) as exc:
            reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
            if reason == "KEY_VALUES_MISMATCH":
                reason = "the key is not the certificate's"
            raise ConfigError(
                f"cluster_store.cert_file/key_file: {settings.cert_file}, {settings.key_file}: "
                f"not a usable client certificate and key ({reason})"
            ) from exc
    return ctx


def open_gateway(settings: EtcdStore) -> EtcdGateway:
    """The gateway `settings` describe, its TLS context built from the files.

    A missing or unusable file is a `ConfigError` naming the field, here at start-up rather
    than at the first call (config loading does not check them: see `EtcdStore`)."""
    for field in ("ca_file", "cert_file", "key_file", "password_file"):
        _check_file(field, getattr(settings, field))
    credentials = None
    if settings.username is not None and settings.password_file is not None:
        credentials = EtcdCredentials(settings.username, settings.password_file)
        try:
            credentials.password()
        except ClusterStoreError as exc:
            raise ConfigError(str(exc)) from exc
        plain = [e for e in settings.endpoints if urlsplit(e).scheme != "https"]
        if plain:
            logger.warning(
                "etcd user %s: the password goes in clear text to %s (use https://)",
                settings.username,
                ", ".join(plain),
            )
    return EtcdGateway(
        settings.endpoints,
        timeout=settings.timeout.total_seconds(),
        ssl_context=_ssl_context(settings),
        credentials=credentials,
    )


class EtcdGateway:
    """One aiohttp session to an etcd cluster's v3 JSON gateway."""

    def __init__(
        self,
        endpoints: list[str],
        *,
        timeout: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
        credentials: EtcdCredentials | None = None,
    ) -> None:
        self._endpoints = [e.rstrip("/") for e in endpoints]
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._ssl_context = ssl_context
        self._credentials = credentials
        self._session: aiohttp.ClientSession | None = None
        # The token and how many times the gateway authenticated (0: not yet).  A call that
        # sees its token refused renews only if nobody renewed since it took the token.
        self._token: str | None = None
        self._token_round = 0
        self._auth_lock = asyncio.Lock()

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                connector=aiohttp.TCPConnector(ssl=self._ssl_context or True),
            )
        return self._session

    async def _post(self, endpoint: str, path: str, body: JsonObject, token: str | None) -> _Answer:
        session = self._open_session()
        headers = {"Authorization": token} if token else None
        try:
            async with session.post(f"{endpoint}{path}", json=body, headers=headers) as resp:
                status, raw = resp.status, await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            return _Answer(None, f"{endpoint}: {_unreachable(endpoint, exc)}")
        if status != 200:
            refusal = _etcd_error(raw)
            text = refusal or raw[:200].decode(errors="replace")
            if refusal == "etcdserver: user name is empty" and self._credentials is None:
                text += " (etcd has authentication on: set cluster_store.username and "
                text += "password_file)"
            return _Answer(None, f"{endpoint}: HTTP {status} {text}", refusal)
        try:
            data = orjson.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            return _Answer(None, f"{endpoint}: not a JSON object: {raw[:100]!r}")
        return _Answer(data)

    async def _current_token(self) -> tuple[int, str | None]:
        if self._credentials is None:
            return 0, None
        if self._token_round == 0:
            return await self._renew(0)
        return self._token_round, self._token

    async def _renew(self, seen_round: int) -> tuple[int, str | None]:
        """Authenticate, unless another call did since `seen_round`; the round and token."""
        async with self._auth_lock:
            if self._token_round == seen_round:
                self._token = await self._authenticate()
                self._token_round += 1
            return self._token_round, self._token

    async def _authenticate(self) -> str | None:
        """A new token (None: etcd has authentication off, calls need none)."""
        assert self._credentials is not None
        name = self._credentials.username
        body = {"name": name, "password": self._credentials.password()}
        errors = []
        for endpoint in self._endpoints:
            answer = await self._post(endpoint, "/v3/auth/authenticate", body, None)
            if answer.refusal == _BAD_CREDENTIALS:
                raise ClusterStoreError(
                    f"etcd refused user {name!r}: wrong user name or password "
                    f"(cluster_store.username, and the password in "
                    f"{self._credentials.password_file})"
                )
            if answer.refusal == _AUTH_OFF:
                logger.warning(
                    "etcd at %s has authentication off: calls go without a token", endpoint
                )
                return None
            token = (answer.data or {}).get("token")
            if isinstance(token, str) and token:
                return token
            errors.append(answer.problem or f"{endpoint}: no token in the answer")
        raise ClusterStoreError(
            f"no etcd endpoint could authenticate user {name!r}: {'; '.join(errors)}"
        )

    async def call(self, path: str, body: JsonObject) -> JsonObject:
        """POST `body` to `path` on the first endpoint that answers 200; its JSON object."""
        seen_round, token = await self._current_token()
        renewed = False
        errors = []
        # Every endpoint in turn: one that cannot be reached, or answers anything but 200
        # (a member without quorum, a proxy's error page), is passed over for the next.
        for endpoint in self._endpoints:
            answer = await self._post(endpoint, path, body, token)
            if answer.refusal in _TOKEN_REFUSED and self._credentials and not renewed:
                # Once a call: a token refused again right after renewal is not chased.
                renewed = True
                logger.info("etcd at %s: %s; authenticating again", endpoint, answer.refusal)
                seen_round, token = await self._renew(seen_round)
                answer = await self._post(endpoint, path, body, token)
            if answer.data is not None:
                return answer.data
            errors.append(answer.problem)
        raise ClusterStoreError(f"no etcd endpoint answered {path}: {'; '.join(errors)}")

    async def aclose(self) -> None:
        """Close the HTTP session and wait for it."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    def close(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            # close() is synchronous (the embedded store's is); let the loop finish it.
            # (no loop left: the process is ending and the socket goes with it)
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(session.close())
