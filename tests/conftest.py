"""Shared fixtures for the swordfish test suite.

Every behavioural test runs twice: once on the stdlib loop (``asyncio``) and
once on swordfish.  The stdlib run proves that the test encodes the stdlib's
behaviour; the swordfish run is the one that matters.

If ``import swordfish`` fails, every swordfish-parametrized test fails with the
import error (it is never skipped).
"""

import asyncio
import contextlib
import gc
import os
import socket
import sys
import threading

import pytest

try:
    import swordfish as _swordfish
    SWORDFISH_IMPORT_ERROR = None
except Exception as exc:  # pragma: no cover - only when the build is missing
    _swordfish = None
    SWORDFISH_IMPORT_ERROR = exc

PY = sys.version_info[:2]
DEFAULT_TIMEOUT = 30  # seconds, per test (pytest-timeout)
RUN_TIMEOUT = 10  # seconds, for one coroutine run through the ``run`` fixture


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "swordfish: the test needs swordfish (added automatically); "
        "'-m \"not swordfish\"' runs only the stdlib half of the suite",
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        # Give every test a default pytest-timeout unless it sets its own.
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT))
        callspec = getattr(item, "callspec", None)
        names = getattr(item, "fixturenames", ())
        if (
            (callspec is not None and callspec.params.get("impl") == "swordfish")
            or "sf" in names
            or "swordfish" in item.name
        ):
            item.add_marker(pytest.mark.swordfish)


def require_swordfish():
    """Return the swordfish module, or fail the current test loudly."""
    if _swordfish is None:
        pytest.fail(
            f"import swordfish failed: {SWORDFISH_IMPORT_ERROR!r}", pytrace=False
        )
    return _swordfish


def _swordfish_factory():
    return require_swordfish().new_event_loop()


FACTORIES = {
    "asyncio": asyncio.new_event_loop,
    "swordfish": _swordfish_factory,
}


@pytest.fixture(params=["asyncio", "swordfish"])
def impl(request):
    """Name of the loop implementation under test: 'asyncio' or 'swordfish'."""
    if request.param == "swordfish":
        require_swordfish()
    return request.param


@pytest.fixture
def loop_factory(impl):
    """A zero-argument callable returning a new, not-yet-running event loop."""
    return FACTORIES[impl]


@pytest.fixture
def sf():
    """The swordfish module (for swordfish-only tests)."""
    return require_swordfish()


def _finalize_loop(loop):
    if loop.is_closed():
        return
    if loop.is_running():  # a broken test left it running; cannot recover
        return
    try:
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            loop.run_until_complete(
                asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
            )
    except BaseException:
        pass
    finally:
        loop.close()


@pytest.fixture
def loop(loop_factory):
    """A fresh loop of the implementation under test, closed afterwards."""
    lp = loop_factory()
    try:
        yield lp
    finally:
        _finalize_loop(lp)


@pytest.fixture
def sf_loop(sf):
    """A fresh swordfish loop (for swordfish-only tests)."""
    lp = sf.new_event_loop()
    try:
        yield lp
    finally:
        _finalize_loop(lp)


def run_on(loop, coro, timeout=RUN_TIMEOUT):
    """Run ``coro`` on ``loop`` with a timeout and a watchdog.

    The timeout is enforced twice: by ``asyncio.wait_for`` on the loop itself,
    and by a watchdog thread that stops the loop through
    ``call_soon_threadsafe`` in case the loop's own timers are broken.
    """
    fired = []

    def watchdog():
        fired.append(True)
        try:
            loop.call_soon_threadsafe(loop.stop)
        except Exception:
            pass

    timer = threading.Timer(timeout + 5, watchdog)
    timer.daemon = True
    timer.start()
    try:
        return loop.run_until_complete(asyncio.wait_for(coro, timeout))
    finally:
        timer.cancel()
        if fired:
            pytest.fail(f"watchdog stopped the loop after {timeout + 5}s")


@pytest.fixture
def run(loop):
    """``run(coro, timeout=10)``: run a coroutine to completion on ``loop``."""

    def _run(coro, timeout=RUN_TIMEOUT):
        return run_on(loop, coro, timeout)

    return _run


@pytest.fixture
def sf_run(sf_loop):
    def _run(coro, timeout=RUN_TIMEOUT):
        return run_on(sf_loop, coro, timeout)

    return _run


def skip_asyncio_before(impl, version, what):
    """Skip the stdlib param on Pythons where the stdlib lacks ``what``."""
    if impl == "asyncio" and PY < version:
        pytest.skip(f"{what} needs Python {'.'.join(map(str, version))}+ in asyncio")


def nb_socketpair(family=socket.AF_UNIX, type=socket.SOCK_STREAM):
    a, b = socket.socketpair(family, type)
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def tcp_pair():
    """A connected pair of non-blocking TCP sockets on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        c = socket.create_connection(srv.getsockname())
        s, _ = srv.accept()
    c.setblocking(False)
    s.setblocking(False)
    return c, s


def reset_close(sock):
    """Close ``sock`` abortively so that the peer sees ECONNRESET."""
    import struct

    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _closing(factory):
    """A fixture body: `make(...)` creates socket pairs, all closed at teardown."""
    pairs = []

    def make(*args, **kwargs):
        p = factory(*args, **kwargs)
        pairs.append(p)
        return p

    yield make
    for a, b in pairs:
        a.close()
        b.close()


@pytest.fixture
def socketpair():
    yield from _closing(nb_socketpair)


@pytest.fixture
def tcppair():
    yield from _closing(tcp_pair)


def swordfish_pythonpath():
    """A PYTHONPATH under which a child interpreter can import swordfish."""
    parts = []
    if _swordfish is not None:
        parts.append(os.path.dirname(os.path.dirname(_swordfish.__file__)))
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(parts)


def child_env(**extra):
    env = dict(os.environ)
    env.pop("PYTHONASYNCIODEBUG", None)
    env.pop("PYTHONDEVMODE", None)
    env["PYTHONPATH"] = swordfish_pythonpath()
    env.update(extra)
    return env


@contextlib.contextmanager
def gc_disabled():
    """The cyclic GC collected once, then off until the block ends."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@pytest.fixture
def no_gc():
    """Disable the cyclic GC for the duration of a test."""
    with gc_disabled():
        yield


def run_iterations(loop, n=3):
    """Run ``loop`` for ``n`` iterations of its ready queue, then stop."""

    def step(k):
        if k <= 0:
            loop.stop()
        else:
            loop.call_soon(step, k - 1)

    loop.call_soon(step, n - 1)
    loop.run_forever()
