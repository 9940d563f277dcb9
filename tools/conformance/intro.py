"""The fixed part of docs/conformance.md: what the run does and what it
leaves out (taken from modules.py, so the list cannot drift)."""

from . import modules

TEXT = """\
# Conformance: CPython's asyncio test suite on swordfish

`tools/conformance.py` runs the modules of CPython's own asyncio test suite
(`test.test_asyncio`, imported from the interpreter, never copied) on the
swordfish loop and on the stdlib loop, and lists the tests that fail on
swordfish but pass on asyncio: that list is the to-do list.

```
make conformance                       # the venv's Python, both loops
python tools/conformance.py [--loop swordfish|asyncio|both] [--modules m1,m2]
       [--json out.json] [--markdown docs/conformance.md] [--strict] [-v]
```

Run it with `PYTHONPATH=python` (or in a venv where swordfish is installed).
The exit status is 0 whatever fails, unless `--strict` is given: then it is 1
when a test fails on swordfish and passes on asyncio (flaky ones excepted).
`--markdown` rewrites this file, replacing the results section of the
Python it ran on and keeping the others.

## How the tests are put on a loop

* Each module runs in its own child process (`tools/conformance/child.py`),
  once per loop, two children at a time.  Their output and every traceback
  go to `tools/.conformance-logs/<python>-<loop>-<module>.log`.
* Before the module is imported, the child installs the loop's policy
  (`swordfish.EventLoopPolicy`, or `asyncio.DefaultEventLoopPolicy` for the
  asyncio side) and wraps `asyncio.set_event_loop_policy` (also
  `asyncio.events._set_event_loop_policy` where it exists, and the lazy
  default of `get_event_loop_policy`) so that the modules' `tearDown` /
  `tearDownModule` reset, `set_event_loop_policy(None)`, installs that policy
  again.  A policy a test sets on purpose is left alone.
  `asyncio.new_event_loop()`, `asyncio.run()`, `asyncio.Runner` and
  `IsolatedAsyncioTestCase` get their loop from the policy; the child checks
  that `asyncio.new_event_loop()` really returns the loop under test before
  any test runs.
* Tests that build their loop as `test_utils.TestLoop` (a fake-clock
  `BaseEventLoop`) or `asyncio.BaseEventLoop` stay on it; they run and are
  counted as they are.  The column "ran on swordfish" counts the tests that
  made at least one swordfish loop (through the policy or the factory); the
  others did not touch the loop at all (fake-clock `TestLoop`, mocks, or a
  policy of the test's own).
* `test_events` and `test_sock_lowlevel` hold loop-generic mixins and one
  copy of them per selector (`SelectEventLoopTests`, `EPollEventLoopTests`,
  ...).  Those copies are dropped; one class, `GenericEventLoopTests` /
  `GenericSockTests`, is built from the mixin with a `create_event_loop()`
  returning the loop under test (`swordfish.new_event_loop()`, or the stdlib
  default loop for the asyncio side, so the comparison is like for like).
  The modules' other classes (`HandleTests`, `PolicyTests`, ...) are kept.
  The transport modules built the same way (`test_sendfile`, `test_server`,
  `test_buffered_proto`) are already described in
  `tools/conformance/modules.py`.
* `loop.create_future()` and `loop.create_task()` return swordfish's native
  `Future` and `Task` (see [design](design.md#native-futures-and-tasks)), so every test
  that makes a future or a task through the loop (`asyncio.create_task`, `gather`,
  `wait_for`, `TaskGroup`, `asyncio.timeout`, the locks and queues, ...) runs on them.
  The classes a test constructs itself (`asyncio.Task(coro, loop=loop)`, `tasks._PyTask`)
  stay the stdlib's. `tests/test_native_*.py` run their scenarios on both kinds and
  compares; the few differences are listed in [loop.md](loop.md#known-differences-from-the-stdlib-loop).
* Only where the test harness itself (not a test) reads a private attribute
  of the stdlib loop does a shim step in (`tools/conformance/shims.py`):
  `test_utils.TestCase.close_loop` reads `loop._default_executor`; for a
  loop without it, the executor is shut down with the public
  `shutdown_default_executor()`.  The table's notes say when a shim was
  used; `--no-shims` turns them off.
* Outcomes: a test with a failing subtest failed; an expected failure
  passed; an unexpected success failed.  A test is stopped after the
  per-test timeout (faulthandler dumps every thread's stack into the log) and
  counted as an error; a test that crashes the interpreter too.  In both
  cases a new child resumes the module after that test.  A module also has a
  wall-clock budget.
* A test that fails on swordfish and passes on asyncio is run once more,
  alone in a fresh child; if it then passes it is listed as flaky.

## What is not run, and why

Modules of `test.test_asyncio` not run at all:

{not_applicable}

Modules left out for now (run one anyway with `--modules NAME`):

{deferred}

Parts of the modules that run:

{mixins}

## Deliberate differences from the stdlib loop

Found by running the same scenarios on both loops; none is exercised by the test suite
above, and each is kept on purpose:

- `sock_recv`, `sock_sendall`, `sock_connect` and the other `sock_*` methods refuse a
  blocking socket with `ValueError` always, not only in debug mode: the stdlib loop would
  block in the system call and freeze every other task.
- `getaddrinfo` with a numeric host (or `None`) answers without the executor round trip, so
  the await can return before callbacks queued with `call_soon` have run. asyncio promises
  no such order.
- `write()` and `writelines()` check their argument at once: a non-contiguous memoryview
  raises `BufferError` from the call (the stdlib loop accepts it and then fails the whole
  connection with a fatal write error); a memoryview of wider items sends all its bytes
  (the stdlib's selector transport, on 3.11, sends `len()` bytes, one per item); data is
  copied when it cannot go out at once, so a bytearray changed after `write()` does not
  change what is sent (the stdlib loop on 3.12+ keeps a reference).
- `set_write_buffer_limits()` takes integers only (`TypeError` for a float, as for any
  size argument); the stdlib stores whatever numbers it is given.
- A `BufferedProtocol` whose `get_buffer()` returns an empty buffer fails the connection
  with `RuntimeError` on TLS as on plain sockets; the stdlib's TLS layer takes the empty
  read for the peer's close_notify and shuts the connection down, dropping the data.
- Messages name swordfish's own classes (`_StreamTransport`, `SocketTransport`) where the
  stdlib's name `_SelectorSocketTransport`.

## Results
"""


def render():
    not_applicable = "\n".join(f"- `{name}`: {why}"
                               for name, why in modules.NOT_APPLICABLE.items())
    deferred = "\n".join(f"- `{m.name}`: {m.why_deferred}"
                         for m in modules.MODULES if not m.default) or "- none"
    mixins = []
    for m in modules.MODULES:
        for mixin, why in m.deferred_mixins.items():
            mixins.append(f"- `{m.name}`: `{mixin}` (its tests are only in the "
                          f"per-selector classes, which are dropped): {why}")
        for pattern, why in m.exclude_tests.items():
            mixins.append(f"- `{pattern}`: {why}")
    return TEXT.format(not_applicable=not_applicable, deferred=deferred,
                       mixins="\n".join(mixins))
