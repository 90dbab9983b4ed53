"""A passive copy's status, derived (pure): which CopyStatus its state makes, and the report
it gives (`GET /v1/status`, the guarantee service's input, the failover's question).

The order of the rules is the order of what an operator must hear first:

    suspended             Suspended, or FailedAndSuspended when a failure suspended it
    not running healthy   what the pipeline is doing: Initializing, Seeding, Failed
    connected             Healthy
    lost its active       DisconnectedAndHealthy (its own files are fine)
    neither yet           Initializing
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dag_common.model import CopyMode, CopyRole, CopyStatus, CopyStatusReport, Position
from replication_node.passive.blocks import BlockProgress
from replication_node.passive.markers import Markers
from replication_node.passive.settings import PassiveSettings


@dataclass(frozen=True, slots=True)
class ScrubSummary:
    """The last background scrub of the copy's file, as its status shows it."""

    finished: datetime
    result: str


def copy_status(
    *,
    suspended: bool,
    failed: bool,
    phase: CopyStatus,
    markers: Markers,
    no_room: bool = False,
) -> CopyStatus:
    """The copy's status from its state; `phase` is what its pipeline is doing, `markers`
    whether it reaches its active (`connected`, `disconnected_since`); `no_room`: its volume
    cannot hold the next generation (Failed, as the write would make it)."""
    if suspended:
        return CopyStatus.FAILED_AND_SUSPENDED if failed else CopyStatus.SUSPENDED
    if no_room:
        return CopyStatus.FAILED
    if phase is not CopyStatus.HEALTHY:
        return phase
    if markers.connected:
        return CopyStatus.HEALTHY
    if markers.disconnected_since is not None:
        # Its own files are fine; the active cannot be reached (since its last start,
        # perhaps: the copy need not have reached it first to be healthy).
        return CopyStatus.DISCONNECTED_AND_HEALTHY
    return CopyStatus.INITIALIZING


def status_report(
    *,
    settings: PassiveSettings,
    markers: Markers,
    status: CopyStatus,
    error: str | None,
    scrub: ScrubSummary | None,
    awaiting_last_logs_from: str | None,
    blocks: BlockProgress | None = None,
    activation_suspended: bool = False,
    activation_reason: str | None = None,
    seed: tuple[int, int | None] | None = None,
) -> CopyStatusReport:
    """The report of a passive copy in `status`, from its settings and its markers;
    `seed`: a running seed's (bytes done, bytes in all)."""
    s, m = settings, markers
    note = None
    if activation_suspended:
        note = "activation suspended" + (f": {activation_reason}" if activation_reason else "")
    return s.report(
        CopyRole.PASSIVE,
        status,
        last_log_generated=m.generated_at_risk,
        open_commits=m.open_commits if m.open_log_at_risk else 0,
        last_log_copy_notified=m.last_log_copy_notified,
        last_log_copied=m.last_log_copied,
        last_log_inspected=m.last_log_inspected,
        last_log_replayed=m.last_log_replayed,
        copy_queue_length=m.copy_queue_length,
        replay_queue_length=m.replay_queue_length,
        last_inspected_log_time=m.last_inspected_log_time,
        last_replayed_log_time=m.last_replayed_log_time,
        replay_lag_time=s.replay_lag_time,
        truncation_lag_time=s.truncation_lag_time,
        error=error,
        epoch=m.epoch,
        last_scrub_time=scrub.finished if scrub else None,
        last_scrub_result=scrub.result if scrub else None,
        awaiting_last_logs_from=awaiting_last_logs_from,
        copy_mode=blocks.mode if blocks else CopyMode.FILE,
        copy_mode_reason=blocks.reason if blocks else None,
        block=blocks.held if blocks else Position(0, 0),
        activation_suspended=activation_suspended,
        note=note,
        seed_bytes_done=seed[0] if seed else None,
        seed_bytes_total=seed[1] if seed else None,
    )
