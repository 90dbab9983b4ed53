"""The node alone taking 1 MiB message items: 16 clients write messages straight to DB1's
active (no transport), as JSON items (`POST …/items`) and as their bytes (`PUT
…/items/{id}/message`), one route after the other in one run (issues 49 and 52).

    .venv/bin/python bench/node_messages.py [--quick] [--count 200] [--clients 16]
        [--dir var/bench-node-messages] [--keep]

The cluster is bench/lmtp.py's (DB1 active on mbx1, a copy on mbx2, 1 MiB logs, LLR depth
10), 100 mailboxes; the messages are lmtp.py's 1 MiB multipart/mixed (7-bit: base64) and an
8-bit one of the same size (Latin-1 text, not UTF-8).  Reported per route and kind: MB/s of
messages answered 201 (durable on the active), and the CPU seconds the active and the
passive used (the passive: until it replayed everything).  `--quick`: 12 messages, seconds.
`--dir` is wiped at the start and removed at the end unless `--keep` (`bench/workdir.py`: one
run at a time in it).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from lmtp import ACTIVE, DB, PASSIVE, large_template, load, process_cpu  # noqa: E402

from bench.workdir import add_work_dir, work_dir  # noqa: E402
from dag_common.rfc822 import body_of_message  # noqa: E402
from tests.cluster_harness import LocalCluster  # noqa: E402
from tests.replication_node.e2e import converged  # noqa: E402

MIB = 1024 * 1024
MB = 1e6
RFC822 = {"Content-Type": "message/rfc822"}


def eight_bit(target: int = MIB) -> bytes:
    """A message of `target` bytes whose text is Latin-1 (not UTF-8)."""
    head = (b"From: Ren\xe9 <rene@example.fr>\r\nTo: user@bench.test\r\n"
            b"Subject: Caf\xe9\r\nContent-Type: text/plain; charset=iso-8859-1\r\n"
            b"Content-Transfer-Encoding: 8bit\r\n\r\n")  # fmt: skip
    line = b"Un caf\xe9 cr\xe8me br\xfbl\xe9e \xe0 la fran\xe7aise, s'il vous pla\xeet.\r\n"
    return head + line * ((target - len(head)) // len(line))


async def phase(c: LocalCluster, route: str, raw: bytes, count: int, clients: int, tag: str,
                mailboxes: list[str]) -> dict[str, float]:  # fmt: skip
    assert c.session is not None
    base = f"{c.url(ACTIVE)}/v1/databases/{DB}/mailboxes"
    body, fmt = body_of_message(raw)
    todo = iter(range(count))
    timeout = aiohttp.ClientTimeout(total=600)

    async def client() -> None:
        for k in todo:
            box, item_id = mailboxes[k % len(mailboxes)], f"{tag}{k}"
            if route == "raw":
                url = f"{base}/{box}/items/{item_id}/message"
                req = c.session.put(url, data=raw, headers=RFC822, timeout=timeout)
            else:
                item = {"item_id": item_id, "body": body, "format": fmt.value}
                req = c.session.post(f"{base}/{box}/items", json=item, timeout=timeout)
            async with req as resp:
                assert resp.status == 201, (resp.status, await resp.text())

    cpu = {n: process_cpu(c.procs[n].pid) for n in (ACTIVE, PASSIVE)}
    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    seconds = time.perf_counter() - t0
    active_cpu = process_cpu(c.procs[ACTIVE].pid) - cpu[ACTIVE]
    await converged(c, DB, ACTIVE, [PASSIVE])
    return {
        "mb_s": count * len(raw) / seconds / MB,
        "seconds": seconds,
        "active_ms_per_mib": active_cpu / (count * len(raw) / MIB) * 1e3,
        "passive_ms_per_mib": (process_cpu(c.procs[PASSIVE].pid) - cpu[PASSIVE])
        / (count * len(raw) / MIB) * 1e3,
    }  # fmt: skip


async def run(args: argparse.Namespace, base: Path) -> None:
    c = LocalCluster(
        base,
        nodes=[(ACTIVE, "redmond"), (PASSIVE, "redmond")],
        databases=[{"name": DB, "copies": [{"node": ACTIVE, "activation_preference": 1},
                                           {"node": PASSIVE, "activation_preference": 2}]}],
        defaults={"log_file_size": "1MiB", "llr_depth": 10, "failover_after": None},
    )  # fmt: skip
    await c.start()
    try:
        await c.wait_status(ACTIVE, DB, "Mounted")
        await c.wait_status(PASSIVE, DB, "Healthy")
        mailboxes = [f"user{i:03d}" for i in range(100)]
        for m in mailboxes:
            await c.ok("PUT", ACTIVE, f"/v1/databases/{DB}/mailboxes/{m}")
        kinds = {"7bit": large_template(0), "8bit": eight_bit()}
        print(f"# {load()}; {args.count} messages of 1 MiB, {args.clients} clients", flush=True)
        for rnd in range(args.rounds):
            for kind, raw in kinds.items():
                for route in ("json", "raw"):
                    r = await phase(c, route, raw, args.count, args.clients,
                                    f"r{rnd}{kind}{route}", mailboxes)  # fmt: skip
                    print(f"round {rnd} {kind} {route}: {r['mb_s']:.2f} MB/s "
                          f"({r['seconds']:.1f} s); CPU ms/MiB active "
                          f"{r['active_ms_per_mib']:.1f}, passive {r['passive_ms_per_mib']:.1f}",
                          flush=True)  # fmt: skip
        print(f"# {load()}", flush=True)
    finally:
        await c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="messages per phase")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2, help="json and raw alternated")
    add_work_dir(parser, "var/bench-node-messages")
    parser.add_argument("--quick", action="store_true", help="12 messages, one round")
    args = parser.parse_args()
    if args.quick:
        args.count, args.rounds = 12, 1
    with work_dir(args) as base:
        asyncio.run(run(args, base))


if __name__ == "__main__":
    main()
