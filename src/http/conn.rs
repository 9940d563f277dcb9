//! The state of one HTTP connection (`Conn`) and of the request it is serving (`Request`),
//! as enums of where each side stands rather than flags, and `Act`: the work the protocol
//! collects under the connection's lock and runs after releasing it (see `acts`).

use super::encode::Encoder;
use super::head::ResponseHead;
use super::parse::ChunkedDecoder;
use crate::transport::stream::{Hold, StreamCore};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TimerKind {
    None,
    /// The head of a request must be complete by the deadline (slowloris).
    Header,
    /// An idle kept-alive connection closes at the deadline.
    KeepAlive,
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
pub struct Request {
    pub gen: u64,
    pub minor: u8,
    pub head_method: bool,
    pub keep_alive: bool,
    pub reading: Reading,
    pub body_buf: Vec<u8>,
    pub expect: Expect,
    /// Readers waiting for the body (for ASGI, pending `receive()` calls), oldest first: a
    /// body message goes to the first still waiting, the disconnect to all.
    pub receive_waiters: Vec<Py<PyAny>>,
    pub writing: Writing,
    /// The interface takes the connection over if the application accepts (a WebSocket
    /// handshake).
    pub upgrade: bool,
    /// The status of the response (for the access log).
    pub status: u16,
    /// Body bytes of the response sent (for the access log).
    pub sent: u64,
    /// The request as the interface made it, for the access log (None once logged).
    pub log: Option<Py<PyAny>>,
    /// When the head was complete, if the access log or the metrics want the response's
    /// duration (None once it is recorded: see `HttpProtocol::record`).
    pub start: Option<f64>,
}

impl Request {
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

pub struct Conn {
    pub transport: Option<Py<PyAny>>,
    pub write: Option<Py<PyAny>>,
    /// The native half of a swordfish socket transport: responses are written straight
    /// into it, without a bytes object or a call through the Python transport.
    pub core: Option<Py<StreamCore>>,
    pub client: Option<Py<PyAny>>,
    pub server: Option<Py<PyAny>>,
    pub https: bool,
    /// A PROXY protocol header is still to come before the first request.
    pub proxy_preface: bool,
    pub rbuf: Vec<u8>,
    pub req: Option<Request>,
    pub gen: u64,
    pub phase: Phase,
    /// Graceful shutdown asked for: the current request is the last.
    pub shutdown: bool,
    pub reading_paused: bool,
    pub writing_paused: bool,
    pub drain_waiters: Vec<Py<PyAny>>,
    /// Waiting for the client to go (an RSGI app's `client_disconnect()`).
    pub lost_waiters: Vec<Py<PyAny>>,
    pub timer: Option<Py<PyAny>>,
    pub timer_at: f64,
    pub deadline: f64,
    pub timer_kind: TimerKind,
    /// This connection's number in the order connections came (`connections_made`): the
    /// coarse clock gives connections accepted together one deadline, and shedding takes
    /// the oldest first.
    pub number: u64,
    pub on_timer: Option<Py<PyAny>>,
    /// The applications of this connection still running, by request generation, with
    /// their task once it is known: the current request's, and earlier ones that completed
    /// their response but have not returned yet.
    pub apps: Vec<(u64, Option<Py<PyAny>>)>,
    /// The protocol the connection switched to (it has `shutdown()` and `abort()`).
    pub upgraded: Option<Py<PyAny>>,
    /// A static file's request waits in the read buffer until the answers before it are
    /// written (see `static_files::serve`).
    pub static_held: bool,
    /// Bytes of static answers queued since the acts last ran.
    pub static_burst: usize,
}

impl Conn {
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
    pub fn current(&mut self, gen: u64) -> Option<&mut Request> {
        self.req.as_mut().filter(|r| r.gen == gen)
    }
}

/// Work to do once the lock is released, in order.
pub enum Act {
    Write(Vec<u8>),
    /// Response bytes held for the end of the loop iteration (on swordfish's transport).
    WriteLater(Vec<u8>, Hold),
    /// A large body by reference; held as `WriteLater` is when a `Hold` is given.
    WriteObj(Py<PyBytes>, Option<Hold>),
    Close,
    Abort,
    PauseReading,
    ResumeReading,
    /// Start the application for a request (the interface's request object, generation).
    Start(Py<PyAny>, u64),
    Resolve(Py<PyAny>, Py<PyAny>),
    ArmTimer(f64),
    CancelTimer(Py<PyAny>),
    Forget,
    LogError(String, Option<Py<PyAny>>),
    /// (request, or None for input refused before it made one; client; status; body size;
    /// seconds)
    AccessLog(Option<Py<PyAny>>, Option<Py<PyAny>>, u16, u64, f64),
    /// Queue `len` bytes of a file from `offset` on swordfish's socket transport, after
    /// what is written before (it sends them with `sendfile`).
    WriteFile {
        file: std::fs::File,
        offset: u64,
        len: u64,
    },
    /// Send `len` bytes of a file from `offset` as the body of request `gen`, through
    /// `sender` (another loop's transport, or TLS: see `send_file_body`).
    SendFile {
        file: std::fs::File,
        offset: u64,
        len: u64,
        gen: u64,
        sender: Py<PyAny>,
    },
}
