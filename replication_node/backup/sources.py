"""The two copies a backup can be taken from, as `backup.BackupSource`: a passive copy
(Healthy; the snapshot read through its read handle, so replay goes on meanwhile) and the
active copy (Mounted; its file holds generations up to committed - llr_depth, the logs the
rest)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dag_common.model import CopyStatus
from replication_node.errors import BackupError
from replication_node.storage.stoppable import Interrupt

if TYPE_CHECKING:
    from replication_node.active.copy import ActiveCopy
    from replication_node.active.instance import ActiveInstance
    from replication_node.passive.copy import PassiveCopy


class PassiveSource:
    """A passive copy as a backup's source."""

    role = "passive"

    def __init__(self, copy: PassiveCopy) -> None:
        self._copy = copy
        self.log_dir: Path = copy.paths.logs

    def status(self) -> CopyStatus:
        return self._copy.status().status

    def usable_status(self) -> CopyStatus:
        return CopyStatus.HEALTHY

    def waypoint(self) -> int:
        return self._copy.markers.last_log_replayed

    def first_required(self) -> int:
        header = self._copy.header
        return header.first_required if header is not None else self.waypoint() + 1

    def inspected(self) -> int:
        return self._copy.markers.last_log_inspected

    def hold_truncation(self, generation: int | None) -> None:
        self._copy.backup_hold = generation

    def snapshot(self, dest: Path, interrupt: Interrupt | None = None) -> None:
        reader = self._copy.reader()
        if reader is None:
            raise BackupError(f"the copy of {self._copy.database} cannot be read now")
        reader.backup_to(dest, interrupt)


class ActiveSource:
    """The mounted active copy as a backup's source."""

    role = "active"

    def __init__(self, instance: ActiveInstance) -> None:
        self._instance = instance
        self.log_dir: Path = instance.paths.logs

    def _copy(self) -> ActiveCopy:
        copy = self._instance.copy
        if copy is None:
            raise BackupError(f"{self._instance.database} is no longer mounted here")
        return copy

    def status(self) -> CopyStatus:
        return self._instance.status().status

    def usable_status(self) -> CopyStatus:
        return CopyStatus.MOUNTED

    def waypoint(self) -> int:
        return self._copy().header.waypoint

    def first_required(self) -> int:
        return self._copy().db.header.first_required

    def inspected(self) -> int:
        return self._copy().stream.last_closed_generation

    def hold_truncation(self, generation: int | None) -> None:
        if self._instance.truncator is not None:
            self._instance.truncator.backup_hold = generation

    def snapshot(self, dest: Path, interrupt: Interrupt | None = None) -> None:
        self._copy().db.backup_to(dest, interrupt)
