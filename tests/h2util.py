"""An HTTP/2 client for the tests of tests/test_http2*.py: the `h2` library's state machine
over asyncio streams, so that a test can send what a well-behaved client sends, or what an
attacker does (frames built by hand, resets, windows left shut), and read every event the
server's frames make."""

import asyncio
import collections
import os
import ssl

import h2.config
import hyperframe.frame
import h2.connection
import h2.events
import h2.settings

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


async def read_all(receive):
    """An ASGI app's whole request body."""
    body = b""
    while True:
        m = await receive()
        body += m.get("body", b"")
        if not m.get("more_body"):
            return body


def gated(release, body=b"ok"):
    """An ASGI app that answers `body` once `release` (an asyncio.Event) is set."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    return app


class Response:
    def __init__(self):
        self.status = None
        self.headers = []
        self.body = b""
        self.trailers = []
        self.reset = None  # the RST_STREAM error code, if the stream was reset
        self.ended = False

    def header(self, name):
        return next((v for n, v in self.headers if n == name), None)


class H2Client:
    """One HTTP/2 connection. `settings`: the client's SETTINGS (window sizes, say);
    `preface_sent`: the start of the preface, written already by the caller."""

    def __init__(self, reader, writer, settings=None, auto_window=True, preface_sent=b""):
        self.reader, self.writer = reader, writer
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self.conn = h2.connection.H2Connection(config=config)
        if settings:
            self.conn.local_settings = h2.settings.Settings(client=True, initial_values=settings)
        self.conn.initiate_connection()
        if preface_sent:
            first = self.conn.data_to_send()
            assert first.startswith(preface_sent)
            self.writer.write(first[len(preface_sent):])
        self.responses = {}
        self.events = []
        self.goaway = None
        self.closed = False
        self.auto_window = auto_window  # give back the window of the DATA read at once
        self.flush()

    @classmethod
    async def upgrade(cls, reader, writer, path=b"/"):
        """h2c by `Upgrade` on an HTTP/1.1 connection (RFC 7540 §3.2): a GET of `path` that
        asks for it; once the server answers 101, the HTTP/2 client, its preface sent, with
        the request as stream 1 (`response(1)`). None, with the response, if HTTP/1.1
        answered instead."""
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        conn = h2.connection.H2Connection(config=config)
        settings = conn.initiate_upgrade_connection()
        writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                     b"Upgrade: h2c\r\nHTTP2-Settings: " + settings + b"\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        if not head.startswith(b"HTTP/1.1 101 "):
            return None, head
        client = cls.__new__(cls)
        client.reader, client.writer, client.conn = reader, writer, conn
        client.responses, client.events = {1: Response()}, []
        client.goaway, client.closed, client.auto_window = None, False, True
        client.flush()
        return client, head

    @classmethod
    async def open(cls, port, tls=None, **kw):
        if tls is not None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls, server_hostname="localhost")
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer, **kw)

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.writer.write(data)

    def send(self, method, path, headers=(), body=None, end=True, authority="localhost"):
        stream_id = self.conn.get_next_available_stream_id()
        fields = [(b":method", method), (b":path", path), (b":scheme", b"http"), (b":authority", authority.encode())]
        fields += [(n, v) for n, v in headers]
        self.conn.send_headers(stream_id, fields, end_stream=end and not body)
        if body:
            self.conn.send_data(stream_id, body, end_stream=end)
        self.responses[stream_id] = Response()
        self.flush()
        return stream_id

    async def pump(self, timeout=5):
        """Read what the server sent next and handle it; False once the connection ended."""
        if self.closed:
            return False
        data = await asyncio.wait_for(self.reader.read(65536), timeout)
        if not data:
            self.closed = True
            return False
        for event in self.conn.receive_data(data):
            self.events.append(event)
            self.handle(event)
        self.flush()
        return True

    def handle(self, event):
        r = self.responses.get(getattr(event, "stream_id", None))
        if isinstance(event, h2.events.ResponseReceived):
            r.headers = event.headers
            r.status = int(dict(event.headers)[b":status"])
        elif isinstance(event, h2.events.DataReceived):
            r.body += event.data
            if self.auto_window and event.flow_controlled_length:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.TrailersReceived):
            r.trailers = event.headers
        elif isinstance(event, h2.events.StreamEnded):
            r.ended = True
        elif isinstance(event, h2.events.StreamReset):
            if r is not None:
                r.reset = event.error_code
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.goaway = event

    async def response(self, stream_id, timeout=5):
        r = self.responses[stream_id]
        while not (r.ended or r.reset is not None):
            if not await self.pump(timeout):
                break
        return r

    async def send_body(self, stream_id, data, end=True):
        """Send `data` on the stream as the windows allow (reading what comes meanwhile)."""
        sent = 0
        while sent < len(data):
            n = min(self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size,
                    len(data) - sent)
            if n == 0:
                await self.pump()
                continue
            self.conn.send_data(stream_id, data[sent:sent + n])
            sent += n
            self.flush()
        if end:
            self.conn.end_stream(stream_id)
            self.flush()

    async def request(self, method, path, body=None, **kw):
        if not body or len(body) <= 16384:
            return await self.response(self.send(method, path, body=body, **kw))
        stream_id = self.send(method, path, end=False, **kw)
        await self.send_body(stream_id, body)
        return await self.response(stream_id)

    async def until_closed(self, timeout=5):
        while await self.pump(timeout):
            pass

    def close(self):
        self.writer.close()


def tls_client_context(cert, alpn=("h2", "http/1.1")):
    ctx = ssl.create_default_context(cafile=cert)
    ctx.set_alpn_protocols(list(alpn))
    return ctx


def random_body(n):
    return os.urandom(n)


async def read_frames(reader, timeout=5):
    """The frames the server sends next, as hyperframe parses them (for what the `h2`
    library will not read: it takes a first GOAWAY for the end of the connection)."""
    head = await asyncio.wait_for(reader.readexactly(9), timeout)
    frame, length = hyperframe.frame.Frame.parse_frame_header(memoryview(head))
    frame.parse_body(memoryview(await asyncio.wait_for(reader.readexactly(length), timeout)))
    return frame


async def through_shutdown(c, on_goaway=None):
    """Read `c`'s connection raw through the server's graceful shutdown until a stream's
    END_STREAM, answering its PINGs: the GOAWAYs, as (last stream id, error code), and the
    DATA that came. `on_goaway(goaways)` after each GOAWAY."""
    goaways, data = [], b""
    while True:
        frame = await read_frames(c.reader)
        if isinstance(frame, hyperframe.frame.GoAwayFrame):
            goaways.append((frame.last_stream_id, frame.error_code))
            if on_goaway is not None:
                on_goaway(goaways)
        elif isinstance(frame, hyperframe.frame.PingFrame) and "ACK" not in frame.flags:
            c.writer.write(hyperframe.frame.PingFrame(0, frame.opaque_data, flags=["ACK"]).serialize())
        elif isinstance(frame, hyperframe.frame.DataFrame):
            data += frame.data
            if "END_STREAM" in frame.flags:
                return goaways, data


class H2WebSocket:
    """A WebSocket over an HTTP/2 stream (RFC 8441): an extended CONNECT on an `H2Client`,
    then the `websockets` library's sans-I/O protocol for the frames, carried as the
    stream's DATA both ways."""

    def __init__(self, client, stream_id, extensions):
        from websockets.protocol import CLIENT, Protocol

        self.client, self.sid = client, stream_id
        self.proto = Protocol(CLIENT, max_size=None)
        self.proto.extensions = extensions
        self.fed = 0  # how much of the stream's DATA the protocol has read
        self.pending = collections.deque()  # frames read, not yet taken

    @classmethod
    async def connect(cls, client, path, subprotocols=(), headers=(), deflate=False):
        """Open a WebSocket on `path`; `(socket, response)`, the socket None unless the
        server answered 2xx."""
        from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
        from websockets.headers import parse_extension

        factory = ClientPerMessageDeflateFactory()
        sid = await cls.ask(client, path, subprotocols, headers, factory if deflate else None)
        client.responses[sid] = r = Response()
        while r.status is None and r.reset is None:
            assert await client.pump(), "the connection closed before the answer"
        if r.status is None or not 200 <= r.status < 300:
            return None, r
        extensions = []
        answered = r.header(b"sec-websocket-extensions")
        for name, params in parse_extension(answered.decode()) if answered else []:
            assert deflate and name == factory.name, name
            extensions.append(factory.process_response_params(params, []))
        return cls(client, sid, extensions), r

    @staticmethod
    async def ask(client, path, subprotocols=(), headers=(), deflate=None):
        """Send the extended CONNECT for `path` (offering the `deflate` factory's
        extension, if any) once the server has enabled it: the stream's id."""
        from websockets.headers import build_extension

        while not client.conn.remote_settings.enable_connect_protocol:
            assert await client.pump(), "the server did not enable the extended CONNECT"
        sid = client.conn.get_next_available_stream_id()
        fields = [(b":method", b"CONNECT"), (b":protocol", b"websocket"), (b":scheme", b"http"),
                  (b":path", path), (b":authority", b"localhost"), (b"sec-websocket-version", b"13")]
        if subprotocols:
            fields.append((b"sec-websocket-protocol", ", ".join(subprotocols).encode()))
        if deflate is not None:
            offer = build_extension([(deflate.name, deflate.get_request_params())])
            fields.append((b"sec-websocket-extensions", offer.encode()))
        client.conn.send_headers(sid, fields + list(headers))
        client.flush()
        return sid

    async def _send(self):
        for chunk in self.proto.data_to_send():
            if chunk:
                await self.client.send_body(self.sid, chunk, end=False)

    async def send(self, message):
        if isinstance(message, str):
            self.proto.send_text(message.encode())
        else:
            self.proto.send_binary(message)
        await self._send()

    async def close(self, code=1000, reason=""):
        self.proto.send_close(code, reason)
        await self._send()

    async def event(self, timeout=5):
        """The next frame the server sent (websockets.frames.Frame); None once the stream
        ended or was reset."""
        r = self.client.responses[self.sid]
        while not self.pending:
            self.pending.extend(self.proto.events_received())
            if self.pending:
                break
            if self.fed < len(r.body):
                self.proto.receive_data(r.body[self.fed:])
                self.fed = len(r.body)
                await self._send()  # pongs, the close's echo
            elif r.ended or r.reset is not None or not await self.client.pump(timeout):
                return None
        return self.pending.popleft()

    async def recv(self, timeout=5):
        """The next data message (str or bytes), or the close frame's (code, reason)."""
        from websockets.frames import Close, Opcode

        while True:
            frame = await self.event(timeout)
            if frame is None:
                return None
            if frame.opcode is Opcode.TEXT:
                return frame.data.decode()
            if frame.opcode is Opcode.BINARY:
                return bytes(frame.data)
            if frame.opcode is Opcode.CLOSE:
                close = Close.parse(frame.data)
                return (close.code, close.reason)
