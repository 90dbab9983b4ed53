"""An active copy's status, as `GET /v1/status` reports it (Get-MailboxDatabaseCopyStatus).

Mounted while its copy is open; Failed with the reason after a failure; Dismounted by an
operator or while its last logs are held for a copy taking over (then read from disk: what
it holds, `held_for` the copy).  The seeds' LastLogGenerated counts the log being written
once it holds an acknowledged commit; the other markers are its closed generations.
`note` says what an operator should know besides: commits waiting for synchronous copies,
a generation of the LLR window found damaged (its bodies cannot be read nor flushed) and
what its mend tried (`log_mend.py`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from dag_common.model import CopyRole, CopyStatus, CopyStatusReport
from replication_node.errors import LogFormatError, LogShareError

if TYPE_CHECKING:
    from replication_node.active.instance import ActiveInstance


def active_status(instance: ActiveInstance) -> CopyStatusReport:
    """The status report of `instance`."""
    generated = instance.last_log_generated
    share = instance.share
    held = None
    if instance.copy is None and share.holding():
        with contextlib.suppress(OSError, LogFormatError, LogShareError):
            held = share.share_info()  # read from disk once per hold
    if instance.copy is not None:
        status = CopyStatus.MOUNTED
    else:
        status = CopyStatus.FAILED if instance.error else CopyStatus.DISMOUNTED
    scrub = instance.scrubber.last if instance.scrubber else None
    followers = sorted(instance.copy.stream.feed.followers) if instance.copy is not None else []
    need = instance.settings.synchronous_copies
    notes = []
    if instance.copy is not None and len(followers) < need:
        notes.append(
            f"{len(followers)} of {need} synchronous copies follow the log in block mode: "
            "commits are refused until enough do"
        )
    if instance.copy is not None and (damage := instance.copy.bodies.damage_note()):
        notes.append(damage)  # a generation in the LLR window damaged (`logged_bodies`)
        if instance.mend.note:  # and what its mend tried (`log_mend`)
            notes.append(instance.mend.note)
    note = "; ".join(notes) or None
    return instance.settings.report(
        CopyRole.ACTIVE,
        status,
        last_log_generated=held.generated_at_risk if held else share.generated_at_risk,
        open_commits=held.open_commits if held else share.open_commits,
        last_log_copy_notified=generated,
        last_log_copied=generated,
        last_log_inspected=generated,
        last_log_replayed=generated,
        last_inspected_log_time=instance.last_close_time,
        last_replayed_log_time=instance.last_close_time,
        error=instance.error,
        epoch=instance.epoch,
        held_for=share.held_for if instance.copy is None and share.holding() else None,
        last_scrub_time=scrub.finished if scrub else None,
        last_scrub_result=scrub.describe() if scrub else None,
        lease_expires_in=instance.lease.expires_in() if instance.copy is not None else None,
        block_followers=followers,
        synchronous_copies=need,
        note=note,
        redelivery=(
            instance.redelivery.record.describe()
            if instance.redelivery and instance.redelivery.record
            else None
        ),
    )
