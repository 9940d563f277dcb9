//! The state of one HTTP connection (`Conn`) and of the request it is serving (`Request`),
//! and `Act`: the work the protocol collects under the connection's lock and runs after
//! releasing it (see `acts`).

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

pub enum BodyState {
    Length(u64),
    Chunked(ChunkedDecoder),
}

/// The request being served.
pub struct Request {
    pub gen: u64,
    pub minor: u8,
    pub head_method: bool,
    pub keep_alive: bool,
    pub body: BodyState,
    pub body_buf: Vec<u8>,
    pub body_done: bool,
    /// `more_body: False` was handed to the app.
    pub body_final_sent: bool,
    /// After the response, the rest of the body is read and dropped.
    pub discard: bool,
    pub expect_continue: bool,
    pub continue_sent: bool,
    /// Pending `receive()` calls, oldest first: a body message goes to the first still
    /// waiting, the disconnect to all (an app may listen for it in a task of its own).
    pub receive_waiters: Vec<Py<PyAny>>,
    // response
    pub started: bool,
    pub status: u16,
    /// Status line and headers, held until the first body message decides the framing.
    pub head: Vec<u8>,
    pub head_written: bool,
    pub app_length: Option<u64>,
    pub chunked: bool,
    pub sent: u64,
    pub trailers: bool,
    pub body_finished: bool,
    pub complete: bool,
    pub task_done: bool,
    pub scope: Option<Py<PyAny>>,
    pub start: f64,
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
    pub rbuf: Vec<u8>,
    pub req: Option<Request>,
    pub gen: u64,
    pub reading_paused: bool,
    pub writing_paused: bool,
    pub drain_waiters: Vec<Py<PyAny>>,
    pub lost: bool,
    /// No new request is read: the connection closes once the current one is done.
    pub closing: bool,
    pub shutdown: bool,
    pub timer: Option<Py<PyAny>>,
    pub timer_at: f64,
    pub deadline: f64,
    pub timer_kind: TimerKind,
    pub on_timer: Option<Py<PyAny>>,
    /// The apps of this connection still running, by request generation, with their task
    /// once it is known: the current request's, and earlier ones that completed their
    /// response but have not returned yet.
    pub apps: Vec<(u64, Option<Py<PyAny>>)>,
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
    StartApp(Py<PyAny>, u64),
    Resolve(Py<PyAny>, Py<PyAny>),
    ArmTimer(f64),
    CancelTimer(Py<PyAny>),
    Forget,
    LogError(String, Option<Py<PyAny>>),
    /// (scope, or None for input refused before it made a request; client; status; body
    /// size; seconds)
    AccessLog(Option<Py<PyAny>>, Option<Py<PyAny>>, u16, u64, f64),
}
