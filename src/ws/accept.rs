//! Answering a WebSocket handshake, for any interface: accepting (the `101` with the
//! negotiated extension goes out and the HTTP/1.1 connection hands its transport over, or
//! the `200` goes out and the HTTP/2 stream becomes a tunnel, and a `WsProtocol` speaking
//! the interface's messages takes it from there), or refusing with an HTTP status.

use super::conn::{WsInterface, WsProtocol, WsSettings};
use super::deflate::{negotiate, ServerConfig};
use super::handshake::{accept_key, check_accept, write_accept};
use crate::carrier::Carrier;
use crate::http::head::HeadBuilder;
use crate::http::protocol::HttpProtocol;
use crate::http::respond::{Part, RespondError};
use crate::http2::protocol::H2Protocol;
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::atomic::Ordering;
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

/// Answer request `gen` with the acceptance (with `subprotocol` and the app's extra
/// `headers`) and start the WebSocket connection: over HTTP/1.1 a `101`, after which the
/// connection's transport is the WebSocket's; over HTTP/2 a `200`, after which the
/// stream is (RFC 8441 §5).
pub fn accept<'py>(
    py: Python<'py>,
    carrier: &Carrier,
    gen: u64,
    a: Accept<'_>,
    subprotocol: Option<&str>,
    headers: &[(&[u8], &[u8])],
) -> PyResult<Result<Bound<'py, WsProtocol>, RespondError>> {
    let negotiated = negotiate(a.extensions, a.deflate);
    let proto = match carrier {
        Carrier::H1(proto) => proto.bind(py),
        Carrier::H2(proto) => {
            check_accept(subprotocol, negotiated.as_ref().map(|(_, h)| h.as_str()), headers).map_err(value_error)?;
            let rules = carrier.state().settings.head_rules();
            let mut head = HeadBuilder::new(200).map_err(value_error)?;
            if let Some(p) = subprotocol {
                head.field(&rules, b"sec-websocket-protocol", p.as_bytes()).map_err(value_error)?;
            }
            if let Some((_, h)) = &negotiated {
                head.field(&rules, b"sec-websocket-extensions", h.as_bytes()).map_err(value_error)?;
            }
            for &(n, v) in headers {
                head.field(&rules, n, v).map_err(value_error)?;
            }
            let head = head.finish(&rules).map_err(value_error)?;
            let (tunnel, waiters) = match H2Protocol::open_tunnel(proto.bind(py), gen, head)? {
                Ok(t) => t,
                Err(e) => return Ok(Err(e)),
            };
            let owner = tunnel.clone().into_any().unbind();
            let deflate = negotiated.map(|(n, _)| n);
            let ws = Bound::new(py, WsProtocol::new(a.settings, a.iface, a.lp, owner, tunnel.as_any(), deflate)?)?;
            tunnel.call_method1(intern!(py, "set_protocol"), (&ws,))?;
            WsProtocol::start(&ws, waiters)?;
            H2Protocol::tunnel_started(proto.bind(py), gen as u32)?;
            close_if_shutting_down(carrier, &ws)?;
            return Ok(Ok(ws));
        }
    };
    let mut head = Vec::with_capacity(256);
    write_accept(&mut head, &accept_key(a.key), subprotocol, negotiated.as_ref().map(|(_, h)| h.as_str()), headers)
        .map_err(value_error)?;
    let handover = match HttpProtocol::upgrade(proto, gen, head)? {
        Ok(h) => h,
        Err(e) => return Ok(Err(e)),
    };
    let transport = handover.transport.bind(py);
    let ws = Bound::new(
        py,
        WsProtocol::new(
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
    close_if_shutting_down(carrier, &ws)?;
    Ok(Ok(ws))
}

/// A server's graceful shutdown tells the WebSockets open at that moment to close; one
/// whose handshake the app was still deciding then (or that came in on a connection the
/// shutdown had not reached yet) is accepted after that word went out, so it closes
/// here, as they did. Left open, it would hold the shutdown (or a retiring worker) up
/// until --timeout-graceful-shutdown, which is unbounded by default.
fn close_if_shutting_down(carrier: &Carrier, ws: &Bound<'_, WsProtocol>) -> PyResult<()> {
    let st = &carrier.state().settings;
    if st.shutting_down.load(Ordering::Relaxed) {
        WsProtocol::shutdown(ws, st.draining.load(Ordering::Relaxed))?;
    }
    Ok(())
}

fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// Refuse the handshake of request `gen` with `status` and an empty body. Over HTTP/1.1
/// the client may have sent frames behind its handshake: the connection is not reused.
pub fn deny(py: Python<'_>, carrier: &Carrier, gen: u64, status: u16) -> PyResult<Result<(), RespondError>> {
    let rules = carrier.state().settings.head_rules();
    let mut head = HeadBuilder::new(status).and_then(|b| b.finish(&rules)).map_err(value_error)?;
    head.close = carrier.h1().is_some();
    let parts = [Part::head(head, false), Part::Body { body: PyBytes::new(py, b""), more: false }];
    Ok(carrier.respond_parts(py, gen, parts)?.map(|_| ()))
}
