"""Opening an active copy from its files: the steps and checks of every mount.

The first mount and every re-mount after a failure go this way, through crash recovery
from disk, never reusing a failed stream's memory.  Before the first log is written as
active, the copy is marked `was-active`; it numbers above the change-number ceiling of the
cluster store's record (read first, `publication.py`); and a copy whose logs no longer hold
an open generation this node announced at this epoch is refused rather than mounted over
the loss.
"""

from __future__ import annotations

from pathlib import Path

from dag_common.clock import Clock
from dag_common.cluster_store.interface import ActiveRecord
from dag_common.durable import atomic_write
from replication_node.active.copy import ActiveCopy, CopyPaths, OpenLogPublisher
from replication_node.active.lease import LeaseKeeper
from replication_node.active.settings import ActiveSettings
from replication_node.errors import RecoveryError
from replication_node.log.logdir import list_closed_generations


async def open_active_copy(
    *,
    settings: ActiveSettings,
    paths: CopyPaths,
    clock: Clock,
    record: ActiveRecord | None,
    publish_open_log: OpenLogPublisher,
    lease: LeaseKeeper | None = None,
) -> ActiveCopy:
    """Mount the copy from disk (creating it the first time) as the active at its settings'
    epoch; `record` is the cluster store's record of the database, read before."""
    epoch = settings.epoch
    create = not paths.database.exists() and not list_closed_generations_safe(paths.logs)
    # Before the first log is written as active: should this copy be passive again one
    # day, its logs above the waypoint are its own and must be checked, not replayed.
    paths.root.mkdir(parents=True, exist_ok=True)
    atomic_write(paths.was_active, f"{epoch}\n".encode())
    # Number above every change number an earlier active may have handed out, even in
    # an open log that was lost with it.
    copy = await ActiveCopy.mount(
        paths=paths,
        log_file_size=settings.log_file_size,
        llr_depth=settings.llr_depth,
        clock=clock,
        create=create,
        change_number_floor=record.change_number_ceiling if record else 0,
        publish_open_log=publish_open_log,
        lease=lease,
        synchronous_copies=settings.synchronous_copies,
        synchronous_wait=settings.synchronous_wait,
        epoch=epoch,
    )
    if record is not None and (record.node, record.epoch) == (settings.node, epoch):
        await _check_announced_logs(
            copy, record.open_generation, database=settings.database, epoch=epoch
        )
    return copy


async def _check_announced_logs(
    copy: ActiveCopy, announced: int, *, database: str, epoch: int
) -> None:
    """Refuse to mount if this node announced, at this epoch, an open generation holding
    acknowledged commits that its logs no longer hold (E00.log lost with a disk): a
    fresh open log of the same generation would silently drop them.  The copy then
    reports Dismounted with the reason; an operator decides (`activate --mount-dial`)."""
    stream = copy.stream
    held = stream.generation if stream.open_commits else stream.last_closed_generation
    if announced > held:
        await copy.crash_close()
        raise RecoveryError(
            f"{database}: open generation {announced} held acknowledged commits "
            f"(announced in the cluster store at epoch {epoch}), but this copy's "
            f"logs hold generations through {held} only (E00.log lost?): not mounted, "
            "so that nothing acknowledged is silently dropped; restore the logs, or "
            "activate another copy accepting the loss (--mount-dial)"
        )


def list_closed_generations_safe(log_dir: Path) -> list[int]:
    """The closed generations in `log_dir`; none if it does not exist yet."""
    return list_closed_generations(log_dir) if log_dir.exists() else []
