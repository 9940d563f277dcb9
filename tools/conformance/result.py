"""A unittest result that records one outcome per test id.

Each event is written at once as a JSON line to the events file, so the
parent still knows what happened when the child hangs or crashes:
``start`` before a test runs, ``result`` when it is over.  Full tracebacks
go to the log stream (the child's stderr, captured by the parent).
"""

import faulthandler
import json
import os
import time
import traceback
import unittest

from . import loops

# Outcomes, worst first: a test's outcome is the worst of its subtests'.
OUTCOMES = ("timeout", "crash", "error", "failed", "skipped", "passed")
RANK = {name: i for i, name in enumerate(OUTCOMES)}


def _short(err):
    """'ExcType: message' on one line, at most 300 characters."""
    etype, value, _ = err
    text = str(value).strip().splitlines()
    msg = f"{etype.__name__}: {text[0] if text else ''}".rstrip(": ")
    if len(text) > 1:
        msg += " ..."
    return msg[:300]


def _where(err):
    """The innermost traceback frame inside a test module, and the innermost
    frame overall, as 'file:line (function)'."""
    frames = traceback.extract_tb(err[2])
    if not frames:
        return "", ""
    fmt = lambda f: f"{os.path.basename(f.filename)}:{f.lineno} ({f.name})"
    in_tests = [f for f in frames if "test_asyncio" in f.filename]
    return (fmt(in_tests[-1]) if in_tests else ""), fmt(frames[-1])


def _chain_names(value):
    """Names of the exception types in value's cause/context chain."""
    names, seen = [], set()
    while value is not None and id(value) not in seen:
        seen.add(id(value))
        names.append(type(value).__name__)
        value = value.__cause__ or value.__context__
    return names


class RecordingResult(unittest.TestResult):
    def __init__(self, events, log, test_timeout):
        super().__init__()
        self.events = events
        self.log = log
        self.test_timeout = test_timeout
        self.current = {}
        # loops made since the previous test ended count for the next one:
        # IsolatedAsyncioTestCase (3.10) makes its loop before startTest
        self._loops0 = loops.loops_created()

    def _emit(self, **event):
        self.events.write(json.dumps(event) + "\n")
        self.events.flush()

    def _note(self, test, outcome, err=None, detail=""):
        test = getattr(test, "test_case", test)  # a subtest: its test
        rec = self.current.setdefault(test.id(), {"outcome": "passed"})
        if RANK[outcome] < RANK[rec["outcome"]]:
            rec["outcome"] = outcome
            if err is not None:
                rec["message"] = _short(err)
                rec["where"], rec["raised_at"] = _where(err)
                rec["chain"] = _chain_names(err[1])
            elif detail:
                rec["message"] = detail
        if err is not None:
            self.log.write(f"--- {outcome.upper()}: {test.id()}\n")
            self.log.write("".join(traceback.format_exception(*err)))
            self.log.flush()

    # -- unittest hooks ------------------------------------------------
    def startTest(self, test):
        super().startTest(test)
        self.log.write(f"=== {test.id()}\n")
        self.log.flush()
        self._emit(event="start", id=test.id())
        self.current[test.id()] = {"outcome": "passed"}
        self._t0 = time.monotonic()
        if self.test_timeout:
            faulthandler.dump_traceback_later(self.test_timeout, exit=True,
                                              file=self.log)

    def stopTest(self, test):
        if self.test_timeout:
            faulthandler.cancel_dump_traceback_later()
        super().stopTest(test)
        rec = self.current.pop(test.id(), {"outcome": "passed"})
        rec["duration"] = round(time.monotonic() - self._t0, 3)
        if loops.counting:
            rec["loops"] = loops.loops_created() - self._loops0
            self._loops0 = loops.loops_created()
        self._emit(event="result", id=test.id(), **rec)

    def addError(self, test, err):
        super().addError(test, err)
        if isinstance(test, unittest.TestCase):
            self._note(test, "error", err)
        else:  # a class or module fixture failed: _ErrorHolder
            self._emit(event="result", id=test.id(), outcome="error",
                       message=_short(err), where=_where(err)[0],
                       raised_at=_where(err)[1], chain=_chain_names(err[1]))
            self.log.write(f"--- ERROR: {test.id()}\n")
            self.log.write("".join(traceback.format_exception(*err)))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._note(test, "failed", err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        if isinstance(test, unittest.TestCase):
            self._note(test, "skipped", detail=reason)
        else:
            self._emit(event="result", id=test.id(), outcome="skipped",
                       message=reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._note(test, "passed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._note(test, "failed", detail="unexpected success")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self.log.write(f"  (subtest {subtest._subDescription()})\n")
            self._note(test, "failed" if failed else "error", err)
