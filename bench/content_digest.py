"""What the content digest costs (issue 21), in one run:

- replay: `Database.apply` of the same transactions into a file with the digest triggers and
  into one without them (the triggers dropped, as a file from before digests had none), in
  alternating order; the ratio is what the triggers cost each copy's replay and the
  active's LLR flush (never the commit path: the log is written before either);
- the triggers with the term replaced by a constant: what SQLite's trigger machinery costs,
  apart from hashing;
- the full recompute (`Database.recompute_digest`: every live row read and hashed), in MB/s
  of database file and in seconds per 10,000 items, which is what `content_check_every`
  spends every Nth generation and the scrub once a cycle.

    .venv/bin/python bench/content_digest.py [--items 20000] [--body 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from replication_node.log.events import Transaction
from replication_node.log.operations import CreateMailbox, PutItem
from replication_node.storage import digest as digest_module
from replication_node.storage.database import Database


def transactions(items: int, body: int, per_txn: int = 50) -> list[Transaction]:
    when = datetime.now(UTC)
    txns = [Transaction(1, 512, when, (CreateMailbox("m", 1),))]
    cn = 1
    for first in range(0, items, per_txn):
        ops: list[PutItem] = []
        for i in range(first, min(items, first + per_txn)):
            cn += 1
            ops.append(PutItem("m", cn, f"i{i}", "Inbox", f"subject {i}", "x" * body))
        txns.append(Transaction(1 + first // (per_txn * 10), 512, when, tuple(ops)))
    # a second pass replacing a third of the items: updates subtract the old row's term
    for first in range(0, items, 3 * per_txn):
        cn += 1
        again = tuple(
            op._replace(body="y" * body, cn=cn)
            for op in txns[1 + first // per_txn].ops[: per_txn // 3]
            if isinstance(op, PutItem)
        )
        txns.append(Transaction(txns[-1].generation + 1, 512, when, again))
    return txns


def fresh(path: Path, digest: bool) -> Database:
    db = Database.create(path, database_signature=uuid.uuid4(), log_signature=uuid.uuid4())
    if not digest:
        db.close()
        conn = sqlite3.connect(path)
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]
        conn.executescript("".join(f"DROP TRIGGER {n};" for n in names))
        conn.close()
        db = Database.open(path)  # the digest table is there: the triggers stay dropped
    return db


def replay_seconds(root: Path, txns: list[Transaction], digest: bool, batch: int = 40) -> float:
    """Apply `txns` in batches into a fresh file, with the digest triggers or without."""
    path = root / f"{'with' if digest else 'without'}-{uuid.uuid4().hex}.sqlite"
    db = fresh(path, digest)
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
        with_, without = [], []
        for r in range(args.rounds):
            order = [True, False] if r % 2 == 0 else [False, True]
            for digest in order:
                (with_ if digest else without).append(replay_seconds(root, txns, digest))
        real_term = digest_module.item_term
        digest_module.item_term = lambda *fields: 1  # the machinery alone
        try:
            machinery = statistics.median(
                replay_seconds(root, txns, True) for _ in range(args.rounds)
            )
        finally:
            digest_module.item_term = real_term
        w, wo = statistics.median(with_), statistics.median(without)
        print(f"replay of {ops} operations ({args.items} items of {args.body} B, 1/3 replaced)")
        print(f"  without digest: {wo:.2f} s  {ops / wo:,.0f} ops/s")
        print(f"  with digest:    {w:.2f} s  {ops / w:,.0f} ops/s   ratio {wo / w:.2f}")
        print(
            f"  triggers, constant term: {machinery:.2f} s: {(machinery - wo) / ops * 1e6:.1f} "
            f"us/op of machinery, {(w - machinery) / ops * 1e6:.1f} us/op of hashing"
        )
        path = root / "recompute.sqlite"
        db = fresh(path, True)
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
