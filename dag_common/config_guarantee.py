"""The cluster config's `guarantee_api:` section: where the Data Guarantee service listens,
how it polls and watches the nodes, where its history goes, and the conditions a passive
copy must meet (`limits:`, the seed's values by default)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from dag_common.config_base import ConfigModel, more_than_zero
from dag_common.model import Duration


class GuaranteeLimits(ConfigModel):
    """The Data Guarantee conditions a passive copy must meet (defaults: the seed's values)."""

    max_copy_queue_length: int = Field(default=10, ge=1)
    max_average_copy_queue_length: float = Field(default=10.0, gt=0)
    # The replay queue may span at most ReplayLagTime plus this.
    replay_queue_over_lag: Duration = timedelta(minutes=10)
    # CheckReplicationFlush by commit time: replayed log time must pass commit_time + skew.
    flush_clock_skew: Duration = timedelta(seconds=5)
    # A lagged copy counts for CheckReplicationFlush only below this ReplayLagTime.
    flush_max_replay_lag: Duration = timedelta(minutes=30)
    # The average copy queue is taken over a caller's queries of the last
    # `average_window_time` (guarantee_api/averages.py says why 3 minutes), at most its last
    # `average_window` queries (a bound on memory).
    average_window: int = Field(default=60, ge=1, le=10_000)
    average_window_time: Duration = timedelta(minutes=3)
    # The waits an answer asks for (the seed's: no status yet 10 s, no healthy copy 2 min,
    # a healthy copy slightly behind 1 min, never more than 10 min).
    wait_no_status: Duration = timedelta(seconds=10)
    wait_no_healthy_copy: Duration = timedelta(minutes=2)
    wait_behind: Duration = timedelta(minutes=1)
    wait_max: Duration = timedelta(minutes=10)

    _average_window_time_more_than_zero = field_validator("average_window_time")(more_than_zero)


class GuaranteeApiConfig(ConfigModel):
    """Where the Data Guarantee service listens, how often it polls, where history goes."""

    listen: str = "127.0.0.1:7200"
    http_listen: str = "127.0.0.1:7201"
    poll_interval: Duration = timedelta(seconds=1)
    history_dir: Path = Path("./var/history")
    # A copy's status is stale (not healthy) when not refreshed for this many poll intervals.
    stale_after_polls: int = Field(default=3, ge=1, le=100)
    # History samples are buffered and written as one Parquet file this often, whatever the
    # poll interval (1s to 1h).  `history_flush_polls`, the setting of before, still counts
    # polls: it stands for that many poll intervals (not with history_flush_interval too).
    history_flush_interval: Duration | None = None
    history_flush_polls: int | None = Field(default=None, ge=1, le=3600)
    # Pushed progress: one `GET /v1/status/watch` per node; a node whose stream says nothing
    # (not even its heartbeat, asked every `watch_heartbeat`) for `watch_silence` counts as
    # stale, as an unanswered poll does, and is polled until its stream is back.
    watch: bool = True
    watch_heartbeat: Duration = timedelta(seconds=1)
    watch_silence: Duration = timedelta(seconds=3)
    # The longest `wait` a request may ask for; a longer one is cut to this, and the answer
    # says so.
    max_wait: Duration = timedelta(seconds=60)
    limits: GuaranteeLimits = GuaranteeLimits()

    @model_validator(mode="after")
    def _watch_timings(self) -> GuaranteeApiConfig:
        beat = self.watch_heartbeat.total_seconds()
        if not 0.05 <= beat <= 60:
            raise ValueError("watch_heartbeat must be within 50ms..60s")
        if self.watch_silence <= self.watch_heartbeat:
            raise ValueError("watch_silence must be longer than watch_heartbeat")
        if self.max_wait <= timedelta(0):
            raise ValueError("max_wait must be positive")
        if self.history_flush_interval is not None and self.history_flush_polls is not None:
            raise ValueError(
                "history_flush_interval and history_flush_polls (the older setting, in polls) "
                "say the same: set one"
            )
        every = self.history_flush_interval
        if every is not None and not timedelta(seconds=1) <= every <= timedelta(hours=1):
            raise ValueError("history_flush_interval must be within 1s..1h")
        return self

    @property
    def history_flush_every(self) -> timedelta:
        """How often the buffered history is written: a minute unless set."""
        if self.history_flush_polls is not None:
            return self.history_flush_polls * self.poll_interval
        return self.history_flush_interval or timedelta(minutes=1)
