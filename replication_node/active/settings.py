"""An active copy's settings, from the cluster config and its defaults."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from dag_common.config_defaults import ActiveFailurePolicy
from dag_common.model import CopyPlace
from replication_node.active.handover import HANDOVER_HOLD


@dataclass(frozen=True, slots=True)
class ActiveSettings(CopyPlace):
    """Per-copy settings of an active copy (`ActiveInstance`), as `PassiveSettings` are a
    passive one's: which copy it is (`CopyPlace`), the epoch it serves, its log's shape, and
    how it holds its role; the node builds them from the copy's `InstanceSpec` and the
    config's defaults."""

    epoch: int  # the stream incarnation it publishes and writes under
    log_file_size: int
    llr_depth: int
    roll_interval: timedelta  # the idle roller's: an open log older than this is closed
    scrub_interval: timedelta | None = None  # the background scrub's cycle (None: off)
    lease_ttl: float = 10.0  # seconds
    synchronous_copies: int = 0  # copies that must hold a commit before it is acknowledged
    synchronous_wait: float = 5.0  # seconds a commit waits for them
    circular_logging: bool = True
    spare_log_files: int = 0
    on_failure: ActiveFailurePolicy = ActiveFailurePolicy.REMOUNT
    handover_hold: float = HANDOVER_HOLD  # seconds its last logs are held for a copy
    truncation_interval: float = 5.0  # seconds between the truncator's passes
