"""Parent side: run each (module, loop kind) in its own child process.

A child that hangs in a test is stopped by faulthandler after the per-test
timeout; one that crashes dies.  Either way the test it was in is recorded
(``timeout`` / ``crash``) and a new child resumes the module after it.  A
whole module also has a wall-clock budget, enforced here by killing the
child's process group.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

from . import loops

TOOLS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_ATTEMPTS = 8          # children per module: 1 + resumes after hangs/crashes


@dataclass
class Options:
    python: str = sys.executable
    log_dir: str = os.path.join(TOOLS_DIR, ".conformance-logs")
    test_timeout: float = 40.0
    module_timeout: float = 300.0
    jobs: int = 2
    shims: bool = True


@dataclass
class ModuleRun:
    module: str
    kind: str
    status: str = "ok"     # ok | absent | skipped | fatal | timeout | crash
    note: str = ""
    tests: dict = field(default_factory=dict)     # id -> record
    excluded: dict = field(default_factory=dict)  # id -> reason
    classes: list = field(default_factory=list)   # [name, kept]
    python: str = ""
    loop_version: str = ""
    counting: bool = True
    shims: dict = field(default_factory=dict)   # harness shim -> times used
    seconds: float = 0.0
    log: str = ""
    rerun: bool = False


def child_env():
    """The environment of a child: this one, with tools/ first on
    PYTHONPATH and relative entries made absolute (children run elsewhere)."""
    env = dict(os.environ)
    path = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([TOOLS_DIR] + path)
    env.pop("PYTHONSTARTUP", None)
    return env


def check_kind(opts, kind):
    """None if the kind's module imports in the child interpreter, else why."""
    module = loops.KINDS[kind].module
    proc = subprocess.run([opts.python, "-c", f"import {module}"],
                          capture_output=True, text=True, env=child_env())
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit status {proc.returncode}"


EXIT_GRACE = 20.0         # seconds a child may take to exit after its last test


def _log_since(path, offset, size=65536):
    """The end of the log, from ``offset`` on (one child's output)."""
    with open(path, "rb") as f:
        f.seek(max(offset, os.path.getsize(path) - size))
        return f.read().decode("utf-8", "replace")


def _death(rc, log_text):
    """Why a child ended without finishing: ('timeout'|'crash', message)."""
    if rc == 1 and "Timeout (" in log_text:
        return "timeout", "hung: stopped after the per-test timeout"
    fatal = [l for l in log_text.splitlines()
             if l.startswith("Fatal Python error")]
    if rc < 0:
        try:
            how = f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            how = f"killed by signal {-rc}"
    else:
        how = f"exited with status {rc}"
    return "crash", how + (f" ({fatal[-1]})" if fatal else "")


class _Events:
    """Reads, as it grows, the events file the children append to, and
    applies the events to a ModuleRun.  ``pending``: the test a child
    started and has not finished; ``seen``: event kinds of this child."""

    def __init__(self, path, run):
        self.path, self.run = path, run
        self.offset = 0
        self.pending = None
        self.seen = set()

    def next_child(self):
        self.pending, self.seen = None, set()

    def read(self):
        with open(self.path) as f:
            f.seek(self.offset)
            data = f.read()
        complete = data[:data.rfind("\n") + 1]   # a line may be half written
        self.offset += len(complete.encode())
        for line in complete.splitlines():
            try:
                self._apply(json.loads(line))
            except (ValueError, KeyError):
                continue

    def _apply(self, ev):
        run, kind = self.run, ev["event"]
        self.seen.add(kind)
        if kind == "begin":
            run.python = ev["python"]
        elif kind == "loop":
            run.loop_version = ev["version"]
        elif kind == "meta":
            run.excluded, run.classes = ev["excluded"], ev["classes"]
            run.counting = ev["counting"]
        elif kind == "start":
            self.pending = ev["id"]
        elif kind == "result":
            run.tests[ev["id"]] = {k: v for k, v in ev.items()
                                   if k not in ("event", "id")}
            if ev["id"] == self.pending:
                self.pending = None
        elif kind == "done":
            for name, n in ev.get("shims", {}).items():
                run.shims[name] = run.shims.get(name, 0) + n
        elif kind == "fatal":
            run.status, run.note = "fatal", f"{ev['stage']}: {ev['message']}"
        elif kind == "absent":
            run.status, run.note = "absent", "not in this Python"
        elif kind == "module-skipped":
            run.status, run.note = "skipped", ev["message"]


_live = set()        # children running now
_stopping = False    # set on Ctrl-C: start no new child


def _stop_all():
    global _stopping
    _stopping = True
    for proc in list(_live):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _wait(proc, events, deadline):
    """Wait for the child, reading its events; kill its process group at
    the deadline, or when it does not exit soon after its last test.
    Returns (exit status, why it was killed or None)."""
    done_at = None
    while True:
        try:
            return proc.wait(timeout=0.5), None
        except subprocess.TimeoutExpired:
            pass
        events.read()
        now = time.monotonic()
        if "done" in events.seen and done_at is None:
            done_at = now
        why = "budget" if now > deadline else \
            "exit" if done_at and now - done_at > EXIT_GRACE else None
        if why:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait(), why


def _command(opts, module, kind, tmp, only):
    cmd = [opts.python, "-m", "conformance.child", "--module", module,
           "--loop", kind, "--events", os.path.join(tmp, "events.jsonl"),
           "--skip", os.path.join(tmp, "skip.txt"),
           "--test-timeout", str(opts.test_timeout)]
    if not opts.shims:
        cmd.append("--no-shims")
    if only is not None:
        only_file = os.path.join(tmp, "only.txt")
        with open(only_file, "w") as f:
            f.write("\n".join(sorted(only)) + "\n")
        cmd += ["--only", only_file]
    return cmd


def run_module(opts, module, kind, only=None, tag=""):
    """Run one module on one loop kind; ``only``: just these test ids."""
    run = ModuleRun(module=module, kind=kind, rerun=only is not None)
    os.makedirs(opts.log_dir, exist_ok=True)
    run.log = os.path.join(opts.log_dir,
                           f"{_pyver(opts.python)}-{kind}-{module}{tag}.log")
    t0 = time.monotonic()
    notes = []
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp, \
            open(run.log, "w") as log:
        cmd = _command(opts, module, kind, tmp, only)
        events = _Events(os.path.join(tmp, "events.jsonl"), run)
        open(events.path, "w").close()
        workdir = os.path.join(tmp, "cwd")
        os.mkdir(workdir)
        for attempt in range(1, MAX_ATTEMPTS + 1):
            # a new child skips the tests already done
            with open(os.path.join(tmp, "skip.txt"), "w") as f:
                f.write("\n".join(run.tests) + "\n")
            log.write(f"##### child {attempt}: {' '.join(cmd)}\n")
            log.flush()
            log_offset = log.tell()
            events.next_child()
            if _stopping:
                break
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=workdir,
                                    env=child_env(), start_new_session=True)
            _live.add(proc)
            try:
                rc, killed = _wait(proc, events, t0 + opts.module_timeout)
            finally:
                _live.discard(proc)
            events.read()
            if "done" in events.seen:
                if killed:
                    notes.append("hung at exit after its last test (killed)")
                elif rc != 0:
                    notes.append(f"exit status {rc} after its last test")
                break
            if killed:
                if events.pending:
                    run.tests[events.pending] = {
                        "outcome": "timeout",
                        "message": "the module's time budget ran out in this test"}
                run.status = "timeout"
                notes.append(f"killed after {opts.module_timeout:.0f}s")
                break
            if run.status in ("fatal", "absent", "skipped"):
                break
            outcome, message = _death(rc, _log_since(run.log, log_offset))
            if events.pending is None:
                run.status = "crash"
                notes.append(f"{message} outside any test")
                break
            run.tests[events.pending] = {"outcome": outcome, "message": message}
            notes.append(f"{outcome} in {events.pending.rsplit('.', 1)[-1]}")
        else:
            notes.append(f"gave up after {MAX_ATTEMPTS} children")
    run.note = "; ".join(filter(None, [run.note] + notes))
    run.seconds = round(time.monotonic() - t0, 1)
    return run


_PYVER = {}


def _pyver(python):
    if python not in _PYVER:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=True).stdout.strip()
        _PYVER[python] = out
    return _PYVER[python]


def run_jobs(opts, jobs, progress=None):
    """Run (module, kind, only, tag) jobs, ``opts.jobs`` at a time:
    {(module, kind): ModuleRun}.  On Ctrl-C the children are killed."""
    results = {}
    with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        futures = {pool.submit(run_module, opts, *job): job[:2] for job in jobs}
        try:
            for fut in as_completed(futures):
                results[futures[fut]] = run = fut.result()
                if progress:
                    progress(run)
        except KeyboardInterrupt:
            _stop_all()
            raise
    return results


def run_all(opts, modules, kinds, progress=None):
    """Run every module on every kind."""
    return run_jobs(opts, [(m.name, k, None, "") for m in modules
                           for k in kinds], progress)


def rerun(opts, wanted, progress=None):
    """Run {(module, kind): test ids} again, each in a fresh child."""
    return run_jobs(opts, [(m, k, ids, "-rerun")
                           for (m, k), ids in wanted.items()], progress)
