"""The HTTP servers compared, how each is started, and its process tree's CPU time.

Every server serves the same ASGI app module from `apps/` (the native hyper server has
the throughput routes built in) on 127.0.0.1, with access logs off.
"""
import http.client
import os
import signal
import subprocess
import sys
import tempfile
import time

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


# name -> (command builder, serves the catalogue app too)
SERVERS = {
    "swordfish": (_swordfish, True),
    "granian-uvloop": (_granian("uvloop"), True),
    "granian-rloop": (_granian("rloop"), True),
    "uvicorn-httptools": (_uvicorn("uvloop", "httptools"), True),
    "uvicorn-h11": (_uvicorn("asyncio", "h11"), True),
    "hypercorn": (_hypercorn, True),
    "native": (_native, False),
}
LABELS = {
    "swordfish": "swordfish",
    "granian-uvloop": "granian ASGI + uvloop",
    "granian-rloop": "granian ASGI + rloop",
    "uvicorn-httptools": "uvicorn httptools + uvloop",
    "uvicorn-h11": "uvicorn h11",
    "hypercorn": "hypercorn + uvloop",
    "native": "native hyper (Rust, 1 thread)",
}


def child_env(extra=None):
    env = dict(os.environ)
    paths = [APPS, os.path.join(REPO, "python")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
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


class Server:
    """One running server process (group); a context manager that stops it."""

    def __init__(self, name, app, port, workers=1, pin=(), env=None):
        builder, _ = SERVERS[name]
        target = f"{app}:app"
        self.name, self.port = name, port
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            list(pin) + builder(target, port, workers), cwd=APPS, env=child_env(env),
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
