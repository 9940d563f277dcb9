//! `WsgiApp`: the WSGI interface of one server — the application, its environ template,
//! the app threads (`pool`) and the loop's side of the hand-off (`bridge`) — and its
//! `Dispatch`, through which the HTTP/1.1 connection hands it requests. Upgrade requests
//! are plain requests here: WSGI cannot take a connection over.

use super::bridge::{body_message, WsgiBridge};
use super::exchange::{Exchange, Route};
use super::pool::{AppContext, Pool};
use super::request::WsgiRequest;
use crate::carrier::Carrier;
use crate::http::dispatch::{Dispatch, RequestView, Served};
use crate::http::parse::Reject;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use pyo3::{PyTraverseError, PyVisit};
use std::any::Any;
use std::sync::Arc;

#[pyclass(module = "swordfish._native", frozen)]
pub struct WsgiApp {
    pool: Arc<Pool>,
}

#[pymethods]
impl WsgiApp {
    /// `environ`: the keys every request's environ starts with (the `wsgi.*` keys,
    /// `SCRIPT_NAME`, `SERVER_PROTOCOL` "HTTP/1.1", an empty `QUERY_STRING`); `threads`:
    /// the most app threads; `logger`: where response errors found on the loop go.
    #[new]
    /// `sendfile`: the coroutine function that sends a `wsgi.file_wrapper` file (see
    /// `WsgiBridge`); None where the loop has no `sendfile` (the file is then iterated).
    #[pyo3(signature = (app, loop_, *, environ, threads, logger, sendfile))]
    fn new(
        py: Python<'_>,
        app: Py<PyAny>,
        loop_: Py<PyAny>,
        environ: Bound<'_, PyDict>,
        threads: usize,
        logger: Py<PyAny>,
        sendfile: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let bridge = Py::new(py, WsgiBridge::new(py, loop_, logger, sendfile))?;
        let ctx = AppContext::new(app, environ)?;
        Ok(WsgiApp { pool: Arc::new(Pool::new(ctx, bridge, threads)) })
    }

    #[getter]
    fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// Stop the app threads (at the server's end): waits up to `timeout` seconds for the
    /// running requests' threads; returns how many are still running.
    fn close(&self, py: Python<'_>, timeout: f64) -> usize {
        self.pool.stop(py, timeout)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.pool.ctx.app)?;
        visit.call(&self.pool.ctx.environ)?;
        visit.call(&self.pool.bridge)
    }
}

/// The WSGI interface as the HTTP/1.1 connection sees it.
pub struct WsgiDispatch(Py<WsgiApp>);

impl WsgiDispatch {
    /// The dispatcher of `interface`, if it is a `WsgiApp`.
    pub fn recognise(interface: &Bound<'_, PyAny>) -> Option<Arc<dyn Dispatch>> {
        let app = interface.cast::<WsgiApp>().ok()?;
        Some(Arc::new(WsgiDispatch(app.clone().unbind())))
    }
}

impl Dispatch for WsgiDispatch {
    fn request(&self, py: Python<'_>, view: &RequestView<'_>) -> Result<Served, Reject> {
        let request = WsgiRequest::new(py, view)?;
        let request = Py::new(py, request).map_err(|_| Reject::BadRequest("request"))?;
        Ok(Served { request: request.into_any(), upgrade: false })
    }

    fn start(&self, py: Python<'_>, carrier: &Carrier, request: Py<PyAny>, gen: u64) -> PyResult<()> {
        let request = request.into_bound(py).cast_into::<WsgiRequest>()?.unbind();
        let bridge = self.0.get().pool.bridge.clone_ref(py);
        let ex = Arc::new(Exchange::new(Route::Loop { carrier: carrier.clone_ref(py), bridge }, gen, request));
        self.0.get().pool.prefetch(py, &ex)
    }

    fn body_message(&self, py: Python<'_>, data: Bound<'_, PyBytes>, more: bool) -> PyResult<Py<PyAny>> {
        body_message(py, data, more)
    }

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
