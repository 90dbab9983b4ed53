"""The transport: mail delivery through the mailbox directory, as the seeds' Hub Transport.

`transport serve` accepts messages (`POST /v1/messages`) into a durable queue on its own disk
(`queue.py`: acknowledged once the queue's SQLite file committed it, fsync'd), resolves each
recipient through the mailbox directory in the cluster store, and delivers to the active copy
of the recipient's database (`delivery.py`), following a switchover, waiting out a locked
mailbox and a failover, and the mailbox to its new database after a move.  What it delivered
it keeps per database in its dumpster (`dumpster.py`: MaxDumpsterTime, the size per database,
oldest out first), and redelivers a window of it when a database's new active asks after a
lossy failover (`POST /v1/redeliver`).

Delivery is idempotent by message id: the item a message becomes in a mailbox is named from
its message id (`messages.item_id_for`), so a redelivery replaces the item with the same
content and never makes a second one.
"""
