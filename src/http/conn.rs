//! The state of one HTTP/1.1 connection (`Conn`) and of the request it is serving
//! (`Request`), as enums of where each side stands rather than flags, and `Act`: the work
//! the connection's logic (`reading`, `writing`) asks for, run by whoever drives the
//! connection once its lock is released. None of it holds a Python object: what a driver
//! adds (the asyncio protocol's transport and waiters, see `link`) comes in through `World`,
//! so the same state and logic serve a connection on the loop and one served without it.

use super::encode::Encoder;
use super::head::ResponseHead;
use super::parse::ChunkedDecoder;
use crate::transport::stream::Hold;

/// What a driver of connections adds to the connection's state.
pub trait World: 'static {
    /// A large body part written by reference, not copied next to its head.
    type Bytes;
    /// Whether `Bytes` refers to the application's bytes: if making one copies them, a body
    /// part is copied next to its head instead, once.
    const BY_REFERENCE: bool;
    /// The request as the access log formats it.
    type Log;
    /// The driver's objects for one connection.
    type Objects;
    /// The driver's objects for one request.
    type RequestObjects: Default;
    /// Work only the driver can do, ordered among the connection's own.
    type Act;
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TimerKind {
    None,
    /// The head of a request must be complete by the deadline (slowloris).
    Header,
    /// An idle kept-alive connection closes at the deadline.
    KeepAlive,
}

/// Body bytes read for the application: a buffer, and where they start in it. A request
/// that arrives whole keeps its head's buffer, the head skipped rather than the body moved
/// down over it; the buffer can then pass to a reader (the WSGI input) without a copy.
#[derive(Default)]
pub struct BodyBuf {
    buf: Vec<u8>,
    start: usize,
}

impl BodyBuf {
    /// The bytes of `buf` from `start` on.
    pub fn from_parts(buf: Vec<u8>, start: usize) -> BodyBuf {
        let start = start.min(buf.len());
        BodyBuf { buf, start }
    }

    pub fn into_parts(self) -> (Vec<u8>, usize) {
        (self.buf, self.start)
    }

    pub fn bytes(&self) -> &[u8] {
        self.buf.get(self.start..).unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where more bytes are appended.
    pub fn tail(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Empty, keeping the buffer unless it is larger than `keep` bytes.
    pub fn clear(&mut self, keep: usize) {
        if self.buf.capacity() > keep {
            self.buf = Vec::new();
        }
        self.buf.clear();
        self.start = 0;
    }
}

/// How much of the body is still to come.
pub enum BodyState {
    Length(u64),
    Chunked(ChunkedDecoder),
}

/// The request body, as the connection reads it.
pub enum Reading {
    /// Arriving, kept for the application.
    Body(BodyState),
    /// Arriving after the response completed: read and dropped.
    Discard(BodyState),
    /// All read; its end not handed to the application yet.
    Ended,
    /// All read, and the application has its end.
    Done,
}

impl Reading {
    pub fn new(body: BodyState) -> Reading {
        match body {
            BodyState::Length(0) => Reading::Ended,
            body => Reading::Body(body),
        }
    }

    /// The whole body has been read.
    pub fn is_read(&self) -> bool {
        matches!(self, Reading::Ended | Reading::Done)
    }
}

/// `Expect: 100-continue` (RFC 9110 §10.1.1).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Expect {
    None,
    /// The client waits for `100 Continue` before it sends the body.
    Waiting,
    /// `100 Continue` was sent.
    Answered,
}

/// The response, as the application gives it.
pub enum Writing {
    /// Nothing from the application yet.
    Init,
    /// The head, held until the first body message decides the framing.
    Head { head: ResponseHead, trailers: bool },
    /// The head is out; the body goes on.
    Body { encoder: Encoder, trailers: bool },
    /// The body is out; trailer fields are collected until the last of them.
    Trailers { encoder: Encoder, fields: Vec<u8> },
    /// The head is out and a file is being sent as the body: by the interface, which waits
    /// for it (its application has not returned), or by the connection's own sender
    /// (`by_connection`: static files, RSGI's `response_file`), which finishes it whatever
    /// the application does meanwhile.
    File { by_connection: bool },
    /// The response is complete, or the connection failed it (something was written).
    Done,
}

impl Writing {
    /// Whether any of the response has gone out (or the connection answered instead).
    pub fn head_written(&self) -> bool {
        !matches!(self, Writing::Init | Writing::Head { .. })
    }
}

/// The request being served.
pub struct Request<W: World> {
    pub gen: u64,
    pub minor: u8,
    pub head_method: bool,
    pub keep_alive: bool,
    pub reading: Reading,
    pub body_buf: BodyBuf,
    pub expect: Expect,
    pub writing: Writing,
    /// The interface takes the connection over if the application accepts (a WebSocket
    /// handshake).
    pub upgrade: bool,
    /// The status of the response (for the access log).
    pub status: u16,
    /// Body bytes of the response sent (for the access log).
    pub sent: u64,
    /// The request as the interface made it, for the access log (None once logged).
    pub log: Option<W::Log>,
    /// When the head was complete, if the access log or the metrics want the response's
    /// duration (None once it is recorded: see `Conn::record`).
    pub start: Option<f64>,
    pub objects: W::RequestObjects,
}

impl<W: World> Request<W> {
    pub fn complete(&self) -> bool {
        matches!(self.writing, Writing::Done)
    }
}

/// Where the connection stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Phase {
    Open,
    /// No new request is read: the connection closes once the current one is done.
    Closing,
    /// The transport is gone.
    Lost,
    /// The connection switched protocols (`upgraded`): the transport is that protocol's.
    Upgraded,
}

pub struct Conn<W: World> {
    pub https: bool,
    /// Response bytes and files are queued on a native socket writer (swordfish's socket
    /// transport), which sends files with `sendfile` itself.
    pub native_writer: bool,
    /// A PROXY protocol header is still to come before the first request.
    pub proxy_preface: bool,
    pub rbuf: Vec<u8>,
    pub req: Option<Request<W>>,
    pub gen: u64,
    pub phase: Phase,
    /// Graceful shutdown asked for: the current request is the last.
    pub shutdown: bool,
    pub reading_paused: bool,
    pub writing_paused: bool,
    /// A timer is armed, to fire at `timer_at`.
    pub timer_armed: bool,
    pub timer_at: f64,
    pub deadline: f64,
    pub timer_kind: TimerKind,
    /// This connection's number in the order connections came (`connections_made`): the
    /// coarse clock gives connections accepted together one deadline, and shedding takes
    /// the oldest first.
    pub number: u64,
    /// A static file's request waits in the read buffer until the answers before it are
    /// written (see `static_files::serve`).
    pub static_held: bool,
    /// Bytes of static answers queued since the acts last ran.
    pub static_burst: usize,
    pub objects: W::Objects,
}

impl<W: World> Conn<W> {
    pub fn new(objects: W::Objects) -> Self {
        Conn {
            https: false,
            native_writer: false,
            proxy_preface: false,
            rbuf: Vec::new(),
            req: None,
            gen: 0,
            phase: Phase::Open,
            shutdown: false,
            reading_paused: false,
            writing_paused: false,
            timer_armed: false,
            timer_at: 0.0,
            deadline: 0.0,
            timer_kind: TimerKind::None,
            number: 0,
            static_held: false,
            static_burst: 0,
            objects,
        }
    }

    pub fn lost(&self) -> bool {
        self.phase == Phase::Lost
    }

    /// Whether the connection is no longer this protocol's to answer on.
    pub fn gone(&self) -> bool {
        matches!(self.phase, Phase::Lost | Phase::Upgraded)
    }

    /// No more input is read (closing, or lost).
    pub fn closing(&self) -> bool {
        self.phase != Phase::Open
    }

    /// Stop reading requests: the connection closes once the current one is done.
    pub fn close_after(&mut self) {
        if self.phase == Phase::Open {
            self.phase = Phase::Closing;
        }
    }

    /// The request `gen`, if it is still the current one.
    pub fn current(&mut self, gen: u64) -> Option<&mut Request<W>> {
        self.req.as_mut().filter(|r| r.gen == gen)
    }
}

/// Work to do once the lock is released, in order.
pub enum Act<W: World> {
    Write(Vec<u8>),
    /// Response bytes that may be held for a moment (see `Hold`), so that what follows
    /// soon leaves in the same write.
    WriteLater(Vec<u8>, Hold),
    /// A large body by reference; held as `WriteLater` is when a `Hold` is given.
    WriteObj(W::Bytes, Option<Hold>),
    Close,
    Abort,
    PauseReading,
    ResumeReading,
    /// Arm the connection's timer to fire in this many seconds.
    ArmTimer(f64),
    /// Cancel the connection's timer.
    CancelTimer,
    /// (request, or None for input refused before it made one; status; body size;
    /// seconds; whether the request was refused before it began, so the log names the
    /// connection's client): the access log's line.
    AccessLog(Option<W::Log>, u16, u64, f64, bool),
    /// The request will hear nothing more: its waiting readers get the disconnect (for
    /// an upgrade request, if `true`, the interface's own).
    Unwait(W::RequestObjects, bool),
    /// Queue `len` bytes of a file from `offset` on the native writer, after what is
    /// written before (it sends them with `sendfile`).
    WriteFile {
        file: std::fs::File,
        offset: u64,
        len: u64,
    },
    /// Send `len` bytes of a file from `offset` as the body of request `gen` by the
    /// driver's own means (no native writer: another loop's transport, or TLS); it reports
    /// back with `file_sent`.
    SendFile {
        file: std::fs::File,
        offset: u64,
        len: u64,
        gen: u64,
    },
    /// The driver's own work.
    World(W::Act),
}
