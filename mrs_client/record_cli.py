"""`mrs list`, `show` and `stats`: the move requests as the move store holds them, as a
person reads them (times, durations and flush points in words) or as JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from dag_common.cli import ExitCode, add_config, add_json, in_words
from dag_common.config import ClusterConfig, load_config
from dag_common.echo import quoted
from dag_common.model import Position
from mrs_client.errors import MoveRejected
from mrs_client.item_limits import SkipReason, counts
from mrs_client.move_store import open_move_store
from mrs_client.move_store.interface import AnswerRow, MoveRecord, MoveStore
from mrs_client.move_store.records import headline, position_fields
from mrs_client.policy import MoveState, StopRequest

T = TypeVar("T")


def _record_line(r: MoveRecord) -> str:
    return (
        f"{r.id:<14}{','.join(r.mailboxes):<22}{r.source_db + ' -> ' + r.target_db:<16}"
        f"{r.state:<12}{int(r.step):>4}  {r.items_copied:>8}"
    )


def cmd_list(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    states = [MoveState(args.state)] if getattr(args, "state", None) else None
    records = asyncio.run(read_store(config, lambda store: store.list(states=states)))
    if args.json:
        print(json.dumps([r.as_dict() for r in records], indent=2))
    else:
        print(f"{'Id':<14}{'Mailboxes':<22}{'Databases':<16}{'State':<12}{'Step':>4}  {'Items':>8}")
        for r in records:
            print(_record_line(r))
    return ExitCode.OK


async def read_store(config: ClusterConfig, fn: Callable[[MoveStore], Awaitable[T]]) -> T:
    """One read of the move store the config names."""
    store = open_move_store(config)
    try:
        return await fn(store)
    finally:
        await store.aclose()


async def _get(
    args: argparse.Namespace, store: MoveStore
) -> tuple[MoveRecord, StopRequest | None, list[dict[str, object]]]:
    """The move `args.id` names, its stop request and its guarantee answers."""
    record = await store.get(args.id)
    if record is None:
        raise MoveRejected(f"no move request {quoted(args.id)}")
    answers = [answer_view(a) for a in await store.answers(record.id)]
    return record, await store.stop_requested(record.id), answers


def answer_view(row: AnswerRow) -> dict[str, object]:
    """A kept guarantee answer as `mrs stats` shows it (JSON): durations in words, and when
    the service expected the condition to clear, as of that answer."""
    expected = row.expected_in
    return {
        **row.model_dump(),
        "retry_after": str(timedelta(seconds=row.retry_after)),
        "expected_in": None if expected is None else str(timedelta(seconds=round(expected))),
        "expected_clear_at": None
        if expected is None
        else (datetime.fromisoformat(row.time) + timedelta(seconds=expected)).isoformat(
            timespec="seconds"
        ),
    }


def cmd_show(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    record, stop, _ = asyncio.run(read_store(config, lambda store: _get(args, store)))
    if args.json:
        print(json.dumps({**record.as_dict(), "stop_requested": stop}, indent=2))
    else:
        for key, value in show_fields(record):
            print(f"{key:<22}{value}")
        if stop is not None:
            print(f"{'Stop requested':<22}{stop} (by `mrs {stop}`, not carried out yet)")
        if record.skipped:
            print("Skipped items:")
            for line in [SKIPPED_HEADER, *skipped_lines(record)]:
                print(f"  {line}")
    return ExitCode.OK


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if value else "-"


def _point(position: Position | None) -> str:
    if position is None:
        return "-"
    generation, offset = position
    return f"generation {generation}" + (f" through byte {offset}" if offset else "")


def _items(r: MoveRecord) -> str:
    """Items copied, of how many the sync knows it has to copy (items_total, 0: unknown)."""
    of = f" of {r.items_total:,}" if r.items_total else " (total not known yet)"
    return f"{r.items_copied:,}{of} ({r.bytes_copied / 1e6:,.1f} MB of bodies)"


def _item_limits(r: MoveRecord) -> str:
    n = counts(r.skipped)
    return (
        f"{n[SkipReason.LARGE]} large skipped (limit {r.large_item_limit}), "
        f"{n[SkipReason.BAD]} bad skipped (limit {r.bad_item_limit})"
    )


def skipped_lines(r: MoveRecord) -> list[str]:
    """One line per skipped item: mailbox, item id, change, size, why."""
    return [
        f"{s.mailbox:<16}{s.item_id or '?':<26}{s.change_number:>10}  "
        f"{'?' if s.size is None else f'{s.size:,}':>14}  {s.reason:<6}{s.detail}"
        for s in r.skipped
    ]


SKIPPED_HEADER = f"{'Mailbox':<16}{'Item':<26}{'Change':>10}  {'Size':>14}  {'Why':<6}Detail"


def show_fields(r: MoveRecord) -> list[tuple[str, str]]:
    """A move request as a person reads it: times, durations and flush points in words."""
    return [
        ("Id", r.id),
        ("Mailboxes", ", ".join(r.mailboxes)),
        ("Move", f"{r.source_db} -> {r.target_db}"),
        ("State", str(r.state)),
        ("Step", f"{int(r.step)}/10 {r.step.label} ({r.steps_done} done)"),
        ("Created", _when(r.created)),
        ("Updated", _when(r.updated)),
        ("Completed", _when(r.completed)),
        ("Stalled since", _when(r.stalled_since)),
        ("Stall reason", r.stall_reason or "-"),
        ("Time stalled", str(timedelta(seconds=round(r.time_stalled)))),
        ("Failure", r.failure or "-"),
        ("Items copied", _items(r)),
        ("Sync cursors", ", ".join(f"{k} at {v}" for k, v in r.sync_cursor.items()) or "-"),
        ("Incremental passes", str(r.incremental_passes)),
        ("Final flush point", _point(r.final_position)),
        ("Unlock flush point", _point(r.unlock_position)),
        (
            "Epochs",
            f"source {r.source_epoch}, target {r.target_epoch}, flushed in {r.flush_epoch}, "
            f"verified in {r.verified_epoch}",
        ),
        ("Reconciles", f"{r.reconciles} ({r.items_repaired} items repaired)"),
        ("Item limits", _item_limits(r)),
        *(
            [
                (
                    "Replaces",
                    f"the soft-deleted {', '.join(r.replaces_soft_deleted)} in {r.target_db}",
                )
            ]
            if r.replaces_soft_deleted
            else []
        ),
    ]


def cmd_stats(args: argparse.Namespace) -> int:
    """Like Get-MoveRequestStatistics: state, step, copied, stalled time and why, answers."""
    config = load_config(args.config)
    record, _, answers = asyncio.run(read_store(config, lambda store: _get(args, store)))
    stats = {
        **headline(record),
        "step_name": record.step.label,
        "steps_done": record.steps_done,
        "items_copied": record.items_copied,
        "bytes_copied": record.bytes_copied,
        "time_stalled": str(timedelta(seconds=round(record.time_stalled))),
        "stall_reason": record.stall_reason,
        "failure": record.failure,
        **position_fields("final", record.final_position),
        "source_epoch": record.source_epoch,
        "target_epoch": record.target_epoch,
        "verified_epoch": record.verified_epoch,
        "reconciles": record.reconciles,
        "items_repaired": record.items_repaired,
        "reconcile_reason": record.reconcile_reason,
        "large_item_limit": record.large_item_limit,
        "bad_item_limit": record.bad_item_limit,
        "large_skipped": counts(record.skipped)[SkipReason.LARGE],
        "bad_skipped": counts(record.skipped)[SkipReason.BAD],
        # A stalled move: when the service expects its condition to clear (its last answer).
        "expected_clear_at": answers[-1]["expected_clear_at"]
        if record.state is MoveState.STALLED and answers
        else None,
        "guarantee_answers": answers,
        "skipped_items": [
            {k: v for k, v in s.as_dict().items() if k != "term"} for s in record.skipped
        ],
    }
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        for key, value in stats.items():
            if key not in ("guarantee_answers", "skipped_items"):
                print(f"{key:<18}{in_words(value)}")
        if record.skipped:
            print("skipped items:")
            for line in [SKIPPED_HEADER, *skipped_lines(record)]:
                print(f"  {line}")
        print("guarantee answers:")
        for a in answers[-args.last :]:
            print(
                f"  {a['time']}  step {a['step']:>2}  {a['method']:<23}{a['status']:<13}"
                f"{a['reason']}"
            )
    return ExitCode.OK


# ---- the commands' arguments (`mrs_client.cli` names them) ---------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    add_config(p)
    add_json(p, "print the record(s) as JSON")


def build_list(lst: argparse.ArgumentParser) -> None:
    """`mrs list`."""
    _common(lst)
    lst.add_argument(
        "--state",
        choices=[str(s) for s in MoveState],
        default=None,
        help="only the moves in this state",
    )
    lst.set_defaults(func=cmd_list)


def build_show(show: argparse.ArgumentParser) -> None:
    """`mrs show`."""
    _common(show)
    show.add_argument("id", help="the move request's id (mrs list)")
    show.set_defaults(func=cmd_show)


def build_stats(stats: argparse.ArgumentParser) -> None:
    """`mrs stats`."""
    _common(stats)
    stats.add_argument("id", help="the move request's id (mrs list)")
    stats.add_argument("--last", type=int, default=20, help="how many guarantee answers")
    stats.set_defaults(func=cmd_stats)
