"""How tests/test_ws_frameworks.py and tests/test_ws_lifecycle.py talk to a WebSocket server: the
`websockets` client library (its threaded client in the test's thread, its asyncio client for
many connections at once), with every wait bounded and no proxy taken from the environment, and
short ways to read a refusal or a close."""

import base64
import inspect
import os
import socket
import struct
import time

from websockets.asyncio.client import connect as async_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from .serving import WAIT

MAX_SIZE = 16 * 1024 * 1024  # the server's default ws_max_size, for messages both ways (the client's is 1 MiB)
# websockets 15+ follows *_PROXY variables unless told not to; older releases never do.
NO_PROXY = {"proxy": None} if "proxy" in inspect.signature(connect).parameters else {}


def ws_connect(port, path="/", scheme="ws", host="127.0.0.1", **options):
    """A connected `websockets.sync.client.ClientConnection` to host:port/path (not over TLS:
    see ws_connect_async)."""
    options = {"open_timeout": WAIT, "close_timeout": WAIT, "ping_interval": None, "max_size": MAX_SIZE,
               **NO_PROXY, **options}
    return connect(f"{scheme}://{host}:{port}{path}", **options)


def ws_connect_async(port, path="/", scheme="ws", **options):
    """The asyncio client's connect(): await it for a `websockets.asyncio.client.ClientConnection`.
    The one to use over TLS: the threaded client reads on a thread of its own while the caller's
    thread writes, on one SSL object, which OpenSSL does not allow; about one handshake in a few
    hundred then never gets its request out, whatever the server."""
    options = {"open_timeout": WAIT, "close_timeout": WAIT, "ping_interval": None, **NO_PROXY, **options}
    return async_connect(f"{scheme}://127.0.0.1:{port}{path}", **options)


def refused_status(port, path="/", **options):
    """The HTTP status of a handshake that the server refuses (fails if it accepts)."""
    try:
        ws = ws_connect(port, path, **options)
    except InvalidStatus as exc:
        return exc.response.status_code
    with ws:
        raise AssertionError(f"the server accepted the WebSocket handshake for {path}")


def closed_by_server(ws):
    """Reads until the server closes: the (code, reason) of the close frame it sent. Fails if a
    message comes first or nothing happens within WAIT."""
    try:
        message = ws.recv(timeout=WAIT)
    except ConnectionClosed as exc:
        assert exc.rcvd is not None, f"the connection ended without a close frame: {exc!r}"
        return exc.rcvd.code, exc.rcvd.reason
    raise AssertionError(f"a message instead of a close: {message!r:.200}")


def negotiated_extensions(ws):
    """The server's Sec-WebSocket-Extensions answer ("" if none)."""
    return ws.response.headers.get("Sec-WebSocket-Extensions", "")


class RawClient:
    """A WebSocket client on a bare socket (no extension offered) that can send a text message and
    read frames but never answers a close: the peer a graceful shutdown has to give up on."""

    def __init__(self, port, path="/raw"):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 "), head

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError
        self.buf += chunk

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def send_text(self, text):
        data, mask = text.encode(), os.urandom(4)
        assert len(data) < 126
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(bytes([0x81, 0x80 | len(data)]) + mask + masked)

    def read_frame(self):
        """(opcode, payload) of the next frame; raises EOFError at the end of the stream."""
        first, second = self._take(2)
        assert not second & 0x80, "a server must not mask its frames"
        n = second & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._take(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._take(8))[0]
        return first & 0x0F, self._take(n)

    def wait_end(self):
        """Reads (and drops) until the server ends the connection; then its monotonic time."""
        try:
            while True:
                self._fill()
        except (EOFError, ConnectionResetError):
            return time.monotonic()

    def close(self):
        self.sock.close()
