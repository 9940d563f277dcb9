//! `HttpServerState`: what every connection of one server shares — the interface that
//! serves its requests (`dispatch`), the loop, the settings (read once, not per
//! connection) and the counters the server runner needs for limits and graceful shutdown.

use super::dispatch::{self, Dispatch};
use super::parse::Limits;
use super::response::push_header;
use super::settings::Settings;
use super::static_files::StaticFiles;
use crate::metrics::counters::Counters;
use crate::metrics::slot::MetricsSlot;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PySet;
use pyo3::{PyTraverseError, PyVisit};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Default headers are matched against the app's with a bit each in a `u64`.
pub const MAX_DEFAULT_HEADERS: usize = 64;

#[pyclass(module = "swordfish._native", frozen)]
pub struct HttpServerState {
    pub dispatch: Arc<dyn Dispatch>,
    /// The interface object `dispatch` was made from (kept for the GC's traversal).
    pub interface: Py<PyAny>,
    pub lp: Py<PyAny>,
    pub logger: Py<PyAny>,
    /// `access_log(request, status, size, seconds, client)` or None.
    pub access_log: Option<Py<PyAny>>,
    /// `--proxy-protocol`: `trusted(host)` says whether a peer may send a PROXY header;
    /// None: connections start with HTTP.
    pub proxy_protocol: Option<Py<PyAny>>,
    /// `--static-path-dir`: the static files answered before the interface sees a request.
    pub static_files: Option<StaticFiles>,
    /// The open connections (HttpProtocol objects), for graceful shutdown.
    pub connections: Py<PySet>,
    /// What the connections read and count without Python objects.
    pub settings: Settings,
    /// HTTP/2 is served (`--http auto|2`, on the loop).
    pub http2: Option<crate::http2::Settings>,
}

#[pymethods]
impl HttpServerState {
    /// Every setting is given by the server (its defaults live in the settings table).
    #[new]
    #[pyo3(signature = (interface, loop_, *, logger, access_log, limit_request_line, limit_header_size,
        limit_request_field_size, limit_header_count, limit_body_size, limit_concurrency, timeout_header_read, timeout_keep_alive,
        date_header, server_header, default_headers, proxy_protocol=None, metrics=None, static_files=None, http2=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        interface: &Bound<'_, PyAny>,
        loop_: Py<PyAny>,
        logger: Py<PyAny>,
        access_log: Option<Py<PyAny>>,
        limit_request_line: usize,
        limit_header_size: usize,
        limit_request_field_size: usize,
        limit_header_count: usize,
        limit_body_size: Option<u64>,
        limit_concurrency: Option<usize>,
        timeout_header_read: f64,
        timeout_keep_alive: f64,
        date_header: bool,
        mut server_header: Option<Vec<u8>>,
        default_headers: Vec<(Vec<u8>, Vec<u8>)>,
        proxy_protocol: Option<Py<PyAny>>,
        metrics: Option<Py<MetricsSlot>>,
        static_files: Option<(String, PathBuf, Option<u64>, Py<PyAny>)>,
        http2: Option<crate::http2::SettingsTuple>,
    ) -> PyResult<Self> {
        let dispatch = dispatch::recognise(interface)
            .ok_or_else(|| PyTypeError::new_err("interface must be one of swordfish's native interfaces"))?;
        if !(timeout_header_read > 0.0 && timeout_keep_alive >= 0.0) {
            return Err(PyValueError::new_err("timeouts must be positive"));
        }
        if default_headers.len() > MAX_DEFAULT_HEADERS {
            return Err(PyValueError::new_err(format!("at most {MAX_DEFAULT_HEADERS} default headers")));
        }
        let mut defaults = Vec::new();
        for (name, value) in default_headers {
            let mut line = Vec::new();
            if !push_header(&mut line, &name, &value) {
                return Err(PyValueError::new_err(format!("invalid default header {name:?}")));
            }
            // A configured server header replaces the built-in one (in error responses too).
            if name.eq_ignore_ascii_case(b"server") {
                server_header = Some(value);
                continue;
            }
            defaults.push((name.to_ascii_lowercase(), line));
        }
        if let Some(s) = &server_header {
            if !push_header(&mut Vec::new(), b"server", s) {
                return Err(PyValueError::new_err("invalid server header"));
            }
        }
        let static_files = match static_files {
            Some((route, dir, expires, sender)) => {
                Some(StaticFiles::new(&route, &dir, expires, sender).map_err(PyValueError::new_err)?)
            }
            None => None,
        };
        let http2 = http2.map(crate::http2::Settings::from);
        let has_access_log = access_log.is_some();
        let counters = metrics.as_ref().map(|m| m.get().shared());
        Ok(HttpServerState {
            access_log,
            dispatch,
            static_files,
            interface: interface.clone().unbind(),
            lp: loop_,
            logger,
            proxy_protocol,
            connections: PySet::empty(py)?.unbind(),
            http2,
            settings: Settings {
                limits: Limits {
                    request_line: limit_request_line,
                    header_size: limit_header_size,
                    field_size: limit_request_field_size,
                    header_count: limit_header_count,
                    body_size: limit_body_size.unwrap_or(u64::MAX),
                },
                timeout_header: timeout_header_read,
                timeout_keep_alive,
                limit_concurrency: limit_concurrency.unwrap_or(usize::MAX),
                date_header,
                server_header,
                default_headers: defaults,
                access_log: has_access_log,
                metrics: counters,
                active_requests: AtomicUsize::new(0),
                total_requests: AtomicU64::new(0),
                connections_made: AtomicU64::new(0),
                shutting_down: AtomicBool::new(false),
                draining: AtomicBool::new(false),
            },
        })
    }

    #[getter]
    fn connections(&self, py: Python<'_>) -> Py<PySet> {
        self.connections.clone_ref(py)
    }

    /// Requests whose app task has not finished yet.
    #[getter]
    fn active_requests(&self) -> usize {
        self.settings.active_requests.load(Ordering::Relaxed)
    }

    /// `begin_shutdown` was called: new requests on kept-alive connections are refused
    /// (or drained), and a WebSocket accepted from now on closes at once.
    #[getter]
    fn shutting_down(&self) -> bool {
        self.settings.shutting_down.load(Ordering::Relaxed)
    }

    /// Requests started since the server began.
    #[getter]
    fn total_requests(&self) -> u64 {
        self.settings.total_requests.load(Ordering::Relaxed)
    }

    /// Out of descriptors: close the connections that are least use (`shed`) — every idle
    /// kept-alive one, then the oldest incomplete heads up to `want` in all. (idle, heads)
    /// closed.
    fn shed_connections(&self, py: Python<'_>, want: usize) -> PyResult<(usize, usize)> {
        super::shed::shed_connections(py, self, want)
    }

    /// New requests on kept-alive connections are refused from now on (they close instead);
    /// `drain`: answered with `connection: close` instead (a retiring worker).
    #[pyo3(signature = (drain=false))]
    fn begin_shutdown(&self, drain: bool) {
        self.settings.draining.store(drain, Ordering::Relaxed);
        self.settings.shutting_down.store(true, Ordering::Relaxed);
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.interface)?;
        visit.call(&self.lp)?;
        visit.call(&self.logger)?;
        visit.call(&self.access_log)?;
        visit.call(&self.proxy_protocol)?;
        if let Some(files) = &self.static_files {
            visit.call(&files.sender)?;
        }
        visit.call(&self.connections)?;
        self.dispatch.traverse(&visit)
    }
}

impl HttpServerState {
    /// An application's error on the server's error log, with its traceback if any.
    pub fn log_error(&self, py: Python<'_>, msg: String, exc: Option<Py<PyAny>>) -> PyResult<()> {
        let kwargs = pyo3::types::PyDict::new(py);
        if let Some(e) = exc {
            kwargs.set_item("exc_info", e)?;
        }
        self.logger.call_method(py, pyo3::intern!(py, "error"), (msg,), Some(&kwargs))?;
        Ok(())
    }

    /// Readers of a request's body still waiting hear that the request is over (the
    /// interface's disconnect message; `upgrade`: its own for a handshake's request).
    pub fn disconnect(&self, py: Python<'_>, readers: Vec<Py<PyAny>>, upgrade: bool) -> PyResult<()> {
        for w in readers {
            let w = w.bind(py);
            if !crate::tasks::is_done(w)? {
                let msg = self.dispatch.disconnect_message(py, upgrade)?;
                crate::tasks::set_result(w, msg.bind(py))?;
            }
        }
        Ok(())
    }

    /// `--metrics`: where this worker counts what it serves.
    pub fn metrics(&self) -> Option<&Counters> {
        self.settings.metrics()
    }
}
