"""python -m memvault: same as the memvault command."""

import sys

from memvault.cli import main

sys.exit(main())
