"""The mover's Data Guarantee client (gRPC aio).

A transport failure is answered as Retry (the service may be restarting), never as
Satisfied; a request the service refuses (unknown database, bad token) fails the move.

CheckReplicationFlush goes by LSN, exact and clock-free, when the service offers it; a
service that knows only the seed's commit-time check does not know the `lsn` field, sees no
target and answers INVALID_ARGUMENT: the client then asks by commit time, and keeps doing so.
The LSN names its stream incarnation (`Lsn.epoch`: the epoch of the active that rolled the
generation), so a service that knows epochs answers for that stream and says `lost` when a
failover forked below it.  Neither the commit-time check nor an LSN without an epoch can see
a fork: the mover's own digest verification is what catches a loss then.

Both questions may carry a `wait` (issue 14): the service answers as soon as Satisfied, or
at the wait's end with the answer of that moment, saying how long it waited (`waited`).  A
service that predates it ignores the field and answers at once (`waited` None): the mover
then sleeps between questions as before.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import grpc

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
from dag_common.config import ClusterConfig
from dag_common.guarantee_wire import GuaranteeRequest, lsn_to_pb
from dag_common.model import Lsn
from mrs_client.errors import MoveFailed
from mrs_client.policy import GuaranteeAnswer, GuaranteeStatus

_STATUS = {
    pb.RETRY: GuaranteeStatus.RETRY,
    pb.SATISFIED: GuaranteeStatus.SATISFIED,
    pb.NOT_SATISFIED: GuaranteeStatus.NOT_SATISFIED,
}
_TRANSIENT = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.CANCELLED,
}


def answer_from(response: pb.GuaranteeResponse) -> GuaranteeAnswer:
    """The mover's view of a response; an unknown status is a Retry, never Satisfied."""
    status = _STATUS.get(response.status, GuaranteeStatus.RETRY)
    reason = response.reason
    not_met = [
        f"{c.node}: " + "; ".join(f"{k.name} {k.detail}" for k in c.checks if not k.passed)
        for c in response.copies
        if not c.meets and any(not k.passed for k in c.checks)
    ]
    if status is not GuaranteeStatus.SATISFIED and not_met:
        reason = f"{reason} [{' | '.join(not_met)}]"
    short = "; ".join(
        f"{c.node}: {next(k.detail for k in c.checks if not k.passed)}"
        for c in response.copies
        if not c.meets and any(not k.passed for k in c.checks)
    )
    lost = bool(response.lost)
    if lost and status is GuaranteeStatus.SATISFIED:
        status = GuaranteeStatus.NOT_SATISFIED  # never progress on a lost write
    return GuaranteeAnswer(
        status=status,
        retry_after=timedelta(seconds=response.retry_after.ToTimedelta().total_seconds()),
        reason=reason,
        epoch=int(response.epoch),
        lost=lost,
        waited=response.waited.ToTimedelta() if response.HasField("waited") else None,
        short=short if status is not GuaranteeStatus.SATISFIED else "",
        expected_in=response.expected_in.ToTimedelta()
        if response.HasField("expected_in") and status is not GuaranteeStatus.SATISFIED
        else None,
    )


def _failed(method: str, exc: grpc.aio.AioRpcError) -> GuaranteeAnswer:
    """A transport failure is a Retry; a refusal fails the move (MoveFailed)."""
    if exc.code() in _TRANSIENT:
        return GuaranteeAnswer(
            GuaranteeStatus.RETRY,
            timedelta(seconds=10),
            f"the Data Guarantee service cannot be reached: {exc.code().name}",
        )
    raise MoveFailed(f"{method} refused: {exc.code().name}: {exc.details()}") from exc


class GrpcGuaranteeClient:
    """CheckReplicationHealth and CheckReplicationFlush over one channel."""

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float = 10.0,
    ) -> None:
        self._channel = (
            grpc.aio.secure_channel(target, credentials)
            if credentials
            else grpc.aio.insecure_channel(target)
        )
        self._stub = pb_grpc.DataGuaranteeStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout
        self.flush_by_lsn = True  # until the service shows it does not know the LSN

    @classmethod
    def from_config(cls, config: ClusterConfig, *, token: str | None) -> GrpcGuaranteeClient:
        credentials = None
        if config.tls is not None:
            credentials = grpc.ssl_channel_credentials(config.tls.ca_file.read_bytes())
        return cls(config.guarantee_api.listen, token=token, credentials=credentials)

    async def _call(self, method: str, request: GuaranteeRequest) -> GuaranteeAnswer:
        try:
            response = await self._send(method, request)
        except grpc.aio.AioRpcError as exc:
            return _failed(method, exc)
        return answer_from(response)

    async def _send(self, method: str, request: GuaranteeRequest) -> pb.GuaranteeResponse:
        # The call's deadline leaves the service the whole wait asked, and then its answer.
        wait = request.wait.ToTimedelta().total_seconds() if request.HasField("wait") else 0.0
        return await getattr(self._stub, method)(
            request, metadata=self._metadata, timeout=self._timeout + wait
        )

    async def check_health(
        self, database: str, caller_id: str, wait: timedelta | None = None
    ) -> GuaranteeAnswer:
        """With `wait`: the service answers as soon as Satisfied, or at its end."""
        request = pb.CheckReplicationHealthRequest(database=database, caller_id=caller_id)
        if wait:
            request.wait.FromTimedelta(wait)
        return await self._call("CheckReplicationHealth", request)

    async def check_flush(
        self,
        database: str,
        caller_id: str,
        lsn: Lsn,
        commit_time: datetime,
        wait: timedelta | None = None,
    ) -> GuaranteeAnswer:
        """Satisfied once the counted copies replayed `lsn`'s generation of the stream of its
        epoch (or, naming a record, `Lsn.record_offset`, hold it in block mode) or, from a
        service without LSN, replayed a log closed after `commit_time` + its clock skew."""
        by_time = pb.CheckReplicationFlushRequest(database=database, caller_id=caller_id)
        by_time.commit_time.FromDatetime(commit_time)
        if wait:
            by_time.wait.FromTimedelta(wait)
        if self.flush_by_lsn:
            by_lsn = pb.CheckReplicationFlushRequest(
                database=database,
                caller_id=caller_id,
                lsn=lsn_to_pb(lsn),
            )
            if wait:
                by_lsn.wait.FromTimedelta(wait)
            try:
                return answer_from(await self._send("CheckReplicationFlush", by_lsn))
            except grpc.aio.AioRpcError as exc:
                if exc.code() is not grpc.StatusCode.INVALID_ARGUMENT:
                    return _failed("CheckReplicationFlush", exc)
                # Asked again by commit time below: if that is refused too, the service
                # refuses the request itself and the move fails with its words.
                self.flush_by_lsn = False
        return await self._call("CheckReplicationFlush", by_time)

    async def close(self) -> None:
        await self._channel.close()
