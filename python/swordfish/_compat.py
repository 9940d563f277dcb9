"""Differences between the supported Python versions, in one place."""

import sys

PY311 = sys.version_info >= (3, 11)
PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)

# asyncio.Task accepts `context=` from 3.11 on.
TASK_TAKES_CONTEXT = PY311
