"""A passive copy's settings, from the cluster config."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from dag_common.model import CopyPlace


@dataclass(frozen=True, slots=True)
class PassiveSettings(CopyPlace):
    """One copy's settings, from the cluster config: all a passive copy runs with (which copy
    it is: `CopyPlace`); an active one takes its preference, log size and scrub from them
    (`InstanceSpec.copy`)."""

    replay_lag_time: timedelta = timedelta(0)
    truncation_lag_time: timedelta = timedelta(0)
    max_inspection_failures: int = 3
    scrub_interval: timedelta | None = None  # the background scrub's cycle (None: off)
    content_check_every: int | None = None  # recompute the content digest every N generations
    block_mode: bool = True  # follow the open log in block mode when caught up
    # The database's log generation size: a copy whose volume has less room than one
    # generation cannot take the next one (its status says so before a write fails).
    log_file_size: int = 1024 * 1024
    # The generations truncation leaves, kept this many at most as spare log files for the
    # next copied or received ones to be written over (`log/spares.py`); 0: none.
    spare_log_files: int = 64
