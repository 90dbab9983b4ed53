"""An active instance serving its log share on a real aiohttp server on port 0 (tests)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from dag_common.clock import Clock, SystemClock
from dag_common.cluster_store.embedded import EmbeddedClusterStore
from dag_common.store_api import ItemIn
from replication_node.active.copy import CopyPaths
from replication_node.active.instance import ActiveInstance
from replication_node.active.settings import ActiveSettings
from replication_node.http.auth import auth_middleware
from replication_node.shipping.logshare import add_log_share_routes
from replication_node.shipping.logshare_client import HttpLogSource
from tests.cluster_harness import serve_app

TOKEN = "share-token-0123456789"


@dataclass
class Share:
    active: ActiveInstance
    url: str
    session: aiohttp.ClientSession
    runner: web.AppRunner
    store: EmbeddedClusterStore

    def source(self, token: str = TOKEN) -> HttpLogSource:
        return HttpLogSource(self.url, "DB1", session=self.session, token=token, timeout=5)

    async def write(self, first: int, n: int, body: int = 400) -> None:
        store = self.active.store
        assert store is not None
        if store.copy.mailbox("m") is None:
            await store.create_mailbox("m", display_name="M", folders=None, locked=False)
        await store.put_items(
            "m",
            [
                ItemIn(item_id=f"i{i}", subject=f"s{i}", body="b" * body)
                for i in range(first, first + n)
            ],
            override_lock=False,
        )

    async def roll(self) -> int:
        assert self.active.copy is not None
        await self.active.copy.roll(force=True)
        return self.active.last_log_generated

    def closed_file(self, generation: int) -> Path:
        from replication_node.log.logfile import closed_log_name

        return self.active.paths.logs / closed_log_name(generation)

    async def close(self) -> None:
        await self.session.close()
        await self.runner.cleanup()
        await self.active.stop()
        self.store.close()


def db1_active(**changes: Any) -> ActiveSettings:
    """The settings of DB1's active copy on node a at epoch 1 (a 64 KiB log, LLR depth 2),
    as the tests start it, with `changes`."""
    settings = ActiveSettings(
        database="DB1",
        node="a",
        site="s",
        activation_preference=1,
        epoch=1,
        log_file_size=64 * 1024,
        llr_depth=2,
        roll_interval=timedelta(hours=1),
    )
    return replace(settings, **changes)


async def start_share(
    root: Path,
    *,
    clock: Clock | None = None,
    heartbeat: float = 0.2,
    synchronous_copies: int = 0,
    synchronous_wait: float = 5.0,
    spare_log_files: int = 0,
) -> Share:
    store = EmbeddedClusterStore(root / "cluster.db")
    # The active announces each open generation in the store: it must be the active there.
    record = await store.set_active("DB1", "a", expected_epoch=0, start_generation=1)
    assert record is not None and record.epoch == 1
    active = ActiveInstance(
        settings=db1_active(
            log_file_size=32 * 1024,
            synchronous_copies=synchronous_copies,
            synchronous_wait=synchronous_wait,
            spare_log_files=spare_log_files,
        ),
        paths=CopyPaths(root / "active" / "DB1", "DB1"),
        clock=clock or SystemClock(),
        cluster_store=store,
    )
    await active.start()
    app = web.Application(middlewares=[auth_middleware(TOKEN)])
    add_log_share_routes(
        app,
        lookup=lambda db: active.share if db == "DB1" and active.copy else None,
        heartbeat=heartbeat,
    )
    runner, url = await serve_app(app)
    return Share(active, url, aiohttp.ClientSession(), runner, store)
