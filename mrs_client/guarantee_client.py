"""The mover's Data Guarantee client (gRPC aio).

A transport failure is answered as Retry (the service may be restarting), never as
Satisfied; a request the service refuses (unknown database, bad token) fails the move.
"""

from __future__ import annotations

from datetime import timedelta

import grpc

from dag_common.config import ClusterConfig
from guarantee_api._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from guarantee_api._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
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
    return GuaranteeAnswer(
        status=status,
        retry_after=timedelta(seconds=response.retry_after.ToTimedelta().total_seconds()),
        reason=reason,
    )


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

    @classmethod
    def from_config(cls, config: ClusterConfig, *, token: str | None) -> GrpcGuaranteeClient:
        credentials = None
        if config.tls is not None:
            credentials = grpc.ssl_channel_credentials(config.tls.ca_file.read_bytes())
        return cls(config.guarantee_api.listen, token=token, credentials=credentials)

    async def _call(self, method: str, request: object) -> GuaranteeAnswer:
        try:
            response = await getattr(self._stub, method)(
                request, metadata=self._metadata, timeout=self._timeout
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() in _TRANSIENT:
                return GuaranteeAnswer(
                    GuaranteeStatus.RETRY,
                    timedelta(seconds=10),
                    f"the Data Guarantee service cannot be reached: {exc.code().name}",
                )
            raise MoveFailed(f"{method} refused: {exc.code().name}: {exc.details()}") from exc
        return answer_from(response)

    async def check_health(self, database: str, caller_id: str) -> GuaranteeAnswer:
        return await self._call(
            "CheckReplicationHealth",
            pb.CheckReplicationHealthRequest(database=database, caller_id=caller_id),
        )

    async def check_flush(self, database: str, caller_id: str, generation: int) -> GuaranteeAnswer:
        """Flush by LSN: satisfied once the counted copies replayed `generation`."""
        return await self._call(
            "CheckReplicationFlush",
            pb.CheckReplicationFlushRequest(
                database=database, caller_id=caller_id, lsn=pb.Lsn(generation=generation, offset=0)
            ),
        )

    async def close(self) -> None:
        await self._channel.close()
