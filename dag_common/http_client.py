"""The one way a client of the nodes (and transports) speaks HTTP: TLS as the cluster's
`tls:` section says (the CA to verify them with), spelled once for every command."""

from __future__ import annotations

import ssl

from dag_common.config import ClusterConfig


def client_ssl(config: ClusterConfig) -> ssl.SSLContext | None:
    """The TLS context of a client of the nodes (None without TLS)."""
    return config.tls.client_context() if config.tls else None
