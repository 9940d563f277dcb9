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
    verbose: bool = False
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


def child_env():
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = TOOLS_DIR + (os.pathsep + path if path else "")
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


def _log_tail(path, size=65536):
    with open(path, "rb") as f:
        f.seek(max(0, os.path.getsize(path) - size))
        return f.read().decode("utf-8", "replace")


def _death(rc, log_path):
    """Why a child ended without finishing: ('timeout'|'crash', message)."""
    tail = _log_tail(log_path)
    if rc == 1 and "Timeout (" in tail:
        return "timeout", "hung: stopped after the per-test timeout"
    fatal = [l for l in tail.splitlines() if l.startswith("Fatal Python error")]
    if rc < 0:
        try:
            how = f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            how = f"killed by signal {-rc}"
    else:
        how = f"exited with status {rc}"
    return "crash", how + (f" ({fatal[-1]})" if fatal else "")


class _Attempt:
    """Reads the events one child appended to the events file."""

    def __init__(self, path, offset):
        self.path, self.offset = path, offset
        self.pending = None
        self.seen = set()

    def read(self, run):
        with open(self.path) as f:
            f.seek(self.offset)
            lines = f.read().splitlines()
        for line in lines:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            self.seen.add(ev["event"])
            kind = ev["event"]
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
                rec = {k: v for k, v in ev.items() if k not in ("event", "id")}
                run.tests[ev["id"]] = rec
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


def run_module(opts, module, kind, only=None, tag=""):
    """Run one module on one loop kind; ``only``: just these test ids."""
    run = ModuleRun(module=module, kind=kind)
    os.makedirs(opts.log_dir, exist_ok=True)
    pyver = _pyver(opts.python)
    run.log = os.path.join(opts.log_dir, f"{pyver}-{kind}-{module}{tag}.log")
    t0 = time.monotonic()
    notes = []
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp, \
            open(run.log, "w") as log:
        events = os.path.join(tmp, "events.jsonl")
        open(events, "w").close()
        skip_file = os.path.join(tmp, "skip.txt")
        cmd = [opts.python, "-m", "conformance.child", "--module", module,
               "--loop", kind, "--events", events, "--skip", skip_file,
               "--test-timeout", str(opts.test_timeout)]
        if not opts.shims:
            cmd.append("--no-shims")
        if only is not None:
            only_file = os.path.join(tmp, "only.txt")
            with open(only_file, "w") as f:
                f.write("\n".join(sorted(only)) + "\n")
            cmd += ["--only", only_file]
        workdir = os.path.join(tmp, "cwd")
        os.mkdir(workdir)
        for attempt in range(1, MAX_ATTEMPTS + 1):
            with open(skip_file, "w") as f:
                f.write("\n".join(run.tests) + "\n")
            log.write(f"##### attempt {attempt}: {' '.join(cmd)}\n")
            log.flush()
            reader = _Attempt(events, os.path.getsize(events))
            budget = opts.module_timeout - (time.monotonic() - t0)
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=workdir,
                                    env=child_env(), start_new_session=True)
            try:
                rc = proc.wait(timeout=max(budget, 1))
                killed = False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc, killed = proc.wait(), True
            log.flush()
            reader.read(run)
            if "done" in reader.seen:
                if rc != 0:
                    notes.append(f"exit status {rc} after the last test")
                break
            if killed:
                if reader.pending:
                    run.tests[reader.pending] = {
                        "outcome": "timeout",
                        "message": "module time budget ran out in this test"}
                run.status = "timeout"
                notes.append(f"killed after {opts.module_timeout:.0f}s")
                break
            if run.status in ("fatal", "absent", "skipped"):
                break
            if reader.pending is None:
                run.status = "crash"
                notes.append(_death(rc, run.log)[1] + " outside any test")
                break
            outcome, message = _death(rc, run.log)
            run.tests[reader.pending] = {"outcome": outcome,
                                         "message": message}
            notes.append(f"{outcome} in {reader.pending.rsplit('.', 1)[-1]}")
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


def run_all(opts, modules, kinds, progress=None):
    """Run every (module, kind); returns {(module, kind): ModuleRun}."""
    jobs = [(m.name, k) for m in modules for k in kinds]
    results = {}
    with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        futures = {pool.submit(run_module, opts, m, k): (m, k)
                   for m, k in jobs}
        for fut in as_completed(futures):
            run = fut.result()
            results[futures[fut]] = run
            if progress:
                progress(run)
    return results


def rerun(opts, runs, progress=None):
    """Run the given test ids again, each (module, kind) in a fresh child:
    {(module, kind): ids} -> {(module, kind): ModuleRun}."""
    results = {}
    with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        futures = {pool.submit(run_module, opts, m, k, ids, "-rerun"): (m, k)
                   for (m, k), ids in runs.items()}
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            if progress:
                progress(results[futures[fut]])
    return results
