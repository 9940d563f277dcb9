//! The ASGI 3 interface: `AsgiApp` (the application and the constant parts of its scopes)
//! is the `Dispatch` of the HTTP/1.1 connection; `http` serves the `http` scope and
//! `websocket` the `websocket` scope; `start` starts the app's task of an `http` scope.

pub mod app;
pub mod http;
pub mod start;
pub mod websocket;

pub use crate::http::app_task::{ready, ready_none, Ready};
pub use crate::http::ClientDisconnected;
use pyo3::prelude::*;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<app::AsgiApp>()?;
    m.add_class::<http::Receive>()?;
    m.add_class::<http::Send>()?;
    m.add_class::<Ready>()?;
    m.add_class::<websocket::WsSession>()?;
    m.add_class::<crate::ws::conn::WsProtocol>()?;
    Ok(())
}
