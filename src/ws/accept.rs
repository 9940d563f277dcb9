//! Answering a WebSocket handshake on an HTTP/1.1 connection, for any interface: accepting
//! (the `101` with the negotiated extension goes out, the connection hands its transport
//! over, and a `WsProtocol` speaking the interface's messages takes it from there), or
//! refusing with an HTTP status.

use super::conn::{WsInterface, WsProtocol, WsSettings};
use super::deflate::{negotiate, ServerConfig};
use super::handshake::{accept_key, write_accept};
use crate::http::head::HeadBuilder;
use crate::http::protocol::HttpProtocol;
use crate::http::respond::{Part, RespondError};
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Arc;

/// A handshake to accept: the request's `sec-websocket-key` and extension offers, and the
/// server's settings.
pub struct Accept<'a> {
    pub key: &'a [u8],
    pub extensions: &'a [Vec<u8>],
    pub deflate: &'a ServerConfig,
    pub settings: WsSettings,
    pub iface: Arc<dyn WsInterface>,
    pub lp: Py<PyAny>,
}

/// Answer request `gen` of `proto` with the `101` (with `subprotocol` and the app's extra
/// `headers`) and start the WebSocket connection on its transport.
pub fn accept<'py>(
    proto: &Bound<'py, HttpProtocol>,
    gen: u64,
    a: Accept<'_>,
    subprotocol: Option<&str>,
    headers: &[(&[u8], &[u8])],
) -> PyResult<Result<Bound<'py, WsProtocol>, RespondError>> {
    let py = proto.py();
    let negotiated = negotiate(a.extensions, a.deflate);
    let mut head = Vec::with_capacity(256);
    write_accept(&mut head, &accept_key(a.key), subprotocol, negotiated.as_ref().map(|(_, h)| h.as_str()), headers)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let handover = match HttpProtocol::upgrade(proto, gen, head)? {
        Ok(h) => h,
        Err(e) => return Ok(Err(e)),
    };
    let transport = handover.transport.bind(py);
    let ws = Bound::new(
        py,
        WsProtocol::new(
            py,
            a.settings,
            a.iface,
            a.lp,
            proto.clone().into_any().unbind(),
            transport,
            negotiated.map(|(n, _)| n),
        )?,
    )?;
    proto.get().upgraded_to(py, ws.clone().into_any().unbind())?;
    transport.call_method1(intern!(py, "set_protocol"), (&ws,))?;
    WsProtocol::start(&ws, handover.waiters)?;
    if handover.reading_paused {
        transport.call_method0(intern!(py, "resume_reading"))?;
    }
    if !handover.leftover.is_empty() {
        WsProtocol::feed(&ws, &handover.leftover)?;
    }
    Ok(Ok(ws))
}

/// Refuse the handshake of request `gen` with `status` and an empty body. The client may
/// have sent frames behind its handshake: the connection is not reused.
pub fn deny(proto: &Bound<'_, HttpProtocol>, gen: u64, status: u16) -> PyResult<Result<(), RespondError>> {
    let py = proto.py();
    let rules = proto.get().state.get().settings.head_rules();
    let mut head =
        HeadBuilder::new(status).and_then(|b| b.finish(&rules)).map_err(|e| PyValueError::new_err(e.to_string()))?;
    head.close = true;
    let parts = [Part::head(head, false), Part::Body { body: PyBytes::new(py, b""), more: false }];
    Ok(HttpProtocol::respond_parts(proto, gen, parts)?.map(|_| ()))
}
