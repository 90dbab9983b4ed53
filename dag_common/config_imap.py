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
    verifications at once (each takes 64 MiB while it runs).  `tls_port`: a second port whose
    connections are TLS from their first byte (993-style; none unless set, and only with a
    `tls:` section).  `invalid_login_delay`: a failed login's wait from an address with no
    recent failure, doubled for each further one (at most 8 s; forgotten after 15 quiet
    minutes); after 3 failures the connection is closed.  `max_sessions`: connections one
    front holds (past it: `* BYE [LIMIT]` at the greeting); `max_sessions_per_user`: one
    user's logged-in sessions on one front (past it: the login `NO [LIMIT]`).
    `idle_timeout`: seconds a session may stay silent outside IDLE before `* BYE` (RFC 3501
    asks at least 30 minutes of a server's autologout).  `move_lock_wait`: seconds a write
    refused by a move's lock (the mailbox's last step of a move) waits for the move to end,
    then `NO [UNAVAILABLE]`.  `failover_wait`: seconds an APPEND that got no answer (its
    active died, none mounted yet) is sent again under its item id until an active answers,
    then `NO [UNAVAILABLE]`; a read (a folder's status or listing) is sent again the same
    way."""

    host: str = "127.0.0.1"
    port: int = Field(default=143, ge=0, le=65535)  # IMAP with STARTTLS
    tls_port: int | None = Field(default=None, ge=0, le=65535)  # implicit TLS, e.g. 993
    users_file: Path | None = None
    max_line: ByteSize = Field(default=ByteSize(64 * 1024), ge=1024, le=16 * 1024 * 1024)
    max_literal: ByteSize = Field(default=ByteSize(36 * 1024 * 1024), ge=1, le=1 << 31)
    login_concurrency: int = Field(default=2, ge=1, le=64)
    invalid_login_delay: float = Field(default=0.5, ge=0, le=30)  # seconds before a NO
    max_sessions: int = Field(default=5000, ge=1, le=1_000_000)
    max_sessions_per_user: int = Field(default=20, ge=1, le=10_000)
    idle_timeout: float = Field(default=1800.0, gt=0, le=86_400)
    move_lock_wait: float = Field(default=60.0, gt=0, le=3600)
    failover_wait: float = Field(default=60.0, gt=0, le=3600)
