//! The ASGI `websocket` scope (www spec 2.5): the handshake as the application sees it
//! (`websocket.connect`, then `websocket.accept`, `websocket.close` or the
//! `websocket.http.response` extension before it), then messages both ways through the
//! connection's `WsProtocol`. One `WsSession` per connection holds where the handshake
//! stands; its `receive` and `send` are the application's callables.

use super::app::AsgiApp;
use super::http::app_finished;
use super::{ready, ready_none, ClientDisconnected};
use crate::carrier::Carrier;
use crate::event_loop::create_future;
use crate::http::app_task::task_exception;
use crate::http::head::HeadBuilder;
use crate::http::respond::{Part, RespondError, Responded};
use crate::sync::GilCell;
use crate::ws::accept::Accept;
use crate::ws::conn::{Payload, Received, SendError, WsInterface, WsProtocol, CLOSE_ABNORMAL, CLOSE_INTERNAL_ERROR};
use crate::ws::frame::{valid_close_code, CLOSE_NORMAL};
use crate::ws::handshake::{check_handshake, Upgrade};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};

/// ASGI's messages for what a `WsProtocol` reads.
pub struct AsgiMessages;

impl WsInterface for AsgiMessages {
    fn text(&self, py: Python<'_>, text: &str) -> PyResult<Py<PyAny>> {
        let d = PyDict::new(py);
        d.set_item(intern!(py, "type"), intern!(py, "websocket.receive"))?;
        d.set_item(intern!(py, "text"), text)?;
        Ok(d.into_any().unbind())
    }

    fn bytes(&self, py: Python<'_>, data: Py<PyBytes>) -> PyResult<Py<PyAny>> {
        let d = PyDict::new(py);
        d.set_item(intern!(py, "type"), intern!(py, "websocket.receive"))?;
        d.set_item(intern!(py, "bytes"), data)?;
        Ok(d.into_any().unbind())
    }

    fn disconnect(&self, py: Python<'_>, code: u16, reason: &str) -> PyResult<Py<PyAny>> {
        disconnect_message(py, code, reason)
    }
}

pub fn disconnect_message(py: Python<'_>, code: u16, reason: &str) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "type"), intern!(py, "websocket.disconnect"))?;
    d.set_item(intern!(py, "code"), code)?;
    d.set_item(intern!(py, "reason"), reason)?;
    Ok(d.into_any().unbind())
}

/// Turn an `http` scope into the `websocket` scope of the same request.
pub fn websocket_scope(
    py: Python<'_>,
    scope: &Bound<'_, PyDict>,
    https: bool,
    subprotocols: &[String],
) -> PyResult<()> {
    scope.set_item(intern!(py, "type"), intern!(py, "websocket"))?;
    scope.set_item(intern!(py, "scheme"), if https { intern!(py, "wss") } else { intern!(py, "ws") })?;
    scope.del_item(intern!(py, "method"))?;
    scope.set_item(intern!(py, "subprotocols"), PyList::new(py, subprotocols)?)?;
    let asgi = PyDict::new(py);
    asgi.set_item("version", "3.0")?;
    asgi.set_item("spec_version", "2.5")?;
    scope.set_item(intern!(py, "asgi"), asgi)?;
    let extensions = PyDict::new(py);
    extensions.set_item("websocket.http.response", PyDict::new(py))?;
    scope.set_item(intern!(py, "extensions"), extensions)?;
    Ok(())
}

/// Where the handshake stands.
enum Stage {
    /// `websocket.connect` not yet received by the application.
    Connecting,
    /// The application has `websocket.connect` and has not answered.
    Handshake,
    Accepted(Py<WsProtocol>),
    /// Refused with a close or an HTTP response.
    Denied,
}

#[pyclass(module = "swordfish._native", frozen)]
pub struct WsSession {
    app: Py<AsgiApp>,
    carrier: Carrier,
    gen: u64,
    /// The request's `sec-websocket-key` and `sec-websocket-extensions` values.
    key: Vec<u8>,
    extensions: Vec<Vec<u8>>,
    stage: GilCell<Stage>,
}

/// Start the application for a `websocket` scope.
pub fn start(app: &Bound<'_, AsgiApp>, carrier: &Carrier, scope: Py<PyAny>, gen: u64) -> PyResult<()> {
    let py = app.py();
    let (key, extensions) = handshake_of(scope.bind(py), matches!(carrier, Carrier::H2(_)))?;
    let session = Bound::new(
        py,
        WsSession {
            app: app.clone().unbind(),
            carrier: carrier.clone_ref(py),
            gen,
            key,
            extensions,
            stage: GilCell::new(Stage::Connecting),
        },
    )?;
    let receive = session.getattr(intern!(py, "receive"))?;
    let send = session.getattr(intern!(py, "send"))?;
    app.get().tasks.launch(
        py,
        carrier,
        gen,
        (scope, receive, send),
        false,
        || session.getattr(intern!(py, "_task_done")),
        |_| Ok(()),
        |exc| app_finished(py, carrier, gen, Some(exc)),
    )
}

/// The key and extension offers of a valid handshake, from the scope's headers (`h2`: an
/// HTTP/2 extended CONNECT's, which has no key).
fn handshake_of(scope: &Bound<'_, PyAny>, h2: bool) -> PyResult<(Vec<u8>, Vec<Vec<u8>>)> {
    let py = scope.py();
    let headers = scope.get_item(intern!(py, "headers"))?;
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for item in headers.try_iter()? {
        let item = item?;
        let t = item.cast::<PyTuple>()?;
        pairs.push((t.get_item(0)?.extract()?, t.get_item(1)?.extract()?));
    }
    let protocol = h2.then_some("websocket");
    match check_handshake(b"GET", 1, protocol, pairs.iter().map(|(n, v)| (n.as_slice(), v.as_slice()))) {
        Upgrade::Valid(u) => Ok((u.key.to_vec(), u.extensions.iter().map(|e| e.to_vec()).collect())),
        _ => Err(PyValueError::new_err("not a WebSocket handshake")),
    }
}

fn get<'py>(msg: &Bound<'py, PyAny>, key: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyAny>>> {
    super::http::message_get(msg, key)
}

fn respond_error(e: RespondError) -> PyErr {
    match e {
        RespondError::Gone => ClientDisconnected::new_err("the client disconnected"),
        _ => PyRuntimeError::new_err("Unexpected ASGI message: the handshake's response is already complete."),
    }
}

impl WsSession {
    fn accept(slf: &Bound<'_, Self>, msg: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let app = this.app.get();
        let subprotocol: Option<String> = match get(msg, intern!(py, "subprotocol"))? {
            Some(s) if !s.is_none() => Some(s.extract()?),
            _ => None,
        };
        let mut headers: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        if let Some(h) = get(msg, intern!(py, "headers"))?.filter(|h| !h.is_none()) {
            for item in h.try_iter()? {
                let (n, v): (Vec<u8>, Vec<u8>) = item?
                    .extract()
                    .map_err(|_| PyTypeError::new_err("headers must be [name: bytes, value: bytes] pairs"))?;
                headers.push((n, v));
            }
        }
        let pairs: Vec<(&[u8], &[u8])> = headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())).collect();
        let accept = Accept {
            key: &this.key,
            extensions: &this.extensions,
            deflate: &app.ws_deflate,
            settings: app.ws_settings,
            iface: std::sync::Arc::new(AsgiMessages),
            lp: app.tasks.lp.clone_ref(py),
        };
        let ws = crate::ws::accept::accept(py, &this.carrier, this.gen, accept, subprotocol.as_deref(), &pairs)?
            .map_err(respond_error)?;
        *this.stage.lock(py)? = Stage::Accepted(ws.unbind());
        Ok(())
    }

    /// Refuse the handshake with `status` and an empty body.
    fn deny(slf: &Bound<'_, Self>, status: u16) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        *this.stage.lock(py)? = Stage::Denied;
        crate::ws::accept::deny(py, &this.carrier, this.gen, status)?.map_err(respond_error)
    }

    fn accepted(&self, py: Python<'_>) -> PyResult<Option<Py<WsProtocol>>> {
        Ok(match &*self.stage.lock(py)? {
            Stage::Accepted(ws) => Some(ws.clone_ref(py)),
            _ => None,
        })
    }
}

#[pymethods]
impl WsSession {
    fn receive(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let mut stage = this.stage.lock(py)?;
        match &*stage {
            Stage::Connecting => {
                *stage = Stage::Handshake;
                drop(stage);
                let d = PyDict::new(py);
                d.set_item(intern!(py, "type"), intern!(py, "websocket.connect"))?;
                ready(py, d.into_any().unbind())
            }
            Stage::Accepted(ws) => {
                let ws = ws.clone_ref(py);
                drop(stage);
                match WsProtocol::receive(ws.bind(py))? {
                    Received::Now(msg) => ready(py, msg),
                    Received::Wait(fut) => Ok(fut),
                }
            }
            Stage::Denied => ready(py, disconnect_message(py, CLOSE_ABNORMAL, "")?),
            Stage::Handshake => {
                drop(stage);
                // Waits on the request: the handshake's answer or the client leaving ends it.
                let fut = create_future(this.app.get().tasks.lp.bind(py))?.unbind();
                if this.carrier.wait_handshake(py, this.gen, &fut)? {
                    Ok(fut)
                } else {
                    ready(py, disconnect_message(py, CLOSE_ABNORMAL, "")?)
                }
            }
        }
    }

    fn send(slf: &Bound<'_, Self>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let typ =
            get(message, intern!(py, "type"))?.ok_or_else(|| PyValueError::new_err("ASGI message without 'type'"))?;
        let typ = typ.cast_into::<PyString>().map_err(|_| PyTypeError::new_err("ASGI message 'type' must be str"))?;
        let ws = this.accepted(py)?;
        match (typ.to_str()?, ws) {
            ("websocket.send", Some(ws)) => {
                let bytes = get(message, intern!(py, "bytes"))?.filter(|b| !b.is_none());
                let text = get(message, intern!(py, "text"))?.filter(|t| !t.is_none());
                let sent = match (bytes, text) {
                    (Some(b), None) => {
                        let b = b.cast_into::<PyBytes>().map_err(|_| PyTypeError::new_err("'bytes' must be bytes"))?;
                        WsProtocol::send(ws.bind(py), Payload::Binary(b))?
                    }
                    (None, Some(t)) => {
                        let t = t.cast_into::<PyString>().map_err(|_| PyTypeError::new_err("'text' must be str"))?;
                        WsProtocol::send(ws.bind(py), Payload::Text(t.to_str()?))?
                    }
                    _ => return Err(PyValueError::new_err("'websocket.send' needs exactly one of 'bytes' and 'text'")),
                };
                match sent {
                    Ok(None) => ready_none(py),
                    Ok(Some(fut)) => Ok(fut),
                    Err(SendError::Closed) => Err(ClientDisconnected::new_err("the WebSocket is closed")),
                }
            }
            ("websocket.close", Some(ws)) => {
                let code: u16 = get(message, intern!(py, "code"))?
                    .filter(|c| !c.is_none())
                    .map_or(Ok(CLOSE_NORMAL), |c| c.extract())?;
                if !valid_close_code(code) {
                    return Err(PyValueError::new_err(format!("invalid close code {code}")));
                }
                let reason: String = get(message, intern!(py, "reason"))?
                    .filter(|r| !r.is_none())
                    .map_or(Ok(String::new()), |r| r.extract())?;
                if ws.get().is_closed(py)? {
                    return Err(ClientDisconnected::new_err("the WebSocket is closed"));
                }
                WsProtocol::close(ws.bind(py), code, &reason)?;
                ready_none(py)
            }
            ("websocket.accept", None) if !matches!(*this.stage.lock(py)?, Stage::Denied) => {
                Self::accept(slf, message)?;
                ready_none(py)
            }
            ("websocket.close", None) if !matches!(*this.stage.lock(py)?, Stage::Denied) => {
                Self::deny(slf, 403)?;
                ready_none(py)
            }
            ("websocket.http.response.start", None) => {
                let status: u16 = get(message, intern!(py, "status"))?
                    .ok_or_else(|| PyValueError::new_err("without 'status'"))?
                    .extract()?;
                let rules = this.carrier.state().settings.head_rules();
                let mut head = HeadBuilder::new(status).map_err(|e| PyValueError::new_err(e.to_string()))?;
                if let Some(h) = get(message, intern!(py, "headers"))?.filter(|h| !h.is_none()) {
                    for item in h.try_iter()? {
                        let (n, v): (Vec<u8>, Vec<u8>) = item?.extract()?;
                        head.field(&rules, &n, &v).map_err(|e| PyValueError::new_err(e.to_string()))?;
                    }
                }
                let mut head = head.finish(&rules).map_err(|e| PyValueError::new_err(e.to_string()))?;
                head.close = this.carrier.h1().is_some();
                *this.stage.lock(py)? = Stage::Denied;
                responded(py, this.carrier.respond(py, this.gen, Part::head(head, false))?)
            }
            ("websocket.http.response.body", None) => {
                let body = match get(message, intern!(py, "body"))? {
                    Some(b) => b.cast_into::<PyBytes>().map_err(|_| PyTypeError::new_err("'body' must be bytes"))?,
                    None => PyBytes::new(py, b""),
                };
                let more = get(message, intern!(py, "more_body"))?.map_or(Ok(false), |m| m.is_truthy())?;
                responded(py, this.carrier.respond(py, this.gen, Part::Body { body, more })?)
            }
            (_, Some(ws)) if ws.get().is_closed(py)? => Err(ClientDisconnected::new_err("the WebSocket is closed")),
            (other, _) => Err(PyRuntimeError::new_err(format!(
                "Unexpected ASGI message '{other}' at this point of the WebSocket connection"
            ))),
        }
    }

    /// The app's task is done.
    fn _task_done(slf: &Bound<'_, Self>, task: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let exc = task_exception(task)?;
        let stage_open = matches!(*this.stage.lock(py)?, Stage::Connecting | Stage::Handshake);
        if let Some(ws) = this.accepted(py)? {
            // Closed by the server: 1011 after an error, 1000 after a return (as uvicorn).
            let failed = exc.as_ref().is_some_and(|e| !e.bind(py).is_instance_of::<ClientDisconnected>());
            let code = if failed { CLOSE_INTERNAL_ERROR } else { CLOSE_NORMAL };
            WsProtocol::close(ws.bind(py), code, "")?;
        } else if stage_open && exc.is_none() {
            // Returned without accepting: denied, as uvicorn does.
            match Self::deny(slf, 403) {
                Err(e) if !e.is_instance_of::<ClientDisconnected>(py) => e.write_unraisable(py, Some(slf.as_any())),
                _ => {}
            }
        }
        app_finished(py, &this.carrier, this.gen, exc)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.app)?;
        self.carrier.traverse(&visit)?;
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        if let Some(stage) = self.stage.try_lock(py) {
            if let Stage::Accepted(ws) = &*stage {
                visit.call(ws)?;
            }
        }
        Ok(())
    }
}

fn responded(py: Python<'_>, r: Result<Responded, RespondError>) -> PyResult<Py<PyAny>> {
    match r.map_err(respond_error)? {
        Responded::Drain(fut) => Ok(fut),
        _ => ready_none(py),
    }
}
