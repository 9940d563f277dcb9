//! The seam between an HTTP/1.1 connection and the interface that serves its requests
//! (ASGI today; WSGI and RSGI next). The connection parses, frames, keeps the socket, its
//! timers and its flow control; the interface turns a request into a call of the
//! application and reads back what the application answers, through the connection's
//! response API (`respond`). Interfaces register when the extension module starts, so that
//! this module names none of them.

use super::link::Conn;
use super::parse::{Head, Reject};
use super::protocol::HttpProtocol;
use pyo3::prelude::*;
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
    fn request(&self, py: Python<'_>, c: &Conn, head: &Head) -> Result<Served, Reject>;

    /// Run the application for request `gen` (called with the connection unlocked).
    fn start(&self, proto: &Bound<'_, HttpProtocol>, request: Py<PyAny>, gen: u64) -> PyResult<()>;

    /// What a reader waiting for the request body gets: `data`, and whether more follows.
    fn body_message(&self, py: Python<'_>, data: &[u8], more: bool) -> PyResult<Py<PyAny>>;

    /// What a reader gets once the request will hear nothing more (client gone, response
    /// complete); `upgrade`: the request asked to switch protocols (see `Served`).
    fn disconnect_message(&self, py: Python<'_>, upgrade: bool) -> PyResult<Py<PyAny>>;

    fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError>;

    fn as_any(&self) -> &dyn Any;
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
