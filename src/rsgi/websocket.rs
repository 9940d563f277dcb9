//! RSGI's WebSocket protocol object: `await accept()` answers the handshake and returns the
//! transport (`receive()`, `send_bytes()`, `send_str()`) over the connection's
//! `WsProtocol`, the same WebSocket layer ASGI's scope runs on; `close(status)` refuses the
//! handshake with that HTTP status before it, or closes the connection with that code after.

use super::app::RsgiApp;
use super::http::RSGI_APP_END;
use super::scope::Scope;
use super::{bytes_arg, ProtocolClosed, ProtocolError};
use crate::carrier::Carrier;
use crate::http::app_task::{ready, ready_none, task_exception};
use crate::http::respond::RespondError;
use crate::sync::GilCell;
use crate::ws::accept::{accept, deny, Accept};
use crate::ws::conn::{Payload, Received, SendError, WsInterface, WsProtocol, CLOSE_INTERNAL_ERROR};
use crate::ws::frame::{valid_close_code, CLOSE_NORMAL, CLOSE_POLICY_VIOLATION};
use crate::ws::handshake::{check_handshake, Upgrade};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use pyo3::{intern, PyTraverseError, PyVisit};
use std::sync::Arc;

/// `WebsocketMessage.kind`.
const KIND_CLOSED: u8 = 0;
const KIND_BYTES: u8 = 1;
const KIND_TEXT: u8 = 2;

/// A message from the client: `kind` 0 (the connection closed; `data` None), 1 (`data`
/// bytes) or 2 (`data` str).
#[pyclass(module = "swordfish.rsgi", name = "WebsocketMessage", frozen, get_all)]
pub struct WebsocketMessage {
    kind: u8,
    data: Py<PyAny>,
}

#[pymethods]
impl WebsocketMessage {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("WebsocketMessage(kind={}, data={})", self.kind, self.data.bind(py).repr()?))
    }
}

/// RSGI's messages for what a `WsProtocol` reads.
struct RsgiMessages;

impl WsInterface for RsgiMessages {
    fn text(&self, py: Python<'_>, text: &str) -> PyResult<Py<PyAny>> {
        let data = PyString::new(py, text).into_any().unbind();
        Ok(Py::new(py, WebsocketMessage { kind: KIND_TEXT, data })?.into_any())
    }

    fn bytes(&self, py: Python<'_>, data: Py<PyBytes>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, WebsocketMessage { kind: KIND_BYTES, data: data.into_any() })?.into_any())
    }

    fn disconnect(&self, py: Python<'_>, _code: u16, _reason: &str) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, WebsocketMessage { kind: KIND_CLOSED, data: py.None() })?.into_any())
    }
}

/// Where the handshake stands.
enum Stage {
    Handshake,
    Accepted(Py<WsProtocol>),
    /// Refused with an HTTP status.
    Denied,
}

#[pyclass(module = "swordfish.rsgi", name = "WebsocketProtocol", frozen)]
pub struct WebsocketProtocol {
    app: Py<RsgiApp>,
    carrier: Carrier,
    gen: u64,
    key: Vec<u8>,
    extensions: Vec<Vec<u8>>,
    stage: GilCell<Stage>,
}

/// Start the app's task for the WebSocket handshake of request `gen`.
pub fn start(app: &Bound<'_, RsgiApp>, carrier: &Carrier, scope: Bound<'_, Scope>, gen: u64) -> PyResult<()> {
    let py = app.py();
    let head = scope.get().head.clone();
    let protocol = matches!(carrier, Carrier::H2(_)).then_some("websocket");
    let (key, extensions) = match check_handshake(head.method(), 1, protocol, head.fields()) {
        Upgrade::Valid(u) => (u.key.to_vec(), u.extensions.iter().map(|e| e.to_vec()).collect()),
        _ => return Err(PyValueError::new_err("not a WebSocket handshake")),
    };
    let protocol = Bound::new(
        py,
        WebsocketProtocol {
            app: app.clone().unbind(),
            carrier: carrier.clone_ref(py),
            gen,
            key,
            extensions,
            stage: GilCell::new(Stage::Handshake),
        },
    )?;
    app.get().tasks.launch(
        py,
        carrier,
        gen,
        (scope, &protocol),
        false,
        || protocol.getattr(intern!(py, "_task_done")),
        |_| Ok(()),
        |exc| carrier.app_finished(py, gen, Some(exc), false, &RSGI_APP_END),
    )
}

impl WebsocketProtocol {
    /// Refuse the handshake with `status` and an empty body.
    fn deny(&self, py: Python<'_>, status: u16) -> PyResult<()> {
        *self.stage.lock(py)? = Stage::Denied;
        match deny(py, &self.carrier, self.gen, status)? {
            Ok(()) | Err(RespondError::Gone) => Ok(()),
            Err(_) => Err(ProtocolError::new_err("the handshake was already answered")),
        }
    }

    fn accepted(&self, py: Python<'_>) -> PyResult<Option<Py<WsProtocol>>> {
        Ok(match &*self.stage.lock(py)? {
            Stage::Accepted(ws) => Some(ws.clone_ref(py)),
            _ => None,
        })
    }
}

#[pymethods]
impl WebsocketProtocol {
    /// Answer the handshake; the transport, awaited.
    fn accept(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if !matches!(*self.stage.lock(py)?, Stage::Handshake) {
            return Err(ProtocolError::new_err("the WebSocket handshake was already answered"));
        }
        let app = self.app.get();
        let a = Accept {
            key: &self.key,
            extensions: &self.extensions,
            deflate: &app.ws_deflate,
            settings: app.ws_settings,
            iface: Arc::new(RsgiMessages),
            lp: app.tasks.lp.clone_ref(py),
        };
        let ws = match accept(py, &self.carrier, self.gen, a, None, &[])? {
            Ok(ws) => ws.unbind(),
            Err(RespondError::Gone) => return Err(ProtocolClosed::new_err("the client disconnected")),
            Err(_) => return Err(ProtocolError::new_err("the WebSocket handshake was already answered")),
        };
        *self.stage.lock(py)? = Stage::Accepted(ws.clone_ref(py));
        ready(py, Py::new(py, WebsocketTransport { ws })?.into_any())
    }

    /// Before `accept()`: refuse the handshake with HTTP status `status` (403 if None).
    /// After: close the connection with close code `status` (1000 if None). Apps pass an
    /// HTTP status there too (Emmett gives its handler's, 200 or 500): one that is not a
    /// close code closes with 1000 below 400, 1008 (policy) for 4xx, 1011 (error) above.
    #[pyo3(signature = (status=None))]
    fn close(&self, py: Python<'_>, status: Option<u16>) -> PyResult<()> {
        if let Some(ws) = self.accepted(py)? {
            let code = match status {
                None => CLOSE_NORMAL,
                Some(code) if valid_close_code(code) => code,
                Some(status) if status < 400 => CLOSE_NORMAL,
                Some(status) if status < 500 => CLOSE_POLICY_VIOLATION,
                Some(_) => CLOSE_INTERNAL_ERROR,
            };
            return WsProtocol::close(ws.bind(py), code, "");
        }
        if matches!(*self.stage.lock(py)?, Stage::Denied) {
            return Ok(());
        }
        self.deny(py, status.unwrap_or(403))
    }

    /// The app's task is done: an open connection closes (1000, or 1011 after an error),
    /// a handshake left unanswered is refused with 403.
    fn _task_done(&self, py: Python<'_>, task: &Bound<'_, PyAny>) -> PyResult<()> {
        let exc = task_exception(task)?;
        let unanswered = matches!(*self.stage.lock(py)?, Stage::Handshake);
        let closed = |e: &Py<PyAny>| e.bind(py).is_instance_of::<ProtocolClosed>();
        if let Some(ws) = self.accepted(py)? {
            let failed = exc.as_ref().is_some_and(|e| !closed(e));
            WsProtocol::close(ws.bind(py), if failed { CLOSE_INTERNAL_ERROR } else { CLOSE_NORMAL }, "")?;
        } else if unanswered && exc.is_none() {
            if let Err(e) = self.deny(py, 403) {
                e.write_unraisable(py, None);
            }
        }
        let disconnected = exc.as_ref().is_some_and(closed);
        self.carrier.app_finished(py, self.gen, exc, disconnected, &RSGI_APP_END)
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

/// An accepted WebSocket connection, as the app uses it.
#[pyclass(module = "swordfish.rsgi", name = "WebsocketTransport", frozen)]
pub struct WebsocketTransport {
    ws: Py<WsProtocol>,
}

impl WebsocketTransport {
    fn send(&self, py: Python<'_>, payload: Payload<'_>) -> PyResult<Py<PyAny>> {
        match WsProtocol::send(self.ws.bind(py), payload)? {
            Ok(None) => ready_none(py),
            Ok(Some(fut)) => Ok(fut),
            Err(SendError::Closed) => Err(ProtocolClosed::new_err("the WebSocket is closed")),
        }
    }
}

#[pymethods]
impl WebsocketTransport {
    /// The next message; once the connection is closed, a message of kind 0.
    fn receive(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match WsProtocol::receive(self.ws.bind(py))? {
            Received::Now(msg) => ready(py, msg),
            Received::Wait(fut) => Ok(fut),
        }
    }

    fn send_bytes(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let data = bytes_arg(data, "send_bytes's data")?;
        self.send(py, Payload::Binary(data))
    }

    fn send_str(&self, py: Python<'_>, data: &Bound<'_, PyString>) -> PyResult<Py<PyAny>> {
        self.send(py, Payload::Text(data.to_str()?))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.ws)
    }
}
