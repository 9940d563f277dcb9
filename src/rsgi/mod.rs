//! The RSGI interface (granian's docs/spec/RSGI.md, version 1.6): `RsgiApp` (the
//! application and how its tasks start) is the `Dispatch` of the HTTP/1.1 connection;
//! `scope` is the request as the app reads it, `http` the HTTP protocol object (the body,
//! the responses, a streamed response's transport) and `websocket` the WebSocket protocol
//! object over the connection's `WsProtocol`, as ASGI's.

pub mod app;
pub mod http;
pub mod scope;
pub mod websocket;

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

create_exception!(
    swordfish.rsgi,
    ProtocolError,
    PyRuntimeError,
    "An RSGI protocol object was used out of turn (a WebSocket accepted twice)."
);

create_exception!(
    swordfish.rsgi,
    ProtocolClosed,
    PyRuntimeError,
    "The connection is over: nothing more can be sent on it."
);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<app::RsgiApp>()?;
    m.add_class::<scope::Scope>()?;
    m.add_class::<scope::Headers>()?;
    m.add_class::<http::HttpProtocol>()?;
    m.add_class::<http::StreamTransport>()?;
    m.add_class::<websocket::WebsocketProtocol>()?;
    m.add_class::<websocket::WebsocketTransport>()?;
    m.add_class::<websocket::WebsocketMessage>()?;
    m.add("RsgiProtocolError", m.py().get_type::<ProtocolError>())?;
    m.add("RsgiProtocolClosed", m.py().get_type::<ProtocolClosed>())?;
    Ok(())
}

/// A body or message the app gives as `bytes` (or any bytes-like object, copied).
fn bytes_arg<'py>(data: &Bound<'py, PyAny>, what: &str) -> PyResult<Bound<'py, PyBytes>> {
    match data.cast::<PyBytes>() {
        Ok(b) => Ok(b.clone()),
        Err(_) => {
            let copied =
                data.extract::<Vec<u8>>().map_err(|_| PyTypeError::new_err(format!("{what} must be bytes")))?;
            Ok(PyBytes::new(data.py(), &copied))
        }
    }
}
