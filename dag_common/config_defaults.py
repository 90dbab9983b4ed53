"""The cluster config's `defaults:` section: the settings of every database that a database
may override (its log, its item size limit, its failover, its block mode), and the item size
bounds the HTTP edge enforces."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, ByteSize, Field, field_validator

from dag_common.config_base import ConfigModel
from dag_common.model import AutoDatabaseMountDial, DataMoveReplicationConstraint, Duration

MIB = 1024 * 1024
# The largest item a store write takes: Exchange Online's receive limit (36 MB) by default;
# at most 150 MiB, Exchange's own ceiling for a message, since a write of one item holds
# about twice its size in a node's memory at the HTTP edge.
DEFAULT_MAX_ITEM_SIZE = 36 * MIB
MAX_MAX_ITEM_SIZE = 150 * MIB


def _max_item_size(value: ByteSize) -> ByteSize:
    if not 0 < value <= MAX_MAX_ITEM_SIZE:
        raise ValueError(
            f"max_item_size must be more than 0 bytes and at most 150MiB ({MAX_MAX_ITEM_SIZE} "
            f"bytes), not {int(value)} bytes"
        )
    return value


ItemSize = Annotated[ByteSize, AfterValidator(_max_item_size)]


class ActiveFailurePolicy(StrEnum):
    """What a node does when its active copy's log write or fsync fails (a full or failing
    disk): the database is dismounted at once either way (nothing more is acknowledged)."""

    REMOUNT = "Remount"  # re-mount through crash recovery, with backoff, once writes work
    FAILOVER = "Failover"  # stay dismounted: automatic failover moves it to the best copy


class Defaults(ConfigModel):
    """Per-database settings that a database may override."""

    log_file_size: ByteSize = ByteSize(1024 * 1024)
    # Spare log files an active copy keeps, written whole while its log is idle, for the
    # next generations to be written over: a roll's fsync then commits no new blocks or size
    # (replication_node/log/spares.py; bench/README.md large_items run 10).  Made only while
    # the disk keeps a quarter of itself and four pools' worth free.  64 (64 MiB of 1 MiB
    # logs): PostgreSQL keeps 80 MB of recycled WAL by default.  0: new files, no pool.
    log_spare_files: int = Field(default=64, ge=0, le=4096)
    # The largest item (its subject and body, in UTF-8) a store write takes, refused with 413
    # at the HTTP edge before it is read (dag_common/http_body.py).
    max_item_size: ItemSize = ByteSize(DEFAULT_MAX_ITEM_SIZE)
    llr_depth: int = Field(default=10, ge=1, le=64)
    auto_database_mount_dial: AutoDatabaseMountDial = AutoDatabaseMountDial.BEST_AVAILABILITY
    data_move_replication_constraint: DataMoveReplicationConstraint = (
        DataMoveReplicationConstraint.SECOND_COPY
    )
    # None: the seeds' formula, 15 minutes / llr_depth.
    log_roll_interval: Duration | None = None
    # Continuous replication circular logging: truncate without waiting for a backup.
    circular_logging: bool = True
    # Automatic failover: a passive copy without its active asks whether it is the best copy
    # to mount as soon as the active's lease has expired in the cluster store, or, the store
    # still showing a live lease, after this long (the activation then waits for the lease
    # to end).  None: only an operator's activate does it.
    failover_after: Duration | None = timedelta(seconds=10)
    on_active_failure: ActiveFailurePolicy = ActiveFailurePolicy.REMOUNT
    # The background scrub of each passive copy's file (every page read and checked by
    # SQLite, as ESE's online checksumming); null: off.
    scrub_interval: Duration | None = timedelta(hours=24)
    # A passive copy adds its content digest up again from its rows after replaying every
    # Nth generation (a row changed inside a valid page).  Null (the default): the scrub
    # does it once a cycle and the check on open after an unclean stop; a recompute reads
    # the whole file (about 1 GB/s, bench/content_digest.py), too much to tie to the log's
    # pace on a large database.  The comparison with the active's digest at each roll is
    # always on: the digest is kept anyway.
    content_check_every: int | None = Field(default=None, ge=1)
    # The active's lease on its role (replication_node/active/lease.py): renewed every
    # ttl/3; no commit is acknowledged without it; another copy is activated only once it
    # has expired or been released.  With a kill -9 or a frozen process, failover comes
    # about one TTL later (the holder counts 90 % of it, so a clock running 10 % off its
    # peers' is safe).  Patroni's default is 30 s; 5 s gives failover in seconds.
    lease_ttl: Duration = timedelta(seconds=5)
    # Block mode's synchronous commit (PostgreSQL's synchronous_standby_names FIRST n,
    # MongoDB's w): a commit is acknowledged only once this many passive copies hold it
    # durably in block mode; with fewer in block mode, a commit waits up to
    # `synchronous_wait` and then fails (503), never acknowledged without them.  0: off.
    synchronous_copies: int = Field(default=0, ge=0)
    synchronous_wait: Duration = timedelta(seconds=5)
    # Passive copies follow the open log in block mode when caught up (Exchange 2010 SP1);
    # false: file mode only, whole closed generations (Exchange 2010 RTM).
    block_mode: bool = True

    @field_validator("lease_ttl")
    @classmethod
    def _sane_lease(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=1) <= value <= timedelta(minutes=10):
            raise ValueError("lease_ttl must be between 1s and 10m")
        return value

    @field_validator("log_file_size")
    @classmethod
    def _sane_size(cls, value: ByteSize) -> ByteSize:
        if not 16 * 1024 <= value <= 64 * 1024 * 1024:
            raise ValueError("log_file_size must be between 16KiB and 64MiB")
        return value
