"""`grpc.health.v1.Health` with all three of its calls: grpcio-health-checking's asyncio
servicer answers Check and Watch, and leaves List to the generated base class, which
answers UNIMPLEMENTED and logs a NotImplementedError with its traceback at every call."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer as _AioHealthServicer


class HealthServicer(_AioHealthServicer):
    """Check, Watch, and List: every service's status as last set."""

    async def List(
        self, request: health_pb2.HealthListRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthListResponse:
        """Every service and its status, at once (the statuses Check answers)."""
        # The base class keeps the statuses Check answers in `_server_status` and offers no
        # other way to read them all; a copy kept here could drift from them.
        return health_pb2.HealthListResponse(
            statuses={
                name: health_pb2.HealthCheckResponse(status=status)
                for name, status in self._server_status.items()
            }
        )
