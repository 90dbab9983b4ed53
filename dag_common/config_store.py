"""The cluster config's `cluster_store:` section: one SQLite file on this machine
(`EmbeddedStore`, the default) or etcd for nodes on several hosts (`EtcdStore`)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from dag_common.config_base import ConfigModel, more_than_zero
from dag_common.model import Duration


class EmbeddedStore(ConfigModel):
    """The cluster store as one SQLite file on this machine (the default)."""

    kind: Literal["embedded"] = "embedded"
    path: Path = Path("./var/cluster.db")


class EtcdStore(ConfigModel):
    """The cluster store in etcd, for nodes on several hosts.

    TLS: `ca_file` is the CA that https:// endpoints are verified against (without it, the
    system's CAs); `cert_file` and `key_file` are the client certificate that an etcd run
    with --client-cert-auth asks for.  RBAC: `username` and `password_file`; the password is
    read from its file at each authentication (a rotated Secret is picked up), never written
    in the config.

    The files are checked when the store is opened, not here: the config is also loaded
    where the store is never opened (`replication-node status`, `mrs` on an operator's
    machine, the chart's tests, a node's config refresh), and those must not need the
    etcd client's secrets to be mounted.
    """

    kind: Literal["etcd"]
    endpoints: list[str] = Field(min_length=1)
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    username: str | None = Field(default=None, min_length=1)
    password_file: Path | None = None
    timeout: Duration = timedelta(seconds=5)

    @model_validator(mode="before")
    @classmethod
    def _no_password_inline(cls, data: object) -> object:
        if isinstance(data, dict) and "password" in data:
            raise ValueError(
                "password is not accepted: the etcd password is never written in the "
                "config; put it in a file and name that file in password_file"
            )
        return data

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        for endpoint in value:
            parts = urlsplit(endpoint)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{endpoint!r} is not a URL like https://host:2379")
        return [e.rstrip("/") for e in value]

    _timeout_more_than_zero = field_validator("timeout")(more_than_zero)

    @model_validator(mode="after")
    def _pairs_and_https(self) -> EtcdStore:
        for pair, needs in (
            (("cert_file", "key_file"), "a client certificate needs both"),
            (("username", "password_file"), "etcd authentication needs both"),
        ):
            given = [f for f in pair if getattr(self, f) is not None]
            if len(given) == 1:
                (missing,) = set(pair) - set(given)
                raise ValueError(f"{given[0]} is set but {missing} is not: {needs}")
        tls = [f for f in ("ca_file", "cert_file", "key_file") if getattr(self, f) is not None]
        plain = [e for e in self.endpoints if urlsplit(e).scheme != "https"]
        if tls and plain:
            raise ValueError(
                f"TLS files are set ({', '.join(tls)}), so every endpoint must be https://, "
                f"but {', '.join(plain)} is not"
            )
        return self
