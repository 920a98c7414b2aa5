"""`python -m agents.evaluate RUN_DIR_OR_CKPT ...`: the command of `agents.evaluate.cli`."""

import sys

from agents.evaluate.cli import main

sys.exit(main())
