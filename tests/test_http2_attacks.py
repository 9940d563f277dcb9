"""The known HTTP/2 attacks, performed against a server in a subprocess: each offender is
closed (GOAWAY, ENHANCE_YOUR_CALM or the like) or held within a bound, the server's memory
stays flat, and a second, well-behaved client is served meanwhile. Frames are built by
hand (hyperframe, hpack), as an attacker builds them."""

import asyncio
import contextlib
import socket
import time

import hpack
import hyperframe.frame as f
import pytest

from apps.serving import ServeProcess
from h2util import PREFACE, H2Client

ENHANCE_YOUR_CALM = 0xB
MiB = 1024 * 1024


@contextlib.contextmanager
def serving_app(*options):
    """tests/apps/http2_app.py served in a subprocess with these options."""
    proc = ServeProcess("apps.http2_app:app", "--port", "0", "--no-access-log", "--lifespan", "off", *options)
    try:
        proc.wait_line("serving on")
        proc.port_number = proc.port()
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def server():
    with serving_app("--http2-max-concurrent-streams", "100") as proc:
        yield proc


def rss(proc):
    with open(f"/proc/{proc.proc.pid}/status") as s:
        return next(int(line.split()[1]) * 1024 for line in s if line.startswith("VmRSS:"))


class Raw:
    """A connection that sends frames as given (after the preface and SETTINGS)."""

    def __init__(self, port, settings=None):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(5)
        self.encoder = hpack.Encoder()
        self.sock.sendall(PREFACE + f.SettingsFrame(0, settings=settings or {}).serialize())
        self.buf = b""

    def send(self, *frames):
        self.sock.sendall(b"".join(fr.serialize() for fr in frames))

    def headers(self, stream_id, path=b"/", method=b"GET", end_stream=True, end_headers=True, fields=()):
        block = self.encoder.encode([(b":method", method), (b":path", path), (b":scheme", b"http"),
                                     (b":authority", b"localhost"), *fields])
        flags = (["END_STREAM"] if end_stream else []) + (["END_HEADERS"] if end_headers else [])
        return f.HeadersFrame(stream_id, block, flags=flags)

    def whole_frames(self):
        """The frames received whole so far, taken off the buffer."""
        while len(self.buf) >= 9:
            frame, length = f.Frame.parse_frame_header(memoryview(self.buf[:9]))
            if len(self.buf) < 9 + length:
                return
            frame.parse_body(memoryview(self.buf[9:9 + length]))
            self.buf = self.buf[9 + length:]
            yield frame

    def frames(self, timeout=5):
        """Frames until the server closes (or `timeout` passes without any)."""
        self.sock.settimeout(timeout)
        while True:
            yield from self.whole_frames()
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                return
            if not data:
                return
            self.buf += data

    def goaway(self, timeout=5):
        """The error code of the GOAWAY that ends the connection (None: closed without one)."""
        code = None
        for frame in self.frames(timeout):
            if isinstance(frame, f.GoAwayFrame):
                code = frame.error_code
        return code

    def close(self):
        self.sock.close()


def get(port, path):
    """The status and body of a GET of `path` over a new HTTP/2 connection."""
    async def main():
        c = await H2Client.open(port)
        r = await c.request(b"GET", path)
        c.close()
        return r.status, r.body

    return asyncio.run(main())


def still_serving(port):
    assert get(port, b"/") == (200, b"hello")


def count(port):
    return tuple(int(x) for x in get(port, b"/count")[1].split())


def cut(port):
    return int(get(port, b"/cut")[1])


def dripped(port):
    return int(get(port, b"/dripped")[1])


def flat(server, before, limit=32 * MiB):
    after = rss(server)
    assert after - before < limit, f"RSS grew by {(after - before) / MiB:.1f} MiB"


def test_rapid_reset(server):
    """CVE-2023-44487: streams opened and reset at once, without end."""
    before = rss(server)
    c = Raw(server.port_number)
    try:
        for i in range(2000):
            sid = 2 * i + 1
            c.send(c.headers(sid, b"/wait"), f.RstStreamFrame(sid, error_code=0x8))
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert c.goaway() == ENHANCE_YOUR_CALM
    c.close()
    still_serving(server.port_number)
    flat(server, before)
    # Every app the resets started was cancelled.
    deadline = time.monotonic() + 5
    while count(server.port_number)[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert count(server.port_number)[0] == 0


def test_made_you_reset(server):
    """CVE-2025-8671: valid streams followed by frames that make the server reset them (a
    WINDOW_UPDATE that overflows the stream's window, RFC 9113 §6.9.1). A stream reset so
    once its app runs has the app cancelled; a flood of them closes the offender, and no
    app is left running."""
    before = rss(server)
    running_before, cancelled_before = count(server.port_number)
    c = Raw(server.port_number)
    c.send(c.headers(1, b"/wait"))
    deadline = time.monotonic() + 5
    while count(server.port_number)[0] == running_before and time.monotonic() < deadline:
        time.sleep(0.02)
    c.send(f.WindowUpdateFrame(1, window_increment=2**31 - 1))
    while count(server.port_number)[1] == cancelled_before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert count(server.port_number) == (running_before, cancelled_before + 1)
    # `h2` closes the connection after 1024 streams it reset for an error. Streams opened
    # while the resets it owes are still unwritten count against the 100 concurrent ones and
    # are refused (REFUSED_STREAM, no app started): of a flood read in one batch, about half
    # are refused (measured: 1182 refused and 1009 reset before the GOAWAY), so the flood
    # is long enough for the limit whatever the batches.
    try:
        for i in range(1, 4000):
            sid = 2 * i + 1
            c.send(c.headers(sid, b"/wait"), f.WindowUpdateFrame(sid, window_increment=2**31 - 1))
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert c.goaway() in (ENHANCE_YOUR_CALM, 0x5)  # or STREAM_CLOSED as a connection error
    c.close()
    still_serving(server.port_number)
    flat(server, before)
    deadline = time.monotonic() + 5
    while count(server.port_number)[0] > running_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert count(server.port_number)[0] == running_before


def test_continuation_flood(server):
    """CVE-2024-27316 and its family: a header block that never ends."""
    before = rss(server)
    c = Raw(server.port_number)
    junk = b"\x00\x05x-abc\x03aaa" * 90  # valid literal fields, again and again
    try:
        c.send(c.headers(1, end_headers=False))
        for _ in range(2000):
            c.send(f.ContinuationFrame(1, junk))
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    assert c.goaway() == ENHANCE_YOUR_CALM
    c.close()
    still_serving(server.port_number)
    flat(server, before)


def test_hpack_bomb(server):
    """A small header block that decodes to megabytes: one large field in the dynamic
    table, then referenced thousands of times."""
    before = rss(server)
    c = Raw(server.port_number)
    big = b"v" * 4000
    first = c.encoder.encode([(b"x-bomb", big)])
    block = c.encoder.encode([(b":method", b"GET"), (b":path", b"/"), (b":scheme", b"http"),
                              (b":authority", b"localhost")])
    # The field is the newest entry of the dynamic table: index 62 (RFC 7541 §2.3.3).
    block += bytes([0x80 | 62]) * 8000
    c.send(f.HeadersFrame(1, first + block, flags=["END_STREAM", "END_HEADERS"]))
    refused = False
    for frame in c.frames():
        if isinstance(frame, (f.RstStreamFrame, f.GoAwayFrame)):
            refused = True
            break
        if isinstance(frame, f.HeadersFrame) and frame.stream_id == 1:
            status = dict(hpack.Decoder().decode(frame.data)).get(":status")
            refused = status == "431"
            break
    assert refused
    c.close()
    still_serving(server.port_number)
    flat(server, before)


@pytest.mark.parametrize("kind", ["settings", "ping"])
def test_control_frame_flood_from_a_client_that_reads_nothing(server, kind):
    """SETTINGS or PING frames, each of which the server must answer, from a client that
    never reads: the server stops reading it rather than queueing answers."""
    before = rss(server)
    c = Raw(server.port_number)
    frame = (f.SettingsFrame(0, settings={f.SettingsFrame.MAX_CONCURRENT_STREAMS: 100}) if kind == "settings"
             else f.PingFrame(0, b"12345678"))
    one = frame.serialize() * 1000
    c.sock.settimeout(2)
    sent = 0
    try:
        while sent < 200 * MiB:
            c.sock.sendall(one)
            sent += len(one)
    except (socket.timeout, BrokenPipeError, ConnectionResetError):
        pass
    # The server stopped reading long before 200 MB (the kernel's buffers hold the rest).
    assert sent < 100 * MiB, sent
    flat(server, before)
    still_serving(server.port_number)
    c.close()


def test_empty_data_frame_flood(server):
    before = rss(server)
    c = Raw(server.port_number)
    try:
        c.send(c.headers(1, b"/echo", method=b"POST", end_stream=False))
        empty = f.DataFrame(1, b"").serialize() * 1000
        for _ in range(200):
            c.sock.sendall(empty)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    assert c.goaway() == ENHANCE_YOUR_CALM
    c.close()
    still_serving(server.port_number)
    flat(server, before)


def test_a_burst_of_tiny_data_frames_is_refused(server):
    """Many one-byte DATA frames at once cost the server a frame each for one byte of body:
    `h2` budgets the frames it holds unread and closes the connection past the budget."""
    c = Raw(server.port_number)
    c.send(f.SettingsFrame(0, flags=["ACK"]))
    c.send(c.headers(1, b"/echo", method=b"POST", end_stream=False))
    try:
        c.sock.sendall(f.DataFrame(1, b"x").serialize() * 20000)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    assert c.goaway() == ENHANCE_YOUR_CALM
    c.close()
    still_serving(server.port_number)


def unknown_frame(size):
    """A frame of an extension type (0xFA): ignored by the server, read all the same."""
    return size.to_bytes(3, "big") + b"\xfa\x00" + bytes(4) + b"u" * size


@pytest.mark.parametrize("payload, per_batch, junk, batches", [
    (1, 64, 0, 8192),  # one-byte frames, 64 at a time
    (100, 1, 16384, 2000),  # 100-byte frames, each beside 16 KiB of an unknown frame
], ids=["one-byte", "beside-junk"])
def test_small_data_frames_to_an_app_that_does_not_read_hold_no_more_than_the_window(
        payload, per_batch, junk, batches):
    """Small DATA frames, each batch taken in before the next comes (a PING answered after
    it), to an app that never reads its body: the server holds about the bytes the window
    let in, not the read buffer each payload came in (with the frames beside it) and a
    slice of it for each frame: 20.5 and 15.0 MiB for 0.5 and 0.2 MiB of body, when it did."""
    with serving_app("--http2-initial-stream-window-size", str(4 * MiB),
                     "--http2-initial-connection-window-size", str(4 * MiB)) as proc:
        still_serving(proc.port_number)
        before = rss(proc)
        c = Raw(proc.port_number)
        try:
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.send(f.SettingsFrame(0, flags=["ACK"]))
            c.send(c.headers(1, b"/wait", method=b"POST", end_stream=False))
            one = f.DataFrame(1, b"x" * payload).serialize() + (unknown_frame(junk) if junk else b"")
            frames = one * per_batch
            for i in range(batches):
                c.sock.sendall(frames + f.PingFrame(0, opaque_data=i.to_bytes(8, "big")).serialize())
                answered = False
                for frame in c.frames():
                    if isinstance(frame, f.PingFrame) and "ACK" in frame.flags:
                        answered = int.from_bytes(frame.opaque_data, "big") == i
                        break
                    assert not isinstance(frame, (f.GoAwayFrame, f.RstStreamFrame)), frame
                assert answered, f"no answer to PING {i}"
            flat(proc, before, limit=3 * MiB)
            still_serving(proc.port_number)
            assert count(proc.port_number) == (1, 0)
        finally:
            c.close()


def test_zero_window_client_holds_no_more_than_the_send_buffer(server):
    """A client that opens no window: the response waits in the stream's send buffer."""
    before = rss(server)
    clients = []
    for _ in range(20):
        c = Raw(server.port_number, settings={f.SettingsFrame.INITIAL_WINDOW_SIZE: 0})
        c.send(c.headers(1, b"/big"))
        clients.append(c)
    time.sleep(1)
    # 20 streams of 1 MiB each: held at the send buffer (400 KiB each at most), not 20 MiB.
    flat(server, before, limit=12 * MiB)
    still_serving(server.port_number)
    for c in clients:
        c.close()


@pytest.mark.parametrize("window", [0, 2**31 - 1], ids=["closed-window", "unread-socket"])
def test_small_response_parts_to_a_client_that_does_not_read_hold_no_more_than_the_send_buffer(server, window):
    """An app that streams one-byte parts (as token or event streams do, in larger ones) to
    clients that never open their window, or open it wide and never read: the parts wait
    as the send buffer's bytes, not as an allocation and a DATA frame each (124 and 663 MiB
    for these 5 streams when they did)."""
    before, start = rss(server), dripped(server.port_number)
    clients = []
    for _ in range(5):
        c = Raw(server.port_number, settings={f.SettingsFrame.INITIAL_WINDOW_SIZE: window})
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        if window:
            c.send(f.WindowUpdateFrame(0, window_increment=window - 65535))
        c.send(f.SettingsFrame(0, flags=["ACK"]))
        c.send(c.headers(1, b"/drip"))
        clients.append(c)
    # Each app sends until its stream holds the send buffer (400 KiB; the part that fills
    # it is not counted until its `send` returns), and then waits.
    deadline = time.monotonic() + 20
    while dripped(server.port_number) - start < 5 * (400 * 1024 - 1):
        assert time.monotonic() < deadline, "the apps did not fill their send buffers"
        flat(server, before, limit=8 * MiB)
    flat(server, before, limit=8 * MiB)
    still_serving(server.port_number)
    for c in clients:
        c.close()


@pytest.fixture
def stall_server():
    with serving_app("--http2-stall-timeout", "1") as proc:
        yield proc


def test_a_stream_stalled_on_a_closed_window_is_reset_after_the_stall_timeout(stall_server):
    port = stall_server.port_number
    c = Raw(port, settings={f.SettingsFrame.INITIAL_WINDOW_SIZE: 0})
    started = time.monotonic()
    c.send(c.headers(1, b"/big"))
    reset = None
    for frame in c.frames(timeout=10):
        if isinstance(frame, f.RstStreamFrame):
            reset = frame.error_code
            break
        assert not isinstance(frame, f.DataFrame), "a closed window let DATA through"
    waited = time.monotonic() - started
    assert reset == 0x8, reset  # CANCEL
    assert 0.9 < waited < 8, waited
    # The app heard it: its waiting send failed.
    deadline = time.monotonic() + 5
    while cut(port) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cut(port) == 1
    # The connection serves on: a stream whose window is opened is answered.
    c.send(f.WindowUpdateFrame(0, window_increment=MiB))
    c.send(c.headers(3, b"/"), f.WindowUpdateFrame(3, window_increment=1000))
    got = b""
    for frame in c.frames(timeout=5):
        if isinstance(frame, f.DataFrame) and frame.stream_id == 3:
            got += frame.data
            if "END_STREAM" in frame.flags:
                break
    assert got == b"hello"
    c.close()


def test_a_slow_reader_whose_window_keeps_opening_is_not_cut(stall_server):
    """Each WINDOW_UPDATE moves bytes, so a response read slowly outlives the stall timeout."""
    port = stall_server.port_number
    c = Raw(port, settings={f.SettingsFrame.INITIAL_WINDOW_SIZE: 0})
    c.send(f.WindowUpdateFrame(0, window_increment=MiB))
    c.send(c.headers(1, b"/big"))
    started = time.monotonic()
    got, ended, reset = 0, False, None
    c.sock.settimeout(0.1)
    opened = 0.0
    while not ended and reset is None and time.monotonic() - started < 20:
        if time.monotonic() - opened >= 0.1:
            c.send(f.WindowUpdateFrame(1, window_increment=48 * 1024))
            opened = time.monotonic()
        try:
            data = c.sock.recv(1 << 20)
        except socket.timeout:
            continue
        assert data, "the server closed the connection"
        c.buf += data
        for frame in c.whole_frames():
            if isinstance(frame, f.DataFrame):
                got += len(frame.data)
                ended = "END_STREAM" in frame.flags
            elif isinstance(frame, f.RstStreamFrame):
                reset = frame.error_code
    # 1 MiB at 48 KiB every 0.1 s: longer than the stall timeout, with no stall in it.
    assert (got, ended, reset) == (MiB, True, None)
    assert time.monotonic() - started > 1.5
    assert cut(port) == 0
    c.close()


def test_a_connection_whose_socket_is_unread_is_closed_after_the_stall_timeout(stall_server):
    """The window is open but the client reads nothing: the transport stays paused, so no
    frame can reach the client; the connection is aborted and the app hears it."""
    port = stall_server.port_number
    c = Raw(port, settings={f.SettingsFrame.INITIAL_WINDOW_SIZE: 2**31 - 1})
    c.send(f.WindowUpdateFrame(0, window_increment=2**31 - 1 - 65535))
    c.send(c.headers(1, b"/big?parts=1024"))  # 64 MiB, more than the socket buffers hold
    deadline = time.monotonic() + 15
    while cut(port) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cut(port) == 1
    c.close()


def test_the_stall_timeout_can_be_off():
    with serving_app("--http2-stall-timeout", "off") as proc:
        c = Raw(proc.port_number, settings={f.SettingsFrame.INITIAL_WINDOW_SIZE: 0})
        c.send(c.headers(1, b"/big"))
        frames = list(c.frames(timeout=2))
        assert not any(isinstance(fr, (f.RstStreamFrame, f.GoAwayFrame)) for fr in frames)
        assert cut(proc.port_number) == 0
        c.close()


def test_data_before_the_settings_ack_uses_the_default_window(server):
    """The server's smaller window applies only once the client has acknowledged it; before
    that the default 65,535 bytes may come (RFC 9113 §6.9.2)."""
    with serving_app("--http2-initial-stream-window-size", "1000") as proc:
        c = Raw(proc.port_number)
        body = b"d" * 60000
        c.send(c.headers(1, b"/echo", method=b"POST", end_stream=False))
        c.send(*[f.DataFrame(1, body[i:i + 16384]) for i in range(0, len(body), 16384)])
        c.send(f.DataFrame(1, b"", flags=["END_STREAM"]))
        got, status = b"", None
        for frame in c.frames():
            if isinstance(frame, f.SettingsFrame) and "ACK" not in frame.flags:
                c.send(f.SettingsFrame(0, flags=["ACK"]))
            elif isinstance(frame, f.HeadersFrame):
                status = dict(hpack.Decoder().decode(frame.data)).get(":status")
            elif isinstance(frame, f.DataFrame):
                got += frame.data
                c.send(f.WindowUpdateFrame(0, window_increment=len(frame.data) or 1),
                       f.WindowUpdateFrame(1, window_increment=len(frame.data) or 1))
                if "END_STREAM" in frame.flags:
                    break
            elif isinstance(frame, (f.GoAwayFrame, f.RstStreamFrame)):
                break
        assert status == "200" and got == body
        c.close()


def test_a_request_with_conflicting_content_lengths_is_refused(server):
    """Two `content-length` fields that disagree make a request malformed (RFC 9113 §8.1.1,
    RFC 9110 §8.6): a proxy in front that believed the other one would frame the body
    differently (request smuggling). The stream is reset with PROTOCOL_ERROR before any
    app sees it; the connection goes on, and a request with one length is answered."""
    c = Raw(server.port_number)
    c.send(c.headers(1, b"/echo", method=b"POST", end_stream=False,
                     fields=[(b"content-length", b"5"), (b"content-length", b"6")]),
           f.DataFrame(1, b"hello", flags=["END_STREAM"]))
    c.send(c.headers(3, b"/echo", method=b"POST", end_stream=False, fields=[(b"content-length", b"5")]),
           f.DataFrame(3, b"hello", flags=["END_STREAM"]))
    reset, body, ended = None, b"", False
    for frame in c.frames(timeout=5):
        if isinstance(frame, f.RstStreamFrame) and frame.stream_id == 1:
            reset = frame.error_code
        elif isinstance(frame, f.DataFrame) and frame.stream_id == 3:
            body += frame.data
            ended = "END_STREAM" in frame.flags
        assert not isinstance(frame, (f.GoAwayFrame, f.RstStreamFrame)) or frame.stream_id == 1, frame
        assert not (isinstance(frame, (f.HeadersFrame, f.DataFrame)) and frame.stream_id == 1), frame
        if reset is not None and ended:
            break
    assert reset == 0x1  # PROTOCOL_ERROR
    assert body == b"hello"
    c.close()


def answer(c, stream_id):
    """The status and body the server answers on `stream_id` (a reset: its code)."""
    decoder, status, body = hpack.Decoder(), None, b""
    for frame in c.frames(timeout=5):
        if isinstance(frame, (f.HeadersFrame, f.DataFrame, f.RstStreamFrame)) and frame.stream_id != stream_id:
            continue
        if isinstance(frame, f.RstStreamFrame):
            return ("reset", frame.error_code), body
        if isinstance(frame, f.HeadersFrame):
            status = dict(decoder.decode(frame.data))[":status"]
        elif isinstance(frame, f.DataFrame):
            body += frame.data
        if isinstance(frame, (f.HeadersFrame, f.DataFrame)) and "END_STREAM" in frame.flags:
            return status, body
        assert not isinstance(frame, f.GoAwayFrame), frame
    raise AssertionError("no answer")


@pytest.mark.parametrize("hosts, status", [
    ([b"evil.example"], "400"),
    ([b"localhost:8080"], "400"),
    ([b"localhost", b"evil.example"], "400"),
    ([b"local host"], "400"),
    ([b"LocalHost:80"], "200"),
    ([], "200"),
])
def test_a_host_field_that_is_not_the_authority_is_refused(server, hosts, status):
    """`:authority` and a `host` field that names another host (RFC 9113 §8.3.1), two of
    them, or one that is no host: a proxy in front routes by one, the app may read the
    other (host confusion). Such a request is answered 400, as over HTTP/1.1, and no app
    sees it; the same host written otherwise (case, the scheme's default port) is served."""
    c = Raw(server.port_number)
    c.send(c.headers(1, b"/version", fields=[(b"host", h) for h in hosts]))
    got, body = answer(c, 1)
    assert got == status
    if status == "200":
        assert body == b"2"
    c.close()


@pytest.mark.parametrize("value, status", [(b"a ", "400"), (b"\ta", "400"), (b"a b", "200")])
def test_a_field_value_with_whitespace_around_it_is_refused(server, value, status):
    """HTTP/1.1 strips the whitespace around a value; in HTTP/2 a value has none, and one
    with some makes the request malformed (RFC 9113 §8.2.1): 400, and no app sees it."""
    c = Raw(server.port_number)
    c.send(c.headers(1, b"/version", fields=[(b"x-field", value)]))
    assert answer(c, 1)[0] == status
    c.close()


def test_a_connection_lingering_after_its_goaway_does_not_hold_up_shutdown():
    """After a connection error the server lingers for the client to close (so that a reset
    does not destroy its GOAWAY), up to the keep-alive timeout; a server shutting down does
    not wait for that client."""
    with serving_app("--timeout-keep-alive", "60") as proc:
        c = Raw(proc.port_number)
        c.send(f.WindowUpdateFrame(0, window_increment=0))  # a connection error
        code = None
        for frame in c.frames(timeout=5):
            if isinstance(frame, f.GoAwayFrame):
                code = frame.error_code
                break
        assert code == 0x1  # PROTOCOL_ERROR
        started = time.monotonic()
        proc.stop(timeout=20)
        assert time.monotonic() - started < 10
        c.sock.settimeout(5)
        try:
            rest = c.sock.recv(65536)
        except ConnectionResetError:
            rest = b""
        assert rest == b""  # closed, not still lingering
        c.close()


def test_streams_past_the_concurrency_limit_are_refused(server):
    c = Raw(server.port_number)
    for i in range(150):
        c.send(c.headers(2 * i + 1, b"/wait"))
    refused = 0
    for frame in c.frames(timeout=2):
        if isinstance(frame, f.RstStreamFrame) and frame.error_code == 0x7:  # REFUSED_STREAM
            refused += 1
            if refused == 50:
                break
        if isinstance(frame, f.GoAwayFrame):
            break
    assert refused == 50
    c.close()
    still_serving(server.port_number)


def test_a_client_that_keeps_opening_streams_past_the_limit_is_sent_away(server):
    """Each stream past the limit is refused at once, and each refusal is a reset the
    client made the server send: past `h2`'s limit on those (1,024), the connection ends
    with ENHANCE_YOUR_CALM instead of refusing streams for as long as the client opens them."""
    c = Raw(server.port_number)
    c.send(*[c.headers(2 * i + 1, b"/wait") for i in range(3000)])
    assert c.goaway() == ENHANCE_YOUR_CALM
    c.close()
    still_serving(server.port_number)
