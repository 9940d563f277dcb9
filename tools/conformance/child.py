"""Child process: run one test module of test.test_asyncio on one loop kind.

    python -m conformance.child --module test_tasks --loop swordfish \
        --events FILE [--skip FILE] [--only FILE] [--test-timeout SECONDS]

Events (JSON lines) are appended to FILE; everything else the tests print,
and the tracebacks, go to stdout/stderr, which the parent sends to a log.
``--skip`` / ``--only`` name files of test ids, one a line: the parent uses
them to resume after a test hung or crashed, and to re-run failures.
"""

import argparse
import faulthandler
import json
import platform
import sys
import traceback
import unittest
import warnings

from . import loops, modules, shims, suite
from .result import RecordingResult


def _read_ids(path):
    if not path:
        return None
    with open(path) as f:
        return {line.strip() for line in f if line.strip()}


def main(argv=None):
    p = argparse.ArgumentParser(prog="conformance.child")
    p.add_argument("--module", required=True)
    p.add_argument("--loop", required=True, choices=sorted(loops.KINDS))
    p.add_argument("--events", required=True)
    p.add_argument("--skip")
    p.add_argument("--only")
    p.add_argument("--test-timeout", type=float, default=0)
    p.add_argument("--no-shims", action="store_true")
    args = p.parse_args(argv)

    log = sys.stderr
    faulthandler.enable(file=log)
    events = open(args.events, "a")

    def emit(**event):
        events.write(json.dumps(event) + "\n")
        events.flush()

    def fatal(stage):
        exc = sys.exc_info()[1]
        traceback.print_exc(file=log)
        emit(event="fatal", stage=stage,
             message=f"{type(exc).__name__}: {exc}"[:500])
        return 2

    emit(event="begin", python=platform.python_version(), loop=args.loop)
    spec = modules.BY_NAME[args.module]
    kind = loops.KINDS[args.loop]
    try:
        loops.install(kind)
        loops.self_check(kind)
    except Exception:
        return fatal("installing the loop")
    emit(event="loop", version=kind.version())
    if not args.no_shims:
        try:
            shims.install()
        except Exception:
            return fatal("installing the harness shims")

    try:
        module = suite.import_module(spec)
    except unittest.SkipTest as exc:
        emit(event="module-skipped", message=str(exc))
        return 0
    except ModuleNotFoundError as exc:
        if exc.name == spec.qualname:
            emit(event="absent")
            return 0
        return fatal("importing the module")
    except Exception:
        return fatal("importing the module")

    try:
        tests, excluded = suite.build(module, spec, kind)
    except Exception:
        return fatal("loading the tests")
    emit(event="meta", total=len(tests), excluded=excluded,
         classes=suite.describe_classes(module, spec),
         counting=loops.counting)

    skip, only = _read_ids(args.skip), _read_ids(args.only)
    if skip:
        tests = [t for t in tests if t.id() not in skip]
    if only is not None:
        tests = [t for t in tests if t.id() in only]

    result = RecordingResult(events, log, args.test_timeout)
    with warnings.catch_warnings():
        if not sys.warnoptions:
            warnings.simplefilter("default")
        unittest.TestSuite(tests).run(result)
    emit(event="done", shims=shims.used)
    log.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
