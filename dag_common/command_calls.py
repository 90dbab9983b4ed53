"""A command line's calls to the nodes and transports of a cluster (the `replication-node`
and `transport` commands), each within the command's `--timeout`, which the callee is told
as the call's deadline (`dag_common.deadline`: a node stopped while the call waited does
not carry it out when it runs again), and each way a call fails said once, here, in one
sentence naming whom it called (issue 48):

    node mbx3 (http://10.0.0.3:7902) cannot be reached: connection refused
    node mbx3 did not answer within 15s: the suspend of DB1\\mbx3 may still be carried
        out, if mbx3 read the call in time: `replication-node status --database DB1` shows
        whether it was
    node mbx3 refused the call as read after its deadline, but answered in time: its
        clock is about 3600s ahead of this host's; …

A command asking one callee lets `CallFailed` end it (exit 1); one asking each node in turn
(`audit`, `db history`) catches it and says which it could not ask.  What a callee answered
(its status and JSON) is the command's to read.

`get_now` is `Calls.get` without an event loop, over the blocking client
(`dag_common.blocking_http`): for a read that makes one call (`transport status`), which
then imports neither aiohttp nor asyncio; aiohttp is imported by `Calls` alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import TYPE_CHECKING

from dag_common.clock import Clock, SystemClock
from dag_common.config import ClusterConfig, load_token
from dag_common.deadline import LATE, header, skew_sentence
from dag_common.errors import CommandFailed, TokenRefused
from dag_common.http_client import client_ssl
from dag_common.json_object import JsonObject
from dag_common.node_answer import AUTH_FAILED, NoAnswer

if TYPE_CHECKING:
    import aiohttp


class CalleeKind(StrEnum):
    """What a command calls: said in its sentences ("node mbx3 cannot be reached")."""

    NODE = "node"
    TRANSPORT = "transport"


@dataclass(frozen=True, slots=True)
class Callee:
    """Whom a command calls: a node or a transport of the config, by its name and url."""

    kind: CalleeKind
    name: str
    url: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass(frozen=True, slots=True)
class Change:
    """What a call asks to be done, and how an operator sees whether it was: said when the
    call got no answer in time, since it may be carried out all the same."""

    what: str  # "the suspend of DB1\\mbx3"
    check: str  # "`replication-node status --database DB1` shows whether it was"


class CallFailed(CommandFailed):
    """A call that got no answer, said naming its callee (exit 1)."""

    def __init__(self, message: str, *, callee: Callee) -> None:
        super().__init__(message)
        self.callee = callee


def credential_refused(status: int, answer: JsonObject) -> TokenRefused:
    """A callee's 401 (the credential is not known) or 403 (known, without the role the call
    needs: the callee's own sentence names it) as the error that ends a command, exit 2,
    said as `status` and the `db` calls say it."""
    if status == 403 and answer.get("error"):
        return TokenRefused(str(answer["error"]))
    return TokenRefused(AUTH_FAILED)


def seconds(value: float) -> str:
    """A timeout as a command line writes it: 15s, 2m, 1.5s."""
    if value >= 60 and value % 60 == 0:
        return f"{value / 60:g}m"
    return f"{value:g}s"


def no_answer(callee: Callee, failure: NoAnswer, timeout: float, change: Change | None) -> str:
    """The sentence a call that got no answer ends its command with."""
    if not failure.sent:
        return f"{callee} ({callee.url}) cannot be reached: {failure}"
    if failure.timed_out:
        said = f"{callee} did not answer within {seconds(timeout)}"
    else:
        said = f"{callee} ({callee.url}) broke off the call: {failure}"
    if change is None:
        return said
    return (
        f"{said}: {change.what} may still be carried out, if {callee.name} read the call "
        f"in time: {change.check}"
    )


class Calls:
    """The calls of one command, over one HTTP session: each within `timeout` seconds,
    its deadline (this host's clock) sent along."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        timeout: float,
        clock: Clock | None = None,
        token: str | None = None,
    ) -> None:
        self._config = config
        self.timeout = timeout
        self._clock = clock or SystemClock()
        self._token = token if token is not None else load_token(config)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Calls:
        from dag_common.http_client import client_session  # aiohttp: for `Calls` alone

        self._session = client_session(self._config)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        """The session the calls go over (for a command that also follows a stream)."""
        assert self._session is not None, "Calls is used as `async with Calls(…) as calls`"
        return self._session

    @property
    def token(self) -> str:
        return self._token

    def node(self, name: str) -> Callee:
        """The config's node `name`."""
        return Callee(CalleeKind.NODE, name, self._config.node(name).url)

    def transport(self, name: str) -> Callee:
        """The config's transport `name`."""
        return Callee(CalleeKind.TRANSPORT, name, self._config.transport_node(name).url)

    async def get(self, callee: Callee, path: str) -> tuple[int, JsonObject]:
        """GET `path` of `callee`: (HTTP status, its JSON object); CallFailed if none."""
        return await self._call("GET", callee, path, None, None)

    async def post(
        self,
        callee: Callee,
        path: str,
        body: JsonObject | None = None,
        *,
        change: Change,
        data: tuple[bytes, str] | None = None,
    ) -> tuple[int, JsonObject]:
        """POST `path` of `callee`, asking for `change`: (HTTP status, its JSON object);
        CallFailed if none, saying that `change` may still be carried out when the call
        was sent.  `data`: bytes and their Content-Type, posted instead of `body`."""
        return await self._call("POST", callee, path, body or {}, change, data)

    async def _call(
        self,
        method: str,
        callee: Callee,
        path: str,
        body: JsonObject | None,
        change: Change | None,
        data: tuple[bytes, str] | None = None,
    ) -> tuple[int, JsonObject]:
        assert self._session is not None, "Calls is used as `async with Calls(…) as calls`"
        from dag_common.node_status import admin_request  # imported with the session's aiohttp

        deadline = self._clock.now().timestamp() + self.timeout
        try:
            code, answer = await admin_request(
                self._session,
                method,
                callee.url + path,
                self._token,
                body,
                timeout=self.timeout,
                headers={**header(deadline), **({"Content-Type": data[1]} if data else {})},
                data=data[0] if data else None,
            )
        except NoAnswer as exc:
            raise CallFailed(no_answer(callee, exc, self.timeout, change), callee=callee) from None
        return answered(callee, code, answer, self._clock)


def answered(callee: Callee, code: int, answer: JsonObject, clock: Clock) -> tuple[int, JsonObject]:
    """A callee's answer, unless it refused the call as read after its deadline though it
    answered in time (CallFailed saying the clocks differ)."""
    server_time = answer.get("server_time")
    if code == LATE and isinstance(server_time, int | float):
        # Refused as late, yet answered before this host's deadline: the clocks differ.
        ahead = server_time - clock.now().timestamp()
        raise CallFailed(skew_sentence(str(callee), max(ahead, 0.0)), callee=callee)
    return code, answer


def get_now(
    config: ClusterConfig,
    callee: Callee,
    path: str,
    *,
    timeout: float,
    clock: Clock | None = None,
    token: str | None = None,
) -> tuple[int, JsonObject]:
    """GET `path` of `callee` as `Calls.get` does (its deadline sent along, the same
    sentences), with the blocking client: (HTTP status, its JSON object); CallFailed."""
    from dag_common.blocking_http import get_json  # http.client: for the reads alone

    clock = clock or SystemClock()
    token = token if token is not None else load_token(config)
    deadline = clock.now().timestamp() + timeout
    try:
        code, answer = get_json(
            callee.url + path, token, timeout=timeout, ssl_context=client_ssl(config),
            headers=header(deadline),
        )  # fmt: skip
    except NoAnswer as exc:
        raise CallFailed(no_answer(callee, exc, timeout, None), callee=callee) from None
    return answered(callee, code, answer, clock)
