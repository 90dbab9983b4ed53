"""The replay manager's decision (pure): which replica instances to stop and to start.

Like the seeds' configupdater: compare the desired instances (from the config and the
cluster store) with the running ones; an instance whose configuration changed is restarted
(stopped, then started), since a replica instance's configuration is static.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from dag_common.config import ClusterConfig
from dag_common.model import CopyRole
from replication_node.passive.settings import PassiveSettings


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """Everything a replica instance is started with; a change means a restart."""

    role: CopyRole
    active_node: str
    active_url: str
    # The copy's own settings, from the config: what a passive instance runs with, and
    # where an active one takes its preference, log size and scrub from.
    copy: PassiveSettings
    llr_depth: int
    roll_interval: timedelta
    epoch: int
    synchronous_copies: int = 0  # an active's: a change restarts it with the new setting

    @property
    def database(self) -> str:
        return self.copy.database


@dataclass(frozen=True, slots=True)
class Plan:
    stop: tuple[str, ...]
    start: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.stop and not self.start


def plan_instances(running: dict[str, InstanceSpec], desired: dict[str, InstanceSpec]) -> Plan:
    """Stop what is no longer wanted or changed; start what is new or changed."""
    stop = sorted(db for db, spec in running.items() if desired.get(db) != spec)
    start = sorted(db for db, spec in desired.items() if running.get(db) != spec)
    return Plan(tuple(stop), tuple(start))


def desired_spec(
    config: ClusterConfig, node: str, database: str, active_node: str, epoch: int
) -> InstanceSpec | None:
    """The instance `node` should run for `database` given who is active, or None."""
    db = config.database(database)
    copy = db.copy_on(node)
    if copy is None:
        return None
    active = config.node(active_node)
    # The epoch matters to an active instance only (it publishes under it); a passive just
    # follows the active's url, so a new epoch on the same active does not restart it.
    role = CopyRole.ACTIVE if active_node == node else CopyRole.PASSIVE
    settings = PassiveSettings(
        database=database,
        node=node,
        site=config.node(node).site,
        activation_preference=copy.activation_preference,
        replay_lag_time=copy.replay_lag_time,
        truncation_lag_time=copy.truncation_lag_time,
        scrub_interval=config.defaults.scrub_interval,
        content_check_every=config.defaults.content_check_every,
        block_mode=config.block_mode_of(db),
        log_file_size=config.log_file_size_of(db),
        spare_log_files=config.defaults.log_spare_files,
    )
    return InstanceSpec(
        role=role,
        active_node=active_node,
        active_url=active.url,
        copy=settings,
        llr_depth=config.llr_depth_of(db),
        roll_interval=config.log_roll_interval_of(db),
        epoch=epoch if role is CopyRole.ACTIVE else 0,
        synchronous_copies=config.synchronous_copies_of(db) if role is CopyRole.ACTIVE else 0,
    )
