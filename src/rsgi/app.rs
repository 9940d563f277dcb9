//! `RsgiApp`: the RSGI interface of one server — the application, how its tasks start,
//! the WebSocket settings — and its `Dispatch`, through which the HTTP/1.1 connection
//! hands it requests.

use super::scope::Scope;
use crate::carrier::Carrier;
use crate::http::app_task::AppTasks;
use crate::http::dispatch::{Dispatch, RequestView, Served};
use crate::http::parse::Reject;
use crate::ws::conn::WsSettings;
use crate::ws::deflate::ServerConfig;
use crate::ws::handshake::{check_handshake, refusal_fields, Upgrade};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use pyo3::{PyTraverseError, PyVisit};
use std::any::Any;
use std::sync::Arc;

#[pyclass(module = "swordfish._native", frozen)]
pub struct RsgiApp {
    /// The application (its `__rsgi__` if it has one) and how its tasks start.
    pub tasks: AppTasks,
    /// `sender(protocol, transport, file, offset, size, gen, None)`: the coroutine that
    /// sends a file body where the transport cannot (TLS, another loop's transport).
    pub file_sender: Py<PyAny>,
    /// WebSocket upgrades are served (`--ws auto`); else they are plain `http` requests.
    pub ws_enabled: bool,
    pub ws_settings: WsSettings,
    pub ws_deflate: ServerConfig,
}

#[pymethods]
impl RsgiApp {
    #[new]
    #[pyo3(signature = (app, loop_, *, file_sender, eager_task, ws, ws_max_size, ws_max_queue, ws_ping_interval,
        ws_ping_timeout, ws_per_message_deflate))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        app: Py<PyAny>,
        loop_: Py<PyAny>,
        file_sender: Py<PyAny>,
        eager_task: Option<Py<PyAny>>,
        ws: bool,
        ws_max_size: usize,
        ws_max_queue: usize,
        ws_ping_interval: Option<f64>,
        ws_ping_timeout: Option<f64>,
        ws_per_message_deflate: bool,
    ) -> PyResult<Self> {
        Ok(RsgiApp {
            tasks: AppTasks::new(py, app, loop_, eager_task)?,
            file_sender,
            ws_enabled: ws,
            ws_settings: WsSettings::new(ws_max_size, ws_max_queue, ws_ping_interval, ws_ping_timeout),
            ws_deflate: ServerConfig { enabled: ws_per_message_deflate, ..ServerConfig::default() },
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.tasks.visit(&visit)?;
        visit.call(&self.file_sender)
    }
}

/// The RSGI interface as the HTTP/1.1 connection sees it.
pub struct RsgiDispatch(pub Py<RsgiApp>);

impl RsgiDispatch {
    /// The dispatcher of `interface`, if it is an `RsgiApp`.
    pub fn recognise(interface: &Bound<'_, PyAny>) -> Option<Arc<dyn Dispatch>> {
        let app = interface.cast::<RsgiApp>().ok()?;
        Some(Arc::new(RsgiDispatch(app.clone().unbind())))
    }
}

impl Dispatch for RsgiDispatch {
    fn request(&self, py: Python<'_>, view: &RequestView<'_>) -> Result<Served, Reject> {
        let app = self.0.get();
        let head = view.head;
        let mut websocket = false;
        if app.ws_enabled && head.upgrade {
            let field = |r: &std::ops::Range<usize>| view.field(r);
            let headers = head.headers.iter().map(|(n, v)| (field(n), field(v)));
            match check_handshake(field(&head.method), head.minor, view.connect_protocol, headers) {
                Upgrade::NotWebSocket => {}
                Upgrade::Refused(r) => return Err(Reject::Upgrade { status: r.status, field: refusal_fields(&r) }),
                Upgrade::Valid(_) => websocket = true,
            }
        }
        let scope = Scope::new(py, view, websocket)?;
        let request = Py::new(py, scope).map_err(|_| Reject::BadRequest("scope"))?.into_any();
        Ok(Served { request, upgrade: websocket })
    }

    fn start(&self, py: Python<'_>, carrier: &Carrier, request: Py<PyAny>, gen: u64) -> PyResult<()> {
        let scope = request.bind(py).cast::<Scope>()?.clone();
        if scope.get().is_websocket() {
            return super::websocket::start(self.0.bind(py), carrier, scope, gen);
        }
        super::http::start(self.0.bind(py), carrier, scope, gen)
    }

    /// `(data, more)`: what the body readers of `http` take apart.
    fn body_message(&self, py: Python<'_>, data: Bound<'_, PyBytes>, more: bool) -> PyResult<Py<PyAny>> {
        Ok(PyTuple::new(py, [data.into_any(), pyo3::types::PyBool::new(py, more).to_owned().into_any()])?
            .into_any()
            .unbind())
    }

    /// None: the body readers end, the handshake's wait too.
    fn disconnect_message(&self, py: Python<'_>, _upgrade: bool) -> PyResult<Py<PyAny>> {
        Ok(py.None())
    }

    fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.0)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
