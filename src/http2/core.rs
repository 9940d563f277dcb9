//! An HTTP/2 server connection, free of Python objects: `h2` (framing, HPACK, the stream
//! and connection state machines, flow control, the protocol's own limits) over an
//! in-memory `Pipe`, and each stream's request body and response as an interface drives
//! them. A driver pushes the client's bytes in, calls `drive` and handles the `Event`s,
//! gives response parts to `respond`, and writes out what `take_output` returns.
//!
//! `h2` is futures-based. Here it is polled with a waker that only raises a flag: `drive`
//! polls the connection and every stream until a pass raises none, so whatever `h2` wakes
//! (a stream's new capacity, a frame to write) is polled within the same call.

use super::body::{Chunks, Queue, Waiting};
use super::pipe::Pipe;
use super::writing::Writing;
use super::Settings;
use crate::intmap::IntMap;
use bytes::Bytes;
use h2::server::{Connection, Handshake, SendResponse};
use h2::{Reason, RecvStream, SendStream};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// What the driver is told after `drive`.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// A request head arrived on stream `id` (see `Stream::request`).
    Request(u32),
    /// Body bytes, or the body's end, arrived for a stream whose reader waits.
    Body(u32),
    /// A stream's queued response fell under the send buffer's size: its writer goes on.
    Writable(u32),
    /// The stream was reset (by the client, or for a protocol error): nothing more is
    /// read from or written to it.
    Reset(u32),
    /// The response is out and the body was all read: a reader still waiting hears that
    /// the request is over.
    Ended(u32),
    /// The connection is over (both sides done, or a connection error was sent).
    Closed,
}

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

enum Phase {
    Handshake(Handshake<Pipe, Bytes>),
    Open(Connection<Pipe, Bytes>),
    Closed,
}

/// How the response's end is to be sent, once the queue is out.
enum End {
    /// The response goes on.
    No,
    /// END_STREAM on the last DATA frame.
    Data,
    Trailers(http::HeaderMap),
}

/// What a reader of a stream's body gets.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyTake {
    /// Bytes (perhaps none) as the DATA frames brought them, and whether more follow.
    Data(Chunks, bool),
    /// None yet: `Event::Body` when some come.
    Wait,
    /// The stream is over (its response is out, or it was reset).
    Gone,
}

pub struct Stream {
    /// The request head, until the driver takes it.
    pub request: Option<http::request::Parts>,
    recv: Option<RecvStream>,
    /// Body bytes received and not yet taken by the application.
    body: Waiting,
    /// The body ended (END_STREAM received, or the stream is gone).
    body_ended: bool,
    /// The application waits for body bytes: `Event::Body` when they come.
    pub reader_waiting: bool,
    /// Some of the body was handed to the application.
    body_taken: bool,
    /// Its end was handed too: a reader now waits for the request to be over.
    body_given: bool,
    respond: Option<SendResponse<Bytes>>,
    send: Option<SendStream<Bytes>>,
    queue: Queue,
    end: End,
    /// The application waits for the queue to shrink: `Event::Writable` when it does.
    pub writer_waiting: bool,
    pub writing: Writing,
    pub reset: bool,
    /// A file as the body: read into the queue as it empties, this many bytes still.
    pub file: Option<(std::fs::File, u64)>,
    /// Since when the queued response has waited on the client (its window closed, or
    /// its socket unread) with no byte moving: for the stall timeout.
    stalled_since: Option<Instant>,
}

impl Stream {
    fn new(request: http::request::Parts, recv: RecvStream, respond: SendResponse<Bytes>) -> Stream {
        let body_ended = recv.is_end_stream();
        Stream {
            request: Some(request),
            recv: (!body_ended).then_some(recv),
            body: Waiting::default(),
            body_ended,
            reader_waiting: false,
            body_taken: false,
            body_given: false,
            respond: Some(respond),
            send: None,
            queue: Queue::default(),
            end: End::No,
            writer_waiting: false,
            writing: Writing::Init,
            reset: false,
            file: None,
            stalled_since: None,
        }
    }

    /// Whether the response's last byte is with `h2`.
    fn response_sent(&self) -> bool {
        self.respond.is_none() && self.send.is_none()
    }
}

pub struct H2Core {
    pipe: Pipe,
    phase: Phase,
    pub streams: IntMap<u32, Stream>,
    /// Response bytes a stream may have queued before its writer waits.
    send_buffer: usize,
    /// A body's DATA payload of this many bytes is kept as `h2` gave it (`body`): half
    /// the largest frame a client may send.
    keep_from: usize,
    flag: Arc<Flag>,
    waker: Waker,
    /// The connection error sent, if the connection ended with one.
    pub error: Option<String>,
    /// Keep-alive PINGs: the handle, and whether one awaits its answer.
    ping: Option<h2::PingPong>,
    ping_outstanding: bool,
    /// A stream's response waits on the client (as the last `drive` found them).
    stalled: bool,
}

/// A response part this small is copied (`body::Queue::push_small`) rather than shared:
/// its own allocation, its entry in the queue and its DATA frame would cost as much as
/// its bytes.
pub const SMALL_PART: usize = 256;

/// Most passes one `drive` makes; each pass is made only because the one before woke
/// something, so this bounds a bug, not the work.
const MAX_PASSES: usize = 64;

impl H2Core {
    /// A connection whose client preface is still to come. `output_cap`: frames held for
    /// the transport before `h2` has to wait.
    pub fn new(config: &Settings, output_cap: usize) -> H2Core {
        let pipe = Pipe::new(output_cap);
        let mut b = h2::server::Builder::new();
        b.max_concurrent_streams(config.max_concurrent_streams)
            .initial_window_size(config.initial_stream_window_size)
            .initial_connection_window_size(config.initial_connection_window_size)
            .max_frame_size(config.max_frame_size)
            .max_header_list_size(config.max_headers_size)
            .max_send_buffer_size(config.max_send_buffer_size);
        if config.connect_protocol {
            b.enable_connect_protocol();
        }
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        H2Core {
            phase: Phase::Handshake(b.handshake(pipe.clone())),
            pipe,
            streams: IntMap::default(),
            send_buffer: config.max_send_buffer_size,
            keep_from: config.max_frame_size as usize / 2,
            flag,
            waker,
            error: None,
            ping: None,
            ping_outstanding: false,
            stalled: false,
        }
    }

    /// Bytes from the client.
    pub fn push(&mut self, data: &[u8]) {
        self.pipe.lock().push(data);
    }

    /// Bytes from the client, read by `h2` in place during `drive`: what it leaves is
    /// kept (see `pipe`).
    pub fn drive_on(&mut self, data: &[u8], events: &mut Vec<Event>) {
        self.pipe.lock().lend(data);
        // Ended however `drive` returns: no later read may see the slice.
        let loan = super::pipe::LoanEnd(self.pipe.clone());
        self.drive(events);
        drop(loan);
    }

    /// Bytes pushed that `h2` has not read yet: it stops reading while it cannot write
    /// (see `pipe`), and the driver stops reading the socket while they are many.
    pub fn unread(&self) -> usize {
        self.pipe.lock().unread()
    }

    /// The client closed its side.
    pub fn push_eof(&mut self) {
        self.pipe.lock().eof = true;
    }

    /// Frames for the transport.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pipe.lock().outbound)
    }

    pub fn closed(&self) -> bool {
        matches!(self.phase, Phase::Closed)
    }

    /// Poll the connection and its streams until nothing more moves.
    pub fn drive(&mut self, events: &mut Vec<Event>) {
        let waker = self.waker.clone();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..MAX_PASSES {
            self.flag.0.store(false, Ordering::Relaxed);
            self.poll_connection(&mut cx, events);
            self.poll_streams(&mut cx, events);
            if !self.flag.0.load(Ordering::Relaxed) {
                break;
            }
        }
    }

    fn poll_connection(&mut self, cx: &mut Context<'_>, events: &mut Vec<Event>) {
        if let Phase::Handshake(h) = &mut self.phase {
            match Pin::new(h).poll(cx) {
                Poll::Pending => return,
                Poll::Ready(Ok(conn)) => self.phase = Phase::Open(conn),
                Poll::Ready(Err(e)) => return self.close(Some(e), events),
            }
        }
        let Phase::Open(conn) = &mut self.phase else { return };
        if self.ping.is_none() {
            self.ping = conn.ping_pong();
        }
        if let (true, Some(ping)) = (self.ping_outstanding, &mut self.ping) {
            if let Poll::Ready(Ok(_)) = ping.poll_pong(cx) {
                self.ping_outstanding = false;
            }
        }
        loop {
            match conn.poll_accept(cx) {
                Poll::Pending => return,
                Poll::Ready(Some(Ok((request, respond)))) => {
                    let id = respond.stream_id().as_u32();
                    let (parts, recv) = request.into_parts();
                    self.streams.insert(id, Stream::new(parts, recv, respond));
                    events.push(Event::Request(id));
                }
                Poll::Ready(Some(Err(e))) => return self.close(Some(e), events),
                Poll::Ready(None) => return self.close(None, events),
            }
        }
    }

    fn close(&mut self, error: Option<h2::Error>, events: &mut Vec<Event>) {
        // A connection error was sent as GOAWAY by `h2`; an I/O error means the client
        // went away.
        self.error = error.filter(|e| !e.is_io()).map(|e| e.to_string());
        self.phase = Phase::Closed;
        for (id, s) in self.streams.iter_mut() {
            if !s.response_sent() || !s.body_ended {
                s.reset = true;
                s.body_ended = true;
                s.recv = None;
                s.respond = None;
                s.send = None;
                events.push(Event::Reset(*id));
            }
        }
        events.push(Event::Closed);
    }

    fn poll_streams(&mut self, cx: &mut Context<'_>, events: &mut Vec<Event>) {
        let mut done = Vec::new();
        self.stalled = false;
        for (&id, s) in self.streams.iter_mut() {
            if s.reset {
                // Reported as `Event::Reset` in the pass that found it: nothing more comes.
                done.push(id);
                continue;
            }
            let reset = poll_body(s, cx, self.keep_from) | poll_send(s, cx, self.send_buffer);
            if reset {
                s.reset = true;
                s.body_ended = true;
                s.recv = None;
                s.respond = None;
                s.send = None;
                s.queue.clear();
                events.push(Event::Reset(id));
                continue;
            }
            if s.reader_waiting && !s.body_given && (!s.body.is_empty() || s.body_ended) {
                s.reader_waiting = false;
                events.push(Event::Body(id));
            }
            if s.writer_waiting && s.queue.len() < self.send_buffer {
                s.writer_waiting = false;
                events.push(Event::Writable(id));
            }
            self.stalled |= s.stalled_since.is_some();
            if s.response_sent() && s.request.is_none() {
                if s.reader_waiting && s.body_given {
                    s.reader_waiting = false;
                    events.push(Event::Ended(id));
                }
                if !s.reader_waiting {
                    done.push(id);
                }
            }
        }
        for id in done {
            // The response is with `h2`: the stream's body, if the app did not read it all,
            // is `h2`'s to refuse (RST_STREAM NO_ERROR, RFC 9113 §8.1).
            self.streams.remove(&id);
        }
    }

    /// Body bytes received on stream `id` and not yet taken, and whether more follow.
    /// Taking them returns their window to the client.
    pub fn take_body(&mut self, id: u32) -> BodyTake {
        let Some(s) = self.streams.get_mut(&id) else { return BodyTake::Gone };
        if s.reset {
            return BodyTake::Gone;
        }
        let len = s.body.len();
        if s.body_given || (len == 0 && !s.body_ended) {
            s.reader_waiting = true;
            return BodyTake::Wait;
        }
        let data = s.body.take();
        if let Some(recv) = &mut s.recv {
            // Only fails for a stream already reset, which the next poll reports.
            let _ = recv.flow_control().release_capacity(len);
        }
        s.body_taken = true;
        s.body_given = s.body_ended;
        self.flag.0.store(true, Ordering::Relaxed);
        BodyTake::Data(data, !s.body_ended)
    }

    /// Nothing more of stream `id`'s body is read: once its response is out, the stream
    /// is `h2`'s to end (RST_STREAM NO_ERROR if the client is still sending).
    pub fn stop_reading(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.recv = None;
            s.body.clear();
            s.body_ended = true;
            s.reader_waiting = false;
            self.flag.0.store(true, Ordering::Relaxed);
        }
    }

    /// Response bytes of stream `id` queued and not yet given to `h2`.
    pub fn queued(&self, id: u32) -> usize {
        self.streams.get(&id).map_or(0, |s| s.queue.len())
    }

    /// Whether stream `id`'s body has all arrived and none of it was taken.
    pub fn body_whole(&self, id: u32) -> bool {
        self.streams.get(&id).is_some_and(|s| s.body_ended && !s.reset && !s.body_taken)
    }

    /// Whether stream `id`'s body has all arrived (or cannot come any more).
    pub fn body_ended(&self, id: u32) -> bool {
        self.streams.get(&id).is_none_or(|s| s.body_ended)
    }

    /// Send the response head of stream `id`; `end`: it has no body.
    pub fn send_head(&mut self, id: u32, head: http::Response<()>, end: bool) -> Result<(), ()> {
        let Some(s) = self.streams.get_mut(&id) else { return Err(()) };
        let Some(mut respond) = s.respond.take() else { return Err(()) };
        match respond.send_response(head, end) {
            Ok(send) if !end => s.send = Some(send),
            Ok(_) => {}
            Err(_) => return Err(()),
        }
        self.flag.0.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Queue body bytes of stream `id`'s response; `end`: they are the last. Whether the
    /// writer is to wait (the queue is over the send buffer's size) before sending more.
    pub fn send_data(&mut self, id: u32, data: Bytes, end: bool) -> Result<bool, ()> {
        let Some(s) = self.streams.get_mut(&id) else { return Err(()) };
        if s.send.is_none() {
            return Err(());
        }
        // A small part with more to come waits for the `drive` that follows every response
        // part, which hands `h2` what the small parts made together; a response that is
        // one small part goes as it is.
        let small = data.len() <= SMALL_PART && !(end && s.queue.is_empty());
        if small {
            s.queue.push_small(&data);
        } else {
            s.queue.push(data);
        }
        if end {
            s.end = End::Data;
        }
        let mut cx = Context::from_waker(&self.waker);
        if (!small || end) && poll_send(s, &mut cx, self.send_buffer) {
            return Err(());
        }
        let wait = s.queue.len() >= self.send_buffer;
        if wait {
            s.writer_waiting = true;
        }
        Ok(wait)
    }

    /// End stream `id`'s response with trailers, once its queued body is out.
    pub fn send_trailers(&mut self, id: u32, fields: http::HeaderMap) -> Result<(), ()> {
        let Some(s) = self.streams.get_mut(&id) else { return Err(()) };
        if s.send.is_none() {
            return Err(());
        }
        s.end = End::Trailers(fields);
        let mut cx = Context::from_waker(&self.waker);
        if poll_send(s, &mut cx, self.send_buffer) {
            return Err(());
        }
        Ok(())
    }

    /// Reset stream `id` (the application failed after its head went out, or went away).
    pub fn reset(&mut self, id: u32, reason: Reason) {
        if let Some(s) = self.streams.get_mut(&id) {
            if let Some(r) = &mut s.respond {
                r.send_reset(reason);
            } else if let Some(send) = &mut s.send {
                send.send_reset(reason);
            }
            s.respond = None;
            s.send = None;
            s.recv = None;
            s.body_ended = true;
            s.queue.clear();
            s.reset = true;
        }
        self.streams.remove(&id);
        self.flag.0.store(true, Ordering::Relaxed);
    }

    /// The driver is done with stream `id`'s request head (and so, once the response is
    /// out, with the stream).
    pub fn request_taken(&mut self, id: u32) -> Option<http::request::Parts> {
        self.streams.get_mut(&id)?.request.take()
    }

    /// GOAWAY with the last stream id: streams in flight finish, no new one is accepted.
    pub fn graceful_shutdown(&mut self) {
        if let Phase::Open(conn) = &mut self.phase {
            conn.graceful_shutdown();
            self.flag.0.store(true, Ordering::Relaxed);
        }
    }

    /// GOAWAY with `reason` at once (a deadline passed).
    pub fn abrupt_shutdown(&mut self, reason: Reason) {
        if let Phase::Open(conn) = &mut self.phase {
            conn.abrupt_shutdown(reason);
            self.flag.0.store(true, Ordering::Relaxed);
        }
    }

    /// Send a keep-alive PING; false if none could be sent (the connection is not open).
    pub fn send_ping(&mut self) -> bool {
        let Some(ping) = &mut self.ping else { return false };
        if ping.send_ping(h2::Ping::opaque()).is_err() {
            return false;
        }
        self.ping_outstanding = true;
        self.flag.0.store(true, Ordering::Relaxed);
        true
    }

    /// A keep-alive PING awaits its answer.
    pub fn ping_outstanding(&self) -> bool {
        self.ping_outstanding
    }

    /// Streams open, from the connection's point of view.
    pub fn has_streams(&self) -> bool {
        !self.streams.is_empty()
    }

    /// Whether a stream's response waits on the client, as the last `drive` found them.
    pub fn stalled(&self) -> bool {
        self.stalled
    }

    /// Reset (CANCEL) the streams whose response has waited on the client longer than
    /// `timeout` with no byte moving, each reported as `Event::Reset`; how long until the
    /// next of those still waiting is due, if any.
    pub fn expire_stalled(&mut self, timeout: Duration, events: &mut Vec<Event>) -> Option<Duration> {
        let now = Instant::now();
        let mut next: Option<Duration> = None;
        let mut expired = Vec::new();
        for (&id, s) in &self.streams {
            let Some(since) = s.stalled_since else { continue };
            match timeout.checked_sub(now.saturating_duration_since(since)) {
                Some(left) if !left.is_zero() => next = Some(next.map_or(left, |n| n.min(left))),
                _ => expired.push(id),
            }
        }
        for id in expired {
            self.reset(id, Reason::CANCEL);
            events.push(Event::Reset(id));
        }
        self.stalled = next.is_some();
        next
    }
}

/// Move what arrived of the stream's body into its buffer; true if the stream failed.
fn poll_body(s: &mut Stream, cx: &mut Context<'_>, keep_from: usize) -> bool {
    let Some(recv) = &mut s.recv else { return false };
    loop {
        match recv.poll_data(cx) {
            Poll::Pending => return false,
            Poll::Ready(Some(Ok(b))) => s.body.push(b, keep_from),
            Poll::Ready(None) => {
                s.body_ended = true;
                s.recv = None;
                return false;
            }
            Poll::Ready(Some(Err(_))) => return true,
        }
    }
}

/// Hand the queued response bytes to `h2` as the stream's window allows, then its end;
/// true if the stream was reset.
fn poll_send(s: &mut Stream, cx: &mut Context<'_>, max_buffer: usize) -> bool {
    if let Some(respond) = &mut s.respond {
        return matches!(respond.poll_reset(cx), Poll::Ready(_));
    }
    if s.send.is_none() {
        return false;
    }
    if read_file(s, max_buffer).is_err() {
        if let Some(send) = &mut s.send {
            send.send_reset(Reason::INTERNAL_ERROR);
        }
        return true;
    }
    let Some(send) = &mut s.send else { return false };
    while !s.queue.is_empty() {
        let mut room = send.capacity();
        if room == 0 {
            send.reserve_capacity(s.queue.len().min(max_buffer.max(1)));
            match send.poll_capacity(cx) {
                Poll::Ready(Some(Ok(n))) if n > 0 => room = n,
                Poll::Ready(Some(Ok(_))) | Poll::Pending => {
                    s.stalled_since.get_or_insert_with(Instant::now);
                    break;
                }
                Poll::Ready(Some(Err(_))) | Poll::Ready(None) => return true,
            }
        }
        let Some(chunk) = s.queue.take(room) else { break };
        s.stalled_since = None;
        let last = s.queue.is_empty() && matches!(s.end, End::Data);
        if send.send_data(chunk, last).is_err() {
            return true;
        }
        if last {
            s.send = None;
            return false;
        }
    }
    if s.queue.is_empty() {
        match std::mem::replace(&mut s.end, End::No) {
            End::No => {}
            End::Data => {
                if send.send_data(Bytes::new(), true).is_err() {
                    return true;
                }
                s.send = None;
                return false;
            }
            End::Trailers(fields) => {
                if send.send_trailers(fields).is_err() {
                    return true;
                }
                s.send = None;
                return false;
            }
        }
    }
    matches!(send.poll_reset(cx), Poll::Ready(_))
}

/// Bytes of a file body read at a time.
const FILE_CHUNK: usize = 64 * 1024;

/// Top the stream's queue up from its file body, to the send buffer's size; the last
/// piece read ends the response.
fn read_file(s: &mut Stream, max_buffer: usize) -> std::io::Result<()> {
    use std::io::Read;
    let Some((file, left)) = &mut s.file else { return Ok(()) };
    while s.queue.len() < max_buffer.max(FILE_CHUNK) && *left > 0 {
        let n = usize::try_from(*left).unwrap_or(usize::MAX).min(FILE_CHUNK);
        let mut buf = vec![0u8; n];
        file.read_exact(&mut buf)?;
        *left -= n as u64;
        s.queue.push(Bytes::from(buf));
    }
    if *left == 0 {
        s.file = None;
        s.end = End::Data;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse::{find_head_end, parse_head, Limits};

    fn settings() -> Settings {
        Settings { connect_protocol: false, ..Settings::defaults() }
    }

    /// A client's preface, its SETTINGS with a stream window of `window`, and a GET on
    /// stream 1 (the frames an h2c upgrade of the same request makes).
    fn client(window: u32) -> Vec<u8> {
        let raw = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: \r\n\r\n";
        let limits =
            Limits { request_line: 8190, header_size: 8190, field_size: 8190, header_count: 100, body_size: 0 };
        let end = find_head_end(raw, &limits).ok().flatten().expect("a head");
        let head = parse_head(raw, end, &limits).expect("a head");
        let get = super::super::upgrade::stream_one(raw, &head, 16384, 32768).expect("stream 1");
        let mut settings = vec![0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 4];
        settings.extend_from_slice(&window.to_be_bytes());
        [super::super::PREFACE, &settings, &get].concat()
    }

    /// Whether `out` holds RST_STREAM on stream 1 with CANCEL.
    fn cancels_stream_one(out: &[u8]) -> bool {
        let mut at = 0;
        while at + 9 <= out.len() {
            let len = u32::from_be_bytes([0, out[at], out[at + 1], out[at + 2]]) as usize;
            if out[at + 3] == 0x3 && out[at + 5..at + 9] == [0, 0, 0, 1] && out[at + 9..at + 9 + len] == [0, 0, 0, 8] {
                return true;
            }
            at += 9 + len;
        }
        false
    }

    #[test]
    fn a_response_stalled_on_a_closed_window_is_reset_once_due() {
        let mut core = H2Core::new(&settings(), 1 << 20);
        core.push(&client(0));
        let mut events = Vec::new();
        core.drive(&mut events);
        assert_eq!(events, vec![Event::Request(1)]);
        assert!(core.send_head(1, http::Response::new(()), false).is_ok());
        assert_eq!(core.send_data(1, Bytes::from_static(b"body"), true), Ok(false));
        core.drive(&mut events);
        assert!(core.stalled());
        events.clear();
        // Not yet due: the time left comes back, and the stream stays.
        let left = core.expire_stalled(Duration::from_secs(60), &mut events);
        assert!(left.is_some_and(|l| l > Duration::from_secs(59)) && events.is_empty());
        assert!(!cancels_stream_one(&core.take_output()));
        // Due: reset with CANCEL and reported.
        assert_eq!(core.expire_stalled(Duration::ZERO, &mut events), None);
        assert_eq!(events, vec![Event::Reset(1)]);
        core.drive(&mut events);
        assert!(!core.stalled() && cancels_stream_one(&core.take_output()));
    }

    #[test]
    fn a_response_the_window_takes_never_stalls() {
        let mut core = H2Core::new(&settings(), 1 << 20);
        core.push(&client(65535));
        let mut events = Vec::new();
        core.drive(&mut events);
        assert!(core.send_head(1, http::Response::new(()), false).is_ok());
        assert_eq!(core.send_data(1, Bytes::from_static(b"body"), true), Ok(false));
        core.drive(&mut events);
        assert!(!core.stalled());
        assert_eq!(core.expire_stalled(Duration::ZERO, &mut events), None);
        assert!(!events.contains(&Event::Reset(1)));
    }
}
