"""`mrs`: move mailboxes between databases, gated on the Data Guarantee API.

    mrs move --config F --mailbox M --to DB [--with-archive]
             [--large-item-limit N] [--bad-item-limit N]
    mrs list | show ID | stats ID | resume ID      (each with --json)
    mrs suspend ID | cancel ID [--wait 60s]        (each with --json)
    mrs serve --config F [--max-moves N] [--max-per-target-database N] …
    mrs batch create NAME --csv F | list | show | report | suspend | resume | complete | …

Move requests live in the cluster store the config names (etcd across hosts): every command
works from any host.  A worker (`mrs serve`) runs queued moves under leases; `mrs move` is a
one-move worker in the foreground.

Exit codes: 0 ok, 1 the move failed or stopped before completing (a suspended move, a
suspend or cancel the running mover has not carried out within --wait), 2 bad input or
config (an unknown move, a completed one, a cancel after step 8).
"""

from __future__ import annotations

import argparse
import logging

from dag_common.cli import Lazy, Script
from mrs_client.errors import MoveRejected

# Each command's module is imported only when it is chosen (`dag_common.cli.Lazy`): this
# table is what `mrs --help` needs, and all it imports.
COMMANDS = (
    Lazy("move", "create a move request and run it", "mrs_client.move_cli:build_move"),
    Lazy("resume", "resume a failed, suspended or interrupted move",
         "mrs_client.move_cli:build_resume"),
    Lazy("suspend",
         "stop a move at its next safe point, keeping its claim and locks (mrs resume goes on)",
         "mrs_client.move_cli:build_suspend"),
    Lazy("cancel",
         "before step 8: remove the target copy, unlock the source, release the mailbox",
         "mrs_client.move_cli:build_cancel"),
    Lazy("serve", "run a worker: claims queued moves under a lease and runs many at once",
         "mrs_client.move_cli:build_serve"),
    Lazy("batch", "migration batches: many moves run by the workers",
         "mrs_client.batch_cli:build"),
    Lazy("list", "all move requests", "mrs_client.record_cli:build_list"),
    Lazy("show", "one move request", "mrs_client.record_cli:build_show"),
    Lazy("stats", "statistics of a move, like Get-MoveRequestStatistics",
         "mrs_client.record_cli:build_stats"),
)  # fmt: skip


def _logging(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else logging.WARNING)


SCRIPT = Script(
    "mrs", COMMANDS, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    # A refused move (unknown mailbox, already moving, locked) changed nothing: bad input.
    bad_input=(MoveRejected,), before=_logging,
)  # fmt: skip
build_parser, main, entry = SCRIPT.parser, SCRIPT.main, SCRIPT.entry


if __name__ == "__main__":
    entry()
