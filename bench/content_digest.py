"""What the content digest costs (issues 21 and 33), in one run:

- replay: `Database.apply` of the same transactions into a fresh file, three ways, in
  rotating order: as the product does it (`TableWriter` counts each put's term and the term
  of the live row it replaces, looked up once per mailbox and transaction); with the terms
  a constant (the lookups and the bookkeeping, no hashing); and without the digest (the
  rows written as they are, nothing looked up or hashed: what a file from before digests
  paid).  The digest is kept by `apply` itself since issue 33 (it was SQLite triggers
  calling a Python function per row); the last two cases patch `storage.tables` in this
  process only, they are what-ifs, not modes of the product;
- the full recompute (`Database.recompute_digest`: every live row read and hashed), in MB/s
  of database file and in seconds per 10,000 items, which is what `content_check_every`
  spends every Nth generation and the scrub once a cycle.

    .venv/bin/python bench/content_digest.py [--items 20000] [--body 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dag_common.model import Position  # noqa: E402
from replication_node.log.events import Transaction  # noqa: E402
from replication_node.log.operations import CreateMailbox, PutItem  # noqa: E402
from replication_node.storage import tables  # noqa: E402
from replication_node.storage.database import Database  # noqa: E402

CASES = ("with the digest", "terms constant", "without the digest")


def transactions(items: int, body: int, per_txn: int = 50) -> list[Transaction]:
    when = datetime.now(UTC)
    txns = [Transaction(Position(1, 512), when, (CreateMailbox("m", 1),))]
    cn = 1
    for first in range(0, items, per_txn):
        ops: list[PutItem] = []
        for i in range(first, min(items, first + per_txn)):
            cn += 1
            ops.append(PutItem("m", cn, f"i{i}", "Inbox", f"subject {i}", "x" * body))
        txns.append(Transaction(Position(1 + first // (per_txn * 10), 512), when, tuple(ops)))
    # a second pass replacing a third of the items: updates subtract the old row's term
    for first in range(0, items, 3 * per_txn):
        cn += 1
        again = tuple(
            msgspec.structs.replace(op, body="y" * body, cn=cn)
            for op in txns[1 + first // per_txn].ops[: per_txn // 3]
            if isinstance(op, PutItem)
        )
        txns.append(Transaction(Position(txns[-1].generation + 1, 512), when, again))
    return txns


@contextlib.contextmanager
def case(name: str) -> Iterator[None]:
    """`storage.tables` as the case has it, for the duration."""
    saved = tables.item_term_of_hash, tables.body_hash, tables.TableWriter._hold
    if name == "terms constant":
        tables.item_term_of_hash = lambda *fields: 1
        tables.body_hash = lambda body: ""
    elif name == "without the digest":
        tables.body_hash = lambda body: ""

        def hold(self: tables.TableWriter, rows: list) -> None:
            self._puts.extend(rows)

        tables.TableWriter._hold = hold  # type: ignore[method-assign]
    try:
        yield
    finally:
        tables.item_term_of_hash, tables.body_hash, tables.TableWriter._hold = saved


def replay_seconds(root: Path, txns: list[Transaction], name: str, batch: int = 40) -> float:
    """Apply `txns` in batches of `batch` into a fresh file, as the case `name` has it."""
    path = root / f"{uuid.uuid4().hex}.sqlite"
    db = Database.create(path, database_signature=uuid.uuid4(), log_signature=uuid.uuid4())
    with case(name):
        start = time.perf_counter()
        for i in range(0, len(txns), batch):
            chunk = txns[i : i + batch]
            db.apply(chunk, waypoint=chunk[-1].generation, committed=0, last_log_time=None)
        seconds = time.perf_counter() - start
    db.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=20000)
    parser.add_argument("--body", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    txns = transactions(args.items, args.body)
    ops = sum(len(t.ops) for t in txns)
    with tempfile.TemporaryDirectory(dir="var" if Path("var").is_dir() else None) as tmp:
        root = Path(tmp)
        seconds: dict[str, list[float]] = {name: [] for name in CASES}
        for r in range(args.rounds):
            for i in range(len(CASES)):
                name = CASES[(r + i) % len(CASES)]
                seconds[name].append(replay_seconds(root, txns, name))
        w, c, wo = (statistics.median(seconds[name]) for name in CASES)
        print(f"replay of {ops} operations ({args.items} items of {args.body} B, 1/3 replaced)")
        print(f"  without digest: {wo:.2f} s  {ops / wo:,.0f} ops/s")
        print(f"  terms constant: {c:.2f} s  {ops / c:,.0f} ops/s   ratio {wo / c:.2f}")
        print(f"  with digest:    {w:.2f} s  {ops / w:,.0f} ops/s   ratio {wo / w:.2f}")
        print(
            f"  {(c - wo) / ops * 1e6:.1f} us/op of lookups and bookkeeping, "
            f"{(w - c) / ops * 1e6:.1f} us/op of hashing (the body's hash and the row's term)"
        )
        path = root / "recompute.sqlite"
        db = Database.create(path, database_signature=uuid.uuid4(), log_signature=uuid.uuid4())
        db.apply(txns, waypoint=txns[-1].generation, committed=0, last_log_time=None)
        size = path.stat().st_size + Path(f"{path}-wal").stat().st_size
        times = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            stored, rows = db.recompute_digest()
            times.append(time.perf_counter() - start)
            assert stored == rows
        db.close()
        t = statistics.median(times)
        print(
            f"full recompute: {t:.2f} s for {args.items} items, {size / 1e6:.0f} MB file: "
            f"{size / 1e6 / t:.0f} MB/s, {t / args.items * 10000:.2f} s per 10,000 items"
        )


if __name__ == "__main__":
    main()
