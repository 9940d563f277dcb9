"""Helpers for the WebSocket server tests: a raw RFC 6455 client over asyncio streams that
sends any frame, well-formed or not, and reads the server's frames strictly; the opening
handshake request; `Handoff`, an app that hands each connection's receive and send to the
test; and the `websockets` client set up for the tests (no proxy, no client pings)."""

import asyncio
import base64
import contextlib
import hashlib
import os
import socket
import struct
import zlib
from dataclasses import dataclass

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as _ws_connect
from websockets.frames import Frame as LibFrame
from websockets.frames import Opcode

from httputil import closed, port_of, read_response, serving

WAIT = 5.0  # seconds for anything a test waits on
MiB = 1024 * 1024
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3

CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
CONTROL = (CLOSE, PING, PONG)
RSV1, RSV2, RSV3 = 4, 2, 1  # the `rsv` argument of frame(): bits 6, 5, 4 of the first byte
DEFLATE_TAIL = b"\x00\x00\xff\xff"  # RFC 7692 §7.2.1: stripped from each compressed message


# --- the opening handshake ---------------------------------------------------------------

def new_key():
    return base64.b64encode(os.urandom(16)).decode()


def accept_for(key):
    """The Sec-WebSocket-Accept a server must answer `key` with."""
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def handshake_request(path="/", *, key=None, version="13", host="example.com", connection="Upgrade",
                      upgrade="websocket", protocols=(), extensions=None, headers=(), method="GET"):
    """The raw bytes of an opening handshake; a header given as None is left out."""
    fields = [
        ("Host", host), ("Upgrade", upgrade), ("Connection", connection),
        ("Sec-WebSocket-Key", new_key() if key is None else key or None),
        ("Sec-WebSocket-Version", version),
        *(("Sec-WebSocket-Protocol", p) for p in protocols),
        ("Sec-WebSocket-Extensions", extensions),
        *headers,
    ]
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{n}: {v}\r\n" for n, v in fields if v is not None)
    return (head + "\r\n").encode("latin-1")


def header_tokens(value):
    return [t.strip().lower() for t in (value or "").split(",")]


def check_upgrade(resp, key):
    """Assert `resp` is a correct 101 for a request with `key` (RFC 6455 §4.2.2)."""
    assert resp.status == 101, resp
    assert (resp.header("upgrade") or "").lower() == "websocket", resp
    assert "upgrade" in header_tokens(resp.header("connection")), resp
    assert resp.header("sec-websocket-accept") == accept_for(key), resp


def deflate_params(resp):
    """The permessage-deflate parameters the 101 agreed on, or None if it agreed on none."""
    offers = [t for t in header_tokens(resp.header("sec-websocket-extensions")) if t]
    if not offers:
        return None
    name, *params = [p.strip() for p in offers[0].split(";")]
    assert len(offers) == 1 and name == "permessage-deflate", resp
    return dict((p.split("=", 1) + [None])[:2] for p in params)


# --- frames ------------------------------------------------------------------------------

def apply_mask(data, key):
    """data XOR the repeated 4-byte key (one big-int XOR: fast for megabytes)."""
    if not data:
        return b""
    n = len(data)
    stream = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")).to_bytes(n, "big")


def frame(opcode, payload=b"", *, fin=True, rsv=0, mask=True, length=None):
    """One frame's bytes. mask: True (a random key), False (unmasked) or the 4-byte key;
    length: the payload length to declare, if not the payload's own (a lie, or a header
    sent without its payload)."""
    if isinstance(payload, str):
        payload = payload.encode()
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    bit = 0x80 if mask is not False else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 1 << 16:
        head += bytes([bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", n)
    if mask is False:
        return head + payload
    key = os.urandom(4) if mask is True else mask
    return head + key + apply_mask(payload, key)


def close_payload(code=None, reason=""):
    if code is None:
        return b""
    return struct.pack("!H", code) + (reason.encode() if isinstance(reason, str) else reason)


def compress(data, bits=15):
    """One message's permessage-deflate payload: raw DEFLATE, flushed, the tail stripped."""
    c = zlib.compressobj(wbits=-bits)
    out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(DEFLATE_TAIL)
    return out[:-4]


@dataclass
class Frame:
    fin: bool
    rsv: int
    opcode: int
    payload: bytes

    @property
    def code(self):
        """The close frame's status code (1005 for an empty close, RFC 6455 §7.1.5)."""
        return struct.unpack("!H", self.payload[:2])[0] if self.payload else 1005

    @property
    def reason(self):
        return self.payload[2:].decode()


@dataclass
class Message:
    opcode: int
    data: object  # str for a text message, bytes for a binary one


class RawClient:
    """A WebSocket client with no opinions: it writes what the test asks for and reads the
    server's frames strictly (unmasked, minimal lengths, valid control frames, valid UTF-8,
    nothing after a close). Open one with `await RawClient.open(server)`."""

    def __init__(self, sock, reader, writer):
        self.sock, self.reader, self.writer = sock, reader, writer
        self.response = None
        self.deflate = None  # the agreed permessage-deflate parameters
        self._inflater = None
        self._partial = None  # (opcode, compressed, [payloads]) of a message being received
        self.close_received = None

    @classmethod
    async def connect(cls, server, *, sndbuf=None, rcvbuf=None):
        """A TCP connection to `server` (no handshake yet); small socket buffers if asked."""
        sock = socket.socket()
        sock.setblocking(False)
        if sndbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(loop.sock_connect(sock, ("127.0.0.1", port_of(server))), WAIT)
        reader, writer = await asyncio.open_connection(sock=sock)
        return cls(sock, reader, writer)

    @classmethod
    async def open(cls, server, path="/", *, deflate=False, sndbuf=None, rcvbuf=None, **request):
        """A connection whose handshake succeeded (101 checked). deflate: offer
        permessage-deflate (as browsers and the `websockets` client do)."""
        client = await cls.connect(server, sndbuf=sndbuf, rcvbuf=rcvbuf)
        key = request.pop("key", None) or new_key()
        if deflate:
            request.setdefault("extensions", "permessage-deflate; client_max_window_bits")
        client.write(handshake_request(path, key=key, **request))
        client.response = resp = await asyncio.wait_for(read_response(client.reader), WAIT)
        check_upgrade(resp, key)
        client.deflate = deflate_params(resp)
        assert client.deflate is None or deflate, f"an extension nobody offered: {resp}"
        if client.deflate is not None:
            client._inflater = zlib.decompressobj(wbits=-15)
        return client

    # sending

    def write(self, raw):
        self.writer.write(raw)

    async def drain(self, timeout=WAIT):
        await asyncio.wait_for(self.writer.drain(), timeout)

    def send_frame(self, opcode, payload=b"", **options):
        self.write(frame(opcode, payload, **options))

    def send_text(self, text, **options):
        self.send_frame(TEXT, text, **options)

    def send_binary(self, data, **options):
        self.send_frame(BINARY, data, **options)

    def send_close(self, code=None, reason="", **options):
        self.send_frame(CLOSE, close_payload(code, reason), **options)

    def ping(self, payload=b""):
        self.send_frame(PING, payload)

    def pong(self, payload=b""):
        self.send_frame(PONG, payload)

    def client_bits(self):
        """The window the client's compressor may use (what the server agreed to)."""
        value = (self.deflate or {}).get("client_max_window_bits")
        return int(value) if value else 15

    def send_compressed(self, opcode, data, pieces=1):
        """A message through permessage-deflate, its payload split over `pieces` frames
        (RSV1 on the first only, RFC 7692 §6.1); a fresh compressor for each message is
        right whatever context takeover was agreed."""
        if isinstance(data, str):
            data = data.encode()
        payload = compress(data, self.client_bits())
        step = -(-len(payload) // pieces) or 1
        parts = [payload[i:i + step] for i in range(0, len(payload), step)] or [b""]
        for i, part in enumerate(parts):
            self.send_frame(opcode if i == 0 else CONT, part, fin=i == len(parts) - 1, rsv=RSV1 if i == 0 else 0)

    def close_tcp(self):
        """Leave without a close frame: a FIN, as a client that crashed cleanly."""
        self.writer.close()

    def reset(self):
        """Leave abortively: SO_LINGER 0, so the server sees a reset (ECONNRESET)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    # receiving

    async def _read_frame(self):
        """The server's next frame, checked against RFC 6455 §5.2 for a server."""
        b0, b1 = await self.reader.readexactly(2)
        fin, rsv, opcode = bool(b0 & 0x80), (b0 >> 4) & 7, b0 & 0x0F
        # A pong may still answer a ping the server got after sending its close (§5.5.2).
        assert self.close_received is None or opcode == PONG, f"opcode {opcode} after the server's close"
        assert not b1 & 0x80, "a server must not mask its frames"
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", await self.reader.readexactly(2))
            assert n >= 126, f"length {n} not in its minimal encoding"
        elif n == 127:
            (n,) = struct.unpack("!Q", await self.reader.readexactly(8))
            assert 1 << 16 <= n < 1 << 63, f"length {n} not in its minimal encoding"
        assert opcode in (CONT, TEXT, BINARY, *CONTROL), f"the server sent opcode {opcode:#x}"
        if opcode in CONTROL:
            assert fin and n <= 125 and not rsv, f"an invalid control frame: fin={fin} length={n} rsv={rsv}"
        else:
            allowed = RSV1 if self.deflate is not None and opcode != CONT else 0
            assert not rsv & ~allowed, f"rsv bits {rsv:03b} on opcode {opcode} (deflate: {self.deflate})"
        got = Frame(fin, rsv, opcode, await self.reader.readexactly(n))
        if opcode == CLOSE:
            assert len(got.payload) != 1, "a close payload of one byte"
            self.close_received = got
            got.reason  # noqa: B018 - a reason that is not UTF-8 fails here
        return got

    async def read_message(self, timeout=WAIT):
        """The next data message (assembled, inflated, text decoded), or the next control
        frame as it comes (control frames may come between a message's fragments)."""
        return await asyncio.wait_for(self._read_message(), timeout)

    async def _read_message(self):
        while True:
            f = await self._read_frame()
            if f.opcode in CONTROL:
                return f
            if f.opcode == CONT:
                assert self._partial is not None, "a continuation frame with no message started"
            else:
                assert self._partial is None, "a new message inside a fragmented one"
                self._partial = (f.opcode, bool(f.rsv & RSV1), [])
            opcode, compressed, parts = self._partial
            parts.append(f.payload)
            if not f.fin:
                continue
            self._partial = None
            data = b"".join(parts)
            if compressed:
                data = self._inflater.decompress(data + DEFLATE_TAIL)
                if "server_no_context_takeover" in self.deflate:
                    self._inflater = zlib.decompressobj(wbits=-15)
            return Message(opcode, data.decode() if opcode == TEXT else data)

    async def recv(self, timeout=WAIT):
        """The next data message's text or bytes; a control frame instead fails the test."""
        got = await self.read_message(timeout)
        assert isinstance(got, Message), f"expected a message, got {got}" + (
            f" (close {got.code} {got.reason!r})" if got.opcode == CLOSE else "")
        return got.data

    async def expect_close(self, timeout=WAIT):
        """Read until the server's close frame, pings and pongs skipped; a data message
        first fails the test. Returns (code, reason)."""
        async def until_close():
            while True:
                got = await self._read_message()
                assert not isinstance(got, Message), f"a message {got} instead of a close"
                if got.opcode == CLOSE:
                    return got.code, got.reason

        return await asyncio.wait_for(until_close(), timeout)

    async def server_closed_tcp(self, timeout=WAIT):
        """Whether the server closes the TCP connection within `timeout`, sending nothing more."""
        return await closed(self.reader, timeout)


async def ws_fails(client, code, timeout=WAIT):
    """Assert the server fails the connection with close `code` and then closes TCP."""
    got, _ = await client.expect_close(timeout)
    assert got == code, f"closed with {got}, expected {code}"
    client.send_close(got)  # the close handshake, as a polite client would answer
    assert await client.server_closed_tcp(), "the server kept the TCP connection after the close"


# --- the server side -----------------------------------------------------------------------

class Conn:
    """One connection as `Handoff` hands it to the test: its scope, receive and send."""

    def __init__(self, scope, receive, send):
        self.scope, self._receive, self.send = scope, receive, send
        self.outcome = asyncio.get_running_loop().create_future()  # None: return; an exception: raise it

    async def receive(self, timeout=WAIT):
        return await asyncio.wait_for(self._receive(), timeout)

    async def accept(self, **fields):
        assert await self.receive() == {"type": "websocket.connect"}
        await self.send({"type": "websocket.accept", **fields})

    async def receive_disconnect(self, timeout=WAIT):
        """The websocket.disconnect that must come next; (code, reason)."""
        message = await self.receive(timeout)
        assert message["type"] == "websocket.disconnect", message
        return message["code"], message.get("reason") or ""

    def finish(self, exc=None):
        """Let the app call return, or raise `exc`."""
        if not self.outcome.done():
            self.outcome.set_result(exc)


def data_of(message):
    """A websocket.receive's text or bytes: exactly one of them is there (the other absent or None)."""
    assert message["type"] == "websocket.receive", message
    text, data = message.get("text"), message.get("bytes")
    assert (text is None) != (data is None), message
    assert isinstance(text, str) if data is None else isinstance(data, bytes), message
    return data if text is None else text


class Handoff:
    """An ASGI app that hands each connection to the test (`await app.next()`) and returns,
    or raises, when the test says so (`conn.finish()`). Lifespan: startup puts `state` into
    the lifespan state."""

    def __init__(self, state=None):
        self.state = state or {}
        self.conns = asyncio.Queue()
        self.calls = 0
        self.all = []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self._lifespan(scope, receive, send)
        self.calls += 1
        conn = Conn(scope, receive, send)
        self.all.append(conn)
        self.conns.put_nowait(conn)
        exc = await conn.outcome
        if exc is not None:
            raise exc

    async def _lifespan(self, scope, receive, send):
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                scope["state"].update(self.state)
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def next(self, timeout=WAIT):
        return await asyncio.wait_for(self.conns.get(), timeout)

    def release(self):
        for conn in self.all:
            conn.finish()


@contextlib.asynccontextmanager
async def ws_serving(app, **options):
    """`serving(app)` whose Handoff connections are let go before the server shuts down,
    so that a failed test does not hold the shutdown up."""
    options.setdefault("timeout_graceful_shutdown", 2)
    async with serving(app, **options) as server:
        try:
            yield server
        finally:
            if isinstance(app, Handoff):
                app.release()


async def accepted(app, server, **open_options):
    """A raw client and its server-side Conn, the connection accepted by the app."""
    opening = asyncio.ensure_future(RawClient.open(server, **open_options))
    try:
        conn = await app.next()
        await conn.accept()
        return await opening, conn
    finally:
        if not opening.done():
            opening.cancel()


def accept_next(app, **fields):
    """A task: the app's next connection, accepted with `fields` (for a client that waits
    for its 101 meanwhile); its result is the Conn."""
    async def accept():
        conn = await app.next()
        await conn.accept(**fields)
        return conn

    return asyncio.ensure_future(accept())


async def echo_app(scope, receive, send):
    """Echoes every message back; a plain `http` request gets 200 'http'."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
        await send({"type": "http.response.body", "body": b"http"})
        return
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": message["text"]})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"]})


# --- the websockets client -----------------------------------------------------------------

def ws_url(server, path="/", secure=False):
    """The ws:// (or wss://) URL of `server` (a Server, or a port number)."""
    port = server if isinstance(server, int) else port_of(server)
    return f"{'wss' if secure else 'ws'}://127.0.0.1:{port}{path}"


def ws_connect(server, path="/", **options):
    """`websockets.asyncio.client.connect` to `server` (wss:// if given an ssl context): no
    proxy from the environment, no pings of its own, no size limit, the tests' timeouts."""
    options = {"proxy": None, "ping_interval": None, "max_size": None, "open_timeout": WAIT,
               "close_timeout": WAIT, **options}
    return _ws_connect(ws_url(server, path, secure="ssl" in options), **options)


class PingCounting(ClientConnection):
    """A `websockets` client connection that counts the server's pings (the library answers
    them itself); pass as `create_connection=PingCounting`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pings = 0
        self._seen = asyncio.Event()

    def process_event(self, event):
        if isinstance(event, LibFrame) and event.opcode is Opcode.PING:  # (the 101 comes through here too)
            self.pings += 1
            self._seen.set()
        super().process_event(event)

    async def wait_pings(self, n, timeout=WAIT):
        async def until():
            while self.pings < n:
                self._seen.clear()
                await self._seen.wait()

        await asyncio.wait_for(until(), timeout)
