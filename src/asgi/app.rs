//! `AsgiApp`: the ASGI interface of one server — the application, how its tasks start,
//! the constant parts of every scope — and its `Dispatch`, through which the HTTP/1.1
//! connection hands it requests.

use super::http::{body_message, build_scope, disconnect_message};
use super::websocket::websocket_scope;
use crate::carrier::Carrier;
use crate::http::app_task::AppTasks;
use crate::http::dispatch::{Dispatch, RequestView, Served};
use crate::http::parse::{is_unreserved_or_sub_delim, Reject};
use crate::sync::GilCell;
use crate::ws::conn::WsSettings;
use crate::ws::deflate::ServerConfig;
use crate::ws::handshake::{check_handshake, refusal_fields, Upgrade};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use pyo3::{PyTraverseError, PyVisit};
use std::any::Any;
use std::sync::Arc;

/// The keys of an `http` scope, in the order the scope lists them.
const SCOPE_KEYS: [&str; 14] = [
    "type",
    "asgi",
    "http_version",
    "server",
    "client",
    "scheme",
    "method",
    "root_path",
    "path",
    "raw_path",
    "query_string",
    "headers",
    "state",
    "extensions",
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

#[pyclass(module = "swordfish._native", frozen)]
pub struct AsgiApp {
    /// The application and how its tasks start.
    pub tasks: AppTasks,
    /// `pathsend(protocol, transport, path, gen, size)`: the coroutine that sends a file.
    pub pathsend: Py<PyAny>,
    pub lifespan_state: Option<Py<PyDict>>,
    /// Every request's scope starts as a copy of this dict: the constant values (`type`,
    /// `root_path`) set, the usual ones (`http_version` 1.1, `scheme` http, `server` the
    /// shared address, `method` GET, an empty `query_string`) too, every other key present
    /// with a placeholder. Copying a dict of that shape is one allocation and a memcpy;
    /// building it key by key costs several resizes, and each key set costs a lookup.
    pub scope_template: Py<PyDict>,
    /// The scope's `asgi` dict, and the names of the extensions offered: each request gets
    /// fresh `asgi` and `extensions` dicts, so that an app that writes into its scope's
    /// changes no other request's.
    pub asgi_info: Py<PyDict>,
    pub extensions: Vec<Py<PyString>>,
    /// The `server` address in the template: the first connection's. The connections to the
    /// same address keep this one object (see `server_address`).
    pub shared_server: GilCell<Option<Py<PyAny>>>,
    /// `root_path` as bytes, and percent-encoded: the prefixes of every request's `path`
    /// and `raw_path`.
    pub root_path: Vec<u8>,
    pub root_path_raw: Vec<u8>,
    /// WebSocket upgrades are served (`--ws auto`); else they are plain `http` requests.
    pub ws_enabled: bool,
    pub ws_settings: WsSettings,
    pub ws_deflate: ServerConfig,
}

#[pymethods]
impl AsgiApp {
    #[new]
    #[pyo3(signature = (app, loop_, *, pathsend, pathsend_supported, root_path, lifespan_state, eager_task,
        ws, ws_max_size, ws_max_queue, ws_ping_interval, ws_ping_timeout, ws_per_message_deflate))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        app: Py<PyAny>,
        loop_: Py<PyAny>,
        pathsend: Py<PyAny>,
        pathsend_supported: bool,
        root_path: &str,
        lifespan_state: Option<Py<PyDict>>,
        eager_task: Option<Py<PyAny>>,
        ws: bool,
        ws_max_size: usize,
        ws_max_queue: usize,
        ws_ping_interval: Option<f64>,
        ws_ping_timeout: Option<f64>,
        ws_per_message_deflate: bool,
    ) -> PyResult<Self> {
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
                "query_string" => PyBytes::new(py, b"").into_any(),
                "state" if lifespan_state.is_none() => continue,
                _ => py.None().into_bound(py),
            };
            scope_template.set_item(PyString::intern(py, key), value)?;
        }
        Ok(AsgiApp {
            tasks: AppTasks::new(py, app, loop_, eager_task)?,
            pathsend,
            lifespan_state,
            scope_template: scope_template.unbind(),
            asgi_info: asgi_info.unbind(),
            extensions,
            shared_server: GilCell::new(None),
            root_path: root_path.as_bytes().to_vec(),
            root_path_raw: percent_encode_path(root_path.as_bytes()),
            ws_enabled: ws,
            ws_settings: WsSettings::new(ws_max_size, ws_max_queue, ws_ping_interval, ws_ping_timeout),
            ws_deflate: ServerConfig { enabled: ws_per_message_deflate, ..ServerConfig::default() },
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.visit(&visit)
    }
}

impl AsgiApp {
    fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.tasks.visit(visit)?;
        visit.call(&self.pathsend)?;
        visit.call(&self.lifespan_state)?;
        visit.call(&self.scope_template)?;
        visit.call(&self.asgi_info)?;
        Ok(())
    }

    /// Whether a scope copied from the template has `server` right already.
    pub fn is_shared_server(&self, py: Python<'_>, server: Option<&Py<PyAny>>) -> bool {
        match (server, self.shared_server.try_lock(py)) {
            (Some(a), Some(shared)) => shared.as_ref().is_some_and(|s| s.is(a)),
            _ => false,
        }
    }
}

/// The ASGI interface as the HTTP/1.1 connection sees it.
pub struct AsgiDispatch(pub Py<AsgiApp>);

impl AsgiDispatch {
    /// The dispatcher of `interface`, if it is an `AsgiApp`.
    pub fn recognise(interface: &Bound<'_, PyAny>) -> Option<Arc<dyn Dispatch>> {
        let app = interface.cast::<AsgiApp>().ok()?;
        Some(Arc::new(AsgiDispatch(app.clone().unbind())))
    }

    /// The `AsgiApp` behind a server state's dispatcher.
    pub fn app_of(dispatch: &dyn Dispatch) -> Option<&AsgiApp> {
        dispatch.as_any().downcast_ref::<AsgiDispatch>().map(|d| d.0.get())
    }
}

impl Dispatch for AsgiDispatch {
    /// As the template's object when it is the same address (the first connection's
    /// address becomes the template's).
    fn server_address(&self, py: Python<'_>, server: Option<Py<PyAny>>) -> PyResult<Option<Py<PyAny>>> {
        let Some(server) = server else { return Ok(None) };
        let app = self.0.get();
        let mut shared = app.shared_server.lock(py)?;
        match shared.as_ref() {
            Some(s) if s.bind(py).eq(server.bind(py))? => Ok(Some(s.clone_ref(py))),
            Some(_) => Ok(Some(server)),
            None => {
                app.scope_template.bind(py).set_item(pyo3::intern!(py, "server"), &server)?;
                *shared = Some(server.clone_ref(py));
                Ok(Some(server))
            }
        }
    }

    fn request(&self, py: Python<'_>, view: &RequestView<'_>) -> Result<Served, Reject> {
        let app = self.0.get();
        let head = view.head;
        let scope = build_scope(py, app, view)?;
        if !app.ws_enabled || !head.upgrade {
            return Ok(Served { request: scope, upgrade: false });
        }
        let method = view.field(&head.method);
        let headers = head.headers.iter().map(|(n, v)| (view.field(n), view.field(v)));
        match check_handshake(method, head.minor, view.connect_protocol, headers) {
            Upgrade::NotWebSocket => Ok(Served { request: scope, upgrade: false }),
            Upgrade::Refused(r) => Err(Reject::Upgrade { status: r.status, field: refusal_fields(&r) }),
            Upgrade::Valid(u) => {
                let dict = scope.bind(py).cast::<PyDict>().map_err(|_| Reject::BadRequest("scope"))?;
                websocket_scope(py, dict, view.https, &u.subprotocols).map_err(|_| Reject::BadRequest("scope"))?;
                Ok(Served { request: scope, upgrade: true })
            }
        }
    }

    fn start(&self, py: Python<'_>, carrier: &Carrier, request: Py<PyAny>, gen: u64) -> PyResult<()> {
        if carrier.is_upgrade(py, gen)? {
            return super::websocket::start(self.0.bind(py), carrier, request, gen);
        }
        super::start::start(py, self.0.bind(py), carrier, request, gen)
    }

    fn body_message(&self, py: Python<'_>, data: Bound<'_, PyBytes>, more: bool) -> PyResult<Py<PyAny>> {
        body_message(py, data, more)
    }

    fn disconnect_message(&self, py: Python<'_>, upgrade: bool) -> PyResult<Py<PyAny>> {
        if upgrade {
            return super::websocket::disconnect_message(py, crate::ws::conn::CLOSE_ABNORMAL, "");
        }
        disconnect_message(py)
    }

    fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.0)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
