"""A child process for the kill -9 tests: concurrent commits, each acknowledged on stdout.

python -m tests.replication_node.crash_writer ROOT WRITERS [LOG_FILE_SIZE BODY SPARES]

SPARES: the stream keeps that many spare log files (`log/spares.py`), made before the
writers start, so that the rolls write over them.
"""

import asyncio
import sys
from pathlib import Path

from dag_common.store_api import ItemIn
from replication_node.active.mailbox_store import MailboxStore
from replication_node.log import spares as spares_module
from tests.replication_node.helpers import mount


async def main(
    root: Path, writers: int, log_file_size: int = 64 * 1024, body: int = 700, spares: int = 0
) -> None:
    copy = await mount(root, log_file_size=log_file_size, llr_depth=3)
    store = MailboxStore(copy)
    if copy.mailbox("m") is None:
        await store.create_mailbox("m")
    if spares:
        # Made whatever room the test machine's disk has left (the pool's own floor is 1 GiB).
        spares_module.FREE_FLOOR = spares_module.FREE_FRACTION = 0
        pool = spares_module.SparePool(copy.paths.logs, log_file_size, spares)
        while pool.prepare_one():  # made here, before the writers: the pool then holds them
            pass
        copy.stream.keep_spares(spares)
    out = sys.stdout

    async def writer(w: int) -> None:
        i = 0
        while True:
            item = f"w{w}n{i}"
            await store.put_items("m", [ItemIn(item_id=item, subject=item, body="y" * body)])
            out.write(f"ACK {item}\n")
            out.flush()
            i += 1

    await asyncio.gather(*(writer(w) for w in range(writers)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), *map(int, sys.argv[2:])))
