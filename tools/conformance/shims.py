"""Work-arounds for places where the *test harness* of test.test_asyncio
(not a test itself) reaches into private attributes of the stdlib loop.

Without them a loop lacking such an attribute errors in every test's
cleanup, which hides what the test itself did.  Each shim only acts when
the attribute is missing, and counts how often it did; the report shows
the counts.  ``--no-shims`` turns them off to see the raw results.
"""

used = {}


def _use(name):
    used[name] = used.get(name, 0) + 1


class _WithoutDefaultExecutor:
    """The loop, seen with ``_default_executor = None``."""

    _default_executor = None

    def __init__(self, loop):
        self._loop = loop

    def __getattr__(self, name):
        return getattr(self._loop, name)


def _patch_close_loop():
    """test_utils.TestCase.close_loop reads ``loop._default_executor``; for
    a loop without it, shut the executor down through the public API and
    let the original do the rest (close, child watcher checks)."""
    from test.test_asyncio import utils as test_utils

    original = test_utils.TestCase.__dict__["close_loop"].__func__

    def close_loop(loop):
        if hasattr(loop, "_default_executor"):
            return original(loop)
        _use("close_loop")
        if not loop.is_closed():
            loop.run_until_complete(loop.shutdown_default_executor())
        return original(_WithoutDefaultExecutor(loop))

    test_utils.TestCase.close_loop = staticmethod(close_loop)


def install():
    _patch_close_loop()
