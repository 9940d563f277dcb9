"""How tests/test_http_frameworks.py serves the framework apps and talks to them: a
`swordfish.server.Server` on a loop of its own in a thread (the client stays in the test's
thread), `python -m swordfish serve` in a subprocess, a raw-socket response reader, and the
server's error log collected from any thread."""

import asyncio
import logging
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading

import httpx

from swordfish.server import Config, Server

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WAIT = 10.0  # seconds for anything a test waits on
MiB = 1024 * 1024


class ThreadServer:
    """`Server(Config(app, ...))` on a new loop of kind `loop` in a thread of its own."""

    def __init__(self, app, loop="swordfish", **options):
        # A connection left stuck (by a failing test) holds the shutdown up 5 s at most.
        options = {"port": 0, "access_log": False, "lifespan": "on", "timeout_graceful_shutdown": 5, **options}
        self.server = Server(Config(app, loop=loop, **options))
        self.server.on_started = self._started
        self.listening = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._run, name="server-loop", daemon=True)

    def _started(self):
        self.port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.listening.set()

    def _run(self):
        loop = self.server.config.new_event_loop()
        try:
            loop.run_until_complete(self.server.serve())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            self.error = exc
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                self.listening.set()  # a server that failed to start wakes the test too

    def start(self):
        self.thread.start()
        assert self.listening.wait(WAIT), "the server did not start"
        if self.error is not None:
            raise self.error
        return self

    def stop(self):
        """Graceful shutdown (lifespan shutdown included); re-raises what serve() raised."""
        if self.thread.is_alive():
            self.server.shutdown()
            self.thread.join(WAIT)
            assert not self.thread.is_alive(), "the server did not stop"
        if self.error is not None:
            raise self.error

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def client_for(server):
    return httpx.Client(base_url=server.url, trust_env=False, timeout=WAIT)


def run_client(coro):
    """Run `coro` (an httpx.AsyncClient session) on a stdlib loop in this thread."""
    return asyncio.run(asyncio.wait_for(coro, WAIT * 2))


class Served:
    """An app on a ThreadServer, with an httpx client and the app's probe."""

    def __init__(self, app, probe, loop, **options):
        self.app, self.probe = app, probe
        self.server = ThreadServer(app, loop=loop, **options)

    def __enter__(self):
        self.server.start()
        self.client = client_for(self.server)
        return self

    def __exit__(self, *exc):
        self.client.close()
        self.server.stop()


class ErrorLog(logging.Handler):
    """The records of the server's error logger, from any thread, with a wait for them."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records = []
        self.cond = threading.Condition()

    def emit(self, record):
        with self.cond:
            self.records.append(record)
            self.cond.notify_all()

    def wait(self, n=1, timeout=WAIT):
        """The records once there are n of them, or all there are after timeout."""
        with self.cond:
            self.cond.wait_for(lambda: len(self.records) >= n, timeout)
            return list(self.records)


def payload(n, seed=1):
    return random.Random(seed).randbytes(n)


def pieces_of(data, size=64 * 1024):
    """A generator of data in pieces: httpx sends it chunked (no content-length)."""
    return (data[i:i + size] for i in range(0, len(data), size))


def raw_connection(server, timeout=WAIT):
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout)


def read_raw_response(sock):
    """One response with a content-length body from a raw socket: (status, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = dict(line.lower().split(": ", 1) for line in lines[1:])
    length = int(fields["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed in the body"
        body += chunk
    assert len(body) == length, "more than one response"
    return int(lines[0].split()[1]), body


class CliServer:
    """`python -m swordfish serve ARGS --app-dir tests --port 0`, its output collected."""

    def __init__(self, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWORDFISH_")}
        cmd = [sys.executable, "-m", "swordfish", "serve", *args, "--app-dir", TESTS, "--port", "0"]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.listening = threading.Event()
        self.port = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            m = re.search(r"serving on http://127\.0\.0\.1:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self.listening.set()
        self.listening.set()  # EOF: the server exited

    def output(self):
        return "".join(self.lines)

    def client(self):
        assert self.listening.wait(30), "the server did not start:\n" + self.output()
        assert self.port is not None, "the server exited:\n" + self.output()
        return httpx.Client(base_url=f"http://127.0.0.1:{self.port}", trust_env=False, timeout=WAIT)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(30)
        self.reader.join(WAIT)
        return code

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
