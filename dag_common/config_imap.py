"""The cluster config's `imap:` section: what every IMAP front (`python -m imap_front serve`)
listens on, whom it lets in, and the limits it holds bad input to (docs/concepts/imap.md,
"Limits for bad input").  TLS is the cluster's `tls:` section, read for the front's name
(`--name`, `{node}` in its paths); without it a front offers no LOGIN at all."""

from __future__ import annotations

from pathlib import Path

from pydantic import ByteSize, Field

from dag_common.config_base import ConfigModel


class ImapFrontSettings(ConfigModel):
    """Every IMAP front's settings.

    `users_file`: YAML, each user's mailbox and argon2id hash (`imap_front/users.py`);
    relative to the config's directory.  `max_line`: a command line's bytes outside its
    literals (past it: `BYE [TOOBIG]` and the connection closed, the line not read further).
    `max_literal`: a literal's bytes (an APPEND's message; the database's max_item_size is
    the node's own bound), refused before a byte of it is read.  `login_concurrency`: argon2
    verifications at once (each takes 64 MiB while it runs)."""

    host: str = "127.0.0.1"
    port: int = Field(default=143, ge=0, le=65535)  # IMAP with STARTTLS
    users_file: Path | None = None
    max_line: ByteSize = Field(default=ByteSize(64 * 1024), ge=1024, le=16 * 1024 * 1024)
    max_literal: ByteSize = Field(default=ByteSize(36 * 1024 * 1024), ge=1, le=1 << 31)
    login_concurrency: int = Field(default=2, ge=1, le=64)
    invalid_login_delay: float = Field(default=0.5, ge=0, le=30)  # seconds before a NO
