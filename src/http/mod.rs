//! The HTTP/1.1 server connection, knowing no interface: parsing (`parse`), the response
//! head's rules (`head`) and body framing (`encode`), serialization helpers (`response`).
//! The connection's state (`conn`) and logic — its reading side (`reading`: heads, bodies,
//! refusals, keep-alive, deadlines) and writing side (`writing`: the response's parts) —
//! hold no Python object, and read the server's `settings` the same way; a driver adds
//! its own objects through `conn::World`. The asyncio protocol class (`protocol`) is the
//! driver on the loop (`link`: its objects), with its request body API (`body`), response
//! API (`respond`), switching protocols (`upgrade`) and the work it runs outside its lock
//! (`acts`); how the asyncio interfaces start their apps' tasks (`app_task`), and the seam
//! to the interface that serves the requests (`dispatch`, with the request target as
//! interfaces present it: `target`). Around it: the PROXY protocol header
//! (`proxy_protocol`), static files answered before any interface (`static_files`) and
//! which connections go first when descriptors run out (`shed`); `config` is the
//! server's state as Python builds it.

pub mod acts;
pub mod app_task;
pub mod body;
pub mod config;
pub mod conn;
#[cfg(test)]
mod core_tests;
pub mod dispatch;
pub mod encode;
pub mod head;
pub mod link;
pub mod parse;
pub mod protocol;
pub mod proxy_protocol;
pub mod reading;
pub mod respond;
pub mod response;
pub mod settings;
pub mod shed;
pub mod static_files;
pub mod target;
pub mod upgrade;
pub mod writing;

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
