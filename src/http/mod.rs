//! The HTTP/1.1 server connection, knowing no interface: parsing (`parse`), the response
//! head's rules (`head`) and body framing (`encode`), serialization helpers (`response`),
//! the asyncio protocol class (`protocol`) with its connection state (`conn`), its
//! request body API (`body`) and response API (`respond`), switching protocols (`upgrade`) and the work it runs outside
//! its lock (`acts`), how the asyncio interfaces start their apps' tasks (`app_task`), and the seam to the interface that serves the requests (`dispatch`,
//! with the request target as interfaces present it: `target`). Around it: the PROXY
//! protocol header (`proxy_protocol`), static files answered before any interface
//! (`static_files`) and which connections go first when descriptors run out (`shed`).

pub mod acts;
pub mod app_task;
pub mod body;
pub mod config;
pub mod conn;
pub mod dispatch;
pub mod encode;
pub mod head;
pub mod parse;
pub mod protocol;
pub mod proxy_protocol;
pub mod respond;
pub mod response;
pub mod shed;
pub mod static_files;
pub mod target;
pub mod upgrade;

use crate::transport::native::Feed;
use pyo3::create_exception;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

create_exception!(
    swordfish._native,
    ClientDisconnected,
    PyOSError,
    "Raised when the app writes to (or reads from) a client that went away: an ASGI `send` \
     (ASGI spec 2.4), a WSGI `write` or `wsgi.input` read."
);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<config::HttpServerState>()?;
    m.add_class::<protocol::HttpProtocol>()?;
    m.add("ClientDisconnected", m.py().get_type::<ClientDisconnected>())?;
    Ok(())
}

/// The socket transport's native read path for `HttpProtocol` (see `transport::native`).
pub fn native_reader(protocol: &Bound<'_, PyAny>) -> Option<Feed> {
    protocol.is_instance_of::<protocol::HttpProtocol>().then_some(feed)
}

fn feed(protocol: &Bound<'_, PyAny>, data: &[u8]) -> PyResult<()> {
    protocol::HttpProtocol::feed(protocol.cast::<protocol::HttpProtocol>()?, data)
}
