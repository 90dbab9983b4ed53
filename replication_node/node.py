"""A replication node: wires the replica instances, the replay manager and the cluster.

This module only wires parts together: `ActiveInstance` (active copies), `PassiveCopy`
(the copy/inspect/replay pipeline), `manager` (what to run), the cluster store (who is
active), `activation` and `failover` (moving the role), `peers` (what the other nodes
say); `http/app.py` serves it over HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from dag_common.clock import Clock
from dag_common.cluster_store.interface import ActivationCause, ClusterStore
from dag_common.config import ClusterConfig, load_config
from dag_common.credentials import Credentials, cluster_only
from dag_common.errors import ConfigError
from dag_common.memory import MemoryBudget
from dag_common.memory_metrics import watch_memory
from dag_common.model import (
    AutoDatabaseMountDial,
    CopyPlace,
    CopyRole,
    CopyStatus,
    CopyStatusReport,
    NodeStatus,
)
from dag_common.route_roles import OnCall
from dag_common.tasks import cancel_and_wait
from replication_node.active.copy import CopyPaths
from replication_node.active.instance import ActiveInstance
from replication_node.active.message_staging import PART_BUFFERS
from replication_node.active.redelivery import DumpsterRedelivery
from replication_node.active.settings import ActiveSettings
from replication_node.admin_api import (
    ActivationAnswer,
    BlockBufferAnswer,
    CopyAction,
    CopyOrder,
    LastLogsAnswer,
    SwitchoverAnswer,
)
from replication_node.backup.backup import BackupAnswer, BackupRequest, run_backup
from replication_node.backup.client import HttpActiveCalls
from replication_node.backup.sources import ActiveSource, PassiveSource
from replication_node.backup.status import with_backups
from replication_node.cluster.activation import Activation
from replication_node.cluster.failover import FailoverMonitor
from replication_node.cluster.manager import InstanceSpec, desired_spec, plan_instances
from replication_node.cluster.peers import HttpPeers, PeerProgress, copy_awaiting_logs
from replication_node.cluster.step_down import step_down
from replication_node.cluster.switchover import Switchover
from replication_node.errors import BadRequest, ClusterStoreError, Conflict, NotFound
from replication_node.log.operations import BackupKind
from replication_node.log.truncation import CopyProgress
from replication_node.metrics import NodeMetrics, NodeStatusCollector
from replication_node.passive.copy import PassiveCopy
from replication_node.shipping.copy_share import HttpCopyLogs
from replication_node.shipping.logshare_client import HttpLogSource
from replication_node.storage.idle_memory import Holders, IdleMemory
from replication_node.storage.reader import MailboxReader

logger = logging.getLogger(__name__)


class Node:
    """One replication node and the database copies it hosts."""

    def __init__(
        self,
        *,
        config: ClusterConfig,
        name: str,
        token: str,
        clock: Clock,
        cluster_store: ClusterStore,
        config_path: Path | None = None,
        config_refresh: float = 30.0,
        metrics: NodeMetrics | None = None,
        credentials: Callable[[], Credentials] | None = None,
        audit: OnCall | None = None,
    ) -> None:
        self.config = config
        self.name = name
        self.site = config.node(name).site
        self.token = token  # what this node presents to its peers and the transports
        # What its API accepts (by default its own token, holding every role).
        self.credentials: Callable[[], Credentials] = credentials or cluster_only(token)
        self.audit: OnCall | None = audit
        self._clock = clock
        self.cluster_store = cluster_store
        self._config_path = config_path
        self._config_refresh = config_refresh
        self._instances: dict[str, ActiveInstance | PassiveCopy] = {}
        self._specs: dict[str, InstanceSpec] = {}
        self._session: aiohttp.ClientSession | None = None
        self._client_ssl: ssl.SSLContext | None = None
        self._refresh_task: asyncio.Task[None] | None = None
        self._failover_task: asyncio.Task[None] | None = None
        self._failover: FailoverMonitor | None = None
        # What moves the active role, once the session to the other nodes is open (start).
        self._peers: HttpPeers | None = None
        self._activation: Activation | None = None
        self._switchover: Switchover | None = None
        self._stepping_down: set[asyncio.Task[str]] = set()  # (`_step_down`)
        self._reconcile_lock = asyncio.Lock()
        self._stopping = False
        self._progress: PeerProgress | None = None  # asked for the active's truncation
        self._backups_running: dict[str, str] = {}  # database -> the backup taken here
        self.unexpected_errors = 0  # HTTP requests that failed on a bug (the API's 500s)
        self.metrics = metrics or NodeMetrics(name)
        self.metrics.watch(
            NodeStatusCollector(
                cluster=lambda: self.config.cluster,
                status=self.status,
                configured_copies=lambda: {
                    db.name: len(db.copies) for db in self.config.databases_on(self.name)
                },
                unexpected_errors=lambda: self.unexpected_errors,
            )
        )
        # Bodies of requests in flight (writes of items), within the node's budget; the
        # process's memory and the budget's use at /metrics.
        self.memory = MemoryBudget(int(config.node(name).memory_budget))
        watch_memory(self.metrics.registry, self.memory)
        # Once quiet, what a burst left resident is given back (storage/idle_memory.py).
        self.idle_memory = IdleMemory(holders=self._memory_holders, clock=clock)
        self._idle_task: asyncio.Task[None] | None = None

    def _memory_holders(self) -> Holders:
        databases, feeds = [], []
        for instance in self._instances.values():
            if isinstance(instance, ActiveInstance):
                if instance.copy is not None:
                    databases.append(instance.copy.db)
                    feeds.append(instance.copy.stream.feed)
            else:
                databases += instance.open_databases()
        # The stager's part buffers kept while busy (the process's: let go of by any node).
        return Holders(databases=databases, feeds=feeds, let_go=(PART_BUFFERS.let_go,))

    @property
    def clock(self) -> Clock:
        """The node's clock (its API refuses a request read after its caller's deadline
        by it: `dag_common.deadline`)."""
        return self._clock

    @property
    def data_dir(self) -> Path:
        return self.config.node(self.name).data_dir

    def paths(self, database: str) -> CopyPaths:
        return CopyPaths(self.data_dir / database, database)

    # ---- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        tls = self.config.tls.for_node(self.name) if self.config.tls else None
        # Under node identity it presents its own certificate to its peers and transports.
        self._client_ssl = tls.client_context(identify=True) if tls else None
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._client_ssl if tls else None),
            timeout=aiohttp.ClientTimeout(total=None, connect=5, sock_read=60),
        )
        self._progress = PeerProgress(
            node=self.name, session=self._session, token=self.token, config=lambda: self.config
        )
        self._peers = HttpPeers(session=self._session, token=self.token, config=lambda: self.config)
        self._activation = Activation(
            config=lambda: self.config,
            cluster_store=self.cluster_store,
            peers=self._peers,
            clock=self._clock,
        )
        self._switchover = Switchover(
            config=lambda: self.config,
            cluster_store=self.cluster_store,
            peers=self._peers,
            clock=self._clock,
        )
        await self.reconcile()
        self._refresh_task = asyncio.create_task(self._refresh_loop(), name="configupdater")

        self._failover = monitor = FailoverMonitor(
            node=self.name,
            config=lambda: self.config,
            passive_copies=lambda: {
                db: i for db, i in self._instances.items() if not isinstance(i, ActiveInstance)
            },
            following=lambda db: self._specs[db].active_node if db in self._specs else None,
            cluster_store=self.cluster_store,
            peers=self._peers,
            activation=self._activation,
            clock=self._clock,
        )
        self._failover_task = asyncio.create_task(monitor.run(), name="failover")
        self._idle_task = asyncio.create_task(self.idle_memory.run(), name="idle-memory")

    def reload_client_certificate(self) -> None:
        """This node's certificate again, for the next connections it opens (a rotation)."""
        if self.config.tls is not None and self._client_ssl is not None:
            self.config.tls.for_node(self.name).reload(self._client_ssl, server=False)

    async def stop(self) -> None:
        self._stopping = True  # a reconcile from now on (an admin call in flight) starts nothing
        await cancel_and_wait(
            [self._refresh_task, self._failover_task, self._idle_task, *self._stepping_down]
        )
        async with self._reconcile_lock:  # one already running ends first
            for db in list(self._instances):
                await self._stop_instance(db)
        if self._session:
            await self._session.close()

    async def _refresh_loop(self) -> None:
        """The seeds' configupdater: re-read the config and reconcile every period."""
        while True:
            await self._clock.sleep(self._config_refresh)
            if self._config_path is not None:
                try:
                    self.config = load_config(self._config_path)
                except ConfigError as exc:
                    logger.error("config reload failed, keeping the running config: %s", exc)
            try:
                await self.reconcile()
            except ClusterStoreError as exc:  # etcd down or refusing us: said, not a bug
                logger.error("reconcile failed (cluster store): %s; will retry", exc)
            except Exception:
                logger.exception("reconcile failed; will retry")

    async def reconcile(self) -> None:
        """Start, stop or restart replica instances to match the config and cluster store."""
        async with self._reconcile_lock:
            if self._stopping:
                return
            desired: dict[str, InstanceSpec] = {}
            for db in self.config.databases_on(self.name):
                record = await self.cluster_store.active(db.name)
                if record is None or record.node not in {c.node for c in db.copies}:
                    first = db.preferred_copy.node
                    # A new database's stream begins at generation 1; an active dropped from
                    # the config leaves a stream whose fork point nobody knows (recorded as 1,
                    # the safe side: no write of an earlier epoch is taken for surviving).
                    record = await self.cluster_store.set_active(
                        db.name,
                        first,
                        expected_epoch=record.epoch if record else 0,
                        start_generation=1 if record is None else None,
                        cause=(
                            ActivationCause.FIRST_MOUNT
                            if record is None
                            else ActivationCause.CONFIG_CHANGE
                        ),
                        lost_logs=0 if record is None else None,
                    ) or await self.cluster_store.active(db.name)
                assert record is not None
                spec = desired_spec(self.config, self.name, db.name, record.node, record.epoch)
                if spec is not None:
                    desired[db.name] = spec
            plan = plan_instances(self._specs, desired)
            for db in plan.stop:
                logger.info("replay manager: stopping instance %s", db)
                await self._stop_instance(db)
            for db in plan.start:
                logger.info("replay manager: starting %s instance %s", desired[db].role, db)
                await self._start_instance(desired[db])

    async def _start_instance(self, spec: InstanceSpec) -> None:
        copy = self.config.database(spec.database).copy_on(self.name)
        assert copy is not None
        if spec.role is CopyRole.ACTIVE:
            defaults = self.config.defaults
            instance: ActiveInstance | PassiveCopy = ActiveInstance(
                settings=ActiveSettings(
                    database=spec.database,
                    node=self.name,
                    site=self.site,
                    activation_preference=spec.copy.activation_preference,
                    epoch=spec.epoch,
                    log_file_size=spec.copy.log_file_size,
                    llr_depth=spec.llr_depth,
                    roll_interval=spec.roll_interval,
                    scrub_interval=spec.copy.scrub_interval,
                    lease_ttl=defaults.lease_ttl.total_seconds(),
                    synchronous_copies=spec.synchronous_copies,
                    synchronous_wait=defaults.synchronous_wait.total_seconds(),
                    circular_logging=defaults.circular_logging,
                    spare_log_files=defaults.log_spare_files,
                    on_failure=defaults.on_active_failure,
                ),
                paths=self.paths(spec.database),
                clock=self._clock,
                cluster_store=self.cluster_store,
                peer_progress=lambda db=spec.database: self._peer_progress(db),
                metrics=self.metrics,
                copy_awaiting_logs=lambda db=spec.database: self._copy_awaiting_logs(db),
                redelivery=DumpsterRedelivery(
                    config=self.config,
                    database=spec.database,
                    node=self.name,
                    epoch=spec.epoch,
                    cluster_store=self.cluster_store,
                    clock=self._clock,
                    token=self.token,
                    session=self._session,
                )
                if self._session is not None
                else None,
                # A damaged generation of its LLR window: from a copy, or the role handed on.
                copy_logs=self._copy_logs(spec.database, (self.name,)),
                step_down=lambda db=spec.database: self._step_down(db),
            )
        else:
            assert self._session is not None
            instance = PassiveCopy(
                settings=spec.copy,
                paths=self.paths(spec.database),
                source=HttpLogSource(
                    spec.active_url, spec.database, session=self._session, token=self.token
                ),
                clock=self._clock,
                metrics=self.metrics,
                peers=self._copy_logs(spec.database, (self.name, spec.active_node)),
            )
        self._instances[spec.database] = instance
        self._specs[spec.database] = spec
        try:
            await instance.start()
        except Exception as exc:
            logger.exception("instance %s failed to start", spec.database)
            if isinstance(instance, ActiveInstance):
                instance.error = f"failed to mount: {exc}"
                instance.copy = None

    def _copy_logs(self, database: str, besides: tuple[str, ...]) -> list[HttpCopyLogs]:
        """The log shares of the copies of `database` on other nodes than `besides`, for a
        generation that cannot be had whole otherwise (`shipping/copy_share.py`)."""
        if self._session is None:
            return []
        return [
            HttpCopyLogs(
                c.node,
                self.config.node(c.node).url,
                database,
                session=self._session,
                token=self.token,
            )
            for c in self.config.database(database).copies
            if c.node not in besides
        ]

    def _step_down(self, database: str) -> Awaitable[str]:
        """Switch `database` over from this node to a healthy copy (`cluster/step_down.py`),
        in a task of the node's: the switchover's end stops the instance that asked."""
        assert self._switchover is not None
        task = asyncio.create_task(
            step_down(self._switchover, self.config, database, self.name),
            name=f"step-down {database}",
        )
        self._stepping_down.add(task)
        task.add_done_callback(self._stepped_down)
        return asyncio.shield(task)

    def _stepped_down(self, task: asyncio.Task[str]) -> None:
        self._stepping_down.discard(task)
        if not task.cancelled() and task.exception() is not None:  # the mend says why
            logger.info("%s", task.exception())

    async def _stop_instance(self, database: str) -> None:
        instance = self._instances.pop(database, None)
        self._specs.pop(database, None)
        if instance is not None:
            try:
                await instance.stop()
            except Exception:
                logger.exception("instance %s did not stop cleanly", database)

    async def activate(
        self, database: str, target: str, dial_override: AutoDatabaseMountDial | None
    ) -> ActivationAnswer:
        """Mount the copy of `database` on `target` after its active is lost."""
        assert self._activation is not None
        return await self._activation.activate(
            database,
            target,
            dial_override=dial_override,
            # A crashed active's lease ends within its TTL; still held after 1.5 TTL, it is
            # renewed by an active that is alive (refused: it may still acknowledge).
            lease_wait=self.config.defaults.lease_ttl.total_seconds() * 1.5,
        )

    async def switchover(self, database: str, target: str) -> SwitchoverAnswer:
        """Move the active copy of `database` to `target` without losing a log."""
        assert self._switchover is not None
        return await self._switchover.switch(database, target)

    async def copy_last_logs(self, database: str) -> LastLogsAnswer:
        """Attempt Copy Last Logs into this node's passive copy of `database`, from the
        active it follows (not mounted, but reachable)."""
        instance = self._passive(database)
        active, _ = self.active_of(database)
        assert active is not None
        return await instance.copy_last_logs(active)

    async def keep_block_buffer(self, database: str) -> BlockBufferAnswer:
        """Keep what this node's passive copy of `database` holds of the open log in block
        mode, before it is activated (`PassiveCopy.keep_block_buffer`)."""
        return await self._passive(database).keep_block_buffer()

    async def backup(self, database: str, to: Path, *, incremental: bool) -> BackupAnswer:
        """Back up this node's copy of `database` into `to` (a directory on this host),
        coordinated with its active (`backup/backup.py`); the manifest, once complete."""
        instance = self._instances.get(database)
        if instance is None:
            raise NotFound(f"no copy of {database} on {self.name}")
        active, url = self.active_of(database)
        if active is None or url is None:
            raise Conflict(f"{self.name} does not know the active copy of {database} yet")
        assert self._session is not None
        source = (
            ActiveSource(instance)
            if isinstance(instance, ActiveInstance)
            else PassiveSource(instance)
        )
        result = await run_backup(
            BackupRequest(
                database=database,
                node=self.name,
                to=to,
                kind=BackupKind.INCREMENTAL if incremental else BackupKind.FULL,
            ),
            source=source,
            active=HttpActiveCalls(
                session=self._session, url=url, token=self.token, database=database, active=active
            ),
            clock=self._clock,
            on_running=lambda what: self._note_backup(database, what),
        )
        return result.answer()

    def _note_backup(self, database: str, what: str | None) -> None:
        if what is None:
            self._backups_running.pop(database, None)
        else:
            self._backups_running[database] = what

    async def _peer_progress(self, database: str) -> list[CopyProgress]:
        assert self._progress is not None
        return await self._progress.of(database)

    async def _copy_awaiting_logs(self, database: str) -> str | None:
        assert self._peers is not None
        return await copy_awaiting_logs(self._peers, database, self.name)

    # ---- what the API asks ---------------------------------------------------------------

    def instance(self, database: str) -> ActiveInstance | PassiveCopy | None:
        return self._instances.get(database)

    def _passive(self, database: str, refusal: str = "") -> PassiveCopy:
        """This node's passive copy of `database`; BadRequest (`refusal`) if it holds none."""
        instance = self.passive_here(database)
        if instance is None:
            raise BadRequest(refusal or f"{self.name} holds no passive copy of {database}")
        return instance

    def passive_here(self, database: str) -> PassiveCopy | None:
        """This node's copy of `database` if it is a passive one."""
        instance = self._instances.get(database)
        return instance if isinstance(instance, PassiveCopy) else None

    def active_here(self, database: str) -> ActiveInstance | None:
        """This node's copy of `database` if it is the active one (mounted or not)."""
        instance = self._instances.get(database)
        return instance if isinstance(instance, ActiveInstance) else None

    def active_of(self, database: str) -> tuple[str | None, str | None]:
        spec = self._specs.get(database)
        return (spec.active_node, spec.active_url) if spec else (None, None)

    def epoch_of(self, database: str) -> int:
        """The stream incarnation this node's copy of `database` serves: an active's own
        epoch, a passive's the epoch of the active whose stream it last reached (0: none)."""
        instance = self._instances.get(database)
        if instance is None:
            return 0
        if isinstance(instance, ActiveInstance):
            return instance.epoch
        return int(instance.status().epoch)

    def reader(self, database: str) -> MailboxReader | None:
        """Something with the store's read methods: the active copy, or the passive's file."""
        instance = self._instances.get(database)
        return instance.reader() if instance is not None else None

    def status(self) -> NodeStatus:
        copies: list[CopyStatusReport] = []
        for db in self.config.databases_on(self.name):
            instance = self._instances.get(db.name)
            if instance is not None:
                copies.append(
                    with_backups(instance, instance.status(), self._backups_running.get(db.name))
                )
            else:
                copy = db.copy_on(self.name)
                assert copy is not None
                place = CopyPlace(db.name, self.name, self.site, copy.activation_preference)
                copies.append(place.report(CopyRole.PASSIVE, CopyStatus.INITIALIZING))
        return NodeStatus(
            node=self.name,
            site=self.site,
            copies=copies,
            failover_paused=self._failover.pause if self._failover else None,
        )

    async def copy_action(self, database: str, order: CopyOrder) -> CopyStatusReport:
        """Suspend, resume or reseed this node's passive copy of `database`; with
        `activation_only`, suspend or resume only its activation (it replicates on).  The
        copy's status once done."""
        action, reason = order.action, order.reason
        if database not in self._instances:
            raise NotFound(f"no copy of {database} on {self.name}")
        instance = self._passive(
            database, f"the copy of {database} on {self.name} is active; {action} a passive copy"
        )
        match action, order.activation_only:
            case CopyAction.RESEED, True:
                raise BadRequest("activation_only: only suspend and resume take it")
            case CopyAction.SUSPEND, True:
                instance.suspend_activation(reason or "activation suspended by administrator")
            case CopyAction.RESUME, True:
                instance.resume_activation()
            case CopyAction.SUSPEND, False:
                await instance.suspend(reason or "suspended by administrator")
            case CopyAction.RESUME, False:
                await instance.resume()
            case CopyAction.RESEED, False:
                await instance.reseed()
        return instance.status()
