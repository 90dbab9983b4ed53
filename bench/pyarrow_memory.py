"""What writing the guarantee service's history costs a process in memory (issue 52): RSS,
anonymous and file-backed, after importing pyarrow, after the first table and file, after
fifty more.  Run once per memory pool (ARROW_DEFAULT_MEMORY_POOL) to see the pool is not
the holder.  Figures in bench/README.md ("memory") and docs/concepts/memory.md.

    .venv/bin/python bench/pyarrow_memory.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

PROBE = r"""
import sys
def rss():
    d = {}
    for line in open('/proc/self/status'):
        if line.startswith(('RssAnon', 'RssFile')):
            k, v = line.split(':')
            d[k] = int(v.split()[0]) // 1024
    return f"anon {d['RssAnon']:>3} MB, files {d['RssFile']:>3} MB"
print(f"  started            {rss()}")
import pyarrow as pa, pyarrow.parquet as pq
print(f"  pyarrow imported   {rss()}")
from guarantee_api.history import SCHEMA
out = sys.argv[1]
rows = [{f.name: None for f in SCHEMA} for _ in range(100)]
pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), f"{out}/0.parquet", compression="zstd")
print(f"  first file written {rss()}  (pool {pa.default_memory_pool().backend_name}, "
      f"{pa.total_allocated_bytes()} B allocated)")
for i in range(50):
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), f"{out}/{i}.parquet")
print(f"  50 more written    {rss()}")
"""


def main() -> None:
    for pool in ("mimalloc", "jemalloc", "system"):
        print(f"ARROW_DEFAULT_MEMORY_POOL={pool}")
        with tempfile.TemporaryDirectory() as out:
            env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": pool}
            subprocess.run([sys.executable, "-c", PROBE, out], env=env, check=True)


if __name__ == "__main__":
    main()
