"""Errors shared by every component.

DagError
├── ConfigError        the cluster config file is missing, unreadable or invalid (exit 2)
├── InUse              a data directory or port is held by another process (exit 2)
├── BadArgument        a command-line value the parser cannot take, named by its option (exit 2)
└── TokenRefused       the nodes or the service refuse the token (exit 2)
"""


class DagError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(DagError):
    """The cluster config cannot be used; the message names the field and the reason."""


class InUse(DagError):
    """What a command would take is taken: a node's data directory locked by a running
    process, a port another process listens on (exit 2, nothing changed)."""


class TokenRefused(DagError):
    """The nodes or the service refuse this command's token (exit 2: fix the token)."""


class BadArgument(DagError):
    """A command-line option's value cannot be taken (`--stall-limit bogus`); the message
    names the option (exit 2, said in one line, without argparse's usage)."""
