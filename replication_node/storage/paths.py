"""Where one database copy keeps its files: the same layout for an active and a passive
copy (a copy changes role in place), so it is the storage floor's, below both."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CopyPaths:
    """Where one database copy keeps its files."""

    root: Path
    name: str

    @property
    def database(self) -> Path:
        return self.root / f"{self.name}.sqlite"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def inspector(self) -> Path:
        return self.logs / "Inspector"

    @property
    def ignored(self) -> Path:
        return self.logs / "IgnoredLogs"

    @property
    def was_active(self) -> Path:
        """Marker written when the copy mounts as active: its newest logs are its own."""
        return self.root / "was-active"
