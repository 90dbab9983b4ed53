"""Small builders shared by the replication_node tests."""

from __future__ import annotations

from pathlib import Path

from dag_common.clock import Clock, SystemClock
from replication_node.active.copy import ActiveCopy, CopyPaths, OpenLogPublisher


async def mount(
    root: Path,
    *,
    name: str = "DB1",
    log_file_size: int = 64 * 1024,
    llr_depth: int = 2,
    clock: Clock | None = None,
    create: bool = True,
    publish_open_log: OpenLogPublisher | None = None,
    change_number_floor: int = 0,
) -> ActiveCopy:
    """Mount (creating if needed) an active copy under `root`."""
    return await ActiveCopy.mount(
        paths=CopyPaths(root, name),
        log_file_size=log_file_size,
        llr_depth=llr_depth,
        clock=clock or SystemClock(),
        create=create,
        publish_open_log=publish_open_log,
        change_number_floor=change_number_floor,
    )
