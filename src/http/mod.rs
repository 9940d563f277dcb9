//! The HTTP/1.1 server protocol: parsing (`parse`), response serialization (`response`),
//! the asyncio protocol class (`protocol`) with its connection state (`conn`) and the work
//! it runs outside its lock (`acts`), and the ASGI glue (`asgi`).

pub mod acts;
pub mod asgi;
pub mod config;
pub mod conn;
pub mod parse;
pub mod protocol;
pub mod response;

use pyo3::prelude::*;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<config::HttpServerState>()?;
    m.add_class::<protocol::HttpProtocol>()?;
    m.add_class::<asgi::Receive>()?;
    m.add_class::<asgi::Send>()?;
    m.add_class::<asgi::Ready>()?;
    m.add("ClientDisconnected", m.py().get_type::<asgi::ClientDisconnected>())?;
    Ok(())
}
