"""Errors shared by every component.

DagError
└── ConfigError        the cluster config file is missing, unreadable or invalid (exit 2)
"""


class DagError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(DagError):
    """The cluster config cannot be used; the message names the field and the reason."""
