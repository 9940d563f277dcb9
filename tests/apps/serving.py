"""How tests/test_http_frameworks.py serves the framework apps and talks to them: a
`swordfish.server.Server` on a loop of its own in a thread (the client stays in the test's
thread), `python -m swordfish serve` in a subprocess, a raw-socket response reader, and the
server's error log collected from any thread.

Also the subprocess server of tests/test_http_workers.py and tests/test_wsgi_lifecycle.py
(`ServeProcess`: its log collected line by line, waits on its lines and its exit) and their
blocking-socket helpers (a connection by port or unix socket, a request left in flight,
everything until the close, a whole response split into status and body)."""

import asyncio
import contextlib
import logging
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx

from swordfish.server import Config, Server

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WAIT = 10.0  # seconds for anything a test waits on
DEADLINE = 30.0  # seconds for anything to happen in a ServeProcess (a loaded 2-core machine)
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


def _over_http2(response):
    assert response.http_version == "HTTP/2", response.http_version


def client_for(server, http2=False):
    """An httpx client of `server`; `http2`: one that speaks HTTP/2 only (h2c with prior
    knowledge) and checks that every response came so."""
    if http2:
        return httpx.Client(base_url=server.url, http1=False, http2=True, trust_env=False, timeout=WAIT,
                            event_hooks={"response": [_over_http2]})
    return httpx.Client(base_url=server.url, trust_env=False, timeout=WAIT)


def run_client(coro):
    """Run `coro` (an httpx.AsyncClient session) on a stdlib loop in this thread."""
    return asyncio.run(asyncio.wait_for(coro, WAIT * 2))


class Served:
    """An app on a ThreadServer, with an httpx client (of HTTP/2 only: `http2`) and the
    app's probe."""

    def __init__(self, app, probe, loop, http2=False, **options):
        self.app, self.probe, self.http2 = app, probe, http2
        self.server = ThreadServer(app, loop=loop, **options)

    def __enter__(self):
        self.server.start()
        self.client = client_for(self.server, self.http2)
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


class Subprocess:
    """A context for what runs `self.proc`: on leaving, the process is killed if it still runs."""

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class CliServer(Subprocess):
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


class ServeProcess(Subprocess):
    """`python -m swordfish serve [APP] --app-dir tests ARGS` (or the command cmd) in a
    subprocess, without this process's SWORDFISH_* variables (env is added), its log
    collected line by line."""

    def __init__(self, *args, app=None, env=None, pass_fds=(), cmd=None):
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("SWORDFISH_")}
        full_env.update(env or {})
        if cmd is None:
            cmd = [sys.executable, "-m", "swordfish", "serve", *([app] if app else []), "--app-dir", TESTS, *args]
        self.proc = subprocess.Popen(cmd, env=full_env, pass_fds=pass_fds,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)  # EOF
            self.cond.notify_all()

    def log(self):
        with self.cond:
            return "\n".join(x for x in self.lines if x is not None)

    def wait_line(self, pattern, start=0, count=1, timeout=DEADLINE):
        """The count-th match of pattern in the log from line `start`: (match, line index)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = 0
                for i, line in enumerate(self.lines[start:], start):
                    if line is None:
                        raise AssertionError(f"server exited before {pattern!r}:\n{self.log()}")
                    m = rx.search(line)
                    if m:
                        found += 1
                        if found == count:
                            return m, i
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {pattern!r} within {timeout}s:\n{self.log()}")
                self.cond.wait(left)

    def port(self):
        m, _ = self.wait_line(r"(?:serving on https?://|workers on )[\d.]+:(\d+)")
        return int(m.group(1))

    def stop(self, sig=signal.SIGTERM, timeout=DEADLINE):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout=DEADLINE):
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"server did not exit within {timeout}s:\n{self.log()}")
        self.reader.join(5)
        return code


@contextlib.contextmanager
def listening_socket():
    """A TCP socket listening on a free port of 127.0.0.1, for a server to inherit with
    `--fd`: (its descriptor, the port); closed on exit."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock.fileno(), sock.getsockname()[1]
    finally:
        sock.close()


def socket_to(addr, timeout=10, ctx=None):
    """A blocking connection to 127.0.0.1:addr, or to the unix socket addr (a str); over
    TLS with the ssl context ctx."""
    if isinstance(addr, str):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(addr)
        return s
    s = socket.create_connection(("127.0.0.1", addr), timeout=timeout)
    return ctx.wrap_socket(s, server_hostname="localhost") if ctx else s


def split_response(data):
    """(status, body) of one whole response (chunked or not)."""
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), data
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in head.lower():
        out = b""
        while body:
            size, _, rest = body.partition(b"\r\n")
            n = int(size, 16)
            if n == 0:
                break
            out += rest[:n]
            body = rest[n + 2:]
        body = out
    return status, body


def read_until(s, marker, data=b""):
    """What s gives, added to data, until marker is in it (a close first fails)."""
    while marker not in data:
        chunk = s.recv(65536)
        assert chunk, data
        data += chunk
    return data


def start_in_flight(addr, path, timeout=DEADLINE):
    """Sends GET path and reads until the app has started answering ("begin\\n"): (the
    socket, what was read)."""
    s = socket_to(addr, timeout)
    s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    return s, read_until(s, b"begin\n")


def read_rest(s, data=b""):
    """data and everything after it until the server closes (EOF or reset); closes s."""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    finally:
        s.close()
    return data


def exchange(addr, raw, ctx=None):
    """(status, body) of the response to the whole request raw, which should close the
    connection (Connection: close, or refused input); over TLS with the context ctx."""
    s = socket_to(addr, ctx=ctx)
    s.sendall(raw)
    return split_response(read_rest(s))


def get(addr, path, ctx=None):
    """(status, body) of GET path on a connection of its own."""
    return exchange(addr, b"GET " + path.encode() + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", ctx)


def pid_of(addr):
    """The pid of the process that answered GET /pid (the test apps' route)."""
    status, body = get(addr, "/pid")
    assert status == 200, (status, body)
    return int(body)


def wait_listening(port, proc, name):
    """Return once 127.0.0.1:port accepts a connection; fails if `proc` (a Popen whose
    stderr is piped) exits first or nothing listens within DEADLINE."""
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert proc.poll() is None, f"{name} exited: {proc.stderr.read() if proc.stderr else ''}"
            assert time.monotonic() < deadline, f"{name} did not start"
            time.sleep(0.05)
