"""Mailbox move throughput (issue 5): `mrs move` end to end against real parts.

    .venv/bin/python bench/move.py [--items 10000] [--body 2000] [--dir var/bench-move]

One run, one cluster:

1. Three `replication-node serve` processes on loopback (tests.cluster_harness; mbx1 and
   mbx2 in redmond, mbx3 in dublin) and `guarantee-api serve`.  DB1 is active on mbx1 with
   passive copies on mbx2 and mbx3; DB2 (constraint SecondCopy) is active on mbx2 with passive
   copies on mbx3 and mbx1.  Production-like settings: log_file_size 1 MiB and llr_depth 10
   (the config's defaults, not the tests' 64 KiB / 2) and the API polls the nodes every 1 s
   (`--poll-interval`; the tests use 200 ms).
2. Mailbox `alice` in DB1 is filled with `--items` items of `--body` bytes over the node HTTP
   API, in batches cut as the mover cuts them (at most 500 items, at most half a log file of
   payload); the log is rolled and the run waits until both passives have replayed it.
3. Plain copy (the baseline): the same items read from mbx1 in one GET, a mailbox
   `alice-copy` created on DB2's active and the items POSTed sequentially in the same batches,
   with no guarantee check and no wait for replication.  DB2's copies then replay it before
   the move starts.
4. `mrs move --mailbox alice --to DB2` as a subprocess (as the tests run it), with the seed's
   timings except the flush wait, which asks CheckReplicationFlush every 1 s instead of the
   seed's 10 s (`--flush-retry-interval`).  Each progress line is time-stamped as it arrives,
   which gives the time of each of the ten steps; `mrs stats --json` gives items and bytes
   copied and the guarantee answers (with their times), `mrs show --json` the exact stalled
   time and when the flush wait began.
5. The target is verified (item count and a SHA-256 over item ids, folders and bodies equal
   to the source's) for the move and for the plain copy, so a broken move cannot be reported.

Time waiting on the guarantee API = stalls after non-Satisfied CheckReplicationHealth answers
(answer to next answer) + the two flush waits (each roll of the target's log, after the final
sync at step 6 and after the unlock at step 9, to the next Satisfied CheckReplicationFlush
answer) + the Satisfied health calls that did not stall, costed at the latency of
CheckReplicationHealth probed from this process.

MB are 10^6 bytes of item bodies.  `--dir` is wiped at the start and removed at the end
(`--keep` leaves it).

`--compare-verification` (issue 18) instead measures what the mover's verification before
step 8 costs (the mailbox digests of source and target compared, one request each): four
mailboxes of `--items` items are filled in DB1 and moved to DB2 one after the other in the
same cluster, ABBA: with verification, without (`mrs move --unsafe-skip-verification`, a
hidden bench-only flag that skips only the digest comparison), without, with.  The report
gives each move's seconds and items/s, the time from the mover's "verifying" line to its
"verified" line, and the ratio of the means.  Every moved mailbox is then checked by the
bench's own digest, so a broken move cannot be reported.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workdir import add_work_dir, work_dir  # noqa: E402
from mrs_client.guarantee_client import GrpcGuaranteeClient  # noqa: E402
from mrs_client.policy import MoveSettings, MoveStep  # noqa: E402
from tests.cluster_harness import TOKEN, LocalCluster  # noqa: E402

MB = 1e6
LOG_FILE_SIZE = "1MiB"
LOG_FILE_BYTES = 1 << 20
LLR_DEPTH = 10
SOURCE, TARGET = "DB1", "DB2"
MAILBOX, COPY_MAILBOX = "alice", "alice-copy"
FOLDERS = ("Inbox", "Projects")
PASSIVES = {SOURCE: ("mbx2", "mbx3"), TARGET: ("mbx3", "mbx1")}
ACTIVE = {SOURCE: "mbx1", TARGET: "mbx2"}
STEP_LINE = re.compile(r"^\w+ step (\d+): ")
PROBE_CALLS = 50


def databases() -> list[dict[str, Any]]:
    return [
        {
            "name": db,
            **({"data_move_replication_constraint": "SecondCopy"} if db == TARGET else {}),
            "copies": [
                {"node": node, "activation_preference": i + 1}
                for i, node in enumerate((ACTIVE[db], *PASSIVES[db]))
            ],
        }
        for db in (SOURCE, TARGET)
    ]


def write_size(entry: dict[str, Any]) -> int:
    """What an item costs in a write, computed as the mover computes it
    (mrs_client.batching.write_size)."""
    return sum(len(str(v).encode()) for v in entry.values()) + 200


def batches(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Cut writes as the mover does: <= sync_batch items and <= half a log file of payload."""
    settings = MoveSettings()
    limit = LOG_FILE_BYTES // 2
    out: list[list[dict[str, Any]]] = []
    batch: list[dict[str, Any]] = []
    size = 0
    for entry in entries:
        cost = write_size(entry)
        if batch and (len(batch) >= settings.sync_batch or size + cost > limit):
            out.append(batch)
            batch, size = [], 0
        batch.append(entry)
        size += cost
    if batch:
        out.append(batch)
    return out


def entry_of(item: dict[str, Any]) -> dict[str, Any]:
    return {k: item[k] for k in ("item_id", "folder", "subject", "body")}


def digest(items: dict[str, dict[str, Any]]) -> tuple[int, str, int]:
    """(live item count, SHA-256 over sorted item ids, folders and bodies, body bytes)."""
    h = hashlib.sha256()
    live = sorted((k, v) for k, v in items.items() if not v["deleted"])
    for item_id, item in live:
        h.update(f"{item_id}\0{item['folder']}\0{item['body']}\0".encode())
    return len(live), h.hexdigest(), sum(len(v["body"].encode()) for _, v in live)


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text)


@dataclass
class MoveRun:
    """One `mrs move` subprocess: exit code, output and when each line arrived."""

    returncode: int = 0
    seconds: float = 0.0
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    ended: datetime | None = None
    lines: list[tuple[datetime, str]] = field(default_factory=list)
    stderr: str = ""


def mrs_args(cluster: LocalCluster, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mrs_client.cli",
        *args,
        "--config",
        str(cluster.config_path),
    ]


async def mrs_json(cluster: LocalCluster, *args: str) -> Any:
    result = await asyncio.to_thread(
        subprocess.run,
        mrs_args(cluster, *args, "--json"),
        capture_output=True,
        text=True,
        env=cluster.env(),
        cwd=ROOT,
        timeout=60,
    )
    if result.returncode != 0:
        raise RuntimeError(f"mrs {' '.join(args)} exited {result.returncode}: {result.stderr}")
    return json.loads(result.stdout)


async def run_move(
    cluster: LocalCluster, timings: list[str], timeout: float, mailbox: str = MAILBOX
) -> MoveRun:
    run = MoveRun()
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *mrs_args(cluster, "move", "--mailbox", mailbox, "--to", TARGET, *timings),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=cluster.env(),
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None

    async def read_lines() -> None:
        async for raw in proc.stdout:  # type: ignore[union-attr]
            run.lines.append((datetime.now(UTC), raw.decode(errors="replace").rstrip("\n")))

    async def read_stderr() -> None:
        run.stderr = (await proc.stderr.read()).decode(errors="replace")  # type: ignore[union-attr]

    try:
        await asyncio.wait_for(asyncio.gather(read_lines(), read_stderr(), proc.wait()), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    run.seconds = time.perf_counter() - start
    run.ended = datetime.now(UTC)
    run.returncode = proc.returncode or 0
    return run


async def settle(cluster: LocalCluster, db: str, timeout: float = 600) -> None:
    """Roll `db`'s log on its active and wait until both passives have replayed it."""
    body = await cluster.ok("POST", ACTIVE[db], f"/v1/databases/{db}/roll-log")
    generation = body["closed_generation"]

    async def replayed() -> bool:
        for node in PASSIVES[db]:
            copy = (await cluster.status(node))[db]
            if copy["status"] != "Healthy" or copy["last_log_replayed"] < generation:
                return False
        return True

    await cluster.wait_for(f"{db} replayed through generation {generation}", replayed, timeout)


async def wait_healthy(cluster: LocalCluster) -> None:
    async def healthy() -> bool:
        for db, nodes in PASSIVES.items():
            for node in nodes:
                if (await cluster.status(node))[db]["status"] != "Healthy":
                    return False
        return True

    await cluster.wait_for("healthy passive copies", healthy, timeout=120)


async def fill(
    cluster: LocalCluster, items: int, body: int, mailbox: str = MAILBOX
) -> dict[str, dict[str, Any]]:
    """Fill a mailbox (alice) in DB1; return its items as read back from mbx1."""
    prefix = f"/v1/databases/{SOURCE}/mailboxes/{mailbox}"
    await cluster.ok(
        "PUT", "mbx1", prefix, json={"display_name": "Alice", "folders": list(FOLDERS)}
    )
    entries = []
    for i in range(items):
        text = f"item {i:06d} of {mailbox}: lorem ipsum dolor sit amet. "
        entries.append(
            {
                "item_id": f"m{i:06d}",
                "folder": FOLDERS[i % 2],
                "subject": f"subject {i}",
                "body": (text * (body // len(text) + 1))[:body],
            }
        )
    for batch in batches(entries):
        await cluster.ok("POST", "mbx1", f"{prefix}/items", json={"items": batch})
    await settle(cluster, SOURCE)
    return await cluster.items("mbx1", SOURCE, mailbox)


async def plain_copy(cluster: LocalCluster) -> tuple[float, int, int]:
    """Read alice from mbx1, write it as alice-copy on DB2's active; (seconds, items, bytes)."""
    start = time.perf_counter()
    source = await cluster.ok("GET", "mbx1", f"/v1/databases/{SOURCE}/mailboxes/{MAILBOX}")
    body = await cluster.ok("GET", "mbx1", f"/v1/databases/{SOURCE}/mailboxes/{MAILBOX}/items")
    entries = [entry_of(i) for i in body["items"] if not i["deleted"]]
    prefix = f"/v1/databases/{TARGET}/mailboxes/{COPY_MAILBOX}"
    await cluster.ok(
        "PUT",
        ACTIVE[TARGET],
        prefix,
        json={"display_name": source["display_name"], "folders": source["folders"]},
    )
    for batch in batches(entries):
        await cluster.ok("POST", ACTIVE[TARGET], f"{prefix}/items", json={"items": batch})
    seconds = time.perf_counter() - start
    return seconds, len(entries), sum(len(e["body"].encode()) for e in entries)


async def probe_health_latency(cluster: LocalCluster) -> float:
    """Mean seconds of one CheckReplicationHealth call from this process (own caller id)."""
    client = GrpcGuaranteeClient(cluster.config["guarantee_api"]["listen"], token=TOKEN)
    try:
        await client.check_health(TARGET, "bench-probe")  # connect
        start = time.perf_counter()
        for _ in range(PROBE_CALLS):
            await client.check_health(TARGET, "bench-probe")
        return (time.perf_counter() - start) / PROBE_CALLS
    finally:
        await client.close()


def step_times(run: MoveRun) -> list[tuple[str, datetime, datetime]]:
    """(label, start, end) for process start-up, each step seen, and the exit."""
    marks: list[tuple[str, datetime]] = [
        ("start-up (process, config, record request)", run.started)
    ]
    for stamp, line in run.lines:
        m = STEP_LINE.match(line)
        if m:
            step = MoveStep(int(m.group(1)))
            marks.append((f"{int(step)}. {step.label}", stamp))
        elif line.endswith(" move completed"):
            marks.append(("after step 10 (to exit)", stamp))
    assert run.ended is not None
    return [
        (label, begin, marks[i + 1][1] if i + 1 < len(marks) else run.ended)
        for i, (label, begin) in enumerate(marks)
    ]


def guarantee_waits(answers: list[dict[str, Any]], rolls: list[datetime]) -> dict[str, float]:
    """Times from the answers: health stalls, the flush waits (each roll of the target's log
    to the first Satisfied flush answer after it), and the call counts."""
    out = {"health_calls": 0, "health_not_satisfied": 0, "health_stall": 0.0}
    out |= {"flush_calls": 0, "flush_not_satisfied": 0, "flush_wait": 0.0}
    for i, answer in enumerate(answers):
        kind = "health" if answer["method"] == "CheckReplicationHealth" else "flush"
        out[f"{kind}_calls"] += 1
        if answer["status"] == "Satisfied":
            when = parse_time(answer["time"])
            if kind == "flush" and rolls and rolls[0] <= when:
                out["flush_wait"] += (when - rolls.pop(0)).total_seconds()
            continue
        out[f"{kind}_not_satisfied"] += 1
        if kind == "health" and i + 1 < len(answers):
            gap = parse_time(answers[i + 1]["time"]) - parse_time(answer["time"])
            out["health_stall"] += gap.total_seconds()
    return out


async def bench(args: argparse.Namespace, base: Path) -> None:
    cluster = LocalCluster(
        base,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")],
        databases=databases(),
        defaults={
            "log_file_size": LOG_FILE_SIZE,
            "llr_depth": LLR_DEPTH,
            "block_mode": not args.file_mode,
        },
    )
    cluster.config["guarantee_api"]["poll_interval"] = args.poll_interval
    cluster.write_config()
    timings = [
        "--health-check-interval",
        args.health_check_interval,
        "--stall-retry-interval",
        args.stall_retry_interval,
        "--flush-retry-interval",
        args.flush_retry_interval,
    ]
    api = None
    try:
        await cluster.start()
        api = await cluster.start_guarantee_api()
        await wait_healthy(cluster)

        start = time.perf_counter()
        source = await fill(cluster, args.items, args.body)
        fill_time = time.perf_counter() - start
        source_count, source_sum, source_bytes = digest(source)
        assert source_count == args.items, (source_count, args.items)

        copy_time, copy_items, copy_bytes = await plain_copy(cluster)
        copied = digest(await cluster.items(ACTIVE[TARGET], TARGET, COPY_MAILBOX))
        assert copied[:2] == (source_count, source_sum), "the plain copy differs from the source"
        await settle(cluster, TARGET)

        run = await run_move(cluster, timings, args.timeout)
        output = "\n".join(line for _, line in run.lines)
        if run.returncode != 0:
            raise RuntimeError(f"mrs move exited {run.returncode}:\n{output}\n{run.stderr}")
        (move,) = await mrs_json(cluster, "list")
        stats = await mrs_json(cluster, "stats", move["id"])
        record = await mrs_json(cluster, "show", move["id"])
        assert stats["state"] == "Completed", stats

        moved = digest(await cluster.items(ACTIVE[TARGET], TARGET, MAILBOX))
        assert moved[:2] == (source_count, source_sum), (
            f"the moved mailbox differs from the source: {moved[0]} items, checksum "
            f"{moved[1][:12]} vs {source_count} items, {source_sum[:12]}"
        )
        probe = await probe_health_latency(cluster)
    except BaseException:
        for name in (*cluster.ports, "guarantee"):
            tail = (base / f"{name}.log").read_text(errors="replace")[-3000:]
            print(f"--- {name} log (tail) ---\n{tail}", file=sys.stderr)
        raise
    finally:
        if api is not None:
            api.terminate()
            api.wait(timeout=20)
        await cluster.close()

    report(args, run, stats, record, probe, fill_time, (copy_time, copy_items, copy_bytes))
    print(
        f"\nverified: {TARGET}/{MAILBOX} on {ACTIVE[TARGET]} holds {moved[0]:,} items, "
        f"SHA-256 {moved[1][:16]}... equal to the source; {TARGET}/{COPY_MAILBOX} too; "
        f"source {source_bytes / MB:.1f} MB of bodies"
    )


def report(
    args: argparse.Namespace,
    run: MoveRun,
    stats: dict[str, Any],
    record: dict[str, Any],
    probe: float,
    fill_time: float,
    plain: tuple[float, int, int],
) -> None:
    copy_time, copy_items, copy_bytes = plain
    items, nbytes = stats["items_copied"], stats["bytes_copied"]
    move_rate, move_mbps = items / run.seconds, nbytes / run.seconds / MB
    copy_rate, copy_mbps = copy_items / copy_time, copy_bytes / copy_time / MB
    print(
        f"cluster: 3 node processes on loopback (mbx1, mbx2 redmond; mbx3 dublin); "
        f"{SOURCE} mbx1 > mbx2 > mbx3, {TARGET} mbx2 > mbx3 > mbx1 (SecondCopy); "
        f"log_file_size {LOG_FILE_SIZE}, llr_depth {LLR_DEPTH}; guarantee API polls every "
        f"{args.poll_interval}; {'file mode' if args.file_mode else 'block mode'}.\n"
        f"mrs timings: health check every {args.health_check_interval}, stall retry "
        f"{args.stall_retry_interval}, flush retry {args.flush_retry_interval} (the seed's "
        f"flush retry is 10s).\n"
        f"fill: {args.items:,} items of {args.body:,} B into {SOURCE}/{MAILBOX} in "
        f"{fill_time:.1f} s, including replay on both passives.\n"
    )
    print("| run | items | MB | seconds | items/s | MB/s |")
    print("|---|---:|---:|---:|---:|---:|")
    print(
        f"| mrs move (10 steps, guarantee-gated, process start to exit) | {items:,} | "
        f"{nbytes / MB:.1f} | {run.seconds:.2f} | {move_rate:,.0f} | {move_mbps:.2f} |"
    )
    print(
        f"| plain copy (same HTTP API and batches, no checks) | {copy_items:,} | "
        f"{copy_bytes / MB:.1f} | {copy_time:.2f} | {copy_rate:,.0f} | {copy_mbps:.2f} |"
    )
    print(
        f"\nmove / plain copy: {move_rate / copy_rate:.2f} of the items/s, "
        f"{move_mbps / copy_mbps:.2f} of the MB/s\n"
    )

    # The mover marks a flush point of the target's log twice (after the final sync at step 6
    # and after the unlock at step 9: a roll, or in block mode the open log's durable end)
    # and waits for each flush; the progress line of each mark is stamped (a roll after a
    # block-mode flush not Satisfied in time counts from the roll).
    rolls = {
        "sync" if "final sync" in line else "unlock": stamp
        for stamp, line in run.lines
        if " target log rolled: " in line or " target log holds the " in line
    }
    marks = [line for _, line in run.lines if " target log " in line]
    print("flush points: " + "; ".join(m.split(": ", 1)[-1] for m in marks) + "\n")
    steps = step_times(run)
    print("| step | seconds | share of the move |")
    print("|---|---:|---:|")
    for label, begin, end in steps:
        seconds = (end - begin).total_seconds()
        print(f"| {label} | {seconds:.2f} | {seconds / run.seconds:.0%} |")
        for step, what, key in (("6.", "final sync", "sync"), ("9.", "unlock", "unlock")):
            if label.startswith(step) and key in rolls:
                before = (rolls[key] - begin).total_seconds()
                print(f"| - {step[0]}a. {what} and flush point | {before:.2f} | |")
                print(f"| - {step[0]}b. flush wait and answer | {seconds - before:.2f} | |")

    waits = guarantee_waits(stats["guarantee_answers"], sorted(rolls.values()))
    satisfied_health = waits["health_calls"] - waits["health_not_satisfied"]
    calls_cost = satisfied_health * probe
    total = waits["health_stall"] + waits["flush_wait"] + calls_cost
    print("\n| waiting on the guarantee API | value |")
    print("|---|---:|")
    print(
        f"| CheckReplicationHealth calls (not Satisfied) | {waits['health_calls']} "
        f"({waits['health_not_satisfied']}) |"
    )
    print(f"| stalled after non-Satisfied health answers, s | {waits['health_stall']:.2f} |")
    print(
        f"| Satisfied health calls x probed latency ({probe * 1e3:.2f} ms), s | {calls_cost:.3f} |"
    )
    print(
        f"| CheckReplicationFlush calls (not Satisfied) | {waits['flush_calls']} "
        f"({waits['flush_not_satisfied']}) |"
    )
    print(f"| flush waits: each flush point to Satisfied, s | {waits['flush_wait']:.2f} |")
    print(f"| move's time_stalled (record; stats says {stats['time_stalled']}), s | "
          f"{record['time_stalled']:.2f} |")  # fmt: skip
    print(f"| total waiting on the guarantee, s | {total:.2f} ({total / run.seconds:.0%}) |")
    if waits["flush_not_satisfied"]:
        n = waits["flush_not_satisfied"]
        print(
            f"\nthe flush wait is {n} non-Satisfied CheckReplicationFlush answer(s) x the "
            f"{args.flush_retry_interval} retry interval (the API sees the replay only at its "
            f"next poll); with the seed's 10s interval it would be at least {n * 10} s."
        )
    print(
        f"\nguarantee wait / move time: {total / run.seconds:.2f}; move time less the "
        f"guarantee wait: {run.seconds - total:.2f} s "
        f"({items / (run.seconds - total):,.0f} items/s)"
    )


VERIFY_ORDER = (("alice", True), ("bob", False), ("carol", False), ("dave", True))


def verification_time(run: MoveRun) -> float:
    """Seconds from the mover's "verifying" progress line to its "verified" one (with the
    digests skipped, the same span covers the epoch check that remains)."""
    start = next(
        t for t, line in run.lines if line.endswith("verifying the target against the source")
    )
    end = next(t for t, line in run.lines if " verified: " in line)
    return (end - start).total_seconds()


async def compare_verification(args: argparse.Namespace, base: Path) -> None:
    """Issue 18: the same move with and without the digest verification, ABBA, one run."""
    cluster = LocalCluster(
        base,
        nodes=[("mbx1", "redmond"), ("mbx2", "redmond"), ("mbx3", "dublin")],
        databases=databases(),
        defaults={
            "log_file_size": LOG_FILE_SIZE,
            "llr_depth": LLR_DEPTH,
            "block_mode": not args.file_mode,
        },
    )
    cluster.config["guarantee_api"]["poll_interval"] = args.poll_interval
    cluster.write_config()
    timings = [
        "--health-check-interval",
        args.health_check_interval,
        "--stall-retry-interval",
        args.stall_retry_interval,
        "--flush-retry-interval",
        args.flush_retry_interval,
    ]
    rows = []
    api = None
    try:
        await cluster.start()
        api = await cluster.start_guarantee_api()
        await wait_healthy(cluster)
        sources = {}
        for mailbox, _ in VERIFY_ORDER:
            start = time.perf_counter()
            sources[mailbox] = digest(await fill(cluster, args.items, args.body, mailbox))
            print(f"filled {mailbox}: {args.items:,} items in {time.perf_counter() - start:.1f} s")
        for mailbox, verify in VERIFY_ORDER:
            extra = [] if verify else ["--unsafe-skip-verification"]
            run = await run_move(cluster, timings + extra, args.timeout, mailbox)
            if run.returncode != 0:
                output = "\n".join(line for _, line in run.lines)
                raise RuntimeError(f"mrs move {mailbox} exited {run.returncode}:\n{output}")
            moved = digest(await cluster.items(ACTIVE[TARGET], TARGET, mailbox))
            assert moved[:2] == sources[mailbox][:2], f"{mailbox} differs from its source"
            (move,) = [m for m in await mrs_json(cluster, "list") if m["mailboxes"] == [mailbox]]
            stats = await mrs_json(cluster, "stats", move["id"])
            waits = guarantee_waits(stats["guarantee_answers"], [])
            spans = {
                label[:2]: (end - begin).total_seconds() for label, begin, end in step_times(run)
            }
            rows.append(
                (
                    mailbox,
                    verify,
                    run.seconds,
                    verification_time(run),
                    spans.get("8.", 0.0),
                    spans.get("9.", 0.0),
                    waits["flush_not_satisfied"],
                )
            )
            print(f"moved {mailbox} ({'with' if verify else 'without'} verification): "
                  f"{run.seconds:.2f} s")  # fmt: skip
    except BaseException:
        for name in (*cluster.ports, "guarantee"):
            tail = (base / f"{name}.log").read_text(errors="replace")[-3000:]
            print(f"--- {name} log (tail) ---\n{tail}", file=sys.stderr)
        raise
    finally:
        if api is not None:
            api.terminate()
            api.wait(timeout=20)
        await cluster.close()

    print(
        f"\n{args.items:,} items of {args.body:,} B per mailbox; log_file_size {LOG_FILE_SIZE}, "
        f"llr_depth {LLR_DEPTH}; API polls every {args.poll_interval}; flush retry "
        f"{args.flush_retry_interval}.\n"
    )
    print(
        "| move | verification | seconds | items/s | verifying -> verified, s | step 8, s "
        "| step 9, s | NotSatisfied flush answers |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for mailbox, verify, seconds, check, step8, step9, not_satisfied in rows:
        print(
            f"| {mailbox} | {'on' if verify else 'off'} | {seconds:.2f} | "
            f"{args.items / seconds:,.0f} | {check:.3f} | {step8:.2f} | {step9:.2f} | "
            f"{not_satisfied} |"
        )
    on = [r for r in rows if r[1]]
    off = [r for r in rows if not r[1]]
    mean_on = sum(r[2] for r in on) / len(on)
    mean_off = sum(r[2] for r in off) / len(off)
    check_on = sum(r[3] for r in on) / len(on)
    check_off = sum(r[3] for r in off) / len(off)
    print(
        f"\nmean with verification {mean_on:.2f} s ({args.items / mean_on:,.0f} items/s), "
        f"without {mean_off:.2f} s ({args.items / mean_off:,.0f} items/s): "
        f"items/s ratio with/without {mean_off / mean_on:.3f}; "
        f"the check itself {check_on:.3f} s vs {check_off:.3f} s without digests "
        f"({(check_on - check_off) / mean_on:.1%} of a verified move)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000, help="items in the mailbox")
    parser.add_argument("--body", type=int, default=2_000, help="bytes per item body")
    add_work_dir(parser, "var/bench-move")
    parser.add_argument("--poll-interval", default="1s", help="guarantee API poll interval")
    parser.add_argument("--health-check-interval", default="10s", help="mrs (seed: 10s)")
    parser.add_argument("--stall-retry-interval", default="30s", help="mrs (seed: 30s)")
    parser.add_argument("--flush-retry-interval", default="1s", help="mrs (seed: 10s)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for the move")
    parser.add_argument(
        "--file-mode",
        action="store_true",
        help="block_mode off: the copies follow closed logs only and the mover rolls (issue 13)",
    )
    parser.add_argument(
        "--compare-verification",
        action="store_true",
        help="issue 18: moves with and without the digest verification (ABBA), same run",
    )
    args = parser.parse_args()
    print(
        f"{date.today().isoformat()} - nproc {os.cpu_count()}, {platform.platform()}, "
        f"Python {platform.python_version()}; --items {args.items} --body {args.body}\n"
    )
    with work_dir(args) as base:
        if args.compare_verification:
            asyncio.run(compare_verification(args, base))
        else:
            asyncio.run(bench(args, base))


if __name__ == "__main__":
    main()
