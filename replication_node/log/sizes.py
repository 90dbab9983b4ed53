"""The log file format's fixed sizes, for the readers of log positions that never open a
log file (the mount policy, and so `replication-node status`): `logfile`, which says what
they mean, brings orjson, crc32c and the format's classes with it (issue 48)."""

from __future__ import annotations

HEADER_SIZE = 512  # a log file's header: its first record is at this offset (`logfile`)
