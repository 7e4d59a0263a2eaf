"""python -m memvault: same as the memvault command."""

import sys

from memvault.cli.main import main

sys.exit(main())
