"""A replication node: hosts database copies, writes or replays their transaction log streams."""
