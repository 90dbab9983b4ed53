"""`replication-node`: serve a node, run a local cluster, show status, inspect files.

Exit codes: 0 ok, 1 operation failed, 2 bad input or config.
"""

from __future__ import annotations

from dag_common.cli import Group, Lazy, Script

# Each command's module is imported only when it is chosen (`dag_common.cli.Lazy`; a
# `Group` only chooses among its table's): these tables are what `replication-node --help`
# needs, and all it imports.
_CLI = "replication_node.cli"

LOG_COMMANDS = (
    Lazy("dump", "header, records and checksum verdicts of a log file",
         f"{_CLI}.files:build_log_dump"),
)  # fmt: skip

DB_COMMANDS = (
    Lazy("header", "the database header (state, checkpoint, waypoint)",
         f"{_CLI}.files:build_db_header"),
    Lazy("roll-log", "close the active copy's open log now", f"{_CLI}.admin:build_roll_log"),
    Lazy("mount", "re-mount the active copy now, through crash recovery (after a failure)",
         f"{_CLI}.admin:build_mount"),
    Lazy("dismount", "dismount the active copy cleanly; no failover until `db mount`",
         f"{_CLI}.admin:build_dismount"),
    Lazy("suspend", "suspend a passive copy", f"{_CLI}.admin:build_suspend"),
    Lazy("resume", "resume a passive copy", f"{_CLI}.admin:build_resume"),
    Lazy("reseed", "reseed a passive copy", f"{_CLI}.admin:build_reseed"),
    Lazy("activate", "mount a passive copy after the active is lost (AutoDatabaseMountDial)",
         f"{_CLI}.admin:build_activate"),
    Lazy("switchover", "move the active copy to another copy, losing nothing",
         f"{_CLI}.admin:build_switchover"),
    Lazy("history",
         "the role changes of a database: each epoch's active, when, why, and the logs lost",
         f"{_CLI}.admin:build_history"),
    Lazy("backup", "back up a copy (passive or active), coordinated with the active",
         f"{_CLI}.backup:build_backup"),
    Lazy("restore", "a full backup, then incrementals, into a database in Clean Shutdown",
         f"{_CLI}.backup:build_restore"),
    Lazy("rebalance", "switch each database's active back to its most preferred healthy copy",
         f"{_CLI}.rebalance:build_rebalance"),
)  # fmt: skip

CLUSTER_COMMANDS = (
    Lazy("up", "start all nodes as local processes; Ctrl-C stops them",
         f"{_CLI}.serve:build_cluster_up"),
    Lazy("pause",
         "pause automatic failover for maintenance (an operator may still activate)",
         f"{_CLI}.pause:build_pause"),
    Lazy("resume", "resume automatic failover after `cluster pause`",
         f"{_CLI}.pause:build_resume"),
)  # fmt: skip


COMMANDS = (
    Group("log", "log file tools", "log_cmd", LOG_COMMANDS),
    Group("db", "database file tools, and the admin calls of a database's copies", "db_cmd",
          DB_COMMANDS),
    Lazy("serve", "run one node", f"{_CLI}.serve:build_serve"),
    Group("cluster", "run every node of a config locally; pause or resume automatic failover",
          "cluster_cmd", CLUSTER_COMMANDS),
    Lazy("mailbox",
         "create a mailbox, write test items, list them, say where one is; list, purge and "
         "restore soft-deleted mailboxes (the node API)",
         f"{_CLI}.mailbox:register"),
    Lazy("status", "copy status of the whole cluster", f"{_CLI}.status:register"),
    Lazy("audit", "recent operator, mover and refused calls on every node, by time",
         f"{_CLI}.audit:register"),
)  # fmt: skip


SCRIPT = Script("replication-node", COMMANDS, description=__doc__)
build_parser, main, entry = SCRIPT.parser, SCRIPT.main, SCRIPT.entry


if __name__ == "__main__":
    entry()
