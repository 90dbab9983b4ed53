"""The cluster config's `tls:` section: the certificate and key a process serves with, the CA
its clients verify peers with, and node identity (mutual TLS) when `client_ca_file` is set."""

from __future__ import annotations

import ssl
from pathlib import Path

from dag_common.config_base import ConfigModel


class TlsConfig(ConfigModel):
    """TLS for node HTTP and the guarantee API: the server's certificate and key, and the CA
    that clients verify peers with.  Node urls then use https://.

    Node identity (mutual TLS), optional: with `client_ca_file`, a node presents its own
    certificate when it calls a peer or a transport, and the `replication` role is granted
    only to a caller whose client certificate that CA issued and names a node of the config
    (its CN or a DNS name); a certificate of another CA is refused in the handshake.
    `{node}` in `cert_file` and `key_file` stands for the process's node name, so one config
    names every node's own pair (`./tls/{node}.crt`)."""

    cert_file: Path
    key_file: Path
    ca_file: Path
    client_ca_file: Path | None = None

    def for_node(self, node: str) -> TlsConfig:
        """These settings as node `node` reads them (`{node}` replaced)."""
        return self.model_copy(
            update={
                "cert_file": Path(str(self.cert_file).replace("{node}", node)),
                "key_file": Path(str(self.key_file).replace("{node}", node)),
            }
        )

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            ctx.verify_mode = ssl.CERT_OPTIONAL  # a client without one holds no replication
            ctx.load_verify_locations(cafile=str(self.client_ca_file))
        return ctx

    def client_context(self, *, identify: bool = False) -> ssl.SSLContext:
        """A client's context; `identify`: present this process's certificate (a node
        calling a peer or a transport, under node identity)."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if identify and self.client_ca_file is not None:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def reload(self, ctx: ssl.SSLContext, *, server: bool) -> None:
        """Load the certificate and key again into `ctx` (a rotation: new handshakes use
        them; connections open keep theirs)."""
        if server or self.client_ca_file is not None:
            ctx.load_cert_chain(self.cert_file, self.key_file)
