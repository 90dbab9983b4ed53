"""The transport (issue 31): messages through `transport serve` against the node's own item
writes, and the dumpster's redelivery of a loss window.

    .venv/bin/python bench/transport.py [--messages 8000] [--concurrency 16] [--mailboxes 8]
        [--rounds 4] [--redeliver 5000] [--dir var/bench-transport] [--keep] [--quick]

One cluster: two `replication-node serve` processes on loopback (tests.cluster_harness), DB1
active on mbx1 with a passive copy on mbx2, log_file_size 1 MiB and llr_depth 10 (the
config's defaults, not the tests' 64 KiB / 2), no automatic failover (a 2-core machine under
load must not fail DB1 over mid-round); and one `transport serve` process, hub1
(tests.transport.harness), with the config's transport settings (`concurrency` 32, the
retry timings) except `max_dumpster_size_per_database`, sized to keep everything the run
delivers (at least 100 MB).  `--mailboxes` mailboxes in DB1; client n writes to mailbox
n mod `--mailboxes`.  Messages and items are 4 KiB: a body of 4,096 characters of text
that does not compress to a pattern, and a short subject.  `--dir` is wiped at the start
and removed at the end unless `--keep` (`bench/workdir.py`: one run at a time in it).

1. Throughput at the same concurrency.  `--concurrency` clients in this process, closed
   loop, one request at a time each:
   - baseline: each client POSTs one item at a time straight to DB1's active
     (`POST /v1/databases/DB1/mailboxes/{m}/items`, `{item_id, subject, body}`); a write
     is done at its 201 (durable on the active).  Round time: start to the last 201.
   - transport: each client POSTs one message at a time to hub1 (`POST /v1/messages`,
     one recipient) and goes on at its 201 (queued durably on the transport).  A message
     is done once its delivery is durable on DB1's active.  That moment is the transport's
     own `delivered` time (`GET /v1/messages/{id}`, read after the round): the wall time
     at which the node acknowledged the batch holding it, read from the same clock as the
     submit times recorded here (one machine), so it is exact, costs the round nothing,
     and needs no polling of the mailboxes during the round (which would load the node
     the transport writes to).  Round time: start to the last `delivered`.  Latency:
     submit (before the POST) to `delivered`, p50 and p99 over every message of every
     round.  Once every message is accepted, the round waits (every 50 ms) for the last
     message of each mailbox to be Delivered, then for `/v1/queue` to show nothing
     Queued or waiting.  Not `/v1/queue` alone: it counts the deliveries by state in the
     thread that commits every submission and delivery, so polling it would add to what
     it measures.
   `--messages` per side, over `--rounds` interleaved pairs (baseline, transport,
   baseline, transport, ...), totals over the rounds.  Before the first round, a warm-up
   not counted: items until DB1's log is past its LLR depth (from then on every roll also
   writes an older generation into the database file), then some messages through the
   transport.  Each round starts on a quiet disk: the transport drained, DB1's log rolled
   and replayed by mbx2, then `sync`, so that neither side pays the other's writeback.
   messages/s of the transport / items/s of the baseline: target >= 0.7.  Beside it:
   the CPU seconds of each process per side (2 cores are shared by the two nodes, the
   transport and this client), and the transport's mean batch (deliveries per node call,
   from its metrics).
2. Redelivery of a loss window.  `--redeliver` messages (5,000: what the issue takes a
   10-minute loss window to hold) are submitted to DB1's mailboxes as in part 1 and
   delivered; the window is cut to exactly them (from before the first submission to
   after the last was delivered; part 1's deliveries are all before it), the disk
   settled as above, then `POST /v1/redeliver {DB1, start, end}` and the time from that
   POST until every one of them is delivered again: the last `delivered` time among them
   (each one's, read afterwards: exact), and when this process saw it, `/v1/queue`
   showing Queued 0, waiting 0 and Delivered back to what it was before the POST (after
   waiting as in part 1: an upper bound, by up to a poll and a `/v1/queue`).  Seconds
   and messages/s.

Checked at the end, so a broken run cannot be reported: the answer to the redelivery
names exactly `--redeliver` messages; every message of both parts is Delivered to DB1,
each of part 2 redelivered once, none poisoned; and every mailbox, read a page at a time
from DB1's active (`GET …/items?since_change=N&limit=…`), holds each message exactly once
(item id `transport.messages.item_id_for(message_id)`, with its subject and body) and each
baseline item, and nothing else.

`--quick`: small numbers, to check the script in seconds (the figures mean nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.workdir import add_work_dir, run_and_report  # noqa: E402
from dag_common.api_types import item_id_for  # noqa: E402
from tests.cluster_harness import LocalCluster, wait_until  # noqa: E402
from tests.transport.harness import Hubs  # noqa: E402

DB = "DB1"
ACTIVE, PASSIVE = "mbx1", "mbx2"
HUB = "hub1"
LLR_DEPTH = 10
BODY = 4096  # characters of text, one byte each in UTF-8
BODIES = 256  # distinct bodies, used round-robin
MB = 1e6


@dataclass(frozen=True)
class Sizes:
    """What one run does (`--quick` makes it small; an option given wins)."""

    messages: int  # part 1, per side, over all rounds
    rounds: int  # part 1, pairs of (baseline, transport)
    redeliver: int  # part 2
    warm_generations: int  # part 1's warm-up: items until DB1's log has closed this many
    warm_messages: int  # part 1's warm-up through the transport


FULL = Sizes(messages=8000, rounds=4, redeliver=5000, warm_generations=LLR_DEPTH + 2,
             warm_messages=500)  # fmt: skip
QUICK = Sizes(messages=320, rounds=2, redeliver=300, warm_generations=2, warm_messages=32)


def text(n: int, seed: int) -> str:
    """`n` characters of text that does not compress to a pattern."""
    return random.Random(seed).randbytes((n + 1) // 2).hex()[:n]


BODY_POOL = [text(BODY, seed) for seed in range(BODIES)]


def body_of(n: int) -> str:
    return BODY_POOL[n % BODIES]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (1 min), {five:.2f} (5 min)"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat()


@dataclass
class Sent:
    """What this run wrote, to check at the end: per mailbox, item id -> (subject, body)."""

    items: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)  # message id -> mailbox

    def add(self, mailbox: str, item_id: str, subject: str, body: str) -> None:
        self.items.setdefault(mailbox, {})[item_id] = (subject, body)


@dataclass(frozen=True)
class Submission:
    """Messages submitted to hub1: when the first POST went, when the last 201 came, each
    message's submit time, and the last message accepted for each mailbox."""

    start: float
    accepted: float
    times: dict[str, float]
    last: dict[str, str]


class Bench:
    """The cluster, the transport and the clients; what each step measured."""

    def __init__(self, base: Path, args: argparse.Namespace) -> None:
        self.args = args
        self.cluster = LocalCluster(
            base,
            nodes=[(ACTIVE, "redmond"), (PASSIVE, "redmond")],
            databases=[
                {
                    "name": DB,
                    "copies": [
                        {"node": ACTIVE, "activation_preference": 1},
                        {"node": PASSIVE, "activation_preference": 2},
                    ],
                }
            ],
            defaults={"log_file_size": "1MiB", "llr_depth": LLR_DEPTH, "failover_after": None},
        )
        self.hubs = Hubs(self.cluster, HUB)
        delivered = args.warm_messages + args.messages + args.redeliver
        dumpster = max(100_000_000, int(2 * delivered * (BODY + 64)))
        # The config's transport settings, not the harness's test timings (50 ms retries):
        # only the dumpster is sized, so that nothing the run delivers leaves it.
        self.cluster.config["transport"] = {"max_dumpster_size_per_database": dumpster}
        self.cluster.write_config()
        self.dumpster = dumpster
        self.mailboxes = [f"user{i:02d}" for i in range(args.mailboxes)]
        self.sent = Sent()
        # the messages of the warm-up, part 1 and part 2, checked at the end
        self.warm_ids: list[str] = []
        self.part1_ids: list[str] = []
        self.part2_ids: list[str] = []

    # ---- the cluster ---------------------------------------------------------------------

    async def start(self) -> None:
        await self.cluster.start()
        await self.cluster.wait_status(ACTIVE, DB, "Mounted")
        await self.cluster.wait_status(PASSIVE, DB, "Healthy")
        for m in self.mailboxes:
            await self.cluster.ok("PUT", ACTIVE, f"/v1/databases/{DB}/mailboxes/{m}")
        await self.hubs.start(HUB)

    async def stop(self) -> None:
        try:
            self.hubs.stop_all()
        finally:
            await self.cluster.close()

    def pids(self) -> dict[str, int]:
        procs = {**self.cluster.procs, HUB: self.hubs.procs[HUB]}
        return {name: p.pid for name, p in procs.items()}

    def cpu(self) -> dict[str, float]:
        return {n: cpu_seconds(pid) for n, pid in self.pids().items()} | {"bench": own_cpu()}

    def tails(self) -> None:
        for name in (ACTIVE, PASSIVE, HUB):
            path = self.cluster.root / f"{name}.log"
            if path.exists():
                tail = path.read_text(errors="replace")[-3000:]
                print(f"--- {name} log (tail) ---\n{tail}", file=sys.stderr)

    async def generation(self) -> int:
        return int((await self.cluster.status(ACTIVE))[DB]["last_log_generated"])

    async def settle(self) -> None:
        """A quiet disk: DB1's log rolled and replayed by mbx2, everything written synced."""
        rolled = await self.cluster.ok("POST", ACTIVE, f"/v1/databases/{DB}/roll-log")
        generation = rolled["closed_generation"] or await self.generation()

        async def replayed() -> bool:
            copy = (await self.cluster.status(PASSIVE))[DB]
            return copy["status"] == "Healthy" and copy["last_log_replayed"] >= generation

        await self.cluster.wait_for(f"{DB} replayed through {generation}", replayed, 600)
        os.sync()

    # ---- the clients -----------------------------------------------------------------------

    async def clients(self, n: int, one: Callable[[int, int], Awaitable[None]]) -> None:
        """`--concurrency` clients, closed loop, sharing the numbers 0..n-1: client c calls
        `one(c, number)` for each number it takes, one at a time."""
        numbers = iter(range(n))

        async def client(c: int) -> None:
            for k in numbers:
                await one(c, k)

        await asyncio.gather(*(client(c) for c in range(self.args.concurrency)))

    def mailbox_of(self, client: int) -> str:
        return self.mailboxes[client % len(self.mailboxes)]

    async def write_items(self, tag: str, n: int) -> tuple[float, float, list[float]]:
        """The baseline: `n` items POSTed straight to DB1's active; (start, last 201, each
        write's latency)."""
        latencies: list[float] = []
        last = 0.0

        async def one(c: int, k: int) -> None:
            nonlocal last
            mailbox, item_id = self.mailbox_of(c), f"{tag}-{k}"
            item = {"item_id": item_id, "subject": f"item {item_id}", "body": body_of(k)}
            sent = time.time()
            status, body = await self.cluster.call(
                "POST", ACTIVE, f"/v1/databases/{DB}/mailboxes/{mailbox}/items", json=item
            )
            done = time.time()
            if status != 201:
                raise RuntimeError(f"baseline write {item_id} to {mailbox}: {status} {body}")
            latencies.append(done - sent)
            last = max(last, done)
            self.sent.add(mailbox, item_id, item["subject"], item["body"])

        start = time.time()
        await self.clients(n, one)
        return start, last, latencies

    async def submit(self, tag: str, n: int) -> Submission:
        """`n` messages submitted to hub1, one recipient each."""
        submitted: dict[str, float] = {}
        latest: dict[str, str] = {}
        last = 0.0

        async def one(c: int, k: int) -> None:
            nonlocal last
            mailbox, message_id = self.mailbox_of(c), f"{tag}.{k}@bench"
            message = {
                "message_id": message_id,
                "recipients": [mailbox],
                "subject": f"message {message_id}",
                "body": body_of(k),
            }
            sent = time.time()
            status, body = await self.hubs.call("POST", HUB, "/v1/messages", json=message)
            if status != 201:
                raise RuntimeError(f"submission of {message_id}: {status} {body}")
            last = max(last, time.time())
            submitted[message_id] = sent
            latest[mailbox] = message_id
            self.sent.messages[message_id] = mailbox
            self.sent.add(mailbox, item_id_for(message_id), message["subject"], message["body"])

        start = time.time()
        await self.clients(n, one)
        return Submission(start, last, submitted, latest)

    # ---- the transport ---------------------------------------------------------------------

    async def queue(self) -> dict[str, Any]:
        status, state = await self.hubs.call("GET", HUB, "/v1/queue")
        assert status == 200, f"GET /v1/queue: {status} {state}"
        return state

    async def drained(self, every: float, delivered: int | None = None) -> dict[str, Any]:
        """Wait until nothing is Queued or waiting in hub1 (and, if given, `delivered`
        deliveries are Delivered); its /v1/queue.  Poison fails the run at once."""
        state: dict[str, Any] = {}

        async def empty() -> bool:
            nonlocal state
            state = await self.queue()
            d = state["deliveries"]
            if d["Poison"]:
                _, poison = await self.hubs.call("GET", HUB, "/v1/poison")
                raise AssertionError(f"the transport poisoned deliveries: {poison}")
            return (
                state["waiting"] == 0
                and d["Queued"] == 0
                and (delivered is None or d["Delivered"] == delivered)
            )

        await wait_until(f"transport {HUB} drained", empty, timeout=1800, every=every)
        return state

    async def landed(self, sub: Submission, *, redeliveries: int = 0) -> None:
        """Wait until the last message accepted for each mailbox is Delivered (delivered
        again `redeliveries` times).  A mailbox gets its messages in queue order, so that
        is (nearly) all of them, and each look is one indexed read in hub1's queue, where
        `/v1/queue` counts every delivery by state in the thread that commits every
        submission and delivery: polled during a round, it would add to what it measures.
        `drained` confirms afterwards."""

        async def done() -> bool:
            for m in sub.last.values():
                status, body = await self.hubs.call("GET", HUB, f"/v1/messages/{m}")
                assert status == 200, f"GET /v1/messages/{m}: {status} {body}"
                (d,) = body["deliveries"]
                if d["state"] == "Poison":
                    raise AssertionError(f"{m} poisoned: {d}")
                if d["state"] != "Delivered" or d["redeliveries"] != redeliveries:
                    return False
            return True

        await wait_until("the last message of each mailbox delivered", done, timeout=1800,
                         every=0.05)  # fmt: skip

    async def deliveries(self, message_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Each message's one delivery as hub1 records it (read after a round, not during
        it): state, database, delivered (epoch seconds), redeliveries."""
        out: dict[str, dict[str, Any]] = {}
        ids = iter(message_ids)

        async def reader() -> None:
            for m in ids:
                status, body = await self.hubs.call("GET", HUB, f"/v1/messages/{m}")
                assert status == 200, f"GET /v1/messages/{m}: {status} {body}"
                (delivery,) = body["deliveries"]
                out[m] = delivery

        await asyncio.gather(*(reader() for _ in range(self.args.concurrency)))
        return out

    async def metrics(self) -> dict[str, float]:
        """hub1's node calls (count of transport_delivery_seconds), deliveries and failed
        tries, summed over their labels."""
        async with self.cluster.session.get(f"{self.hubs.url(HUB)}/metrics") as resp:  # type: ignore[union-attr]
            page = await resp.text()
        wanted = {
            "calls": "transport_delivery_seconds_count",
            "deliveries": "transport_deliveries_total",
            "failures": "transport_delivery_failures_total",
        }
        out = dict.fromkeys(wanted, 0.0)
        for line in page.splitlines():
            match = re.match(r"^([a-z_]+)(?:\{[^}]*\})? ([0-9.e+-]+)$", line)
            if match:
                for key, name in wanted.items():
                    if match.group(1) == name:
                        out[key] += float(match.group(2))
        return out

    # ---- 1. throughput ---------------------------------------------------------------------

    async def warm_up(self) -> dict[str, Any]:
        start, n = time.perf_counter(), 0
        while await self.generation() < self.args.warm_generations:
            await self.write_items(f"w{n}", self.args.concurrency * 16)
            n += 1
        items = n * self.args.concurrency * 16
        sub = await self.submit("warm", self.args.warm_messages)
        await self.drained(every=0.1)
        self.warm_ids = list(sub.times)
        return {"items": items, "messages": len(sub.times), "generation": await self.generation(),
                "seconds": time.perf_counter() - start}  # fmt: skip

    async def throughput(self) -> dict[str, Any]:
        per_round = self.args.messages // self.args.rounds
        base = {"n": 0, "seconds": 0.0, "latencies": [], "cpu": {}}
        hub = {"n": 0, "seconds": 0.0, "accept_seconds": 0.0, "latencies": [], "cpu": {},
               "calls": 0.0, "deliveries": 0.0, "failures": 0.0}  # fmt: skip
        rounds = []

        def add_cpu(into: dict[str, float], before: dict[str, float]) -> None:
            for name, seconds in self.cpu().items():
                into[name] = into.get(name, 0.0) + seconds - before[name]

        for r in range(self.args.rounds):
            await self.settle()
            before = self.cpu()
            start, last, latencies = await self.write_items(f"b{r}", per_round)
            add_cpu(base["cpu"], before)
            base_s = last - start
            base["n"] += per_round
            base["seconds"] += base_s
            base["latencies"] += latencies

            await self.settle()
            dumpster = (await self.queue())["deliveries"]["Delivered"]
            counted = await self.metrics()
            before = self.cpu()
            sub = await self.submit(f"r{r}", per_round)
            await self.landed(sub)
            add_cpu(hub["cpu"], before)
            await self.drained(every=0.1)
            after = await self.metrics()
            for key in ("calls", "deliveries", "failures"):
                hub[key] += after[key] - counted[key]
            records = await self.deliveries(list(sub.times))
            latencies = []
            for m, d in records.items():
                assert d["state"] == "Delivered" and d["database"] == DB, (m, d)
                latencies.append(d["delivered"] - sub.times[m])
            # one clock (this machine's) for the submit and the delivered times
            assert min(latencies) > 0, (
                f"a message delivered before it was submitted: {min(latencies)}"
            )
            hub_s = max(d["delivered"] for d in records.values()) - sub.start
            hub["n"] += per_round
            hub["seconds"] += hub_s
            hub["accept_seconds"] += sub.accepted - sub.start
            hub["latencies"] += latencies
            self.part1_ids += list(sub.times)
            ratio = (per_round / hub_s) / (per_round / base_s)
            rounds.append({"baseline_s": base_s, "transport_s": hub_s, "ratio": ratio,
                           "dumpster_before": dumpster})  # fmt: skip
            print(f"  round {r + 1}: baseline {per_round} items in {base_s:.2f} s "
                  f"({per_round / base_s:.0f}/s), transport {per_round} messages in "
                  f"{hub_s:.2f} s ({per_round / hub_s:.0f}/s), ratio {ratio:.2f}; "
                  f"{dumpster} messages in the dumpster before", flush=True)  # fmt: skip
        await self.settle()
        return {"per_round": per_round, "baseline": base, "transport": hub, "rounds": rounds}

    # ---- 2. redelivery ---------------------------------------------------------------------

    async def redelivery(self) -> dict[str, Any]:
        n = self.args.redeliver
        window_start = time.time()
        sub = await self.submit("d", n)
        await self.landed(sub)
        state = await self.drained(every=0.1)
        window_end = time.time()
        fill_s = window_end - sub.start
        self.part2_ids = list(sub.times)
        delivered_before = state["deliveries"]["Delivered"]
        await self.settle()

        posted = time.time()
        status, answer = await self.hubs.call(
            "POST", HUB, "/v1/redeliver",
            json={"database": DB, "start": rfc3339(window_start), "end": rfc3339(window_end)},
        )  # fmt: skip
        answered = time.time()
        assert status == 200 and answer.get("status") == "Success", (status, answer)
        assert answer["messages"] == n, f"redelivery queued {answer['messages']}, not {n}"
        await self.landed(sub, redeliveries=1)
        await self.drained(every=0.05, delivered=delivered_before)
        observed = time.time()
        records = await self.deliveries(self.part2_ids)
        for m, d in records.items():
            assert d["state"] == "Delivered" and d["database"] == DB, (m, d)
            assert d["redeliveries"] == 1 and d["delivered"] >= posted, (m, d)
        last = max(d["delivered"] for d in records.values())
        return {
            "messages": n,
            "fill_s": fill_s,
            "window_s": window_end - window_start,
            "answer_s": answered - posted,
            "queue_s": observed - posted,
            "last_delivered_s": last - posted,
        }

    # ---- the check -------------------------------------------------------------------------

    async def check(self) -> dict[str, Any]:
        """Every mailbox holds what was sent to it, each item exactly once, nothing else;
        every message Delivered to DB1, none poisoned."""
        records = await self.deliveries(self.warm_ids + self.part1_ids)
        for m, d in records.items():
            assert d["state"] == "Delivered" and d["database"] == DB, (m, d)
        state = await self.queue()
        total = len(self.warm_ids) + len(self.part1_ids) + len(self.part2_ids)
        assert state["deliveries"] == {"Queued": 0, "Delivered": total, "Poison": 0}, state
        assert state["waiting"] == 0, state
        (dumpster,) = state["dumpsters"]
        assert dumpster["database"] == DB and dumpster["messages"] == total, dumpster
        items = 0
        for mailbox in self.mailboxes:
            listed = await self.listing(mailbox)
            ids = [i["item_id"] for i in listed if not i["deleted"]]
            assert len(ids) == len(set(ids)), f"{mailbox}: an item id listed twice"
            expected = self.sent.items.get(mailbox, {})
            missing = set(expected) - set(ids)
            extra = set(ids) - set(expected)
            assert not missing, f"{mailbox}: {len(missing)} missing, e.g. {sorted(missing)[:3]}"
            assert not extra, f"{mailbox}: {len(extra)} not sent, e.g. {sorted(extra)[:3]}"
            for i in listed:
                if not i["deleted"]:
                    subject, body = expected[i["item_id"]]
                    assert (i["subject"], i["body"]) == (subject, body), i["item_id"]
            items += len(ids)
        messages = len(self.sent.messages)
        return {"items": items, "messages": messages, "queue": state}

    async def listing(self, mailbox: str, page: int = 2000) -> list[dict[str, Any]]:
        """Every item of `mailbox` on DB1's active, a page at a time by change number."""
        out: list[dict[str, Any]] = []
        since = 0
        while True:
            body = await self.cluster.ok(
                "GET", ACTIVE, f"/v1/databases/{DB}/mailboxes/{mailbox}/items",
                params={"since_change": str(since), "limit": str(page)},
            )  # fmt: skip
            out += body["items"]
            since = body["last_change_number"]
            if not body["more"]:
                return out


async def run(base: Path, args: argparse.Namespace) -> dict[str, Any]:
    bench = Bench(base, args)
    out: dict[str, Any] = {"dumpster_bytes": bench.dumpster}
    try:
        await bench.start()
        out["warm_up"] = await bench.warm_up()
        warm = out["warm_up"]
        print(f"warm-up: {warm['items']} items, {warm['messages']} messages, DB1 at "
              f"generation {warm['generation']}", flush=True)  # fmt: skip
        print(f"## 1. throughput, {args.concurrency} clients over {args.mailboxes} mailboxes",
              flush=True)  # fmt: skip
        out["throughput"] = await bench.throughput()
        print(f"## 2. redelivery of {args.redeliver} messages", flush=True)
        out["redelivery"] = await bench.redelivery()
        out["check"] = await bench.check()
    except BaseException:
        bench.tails()
        raise
    finally:
        await bench.stop()
    return out


def report(args: argparse.Namespace, out: dict[str, Any]) -> None:
    t = out["throughput"]
    base, hub = t["baseline"], t["transport"]
    base_rate, hub_rate = base["n"] / base["seconds"], hub["n"] / hub["seconds"]
    ratio = hub_rate / base_rate
    ratios = [r["ratio"] for r in t["rounds"]]
    batch = hub["deliveries"] / hub["calls"] if hub["calls"] else 0.0

    def ms(values: list[float], q: float) -> str:
        return f"{percentile(values, q) * 1e3:.1f}"

    def cpu(side: dict[str, Any]) -> str:
        return ", ".join(f"{name} {s:.1f}" for name, s in side["cpu"].items())

    print(f"\n{date.today().isoformat()} - nproc {os.cpu_count()}, {platform.platform()}, "
          f"Python {platform.python_version()}; {'--quick' if args.quick else 'full sizes'}; "
          f"{load()}")  # fmt: skip
    print(f"DB1 on mbx1 (active) and mbx2, log_file_size 1 MiB, llr_depth 10; transport hub1 "
          f"(config defaults, dumpster {out['dumpster_bytes'] / MB:.0f} MB); 4 KiB bodies; "
          f"{args.concurrency} clients over {args.mailboxes} mailboxes; {args.rounds} "
          f"interleaved rounds of {t['per_round']} a side\n")  # fmt: skip
    print("| side | done | seconds | per second | latency p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| baseline: a POST of one item to the active, to its 201 | {base['n']} | "
          f"{base['seconds']:.2f} | {base_rate:.0f} | {ms(base['latencies'], 0.5)} | "
          f"{ms(base['latencies'], 0.99)} |")  # fmt: skip
    print(f"| transport: submission to durable on the active | {hub['n']} | "
          f"{hub['seconds']:.2f} | {hub_rate:.0f} | {ms(hub['latencies'], 0.5)} | "
          f"{ms(hub['latencies'], 0.99)} |")  # fmt: skip
    print(f"\ntransport / baseline: **{ratio:.2f}** (rounds {min(ratios):.2f}-{max(ratios):.2f}; "
          f"target >= 0.7)")  # fmt: skip
    print(f"transport: accepted (201s) at {hub['n'] / hub['accept_seconds']:.0f}/s; "
          f"{batch:.1f} deliveries per node call ({hub['calls']:.0f} calls); "
          f"{hub['failures']:.0f} failed tries")  # fmt: skip
    print(f"CPU seconds, baseline rounds: {cpu(base)}")
    print(f"CPU seconds, transport rounds: {cpu(hub)}")
    r = out["redelivery"]
    n, last = r["messages"], r["last_delivered_s"]
    print(
        f"\nredelivery of {n} messages (submitted and delivered in {r['fill_s']:.2f} s, "
        f"{n / r['fill_s']:.0f}/s, beforehand): POST /v1/redeliver answered in "
        f"{r['answer_s']:.2f} s; every one delivered again **{last:.2f} s** after the "
        f"POST (**{n / last:.0f} messages/s**; seen by /v1/queue at {r['queue_s']:.2f} s)"
    )
    c = out["check"]
    print(
        f"checked: {c['messages']} messages each delivered once, {c['items']} items in "
        f"{args.mailboxes} mailboxes as sent, nothing else; queue {c['queue']['deliveries']}"
    )
    summary = {
        "date": date.today().isoformat(),
        "nproc": os.cpu_count(),
        "platform": platform.platform(),
        "quick": args.quick,
        "concurrency": args.concurrency,
        "mailboxes": args.mailboxes,
        "baseline_per_s": base_rate,
        "transport_per_s": hub_rate,
        "ratio": ratio,
        "round_ratios": ratios,
        "baseline_p50_ms": percentile(base["latencies"], 0.5) * 1e3,
        "baseline_p99_ms": percentile(base["latencies"], 0.99) * 1e3,
        "transport_p50_ms": percentile(hub["latencies"], 0.5) * 1e3,
        "transport_p99_ms": percentile(hub["latencies"], 0.99) * 1e3,
        "deliveries_per_call": batch,
        "redeliver_messages": r["messages"],
        "redeliver_s": r["last_delivered_s"],
        "redeliver_seen_s": r["queue_s"],
        "redeliver_per_s": r["messages"] / r["last_delivered_s"],
    }
    print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, help="part 1: per side, over the rounds (8000)")
    parser.add_argument("--concurrency", type=int, default=16, help="clients at once")
    parser.add_argument("--mailboxes", type=int, default=8, help="mailboxes in DB1")
    parser.add_argument("--rounds", type=int, help="part 1: interleaved pairs of rounds (4)")
    parser.add_argument("--redeliver", type=int, help="part 2: messages in the window (5000)")
    add_work_dir(parser, "var/bench-transport")
    parser.add_argument("--quick", action="store_true", help="small numbers, in seconds")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    args.messages = args.messages or sizes.messages
    args.rounds = args.rounds or sizes.rounds
    args.redeliver = args.redeliver or sizes.redeliver
    args.warm_generations = sizes.warm_generations
    args.warm_messages = sizes.warm_messages
    if min(args.messages // args.rounds, args.redeliver, args.concurrency, args.mailboxes) < 1:
        parser.error("--messages per round, --redeliver, --concurrency, --mailboxes: >= 1")
    run_and_report(args, run, report)


if __name__ == "__main__":
    main()
