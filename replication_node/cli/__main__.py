"""`python -m replication_node.cli`: the replication-node command."""

import sys

from replication_node.cli.main import main

sys.exit(main())
