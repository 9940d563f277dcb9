"""`python -m swordfish serve module:app`."""

import sys

from .server.cli import main

sys.exit(main())
