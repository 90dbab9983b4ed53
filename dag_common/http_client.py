"""The one way a client of the nodes (and transports) speaks HTTP: TLS as the cluster's
`tls:` section says (the CA to verify them with), spelled once for every command and
service (`client_session`); the command lines' blocking client (`dag_common.blocking_http`)
takes its TLS context from `client_ssl` too, without importing aiohttp."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

from dag_common.config import ClusterConfig

if TYPE_CHECKING:
    import aiohttp


def client_ssl(config: ClusterConfig) -> ssl.SSLContext | None:
    """The TLS context of a client of the nodes (None without TLS)."""
    return config.tls.client_context() if config.tls else None


def client_session(
    config: ClusterConfig,
    *,
    timeout: aiohttp.ClientTimeout | None = None,
    limit: int = 100,
) -> aiohttp.ClientSession:
    """A session to the cluster's nodes and transports, TLS as configured (`limit`: open
    connections at most, 0 for none; `timeout`: aiohttp's default of 5 minutes if None)."""
    import aiohttp  # here: `client_ssl` alone is the blocking client's, which spares it

    connector = aiohttp.TCPConnector(ssl=client_ssl(config), limit=limit)
    if timeout is None:
        return aiohttp.ClientSession(connector=connector)
    return aiohttp.ClientSession(connector=connector, timeout=timeout)
