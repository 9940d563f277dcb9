"""The HTTP servers compared, how each is started, where it runs, and its process tree's
CPU time.

The ASGI servers serve the same app module from `apps/` (bench.py, catalogue.py), the
WSGI servers its WSGI twin (bench_wsgi.py); the native hyper server has the throughput
routes built in. All listen on 127.0.0.1 with access logs off. `ServerProcess` starts
any command line (the wsgi_report suite uses it with its own apps).
"""
import http.client
import importlib.machinery
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections import namedtuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from proctree import tree  # noqa: E402  (shared with the other suites)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
APPS = os.path.join(HERE, "apps")
NATIVE_DIR = os.path.join(HERE, "native", "target", "release")
READY_TIMEOUT = 60.0


def _swordfish(target, port, workers):
    return [sys.executable, "-m", "swordfish", "serve", target, "--host", "127.0.0.1",
            "--port", str(port), "--workers", str(workers), "--no-access-log",
            "--log-level", "warning"]


def _swordfish_metrics(target, port, workers):
    # A supervisor with the workers under it (--metrics runs one even for one worker).
    return _swordfish(target, port, workers) + ["--metrics", "--metrics-port", "0"]


def _uvicorn(loop, http):
    def command(target, port, workers):
        return [sys.executable, "-m", "uvicorn", target, "--host", "127.0.0.1", "--port", str(port),
                "--workers", str(workers), "--loop", loop, "--http", http, "--no-access-log",
                "--log-level", "warning"]
    return command


def _granian(loop):
    def command(target, port, workers):
        return [sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1",
                "--port", str(port), "--workers", str(workers), "--loop", loop, "--no-ws",
                "--log-level", "warning", target]
    return command


def _hypercorn(target, port, workers):
    return [sys.executable, "-m", "hypercorn", target, "--bind", f"127.0.0.1:{port}",
            "--workers", str(workers), "--worker-class", "uvloop", "--log-level", "warning"]


def _native(target, port, workers):
    return [os.path.join(NATIVE_DIR, "http-native"), "--port", str(port)]


# The WSGI servers. A None thread count leaves the server's default.

def swordfish_wsgi(threads=None):
    def command(target, port, workers):
        return (_swordfish(target, port, workers) + ["--interface", "wsgi"]
                + (["--threads", str(threads)] if threads else []))
    return command


def granian_wsgi(blocking_threads=None):
    """granian's WSGI blocking threads default to backpressure / 2 (512 with one worker)."""
    def command(target, port, workers):
        return ([sys.executable, "-m", "granian", "--interface", "wsgi", "--host", "127.0.0.1",
                 "--port", str(port), "--workers", str(workers), "--no-ws", "--log-level", "warning"]
                + (["--blocking-threads", str(blocking_threads)] if blocking_threads else []) + [target])
    return command


def gunicorn(worker_class, threads=None):
    """gunicorn logs no access lines unless given --access-logfile."""
    def command(target, port, workers):
        return ([sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
                 "--worker-class", worker_class, "--log-level", "warning"]
                + (["--threads", str(threads)] if threads else []) + [target])
    return command


def _waitress(target, port, workers):
    # One process only (and no `python -m waitress`: its console script). Its default
    # connection limit (100) would leave most of the hello workload's 400 connections
    # waiting in the backlog; 4 threads is its default.
    if workers != 1:
        raise RuntimeError("waitress runs a single process")
    return [os.path.join(os.path.dirname(sys.executable), "waitress-serve"), "--host=127.0.0.1",
            f"--port={port}", "--threads=4", "--connection-limit=1000", target]


def _swordfish_rsgi(target, port, workers):
    return _swordfish(target, port, workers) + ["--interface", "rsgi"]


def _granian_rsgi(target, port, workers):
    return [sys.executable, "-m", "granian", "--interface", "rsgi", "--host", "127.0.0.1", "--port", str(port),
            "--workers", str(workers), "--loop", "uvloop", "--no-ws", "--log-level", "warning", target]


# builder: command(target, port, workers); catalogue: serves the catalogue app too;
# wsgi: serves the WSGI twin of the app (apps/<app>_wsgi.py); rsgi: its RSGI twin
# (apps/<app>_rsgi.py, the throughput app only)
Entry = namedtuple("Entry", "builder catalogue wsgi rsgi", defaults=(False,))
SERVERS = {
    "swordfish": Entry(_swordfish, True, False),
    "swordfish-metrics": Entry(_swordfish_metrics, True, False),
    "granian-uvloop": Entry(_granian("uvloop"), True, False),
    "granian-rloop": Entry(_granian("rloop"), True, False),
    "uvicorn-httptools": Entry(_uvicorn("uvloop", "httptools"), True, False),
    "uvicorn-h11": Entry(_uvicorn("asyncio", "h11"), True, False),
    "hypercorn": Entry(_hypercorn, True, False),
    "native": Entry(_native, False, False),
    "swordfish-wsgi": Entry(swordfish_wsgi(), False, True),
    "granian-wsgi": Entry(granian_wsgi(), False, True),
    "gunicorn-gevent": Entry(gunicorn("gevent"), False, True),
    "waitress": Entry(_waitress, False, True),
    "swordfish-rsgi": Entry(_swordfish_rsgi, False, False, True),
    "granian-rsgi": Entry(_granian_rsgi, False, False, True),
}
LABELS = {
    "swordfish": "swordfish",
    "swordfish-metrics": "swordfish --metrics",
    "granian-uvloop": "granian ASGI + uvloop",
    "granian-rloop": "granian ASGI + rloop",
    "uvicorn-httptools": "uvicorn httptools + uvloop",
    "uvicorn-h11": "uvicorn h11",
    "hypercorn": "hypercorn + uvloop",
    "native": "native hyper (Rust, 1 thread)",
    "swordfish-wsgi": "swordfish WSGI (default threads)",
    "granian-wsgi": "granian WSGI (default blocking threads)",
    "gunicorn-gevent": "gunicorn gevent",
    "waitress": "waitress --threads 4",
    "swordfish-rsgi": "swordfish RSGI",
    "granian-rsgi": "granian RSGI + uvloop",
}
# Tuned variants named by a suffix, any N >= 1: swordfish-wsgi-tN (--threads N),
# gunicorn-gthread-tN (gthread worker, --threads N), granian-wsgi-btN (--blocking-threads N).
TUNED = {
    "swordfish-wsgi-t": (swordfish_wsgi, "swordfish WSGI --threads {}"),
    "gunicorn-gthread-t": (lambda n: gunicorn("gthread", n), "gunicorn gthread --threads {}"),
    "granian-wsgi-bt": (granian_wsgi, "granian WSGI --blocking-threads {}"),
}
# The servers of each suite, in table order (run.py --suite).
SUITES = {
    "asgi": ["swordfish", "granian-uvloop", "granian-rloop", "uvicorn-httptools", "uvicorn-h11",
             "hypercorn", "native"],
    "wsgi": ["swordfish-wsgi", "swordfish-wsgi-t1", "swordfish-wsgi-t2", "swordfish-wsgi-t4",
             "swordfish-wsgi-t8", "granian-wsgi-bt1", "granian-wsgi", "gunicorn-gthread-t1",
             "gunicorn-gthread-t4", "gunicorn-gthread-t8", "gunicorn-gthread-t32", "gunicorn-gevent",
             "waitress", "swordfish", "native"],
    # What --metrics costs: the same server counting every request, or not.
    "metrics": ["swordfish", "swordfish-metrics"],
}


def _tuned(name):
    """(command maker, label format, N) of a tuned variant's name, or None."""
    m = re.fullmatch(r"(.*-b?t)(\d+)", name)
    if m and m.group(1) in TUNED and int(m.group(2)) >= 1:
        return (*TUNED[m.group(1)], int(m.group(2)))
    return None


def entry(name):
    """The Entry of a server name, None if unknown."""
    if name in SERVERS:
        return SERVERS[name]
    tuned = _tuned(name)
    return Entry(tuned[0](tuned[2]), False, True) if tuned else None


def label(name):
    if name in LABELS:
        return LABELS[name]
    tuned = _tuned(name)
    return tuned[1].format(tuned[2]) if tuned else name


def built_here():
    """Whether ../python holds swordfish built for this interpreter (else the servers use
    the swordfish installed in the venv, e.g. from a wheel)."""
    package = os.path.join(REPO, "python", "swordfish")
    return any(os.path.exists(os.path.join(package, "_native" + s)) for s in importlib.machinery.EXTENSION_SUFFIXES)


def child_env(extra=None, apps=APPS):
    env = dict(os.environ)
    paths = [apps] + ([os.path.join(REPO, "python")] if built_here() else [])
    paths += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONHASHSEED"] = "0"
    env.update(extra or {})
    return env


def tree_cpu_seconds(pid):
    """User + system CPU time of a process and its live descendants."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


class ServerProcess:
    """One running server process (group) started from `command` in `apps`, with `apps`
    on its PYTHONPATH; ready once GET / answers 200 (over TLS with `tls`, the certificate
    not verified). A context manager that stops it."""

    def __init__(self, name, command, port, apps=APPS, env=None, tls=False):
        self.name, self.port, self.tls = name, port, tls
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            command, cwd=apps, env=child_env(env, apps), stdin=subprocess.DEVNULL,
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self):
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.output()}")
            try:
                if self.tls:
                    conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=2,
                                                       context=ssl._create_unverified_context())
                else:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
                conn.close()
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer within {READY_TIMEOUT:.0f} s: {self.output()}")

    def output(self, lines=5):
        self.log.seek(0)
        text = self.log.read().decode(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:])

    def cpu_seconds(self):
        return tree_cpu_seconds(self.proc.pid)

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class Server(ServerProcess):
    """One of SERVERS (or a tuned variant) serving apps/<app>.py, or its WSGI twin
    apps/<app>_wsgi.py for a WSGI server, its RSGI twin apps/<app>_rsgi.py for an RSGI one."""

    def __init__(self, name, app, port, workers=1, pin=(), env=None):
        spec = entry(name)
        target = f"{app}_wsgi:app" if spec.wsgi else f"{app}_rsgi:app" if spec.rsgi else f"{app}:app"
        super().__init__(name, list(pin) + spec.builder(target, port, workers), port, APPS, env)
