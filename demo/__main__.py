"""`python -m demo`: see `demo.main`."""

import sys

from demo.main import main

sys.exit(main())
