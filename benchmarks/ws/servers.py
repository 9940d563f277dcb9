"""The WebSocket servers compared, how each is started, and its process tree's CPU time
and memory.

Every Python server serves the same ASGI apps from `apps/` (echo, broadcast; the RSGI
servers their RSGI twins, echo_rsgi and broadcast_rsgi) on
127.0.0.1 with one worker, uvloop where it has a choice and access logs off; the
native tokio-tungstenite server has both apps built in (`/broadcast` relays, any other
path echoes). A server counts as started once its port accepts TCP connections; the
runner then probes it with a WebSocket echo check.
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from proctree import thread_sum, tree  # noqa: E402  (shared with the other suites)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
APPS = os.path.join(HERE, "apps")
NATIVE_DIR = os.path.join(HERE, "native", "target", "release")
START_TIMEOUT = 60.0


def _swordfish(target, port):
    return [sys.executable, "-m", "swordfish", "serve", target, "--host", "127.0.0.1",
            "--port", str(port), "--workers", "1", "--no-access-log", "--log-level", "warning",
            "--ws", "auto", "--ws-per-message-deflate"]


def _uvicorn(ws):
    def command(target, port):
        return [sys.executable, "-m", "uvicorn", target, "--host", "127.0.0.1", "--port", str(port),
                "--loop", "uvloop", "--http", "httptools", "--ws", ws, "--no-access-log",
                "--log-level", "warning"]
    return command


def _granian(target, port, interface="asgi"):
    return [sys.executable, "-m", "granian", "--interface", interface, "--host", "127.0.0.1",
            "--port", str(port), "--workers", "1", "--runtime-threads", "1", "--loop", "uvloop",
            "--ws", "--log-level", "warning", target]


# RSGI servers serve the RSGI twin of each app (apps/<app>_rsgi.py).

def _swordfish_rsgi(target, port):
    return _swordfish(target.replace(":", "_rsgi:"), port) + ["--interface", "rsgi"]


def _granian_rsgi(target, port):
    return _granian(target.replace(":", "_rsgi:"), port, "rsgi")


def _hypercorn(target, port):
    return [sys.executable, "-m", "hypercorn", target, "--bind", f"127.0.0.1:{port}",
            "--workers", "1", "--worker-class", "uvloop", "--log-level", "warning"]


def _native(target, port):
    return [os.path.join(NATIVE_DIR, "ws-native"), "--port", str(port)]


SERVERS = {
    "swordfish": _swordfish,
    "uvicorn-sansio": _uvicorn("websockets-sansio"),
    "uvicorn-wsproto": _uvicorn("wsproto"),
    "granian": _granian,
    "hypercorn": _hypercorn,
    "native": _native,
    "swordfish-rsgi": _swordfish_rsgi,
    "granian-rsgi": _granian_rsgi,
}
LABELS = {
    "swordfish": "swordfish",
    "uvicorn-sansio": "uvicorn websockets-sansio",
    "uvicorn-wsproto": "uvicorn wsproto",
    "granian": "granian ASGI",
    "hypercorn": "hypercorn (wsproto)",
    "native": "native tokio-tungstenite",
    "swordfish-rsgi": "swordfish RSGI",
    "granian-rsgi": "granian RSGI",
}
NATIVE = "native"


def child_env():
    env = dict(os.environ)
    paths = [APPS, os.path.join(REPO, "python")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONHASHSEED"] = "0"
    return env



class ServerFailed(Exception):
    """The server did not start, or died."""


class Server:
    """One running server process (group); a context manager that stops it."""

    def __init__(self, name, app, port, pin=()):
        self.name, self.port = name, port
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            list(pin) + SERVERS[name](f"{app}:app", port), cwd=APPS, env=child_env(),
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        try:
            self._wait_listening()
        except BaseException:
            self.stop()
            raise

    def _wait_listening(self):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerFailed(f"did not start (exit {self.proc.returncode}): {self.output()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise ServerFailed(f"did not listen within {START_TIMEOUT:.0f} s: {self.output()}")

    def output(self, lines=4):
        self.log.seek(0)
        text = self.log.read().decode(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:]) or "no output"

    def check_alive(self):
        if self.proc.poll() is not None:
            raise ServerFailed(f"died (exit {self.proc.returncode}): {self.output()}")

    def cpu_seconds(self):
        """CPU time of the process tree's live threads, from schedstat (nanoseconds: the
        10 ms ticks of /proc/PID/stat are too coarse for a fast server's short run)."""
        return thread_sum(self.proc.pid, "schedstat", lambda text: int(text.split()[0])) / 1e9

    def rss_bytes(self):
        """Resident memory of the process tree (granian and hypercorn run a worker
        process under a supervisor)."""
        total = 0
        for p in tree(self.proc.pid):
            try:
                with open(f"/proc/{p}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) * 1024
            except OSError:
                continue
        return total

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
