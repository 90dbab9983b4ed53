"""Shared by the guarantee API tests: cluster configs (parsed, or as a file), node status
bodies, a service started over fake nodes, and a health request with the token."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2_grpc as pb_grpc
from dag_common.clock import ManualClock
from dag_common.config import ClusterConfig, parse_config
from dag_common.credentials import Credentials
from dag_common.model import CopyRole, CopyStatus, CopyStatusReport, NodeStatus
from guarantee_api.server import GuaranteeService
from tests.cluster_harness import TOKEN, write_cluster_config
from tests.cluster_harness import cluster_config as config_dict
from tests.guarantee_api.fake_nodes import FakeNodes

AUTH = (("authorization", f"Bearer {TOKEN}"),)
T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SITES = {"mbx1": "redmond", "mbx2": "redmond", "mbx3": "dublin"}


def cluster_config(
    urls: dict[str, str], tmp: Path, *, db1_constraint: str = "SecondCopy", **api: object
) -> ClusterConfig:
    """A three-node, two-site cluster: DB1 on all three nodes, DB2 on mbx2 only."""
    return parse_config(
        config_dict(
            [(n, SITES[n], urls[n]) for n in ("mbx1", "mbx2", "mbx3")],
            [
                {
                    "name": "DB1",
                    "data_move_replication_constraint": db1_constraint,
                    "copies": [
                        {"node": "mbx1", "activation_preference": 1},
                        {"node": "mbx2", "activation_preference": 2},
                        {"node": "mbx3", "activation_preference": 3},
                    ],
                },
                {"name": "DB2", "copies": [{"node": "mbx2", "activation_preference": 1}]},
            ],
            cluster="dag1",
            guarantee_api={
                "listen": "127.0.0.1:0",
                "http_listen": "127.0.0.1:0",
                "history_dir": str(tmp / "history"),
                **api,
            },
        ),
        base_dir=tmp,
    )


def write_config(path: Path, urls: dict[str, str], **api: object) -> Path:
    """A config file for `guarantee-api serve`: DB1 on the nodes at `urls` (mbx3 in dublin,
    the others in redmond)."""
    return write_cluster_config(
        path,
        config_dict(
            [(n, "redmond" if n != "mbx3" else "dublin", u) for n, u in urls.items()],
            [
                {
                    "name": "DB1",
                    "copies": [
                        {"node": n, "activation_preference": i + 1} for i, n in enumerate(urls)
                    ],
                }
            ],
            cluster="dag1",
            guarantee_api={"listen": "127.0.0.1:0", "http_listen": "127.0.0.1:0", **api},
        ),
    )


def report(
    node: str,
    database: str = "DB1",
    *,
    role: CopyRole = CopyRole.PASSIVE,
    status: CopyStatus | None = None,
    replayed: int = 100,
    cq: int = 0,
    rq: int = 0,
    replayed_time: datetime = T0,
    lag: timedelta = timedelta(0),
) -> CopyStatusReport:
    """One copy's status as its node would report it."""
    if status is None:
        status = CopyStatus.MOUNTED if role is CopyRole.ACTIVE else CopyStatus.HEALTHY
    generated = replayed + rq + cq
    return CopyStatusReport(
        database=database,
        node=node,
        site=SITES[node],
        role=role,
        status=status,
        activation_preference=int(node[-1]),
        last_log_generated=generated,
        last_log_copy_notified=generated,
        last_log_copied=replayed + rq,
        last_log_inspected=replayed + rq,
        last_log_replayed=generated if role is CopyRole.ACTIVE else replayed,
        copy_queue_length=cq,
        replay_queue_length=rq,
        last_inspected_log_time=replayed_time,
        last_replayed_log_time=replayed_time,
        replay_lag_time=lag,
    )


def node_status(node: str, *copies: CopyStatusReport) -> NodeStatus:
    return NodeStatus(node=node, site=SITES[node], copies=list(copies))


def healthy_cluster(**mbx2: object) -> dict[str, NodeStatus]:
    """DB1 active on mbx1, passive on mbx2 (tunable) and mbx3; DB2 active on mbx2."""
    return {
        "mbx1": node_status("mbx1", report("mbx1", role=CopyRole.ACTIVE)),
        "mbx2": node_status(
            "mbx2", report("mbx2", **mbx2), report("mbx2", "DB2", role=CopyRole.ACTIVE)
        ),
        "mbx3": node_status("mbx3", report("mbx3")),
    }


@dataclass
class Running:
    """A started service, its clock, a stub and a way to run the next poll round."""

    service: GuaranteeService
    clock: ManualClock
    channel: grpc.aio.Channel
    stub: pb_grpc.DataGuaranteeStub

    async def next_round(self) -> None:
        """One round of polling that began after this call: what the nodes answer now.  A
        round under way (begun by the test's last advance of the clock) may have read the
        nodes before the test changed them: it ends first (the poller sleeps again before
        this task runs on)."""
        poller = self.service.poller
        assert poller is not None
        await poller.wait_rounds(poller.rounds_started)
        done = self.service.view.rounds_completed
        await self.clock.advance(self.service.config.guarantee_api.poll_interval.total_seconds())
        await poller.wait_rounds(done + 1)


async def start_service(
    nodes: FakeNodes,
    tmp_path: Path,
    *,
    first_round: bool = True,
    clients: Credentials | None = None,
    anyone: bool = False,
    **api: object,
) -> Running:
    """The service over `nodes`, asked by callers with TOKEN (or `clients`' credentials; with
    `anyone`, by anyone: `--no-client-token`)."""
    config = cluster_config(nodes.urls, tmp_path, **api)
    clock = ManualClock()
    service = GuaranteeService(
        config, node_token=TOKEN,
        client_token=TOKEN if clients is None and not anyone else None,
        clients=None if clients is None else (lambda: clients), clock=clock,
    )  # fmt: skip
    await service.start()
    try:
        if first_round:
            assert service.poller is not None
            await service.poller.wait_rounds(1)
    except BaseException:  # the caller never gets the service to stop: stop it here
        await service.stop(grace=0)
        raise
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}")
    return Running(service, clock, channel, pb_grpc.DataGuaranteeStub(channel))


def health_req(
    database: str = "DB1", caller: str = "mover-1", constraint: int = 0
) -> pb.CheckReplicationHealthRequest:
    return pb.CheckReplicationHealthRequest(
        database=database, caller_id=caller, constraint=constraint
    )


async def ask(running: Running, **kw: Any) -> pb.GuaranteeResponse:
    """CheckReplicationHealth of the running service, with the token."""
    return await running.stub.CheckReplicationHealth(health_req(**kw), metadata=AUTH)
