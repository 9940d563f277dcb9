//! The asyncio protocol's world (`Loop`): what `HttpProtocol` adds to a connection's state —
//! the transport, the addresses as the interfaces present them, the waiters of the
//! application and of the loop's timer, the applications' tasks and the protocol an upgrade
//! switched to — and the work only it can do (`LoopAct`).

use super::conn::{self, World};
use crate::transport::stream::StreamCore;
use crate::transport::writer::Writer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

pub struct Loop;

impl World for Loop {
    type Bytes = Py<PyBytes>;
    const BY_REFERENCE: bool = true;
    type Log = Py<PyAny>;
    type Objects = Link;
    type RequestObjects = Readers;
    type Act = LoopAct;
}

pub type Conn = conn::Conn<Loop>;
pub type Request = conn::Request<Loop>;
pub type Act = conn::Act<Loop>;

/// A connection's Python objects.
#[derive(Default)]
pub struct Link {
    pub transport: Option<Py<PyAny>>,
    /// Where responses go: swordfish's transports take them without a bytes object or a
    /// call through the Python transport.
    pub writer: Option<Writer>,
    pub client: Option<Py<PyAny>>,
    pub server: Option<Py<PyAny>>,
    pub drain_waiters: Vec<Py<PyAny>>,
    /// Waiting for the client to go (an RSGI app's `client_disconnect()`).
    pub lost_waiters: Vec<Py<PyAny>>,
    pub timer: Option<Py<PyAny>>,
    pub on_timer: Option<Py<PyAny>>,
    /// The applications of this connection still running, by request generation, with
    /// their task once it is known: the current request's, and earlier ones that completed
    /// their response but have not returned yet.
    pub apps: Vec<(u64, Option<Py<PyAny>>)>,
    /// The protocol the connection switched to (it has `shutdown()` and `abort()`).
    pub upgraded: Option<Py<PyAny>>,
    /// Sends a file body when the connection has no native writer (`Act::SendFile`): the
    /// sender of the part that asked for it.
    pub file_sender: Option<Py<PyAny>>,
}

impl Link {
    /// The native half of a swordfish socket transport, when that is the writer (files are
    /// queued in it).
    pub fn stream(&self) -> Option<&Py<StreamCore>> {
        self.writer.as_ref().and_then(Writer::stream)
    }
}

/// Readers waiting for the body (for ASGI, pending `receive()` calls), oldest first: a
/// body message goes to the first still waiting, the disconnect to all.
#[derive(Default)]
pub struct Readers(pub Vec<Py<PyAny>>);

/// Work only the asyncio protocol can do.
pub enum LoopAct {
    /// Start the application for a request (the interface's request object, generation).
    Start(Py<PyAny>, u64),
    Resolve(Py<PyAny>, Py<PyAny>),
    /// Drop the connection from the server's set.
    Forget,
    LogError(String, Option<Py<PyAny>>),
    /// The client speaks HTTP/2: the connection goes to an HTTP/2 protocol, with what was
    /// read so far; after an h2c upgrade, with the request as stream 1's frames.
    Http2(Option<Vec<u8>>),
}
