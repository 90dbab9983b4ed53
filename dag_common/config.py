"""The cluster config (YAML), typed and validated once at start-up.

Every field of the contract in DESIGN.md is accepted as written.  Relative paths are taken
from the directory of the config file, so a config works wherever it is started from.
A bad file raises `ConfigError` whose message names the field path and the reason.

The whole config (`ClusterConfig`), its nodes, databases and transports are here; four
sections stand in modules of their own, each a model of the same base (`config_base`): the
per-database defaults (`config_defaults`), the cluster store's (`config_store`), the Data
Guarantee service's (`config_guarantee`) and TLS (`config_tls`).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Annotated, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    ByteSize,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from dag_common.config_base import ConfigModel as _Model
from dag_common.config_defaults import MIB, Defaults, ItemSize
from dag_common.config_guarantee import GuaranteeApiConfig
from dag_common.config_imap import ImapFrontSettings
from dag_common.config_store import EmbeddedStore, EtcdStore
from dag_common.config_tls import TlsConfig
from dag_common.credentials import (
    CLUSTER_CREDENTIAL,
    CREDENTIAL_FILE_ENV,
    TOKEN_ENV,
    Accepted,
    Credential,
    CredentialError,
    Credentials,
    Role,
    accepted_digest,
    digest,
    environment_secret,
    read_secrets,
)
from dag_common.errors import ConfigError
from dag_common.model import AutoDatabaseMountDial, DataMoveReplicationConstraint, Duration
from dag_common.yaml_file import read_yaml

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
NAME_RULE = "1 to 64 letters, digits, '_', '.' or '-', the first a letter or digit"

DEFAULT_MEMORY_BUDGET = 256 * MIB  # a node's bodies in flight (NodeConfig.memory_budget)


def is_config_name(text: str) -> bool:
    """Whether `text` can name a node, site, database or cluster of the config (NAME_RULE)."""
    return re.fullmatch(_NAME, text) is not None


class NodeConfig(_Model):
    """One replication node: its name, site, where it listens and where it keeps data."""

    name: str = Field(pattern=_NAME)
    site: str = Field(pattern=_NAME)
    url: str
    data_dir: Path
    # Bytes of request bodies the node holds in flight at most (writes of items): past it a
    # write waits a few seconds for room, then is answered 503 with Retry-After, instead of
    # growing the process to its pod's limit (dag_common/memory.py).  A write larger than
    # the budget is taken alone.  256 MiB: a fourth of the chart's 1 GiB pod, where a write
    # costs the node about twice its body while it is parsed.
    memory_budget: ByteSize = Field(default=ByteSize(DEFAULT_MEMORY_BUDGET), gt=0)
    # Requests waiting on a mailbox's change feed at once (GET …/changes; an IMAP front
    # keeps one per mailbox with a session): past it a request is answered 503 with
    # Retry-After.  Each costs a socket and a few KiB, no thread.
    change_waiters: int = Field(default=10_000, ge=1, le=1_000_000)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return _http_url(value)

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or 0


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or not parts.port:
        raise ValueError("url must look like http://host:port")
    return value.rstrip("/")


class CopyConfig(_Model):
    """One copy of a database on a node."""

    node: str
    activation_preference: int = Field(ge=1)
    replay_lag_time: Duration = timedelta(0)
    truncation_lag_time: Duration = timedelta(0)


class DatabaseConfig(_Model):
    """A replicated database and its copies; unset settings come from `defaults`."""

    name: str = Field(pattern=_NAME)
    data_move_replication_constraint: DataMoveReplicationConstraint | None = None
    auto_database_mount_dial: AutoDatabaseMountDial | None = None
    log_file_size: ByteSize | None = None
    max_item_size: ItemSize | None = None
    llr_depth: int | None = Field(default=None, ge=1, le=64)
    synchronous_copies: int | None = Field(default=None, ge=0)
    block_mode: bool | None = None
    copies: list[CopyConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct_copies(self) -> DatabaseConfig:
        nodes = [c.node for c in self.copies]
        if len(set(nodes)) != len(nodes):
            raise ValueError(f"database {self.name} has two copies on one node")
        prefs = [c.activation_preference for c in self.copies]
        if len(set(prefs)) != len(prefs):
            raise ValueError(f"database {self.name} has two copies with one activation_preference")
        return self

    def copy_on(self, node: str) -> CopyConfig | None:
        """This database's copy on `node`, if it has one."""
        return next((c for c in self.copies if c.node == node), None)

    @property
    def preferred_copy(self) -> CopyConfig:
        """The copy with the lowest activation preference: active when the cluster starts."""
        return min(self.copies, key=lambda c: c.activation_preference)


class TransportNode(NodeConfig):
    """One transport (the seeds' Hub Transport server): its name, site, where it listens and
    where it keeps its queue and dumpster; the same fields as a node's, and the ports of its
    mail listeners (on the url's host; none: that listener is off)."""

    smtp_port: int | None = Field(default=None, ge=0, le=65535)  # submission and relay
    lmtp_port: int | None = Field(default=None, ge=0, le=65535)  # final delivery from an MTA

    @model_validator(mode="after")
    def _distinct_ports(self) -> TransportNode:
        ports = [p for p in (self.port, self.smtp_port, self.lmtp_port) if p]
        if len(set(ports)) != len(ports):
            raise ValueError(f"transport {self.name}: its HTTP, SMTP and LMTP ports must differ")
        return self


def _network(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError as exc:
        raise ValueError(f"not a network (address/prefix): {value!r}") from exc


class MailSettings(_Model):
    """The transports' SMTP and LMTP listeners (docs/concepts/transport.md, "Mail").

    `trusted_networks`: clients that may submit by SMTP without AUTH, and the only ones the
    LMTP listener serves (LMTP has no AUTH: it is the hop from the MTA, inside the cluster).
    Any other SMTP client must AUTH (PLAIN or LOGIN, only after STARTTLS) with a credential
    that holds the `store` role.  `hostname`: what the listeners call themselves in their
    greeting and in the `Received:` header they add (empty: the transport's name)."""

    trusted_networks: list[Annotated[str, AfterValidator(_network)]] = [
        "127.0.0.0/8",
        "::1/128",
    ]
    hostname: str = Field(default="", pattern=r"^$|^[A-Za-z0-9][A-Za-z0-9.-]{0,252}$")
    max_recipients: int = Field(default=1000, ge=1, le=1000)  # per message: 452 4.5.3 past it
    idle_timeout: Duration = timedelta(minutes=5)  # RFC 5321 4.5.3.2.7's server timeout
    max_sessions_per_client: int = Field(default=50, ge=1, le=10000)  # 421 4.7.0 past it


class TransportSettings(_Model):
    """What every transport does with the messages it accepts (`transport serve`).

    The dumpster's two bounds are the seeds' (MaxDumpsterTime 7 days;
    MaxDumpsterSizePerStorageGroup 18 MB, "1.5 times the maximum message size": set it to
    1.5 x max_item_size where large mail is usual).  A message waits in the queue while
    its mailbox is locked, moving or its database failing over, retried with backoff up to
    `retry_max_interval` apart, for up to `message_expiration` (Exchange's default, 2 days);
    an answer that says the message itself is wrong (an unknown mailbox after the directory
    was read again, too large) counts towards `max_tries`.  Either way, it ends in the
    poison queue, never dropped."""

    max_dumpster_time: Duration = timedelta(days=7)
    max_dumpster_size_per_database: ByteSize = ByteSize(18 * 1000 * 1000)
    redelivery_interval: Duration = timedelta(seconds=30)
    retry_interval: Duration = timedelta(seconds=1)
    retry_max_interval: Duration = timedelta(seconds=60)
    message_expiration: Duration = timedelta(days=2)
    max_tries: int = Field(default=5, ge=1, le=1000)
    concurrency: int = Field(default=32, ge=1, le=1024)
    # Bytes of message bodies a transport holds in flight, at most: submissions being read
    # (past it a submission waits, then is answered 503 with Retry-After) and deliveries
    # being tried (they wait their turn).  Queued messages wait in the queue's file, not in
    # memory.  256 MiB: half the chart's 512 MiB transport pod.
    memory_budget: ByteSize = Field(default=ByteSize(DEFAULT_MEMORY_BUDGET), gt=0)
    mail: MailSettings = MailSettings()


class CredentialConfig(_Model):
    """A credential the services accept: its name (in the audit log and in refusals), its
    roles, and where its secrets are (a file of one a line, or an environment variable;
    never this file)."""

    name: str = Field(pattern=_NAME)
    roles: list[Role] = Field(min_length=1)
    file: Path | None = None
    env: str | None = Field(default=None, pattern=r"^[A-Z_][A-Z0-9_]*$")

    @model_validator(mode="after")
    def _one_source(self) -> CredentialConfig:
        if (self.file is None) == (self.env is None):
            raise ValueError(f"credential {self.name}: name its secrets' file or env, one of them")
        return self


_Named = TypeVar("_Named", NodeConfig, TransportNode, DatabaseConfig)


def _named(items: list[_Named], name: str) -> _Named:
    """The item of `items` called `name`; KeyError if there is none."""
    for item in items:
        if item.name == name:
            return item
    raise KeyError(name)


class ClusterConfig(_Model):
    """The whole cluster config file."""

    cluster: str = Field(pattern=_NAME)
    auth_token_file: Path | None = None
    tls: TlsConfig | None = None
    cluster_store: Annotated[EmbeddedStore | EtcdStore, Field(discriminator="kind")] = (
        EmbeddedStore()
    )
    defaults: Defaults = Defaults()
    nodes: list[NodeConfig] = Field(min_length=1)
    databases: list[DatabaseConfig] = []
    guarantee_api: GuaranteeApiConfig = GuaranteeApiConfig()
    transports: list[TransportNode] = []
    transport: TransportSettings = TransportSettings()
    imap: ImapFrontSettings = ImapFrontSettings()  # every IMAP front's (issue 50)
    # The credentials every service accepts, besides the cluster token (which holds every
    # role); see dag_common/credentials.py.
    credentials: list[CredentialConfig] = []

    @model_validator(mode="after")
    def _references(self) -> ClusterConfig:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError("two nodes share a name")
        held = [c.name for c in self.credentials]
        if len(set(held)) != len(held) or CLUSTER_CREDENTIAL in held:
            raise ValueError(
                f"two credentials share a name (or one is called {CLUSTER_CREDENTIAL!r}, the "
                "cluster token's)"
            )
        hubs = [t.name for t in self.transports]
        if len(set(hubs)) != len(hubs):
            raise ValueError("two transports share a name")
        urls = [n.url for n in self.nodes] + [t.url for t in self.transports]
        if len(set(urls)) != len(urls):
            raise ValueError("two nodes or transports share a url")
        dbs = [d.name for d in self.databases]
        if len(set(dbs)) != len(dbs):
            raise ValueError("two databases share a name")
        for db in self.databases:
            for copy in db.copies:
                if copy.node not in names:
                    raise ValueError(f"database {db.name}: copy on unknown node {copy.node!r}")
            wanted = self.synchronous_copies_of(db)
            if wanted and not self.block_mode_of(db):
                raise ValueError(
                    f"database {db.name}: synchronous_copies needs block mode (block_mode is off)"
                )
            if wanted > len(db.copies) - 1:
                raise ValueError(
                    f"database {db.name}: synchronous_copies is {wanted} but it has "
                    f"{len(db.copies) - 1} passive copies: no commit could ever be acknowledged"
                )
        return self

    def node(self, name: str) -> NodeConfig:
        """The node called `name`; KeyError if there is none."""
        return _named(self.nodes, name)

    def transport_node(self, name: str) -> TransportNode:
        """The transport called `name`; KeyError if there is none."""
        return _named(self.transports, name)

    def database(self, name: str) -> DatabaseConfig:
        """The database called `name`; KeyError if there is none."""
        return _named(self.databases, name)

    def constraint_of(self, db: DatabaseConfig) -> DataMoveReplicationConstraint:
        """The database's DataMoveReplicationConstraint, or the default."""
        return db.data_move_replication_constraint or self.defaults.data_move_replication_constraint

    def mount_dial_of(self, db: DatabaseConfig) -> AutoDatabaseMountDial:
        return db.auto_database_mount_dial or self.defaults.auto_database_mount_dial

    def synchronous_copies_of(self, db: DatabaseConfig) -> int:
        """How many passive copies must hold a commit before it is acknowledged."""
        if db.synchronous_copies is not None:
            return db.synchronous_copies
        return self.defaults.synchronous_copies

    def block_mode_of(self, db: DatabaseConfig) -> bool:
        return db.block_mode if db.block_mode is not None else self.defaults.block_mode

    def log_file_size_of(self, db: DatabaseConfig) -> int:
        return int(db.log_file_size or self.defaults.log_file_size)

    def max_item_size_of(self, db: DatabaseConfig) -> int:
        """The largest item a write to `db` takes: its own max_item_size, or the default."""
        return int(db.max_item_size or self.defaults.max_item_size)

    def largest_max_item_size(self) -> int:
        """The largest max_item_size of any database (the default when none overrides it)."""
        sizes = [self.max_item_size_of(db) for db in self.databases]
        return max([int(self.defaults.max_item_size), *sizes])

    def llr_depth_of(self, db: DatabaseConfig) -> int:
        """LLR depth: the configured depth, or 1 for a database with no other copy (seeds)."""
        if db.llr_depth is not None:
            return db.llr_depth
        return self.defaults.llr_depth if len(db.copies) > 1 else 1

    def log_roll_interval_of(self, db: DatabaseConfig) -> timedelta:
        """Idle log roll period: configured, else 15 minutes / LLR depth (the seeds' formula)."""
        if self.defaults.log_roll_interval is not None:
            return self.defaults.log_roll_interval
        return timedelta(minutes=15) / self.llr_depth_of(db)

    def databases_on(self, node: str) -> list[DatabaseConfig]:
        """The databases with a copy on `node`."""
        return [db for db in self.databases if db.copy_on(node) is not None]


def _resolve(config: ClusterConfig, base: Path) -> ClusterConfig:
    """Relative paths made absolute against `base`.  A directory the process keeps its data
    in is resolved through its symlinks, once; a file it reads again as it changes (a
    credential, a TLS pair, the IMAP users, the cluster store's secrets: `file`) is not, so
    that it names the file where the operator put it: a Kubernetes volume (a ConfigMap's or
    a Secret's) holds each file as `name -> ..data/name`, `..data` a link to a versioned
    directory swapped on each update and the old one removed, and a path resolved at start-up
    would name the old version for ever, then nothing."""

    def fix(path: Path) -> Path:
        return path if path.is_absolute() else (base / path).resolve()

    def file(path: Path) -> Path:
        return Path(os.path.abspath(base / path))  # absolute, `..` folded, links kept

    update: dict[str, object] = {
        "nodes": [n.model_copy(update={"data_dir": fix(n.data_dir)}) for n in config.nodes],
        "transports": [
            t.model_copy(update={"data_dir": fix(t.data_dir)}) for t in config.transports
        ],
        "guarantee_api": config.guarantee_api.model_copy(
            update={"history_dir": fix(config.guarantee_api.history_dir)}
        ),
    }
    if config.auth_token_file is not None:
        update["auth_token_file"] = file(config.auth_token_file)
    if config.imap.users_file is not None:
        update["imap"] = config.imap.model_copy(update={"users_file": file(config.imap.users_file)})
    update["credentials"] = [
        c.model_copy(update={"file": file(c.file)}) if c.file is not None else c
        for c in config.credentials
    ]
    if config.tls is not None:
        client_ca = config.tls.client_ca_file
        update["tls"] = TlsConfig(
            cert_file=file(config.tls.cert_file),
            key_file=file(config.tls.key_file),
            ca_file=file(config.tls.ca_file),
            client_ca_file=file(client_ca) if client_ca is not None else None,
        )
    store = config.cluster_store
    if isinstance(store, EmbeddedStore):
        update["cluster_store"] = EmbeddedStore(path=fix(store.path))
    else:
        files = ("ca_file", "cert_file", "key_file", "password_file")
        update["cluster_store"] = store.model_copy(
            update={f: file(getattr(store, f)) for f in files if getattr(store, f) is not None}
        )
    return config.model_copy(update=update)


def _where(data: object, loc: tuple[object, ...]) -> str:
    """A field's place in the config, list items by their name where they have one:
    `databases[DB1].copies[mbx3].activation_preference`, not `databases.0.copies.2...`."""
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            item = node[part] if isinstance(node, list) and part < len(node) else None
            name = item.get("name") or item.get("node") if isinstance(item, dict) else None
            out += f"[{name}]" if isinstance(name, str) and name else f"[{part}]"
            node = item
        else:
            out += f".{part}" if out else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out or "(top level)"


def _describe(exc: ValidationError, data: object) -> str:
    return "\n".join(f"  {_where(data, err['loc'])}: {err['msg']}" for err in exc.errors())


def parse_config(data: object, *, base_dir: Path, source: str = "config") -> ClusterConfig:
    """Validate already-parsed YAML; relative paths resolve against `base_dir`."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping")
    try:
        config = ClusterConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source} is invalid:\n{_describe(exc, data)}") from exc
    return _resolve(config, base_dir)


def load_config(path: str | os.PathLike[str]) -> ClusterConfig:
    """Read, parse and validate a cluster config file."""
    file = Path(path)
    data = read_yaml(file, "config", ConfigError)
    # Beside the file as named, not where its links lead (`_resolve`: a Kubernetes volume).
    return parse_config(data, base_dir=file.absolute().parent, source=str(file))


def load_token(config: ClusterConfig) -> str:
    """The credential this process presents: the first secret of $DG_CREDENTIAL_FILE (a
    process given a credential of its own), else the cluster token."""
    own = os.environ.get(CREDENTIAL_FILE_ENV, "").strip()
    if not own:
        if config.credentials and not has_cluster_token(config):
            raise ConfigError(
                f"no credential to present: give one of the config's credentials with "
                f"--credential-file FILE or ${CREDENTIAL_FILE_ENV} (or the cluster token: "
                f"${TOKEN_ENV} or auth_token_file)"
            )
        return cluster_token(config)
    try:
        secrets = read_secrets(Path(own))
    except CredentialError as exc:
        raise ConfigError(f"${CREDENTIAL_FILE_ENV}: {exc}") from None
    if not secrets:
        raise ConfigError(f"${CREDENTIAL_FILE_ENV}: {own} holds no secret")
    return secrets[0]


def has_cluster_token(config: ClusterConfig) -> bool:
    """Whether the environment or the config names a cluster token."""
    return bool(os.environ.get(TOKEN_ENV, "").strip()) or config.auth_token_file is not None


def cluster_token(config: ClusterConfig) -> str:
    """The cluster token: $DG_AUTH_TOKEN if set, else the token file."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token
    if config.auth_token_file is None:
        raise ConfigError(f"no cluster token: set {TOKEN_ENV} or auth_token_file")
    try:
        token = config.auth_token_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(
            f"cannot read auth_token_file {config.auth_token_file}: {exc.strerror}"
        ) from exc
    if len(token) < 16:
        raise ConfigError(f"auth_token_file {config.auth_token_file}: token shorter than 16 chars")
    return token


def load_credentials(config: ClusterConfig) -> Credentials:
    """The credentials a service accepts: the cluster token, if the config or the
    environment has one, as the credential `cluster` holding every role, and each of the
    config's `credentials`.  ConfigError naming a credential that cannot be read."""
    accepted = []
    if has_cluster_token(config):
        every = frozenset(Role)
        accepted.append(Credential(CLUSTER_CREDENTIAL, every, (digest(cluster_token(config)),)))
    for c in config.credentials:
        try:
            secrets = read_secrets(c.file) if c.file else environment_secret(c.env or "")
        except CredentialError as exc:
            raise ConfigError(f"credential {c.name}: {exc}") from None
        digests = tuple(map(accepted_digest, secrets))
        accepted.append(Credential(c.name, frozenset(c.roles), digests))
    if not accepted:
        raise ConfigError(
            f"no credential to accept: set {TOKEN_ENV}, auth_token_file or credentials"
        )
    return Credentials(accepted)


def credential_files(config: ClusterConfig, node: str | None = None) -> list[Path]:
    """The files a service's accepted credentials are read from, and (for node `node`, if
    named) its TLS certificate and key: watched for changes."""
    files = [c.file for c in config.credentials if c.file is not None]
    if config.auth_token_file is not None:
        files.append(config.auth_token_file)
    if config.tls is not None:
        tls = config.tls.for_node(node) if node else config.tls
        files += [tls.cert_file, tls.key_file]
    return files


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when `path` is written or replaced (None: it cannot be looked at)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def accepted_credentials(
    config_path: str | os.PathLike[str],
    *,
    node: str | None = None,
    on_reload: Callable[[], None] | None = None,
) -> Accepted:
    """What a service started from `config_path` accepts, reloaded from that file (its
    `credentials` and their files) on SIGHUP and whenever the config, a credential file or
    (node `node`'s) certificate changes; `on_reload` then runs too (the TLS contexts')."""

    def config() -> ClusterConfig:
        return load_config(config_path)

    # The files named by the config as it stood at its stamp (inode, size, mtime): read and
    # parsed again only once that changes, not at every look (every 2 s: 14 ms of a node's
    # CPU each, a YAML parse and the config's validation; issue 49's profile of the active).
    named: tuple[tuple[int, int, int] | None, list[Path]] | None = None

    def files() -> list[Path]:  # the config itself too: a credential added to it counts
        nonlocal named
        stamp = _stamp(Path(config_path))
        # A file named gone is looked for again: a relative path is resolved through symlinks
        # when the config is read, and a secret rotated by swapping one (as a Kubernetes
        # volume is) leaves the old target deleted and the new one under another name.
        if named is not None and named[0] == stamp and all(p.exists() for p in named[1]):
            return named[1]
        try:
            found = [Path(config_path), *credential_files(config(), node)]
        except ConfigError:  # being rewritten: its change is seen on the next look
            return [Path(config_path)]
        named = (stamp, found)  # a change after the stamp: seen at the next look
        return found

    return Accepted(lambda: load_credentials(config()), files, on_reload=on_reload)
