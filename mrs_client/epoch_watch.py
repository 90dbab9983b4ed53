"""Which incarnation (epoch) each end of a move is in, as its answers name it (pure: no I/O).

Every node answer names the epoch of the copy that gave it; an answer naming another epoch
than the one the move saw means the end failed over (or switched over) in between, and what
the move read or wrote before may be gone: `NeedsReconcile`.
"""

from __future__ import annotations

from enum import StrEnum

from mrs_client.errors import NeedsReconcile


class Side(StrEnum):
    SOURCE = "source"
    TARGET = "target"


class EpochWatch:
    """The epoch each end of a move is in; an answer naming another raises NeedsReconcile.

    An end seen at 0 (not yet, or a node that does not say) takes the first epoch seen."""

    def __init__(self, *, source: int = 0, target: int = 0) -> None:
        self.epochs = {Side.SOURCE: source, Side.TARGET: target}

    def see(self, side: Side, epoch: int, what: str) -> None:
        known = self.epochs[side]
        if not epoch or epoch == known:
            return
        if not known:
            self.epochs[side] = epoch
            return
        raise NeedsReconcile(
            f"{what}: the {side} is at epoch {epoch}, the move saw epoch {known}",
            target_changed=side is Side.TARGET,
        )
