"""`mrs batch …`: migration batches from the command line (module `batches`).

    mrs batch create NAME (--csv FILE | --mailboxes M … --to DB) [--start-after T]
        [--complete-after T | --suspend-when-ready-to-complete]
        [--incremental-sync-interval D] [--priority P] [--large-item-limit N]
        [--bad-item-limit N] [--max-mb-per-s X] [--stall-retries N] [--stall-retry-after D]
    mrs batch list | show NAME | report NAME            (each with --json)
    mrs batch suspend | resume | complete | cancel NAME
    mrs batch set NAME --max-mb-per-s X|none

Times (`--start-after`, `--complete-after`) are ISO 8601; one without a zone is UTC.  The
moves of a batch are run by the workers (`mrs serve`); these commands only change records.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dag_common.cli import ExitCode, add_config, add_count, add_duration, add_json, in_words
from dag_common.clock import SystemClock
from dag_common.config import ClusterConfig, load_config
from dag_common.echo import quoted
from mrs_client import batches
from mrs_client.errors import MoveRejected
from mrs_client.move_cli import connected
from mrs_client.move_store import open_move_store
from mrs_client.move_store.interface import BatchRecord, MoveStore
from mrs_client.move_store.records import BatchSettings
from mrs_client.policy import FINISHED, GuaranteeStatus, MovePriority, MoveState
from mrs_client.record_cli import answer_view, read_store


def _time(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{quoted(text)} is not a time "
            "(ISO 8601, as 2026-12-01T22:00 or 2026-12-01T22:00+01:00)"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _priority(text: str) -> MovePriority:
    try:
        return MovePriority.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _rate(text: str) -> float | None:
    if text.lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(
            f"{quoted(text)} is not a rate in MB/s (more than 0, or none)"
        )
    return value


# ---- create ---------------------------------------------------------------------------------


def _settings(args: argparse.Namespace) -> BatchSettings:
    return BatchSettings(
        start_after=args.start_after,
        complete_after=args.complete_after,
        suspend_when_ready_to_complete=args.suspend_when_ready_to_complete,
        incremental_sync_interval=args.incremental_sync_interval.total_seconds(),
        priority=args.priority,
        large_item_limit=args.large_item_limit,
        bad_item_limit=args.bad_item_limit,
        max_mb_per_s=args.max_mb_per_s,
        stall_retries=args.stall_retries,
        stall_retry_after=args.stall_retry_after.total_seconds(),
    )


def _lines(args: argparse.Namespace) -> list[batches.BatchLine]:
    if args.csv is not None:
        try:
            text = Path(args.csv).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise MoveRejected(f"--csv {args.csv}: {exc}") from exc
        return batches.parse_csv(text)
    if not args.to:
        raise MoveRejected("--mailboxes needs --to DB (the target database)")
    return [batches.BatchLine(0, m, args.to, None, args.with_archive) for m in args.mailboxes]


def cmd_create(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    batches.batch_name(args.name)
    lines = _lines(args)  # a bad CSV is refused before anything is opened
    settings = _settings(args)

    async def create() -> tuple[BatchRecord, list[Any]]:
        async with connected(args, config) as on:
            return await batches.create(
                on.store, on.mover(), args.name, lines, settings, now=SystemClock().now()
            )

    batch, records = asyncio.run(create())
    if args.json:
        print(json.dumps({**batch.as_dict(), "requests": [r.as_dict() for r in records]}, indent=2))
    else:
        print(f"batch {batch.name}: {len(records)} move(s) queued")
    return ExitCode.OK


# ---- reading ----------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    config = load_config(args.config)

    async def read(store: MoveStore) -> list[tuple[BatchRecord, dict[str, int]]]:
        return [(b, batches.counts(await store.list(batch=b.name))) for b in await store.batches()]

    rows = asyncio.run(read_store(config, read))
    if args.json:
        print(json.dumps([{**b.as_dict(), "by_state": n} for b, n in rows], indent=2))
        return ExitCode.OK
    print(f"{'Batch':<24}{'Status':<12}{'Moves':>6}{'Queued':>8}{'Running':>8}{'Synced':>8}"
          f"{'Done':>6}{'Failed':>8}")  # fmt: skip
    for b, n in rows:
        running = n["InProgress"] + n["Stalled"]
        print(f"{b.name:<24}{_status(b):<12}{sum(n.values()):>6}{n['Queued']:>8}{running:>8}"
              f"{n['Synced']:>8}{n['Completed']:>6}{n['Failed']:>8}")  # fmt: skip
    return ExitCode.OK


def _status(b: BatchRecord) -> str:
    if b.cancelled:
        return "Cancelled"
    if b.suspended:
        return "Suspended"
    if b.complete_requested:
        return "Completing"
    return "Active"


async def _report(store: MoveStore, name: str) -> batches.BatchReport:
    batch = await batches.get(store, name)
    records = await store.list(batch=name)
    held_back: Counter[str] = Counter()
    clears: dict[str, str | None] = {}
    for r in records:
        answers = await store.answers(r.id)
        for a in answers:
            if a.status != GuaranteeStatus.SATISFIED:
                held_back[a.reason] += 1
        if r.state is MoveState.STALLED and answers:
            clears[r.id] = answer_view(answers[-1])["expected_clear_at"]
    return batches.report(batch, records, held_back, SystemClock().now(), clears)


def _print_report(args: argparse.Namespace, text: Callable[[batches.BatchReport], None]) -> int:
    """Print the report of batch `args.name`: as JSON (`--json`), or as `text` says it."""
    config = load_config(args.config)
    rep = asyncio.run(read_store(config, lambda store: _report(store, args.name)))
    if args.json:
        print(json.dumps(rep, indent=2))
    else:
        text(rep)
    return ExitCode.OK


def cmd_show(args: argparse.Namespace) -> int:
    return _print_report(args, _show_text)


def _show_text(rep: batches.BatchReport) -> None:
    """`mrs batch show` without --json: the batch's settings, then its moves."""
    settings = rep["settings"]
    print(f"{'Batch':<24}{rep['name']}")
    print(f"{'Created':<24}{rep['created']}")
    print(f"{'Moves':<24}{rep['moves']} " + _by_state(rep["by_state"]))
    for key in ("start_after", "complete_after", "suspend_when_ready_to_complete",
                "incremental_sync_interval", "priority", "max_mb_per_s", "large_item_limit",
                "bad_item_limit", "stall_retries", "stall_retry_after"):  # fmt: skip
        print(f"{key.replace('_', ' ').capitalize():<24}{_setting(key, settings[key])}")
    for key in ("suspended", "cancelled", "complete_requested"):
        print(f"{key.replace('_', ' ').capitalize():<24}{in_words(rep[key])}")
    print(f"{'Id':<14}{'Mailboxes':<26}{'Databases':<16}{'State':<12}{'Step':>4}  Stall")
    for m in rep["move_reports"]:
        print(f"{m['id']:<14}{','.join(m['mailboxes']):<26}"
              f"{m['source'] + ' -> ' + m['target']:<16}{m['state']:<12}{m['step']:>4}  "
              f"{m['stall_status'] or '-'}{_clears(m)}")  # fmt: skip


def _setting(key: str, value: object) -> str:
    """A batch's setting as `batch show` says it: waits as durations, none as "-"."""
    if key in ("incremental_sync_interval", "stall_retry_after") and isinstance(value, float):
        return str(timedelta(seconds=round(value)))
    if key == "max_mb_per_s" and value is not None:
        return f"{value} MB/s"
    return in_words(value)


def _clears(move: batches.MoveReport) -> str:
    when = move.get("expected_clear_at")
    return f" (expected to clear at {when})" if when else ""


def _by_state(n: dict[str, int]) -> str:
    return "(" + ", ".join(f"{v} {k}" for k, v in n.items() if v) + ")"


def cmd_report(args: argparse.Namespace) -> int:
    return _print_report(args, _report_text)


def _report_text(rep: batches.BatchReport) -> None:
    """`mrs batch report` without --json: MB moved, throughput, stalls, holds, moves."""
    rate = "-" if rep["mb_per_s"] is None else f"{rep['mb_per_s']:.2f} MB/s"
    print(f"batch {rep['name']}: {rep['moves']} moves {_by_state(rep['by_state'])}")
    print(f"moved {rep['megabytes']:.1f} MB in {rep['seconds'] or 0:.0f} s ({rate})")
    print("time stalled, by reason:")
    for why, seconds in rep["stalled_seconds_by_reason"].items() or [("-", 0)]:
        print(f"  {why:<40}{timedelta(seconds=round(seconds))}")
    print("held back by (guarantee answers not Satisfied):")
    for row in rep["held_back_by"] or [{"reason": "-", "answers": 0}]:
        print(f"  {row['answers']:>6}  {row['reason']}")
    print(f"{'Id':<14}{'Mailboxes':<26}{'State':<12}{'MB':>9}{'Items':>8}{'Stalled':>10}"
          f"  Started -> Completed")  # fmt: skip
    for m in rep["move_reports"]:
        print(f"{m['id']:<14}{','.join(m['mailboxes']):<26}{m['state']:<12}"
              f"{m['megabytes']:>9.1f}{m['items']:>8}{m['stalled_seconds']:>10.0f}"
              f"  {m['started'] or '-'} -> {m['completed'] or '-'}")  # fmt: skip


# ---- operating ----------------------------------------------------------------------------------


async def _operate(args: argparse.Namespace, config: ClusterConfig) -> str:
    """suspend, resume, complete, set: change the batch record (and its moves)."""
    store = open_move_store(config)
    clock = SystemClock()
    try:
        if args.batch_command == "suspend":
            return await batches.suspend(store, args.name, clock=clock)
        if args.batch_command == "resume":
            return await batches.resume(store, args.name, clock=clock)
        if args.batch_command == "complete":
            return await batches.complete(store, args.name, clock=clock)
        return await batches.change(store, args.name, max_mb_per_s=args.max_mb_per_s)
    finally:
        await store.aclose()


def cmd_operate(args: argparse.Namespace) -> int:
    print(asyncio.run(_operate(args, load_config(args.config))))
    return ExitCode.OK


async def _cancel(args: argparse.Namespace, config: ClusterConfig) -> tuple[str, bool]:
    from mrs_client import stopping

    async with connected(args, config) as on:
        batch = await batches.get(on.store, args.name)
        await on.store.save_batch(replace(batch, cancelled=True))
        lines, ok = [], True
        for r in await on.store.list(batch=args.name):
            if r.state in FINISHED:
                continue
            try:
                stopped = await stopping.cancel(
                    on.store,
                    r.id,
                    nodes=on.nodes,
                    directory=on.directory,
                    clock=SystemClock(),
                    wait=args.wait,
                )
            except MoveRejected as exc:  # past step 8: it can only go forward
                lines.append(f"  {r.id}: {exc}")
                continue
            ok = ok and stopped.done
            lines.append(f"  {stopped.line}")
        return "\n".join([f"batch {args.name} cancelled", *lines]), ok


def cmd_cancel(args: argparse.Namespace) -> int:
    line, ok = asyncio.run(_cancel(args, load_config(args.config)))
    print(line)
    return ExitCode.OK if ok else ExitCode.FAILED


def build(parent: argparse.ArgumentParser) -> None:
    """`mrs batch` and its commands."""
    cmds = parent.add_subparsers(dest="batch_command", required=True)

    def command(name: str, func: Any, text: str, *, named: bool = True) -> argparse.ArgumentParser:
        p = cmds.add_parser(name, help=text)
        add_config(p)
        add_json(p, "print as JSON")
        if named:
            p.add_argument("name", help="the batch's name")
        p.set_defaults(func=func)
        return p

    # No move timings here: the workers that run the moves use their own (`mrs serve`).
    create = command("create", cmd_create, "validate and queue a batch of moves")
    source = create.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--csv",
        metavar="FILE",
        help="mailbox,target_database[,priority][,archive] with a header line",
    )
    source.add_argument("--mailboxes", nargs="+", metavar="MAILBOX", help="the mailboxes to move")
    create.add_argument("--to", help="target database (with --mailboxes)")
    create.add_argument(
        "--with-archive",
        action="store_true",
        help="with --mailboxes: move each mailbox's archive with it",
    )
    create.add_argument(
        "--start-after", type=_time, metavar="TIME", help="no move of the batch starts before"
    )
    when = create.add_mutually_exclusive_group()
    when.add_argument(
        "--complete-after",
        type=_time,
        metavar="TIME",
        help="moves sync, then wait synced until this time to complete",
    )
    when.add_argument(
        "--suspend-when-ready-to-complete",
        action="store_true",
        help="moves sync, then wait synced for `mrs batch complete`",
    )
    add_duration(
        create,
        "--incremental-sync-interval",
        default="24h",
        help="how often a synced move syncs again while it waits",
    )
    create.add_argument(
        "--priority",
        type=_priority,
        default=MovePriority.NORMAL,
        help="Lowest … Normal … Emergency (a CSV line may say its own)",
    )
    add_count(
        create,
        "--large-item-limit",
        least=0,
        of="items",
        default=0,
        help="each move skips and reports up to N items over the target's max_item_size",
    )
    add_count(
        create,
        "--bad-item-limit",
        least=0,
        of="items",
        default=0,
        help="each move skips and reports up to N source items that cannot be read",
    )
    create.add_argument(
        "--max-mb-per-s",
        type=_rate,
        default=None,
        metavar="X",
        help="the batch's throughput cap, MB/s over all its moves",
    )
    add_count(
        create,
        "--stall-retries",
        least=0,
        of="retries",
        default=3,
        help="queue a move failed by the stall limit again, up to N times",
    )
    add_duration(
        create,
        "--stall-retry-after",
        default="15m",
        help="how long after such a failure the move is queued again",
    )

    command("list", cmd_list, "every batch, with its moves counted by state", named=False)
    command("show", cmd_show, "a batch: settings and moves")
    command("report", cmd_report, "a batch's report: MB, throughput, stalls and why")
    command("suspend", cmd_operate, "stop the batch's moves at their next safe point")
    command("resume", cmd_operate, "run a suspended batch again")
    command("complete", cmd_operate, "complete the batch's synced moves now")
    cancel = command("cancel", cmd_cancel, "cancel every move of the batch not past step 8")
    add_duration(
        cancel, "--wait", default="60s", help="how long to wait for each running move to stop"
    )
    change = command("set", cmd_operate, "change a batch's throughput cap while it runs")
    change.add_argument(
        "--max-mb-per-s", type=_rate, required=True, metavar="X|none", help="MB/s, or none"
    )
