"""A copy's status report with its backups: the header's last full and incremental backup,
and the backup under way (the active knows any, by its lease; the node a backup is taken
on knows its own)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dag_common.model import CopyStatusReport

if TYPE_CHECKING:
    from replication_node.active.instance import ActiveInstance
    from replication_node.passive.copy import PassiveCopy


def with_backups(
    instance: ActiveInstance | PassiveCopy, report: CopyStatusReport, taken_here: str | None
) -> CopyStatusReport:
    """`report` with the backup fields of `instance`."""
    from replication_node.active.instance import ActiveInstance

    running = taken_here
    if isinstance(instance, ActiveInstance):
        header = instance.copy.merged_header if instance.copy is not None else None
        lease = instance.backups.running()
        running = lease.describe() if lease is not None else taken_here
    else:
        header = instance.header
    update: dict[str, object] = {"backup_in_progress": running}
    if header is not None:
        update.update(
            last_full_backup_generation=header.last_full_backup_generation,
            last_full_backup_time=header.last_full_backup_time,
            last_incremental_backup_generation=header.last_incremental_backup_generation,
            last_incremental_backup_time=header.last_incremental_backup_time,
        )
    return report.model_copy(update=update)
