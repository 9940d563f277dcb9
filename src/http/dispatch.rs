//! The seam between an HTTP/1.1 connection and the interface that serves its requests
//! (ASGI today; WSGI and RSGI next). The connection parses, frames, keeps the socket, its
//! timers and its flow control; the interface turns a request into a call of the
//! application and reads back what the application answers, through the connection's
//! response API (`respond`). Interfaces register when the extension module starts, so that
//! this module names none of them.

use super::link::Conn;
use super::parse::{Head, Reject};
use crate::carrier::Carrier;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{PyTraverseError, PyVisit};
use std::any::Any;
use std::sync::{Arc, OnceLock};

pub trait Dispatch: Send + Sync + 'static {
    /// A connection's `server` address: the interface may keep one shared object for it.
    fn server_address(&self, py: Python<'_>, server: Option<Py<PyAny>>) -> PyResult<Option<Py<PyAny>>> {
        let _ = py;
        Ok(server)
    }

    /// A request head is complete: what the interface serves it with (for ASGI, the
    /// scope). `Err`: the request is refused with that status.
    fn request(&self, py: Python<'_>, view: &RequestView<'_>) -> Result<Served, Reject>;

    /// Run the application for request `gen` (called with the connection unlocked).
    fn start(&self, py: Python<'_>, carrier: &Carrier, request: Py<PyAny>, gen: u64) -> PyResult<()>;

    /// What a reader waiting for the request body gets: `data`, and whether more follows.
    fn body_message(&self, py: Python<'_>, data: Bound<'_, PyBytes>, more: bool) -> PyResult<Py<PyAny>>;

    /// What a reader gets once the request will hear nothing more (client gone, response
    /// complete); `upgrade`: the request asked to switch protocols (see `Served`).
    fn disconnect_message(&self, py: Python<'_>, upgrade: bool) -> PyResult<Py<PyAny>>;

    fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError>;

    fn as_any(&self) -> &dyn Any;
}

/// A request head as an interface reads it, whichever connection it came on: the head's
/// ranges index `buf`.
pub struct RequestView<'a> {
    pub buf: &'a [u8],
    pub head: &'a Head,
    pub client: Option<&'a Py<PyAny>>,
    pub server: Option<&'a Py<PyAny>>,
    pub https: bool,
    /// The request came on an HTTP/2 stream (its head then says HTTP/1.1).
    pub h2: bool,
    /// An HTTP/2 extended CONNECT's `:protocol` (its head says `GET`, and `upgrade`).
    pub connect_protocol: Option<&'a str>,
}

impl<'a> RequestView<'a> {
    /// A request of an HTTP/1.x connection on the loop.
    pub fn of(c: &'a Conn, head: &'a Head) -> Self {
        RequestView {
            buf: &c.rbuf,
            head,
            client: c.objects.client.as_ref(),
            server: c.objects.server.as_ref(),
            https: c.https,
            h2: false,
            connect_protocol: None,
        }
    }

    pub fn field(&self, r: &std::ops::Range<usize>) -> &'a [u8] {
        self.buf.get(r.clone()).unwrap_or_default()
    }
}

/// A request as the interface will serve it.
pub struct Served {
    /// What the interface starts the application with; also what the access log gets.
    pub request: Py<PyAny>,
    /// The interface takes the connection over if the application accepts (an upgrade).
    pub upgrade: bool,
}

/// Make the dispatcher of an interface object given to `HttpServerState`, if it is one.
pub type Recognise = fn(&Bound<'_, PyAny>) -> Option<Arc<dyn Dispatch>>;

static INTERFACES: OnceLock<Vec<Recognise>> = OnceLock::new();

/// Set the interfaces, once, when the extension module starts.
pub fn register(interfaces: Vec<Recognise>) {
    let _ = INTERFACES.set(interfaces);
}

pub fn recognise(interface: &Bound<'_, PyAny>) -> Option<Arc<dyn Dispatch>> {
    INTERFACES.get()?.iter().find_map(|r| r(interface))
}
