//! `HttpServerState`: what every connection of one server shares — the app, the loop, the
//! settings (read once, not per connection), the constant scope parts and the counters the
//! server runner needs for limits and graceful shutdown.

use super::parse::{is_unreserved_or_sub_delim, Limits};
use super::response::push_header;
use super::protocol::HttpProtocol;
use crate::event_loop::LoopCore;
use crate::sync::GilCell;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySet, PyString};
use pyo3::{PyTraverseError, PyVisit};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// The keys of an `http` scope, in the order the scope lists them.
const SCOPE_KEYS: [&str; 14] = [
    "type", "asgi", "http_version", "server", "client", "scheme", "method", "root_path", "path",
    "raw_path", "query_string", "headers", "state", "extensions",
];

/// A path as it may appear in a request target: the bytes of RFC 3986's `pchar` and `/`
/// as they are, every other byte as `%XX`.
fn percent_encode_path(path: &[u8]) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(path.len());
    for &b in path {
        if is_unreserved_or_sub_delim(b) || b":@/".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
    out
}

/// Default headers are matched against the app's with a bit each in a `u64`.
pub const MAX_DEFAULT_HEADERS: usize = 64;

#[pyclass(module = "swordfish._native", frozen)]
pub struct HttpServerState {
    pub app: Py<PyAny>,
    pub lp: Py<PyAny>,
    pub create_task: Py<PyAny>,
    /// The Task class, called `Task(coro, loop=loop, eager_start=True)`: a task that runs
    /// its first step at once (Python 3.12+), so a response that never waits is sent
    /// without a trip through the ready queue. (The loop must be given: an eager start
    /// asks it whether it runs.)
    pub eager_task: Option<Py<PyAny>>,
    /// `{"loop": loop, "eager_start": True}`: the keywords of that call, built once (the
    /// Task type has no vectorcall, so keywords given by name would become a new dict per
    /// request).
    pub kw_eager: Py<PyDict>,
    /// An eager task is running its first step: a request it completes and that starts the
    /// next pipelined one waits in `chained` until the step returns (no nesting, however
    /// long the pipeline).
    pub in_eager: AtomicBool,
    /// (protocol, scope, request generation) of the requests waiting so.
    pub chained: GilCell<VecDeque<(Py<HttpProtocol>, Py<PyAny>, u64)>>,
    /// The loop's native core when it is swordfish's own loop: an eager start is skipped
    /// while callbacks are already waiting there (see `start_app`).
    pub core: Option<Py<LoopCore>>,
    pub logger: Py<PyAny>,
    /// `access_log(scope, status, size, seconds)` or None.
    pub access_log: Option<Py<PyAny>>,
    /// `pathsend(protocol, transport, path, gen, size)`: the coroutine that sends a file.
    pub pathsend: Py<PyAny>,
    pub lifespan_state: Option<Py<PyDict>>,
    /// Every request's scope starts as a copy of this dict: the constant values (`type`,
    /// `root_path`) set, the usual ones (`http_version` 1.1, `scheme`
    /// http, `server` the shared address, `method` GET, an empty `query_string`) too, every
    /// other key present with a placeholder.
    /// Copying a dict of that shape is one allocation and a memcpy; building it key by key
    /// costs several resizes, and each key set costs a lookup.
    pub scope_template: Py<PyDict>,
    /// The scope's `asgi` dict, and the names of the extensions offered: each request gets
    /// fresh `asgi` and `extensions` dicts, so that an app that writes into its scope's
    /// changes no other request's.
    pub asgi_info: Py<PyDict>,
    pub extensions: Vec<Py<PyString>>,
    /// The `server` address in the template: the first connection's. The connections to the
    /// same address keep this one object (see `share_server`).
    pub shared_server: GilCell<Option<Py<PyAny>>>,
    /// `root_path` as bytes, and percent-encoded: the prefixes of every request's `path`
    /// and `raw_path`.
    pub root_path: Vec<u8>,
    pub root_path_raw: Vec<u8>,
    /// The open connections (HttpProtocol objects), for graceful shutdown.
    pub connections: Py<PySet>,
    pub limits: Limits,
    pub timeout_header: f64,
    pub timeout_keep_alive: f64,
    pub limit_concurrency: usize,
    pub date_header: bool,
    pub server_header: Option<Vec<u8>>,
    /// The configured headers added to every response, as (lower-case name, serialized
    /// `name: value\r\n` line); a header of the same name set by the app replaces one.
    pub default_headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub active_requests: AtomicUsize,
    pub total_requests: AtomicU64,
    pub shutting_down: AtomicBool,
}

#[pymethods]
impl HttpServerState {
    #[new]
    #[pyo3(signature = (app, loop_, *, logger, pathsend, access_log=None, root_path="", lifespan_state=None,
        limit_request_line=8190, limit_header_size=32768, limit_header_count=100,
        limit_body_size=None, limit_concurrency=None, timeout_header_read=10.0, timeout_keep_alive=5.0,
        date_header=true, server_header=Some(b"swordfish".to_vec()), default_headers=Vec::new(),
        eager_task=None, pathsend_supported=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        app: Py<PyAny>,
        loop_: Py<PyAny>,
        logger: Py<PyAny>,
        pathsend: Py<PyAny>,
        access_log: Option<Py<PyAny>>,
        root_path: &str,
        lifespan_state: Option<Py<PyDict>>,
        limit_request_line: usize,
        limit_header_size: usize,
        limit_header_count: usize,
        limit_body_size: Option<u64>,
        limit_concurrency: Option<usize>,
        timeout_header_read: f64,
        timeout_keep_alive: f64,
        date_header: bool,
        mut server_header: Option<Vec<u8>>,
        default_headers: Vec<(Vec<u8>, Vec<u8>)>,
        eager_task: Option<Py<PyAny>>,
        pathsend_supported: bool,
    ) -> PyResult<Self> {
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
        let asgi_info = PyDict::new(py);
        asgi_info.set_item("version", "3.0")?;
        asgi_info.set_item("spec_version", "2.4")?;
        // `pathsend` needs the loop's `sendfile` (uvloop has none).
        let names = if pathsend_supported {
            &["http.response.pathsend", "http.response.trailers"][..]
        } else {
            &["http.response.trailers"][..]
        };
        let extensions: Vec<Py<PyString>> = names.iter().map(|n| PyString::intern(py, n).unbind()).collect();
        let scope_template = PyDict::new(py);
        for key in SCOPE_KEYS {
            let value = match key {
                "type" => PyString::new(py, "http").into_any(),
                "root_path" => PyString::new(py, root_path).into_any(),
                "http_version" => PyString::intern(py, "1.1").into_any(),
                "scheme" => PyString::intern(py, "http").into_any(),
                "method" => PyString::intern(py, "GET").into_any(),
                "query_string" => pyo3::types::PyBytes::new(py, b"").into_any(),
                "state" if lifespan_state.is_none() => continue,
                _ => py.None().into_bound(py),
            };
            scope_template.set_item(PyString::intern(py, key), value)?;
        }
        let create_task = loop_.bind(py).getattr("create_task")?.unbind();
        let kw_eager = PyDict::new(py);
        kw_eager.set_item(PyString::intern(py, "loop"), &loop_)?;
        kw_eager.set_item(PyString::intern(py, "eager_start"), true)?;
        let core = loop_.bind(py).cast::<LoopCore>().ok().map(|c| c.clone().unbind());
        Ok(HttpServerState {
            app,
            lp: loop_,
            create_task,
            eager_task,
            kw_eager: kw_eager.unbind(),
            in_eager: AtomicBool::new(false),
            chained: GilCell::new(VecDeque::new()),
            core,
            logger,
            access_log,
            pathsend,
            lifespan_state,
            scope_template: scope_template.unbind(),
            asgi_info: asgi_info.unbind(),
            extensions,
            shared_server: GilCell::new(None),
            root_path: root_path.as_bytes().to_vec(),
            root_path_raw: percent_encode_path(root_path.as_bytes()),
            connections: PySet::empty(py)?.unbind(),
            limits: Limits {
                request_line: limit_request_line,
                header_size: limit_header_size,
                header_count: limit_header_count,
                body_size: limit_body_size.unwrap_or(u64::MAX),
            },
            timeout_header: timeout_header_read,
            timeout_keep_alive,
            limit_concurrency: limit_concurrency.unwrap_or(usize::MAX),
            date_header,
            server_header,
            default_headers: defaults,
            active_requests: AtomicUsize::new(0),
            total_requests: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
        })
    }

    #[getter]
    fn connections(&self, py: Python<'_>) -> Py<PySet> {
        self.connections.clone_ref(py)
    }

    /// Requests whose app task has not finished yet.
    #[getter]
    fn active_requests(&self) -> usize {
        self.active_requests.load(Ordering::Relaxed)
    }

    /// Requests started since the server began.
    #[getter]
    fn total_requests(&self) -> u64 {
        self.total_requests.load(Ordering::Relaxed)
    }

    /// New requests on kept-alive connections are refused from now on (they close instead).
    fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.app)?;
        visit.call(&self.lp)?;
        visit.call(&self.create_task)?;
        visit.call(&self.eager_task)?;
        visit.call(&self.core)?;
        visit.call(&self.logger)?;
        visit.call(&self.access_log)?;
        visit.call(&self.pathsend)?;
        visit.call(&self.lifespan_state)?;
        visit.call(&self.connections)?;
        visit.call(&self.kw_eager)?;
        visit.call(&self.scope_template)?;
        visit.call(&self.asgi_info)?;
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        if let Some(chained) = self.chained.try_lock(py) {
            for (proto, scope, _) in chained.iter() {
                visit.call(proto)?;
                visit.call(scope)?;
            }
        }
        Ok(())
    }
}

impl HttpServerState {
    /// How a connection keeps its `server` address: as the template's object when it is the
    /// same address (the first connection's address becomes the template's).
    pub fn share_server(&self, py: Python<'_>, server: Option<Py<PyAny>>) -> PyResult<Option<Py<PyAny>>> {
        let Some(server) = server else { return Ok(None) };
        let mut shared = self.shared_server.lock(py)?;
        match shared.as_ref() {
            Some(s) if s.bind(py).eq(server.bind(py))? => Ok(Some(s.clone_ref(py))),
            Some(_) => Ok(Some(server)),
            None => {
                self.scope_template.bind(py).set_item(pyo3::intern!(py, "server"), &server)?;
                *shared = Some(server.clone_ref(py));
                Ok(Some(server))
            }
        }
    }

    /// Whether a scope copied from the template has `server` right already.
    pub fn is_shared_server(&self, py: Python<'_>, server: Option<&Py<PyAny>>) -> bool {
        match (server, self.shared_server.try_lock(py)) {
            (Some(a), Some(shared)) => shared.as_ref().is_some_and(|s| s.is(a)),
            _ => false,
        }
    }
}
