"""`guarantee-api serve --config CLUSTER.yaml`: run the Data Guarantee service until SIGTERM.

Exit codes (dag_common.cli.ExitCode): 0 after a graceful shutdown, 1 when the service
cannot run (e.g. its port is taken), 2 for a bad config or bad arguments; a bad config
prints the field path and the reason.
"""

from __future__ import annotations

import argparse
import logging
import sys

from dag_common.cli import Lazy, Script

# The command's module (grpc, the service) is imported only when it is chosen.
COMMANDS = (Lazy("serve", "run the Data Guarantee gRPC service", "guarantee_api.serve_cli:build"),)


def _logging(args: argparse.Namespace) -> None:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


SCRIPT = Script("guarantee-api", COMMANDS, description=__doc__.splitlines()[0], before=_logging)
_parser, main = SCRIPT.parser, SCRIPT.main  # main: the `guarantee-api` console script


if __name__ == "__main__":
    sys.exit(main())
