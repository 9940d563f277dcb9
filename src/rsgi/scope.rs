//! The RSGI scope of a request (`Scope`) and its headers (`Headers`): the request head is
//! copied once into a `RequestHead`, and every attribute is made from it when the app
//! reads it, so an app that looks at the path and one header pays for those only.

use crate::http::dispatch::RequestView;
use crate::http::parse::{absolute_form, Head, Reject};
use crate::http::target::{method_str, percent_decode, split_target};
use crate::sync::GilCell;
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};
use std::ops::Range;
use std::sync::Arc;

/// The RSGI version served (granian's docs/spec/RSGI.md).
pub const RSGI_VERSION: &str = "1.6";

/// A request's head, as the scope and its headers read it.
pub struct RequestHead {
    buf: Vec<u8>,
    method: Range<usize>,
    path: Range<usize>,
    query: Range<usize>,
    /// The authority of an absolute-form target (HTTP/1.1 has no `:authority`).
    authority: Option<Range<usize>>,
    fields: Vec<(Range<usize>, Range<usize>)>,
    minor: u8,
    /// The request came on an HTTP/2 stream: its `:authority` is the leading `host` field.
    h2: bool,
}

impl RequestHead {
    pub fn new(buf: &[u8], head: &Head, h2: bool) -> Result<RequestHead, Reject> {
        let bytes = &buf[..head.len];
        let method = head.method.clone();
        let target = &bytes[head.target.clone()];
        let (path, query) = split_target(target, &bytes[method.clone()])?;
        let range = |part: &[u8]| {
            let start = part.as_ptr() as usize - bytes.as_ptr() as usize;
            start..start + part.len()
        };
        // `split_target` gives "/" (not part of the buffer) for an absolute target without
        // a path.
        let path = if path.as_ptr() >= bytes.as_ptr() && path.as_ptr() < bytes.as_ptr().wrapping_add(bytes.len()) {
            range(path)
        } else {
            0..0
        };
        let query = if query.is_empty() { 0..0 } else { range(query) };
        let mut authority = absolute_form(target).map(|(authority, _)| range(authority));
        if h2 {
            // RSGI's `authority`: HTTP/2's `:authority` (see `http2::request`).
            authority = head
                .headers
                .iter()
                .find(|(n, _)| bytes[n.clone()].eq_ignore_ascii_case(b"host"))
                .map(|(_, v)| v.clone());
        }
        Ok(RequestHead {
            buf: bytes.to_vec(),
            method,
            path,
            query,
            authority,
            fields: head.headers.clone(),
            minor: head.minor,
            h2,
        })
    }

    fn get(&self, r: &Range<usize>) -> &[u8] {
        self.buf.get(r.clone()).unwrap_or_default()
    }

    pub fn method(&self) -> &[u8] {
        self.get(&self.method)
    }

    /// The fields as (name, value) bytes, names as the client wrote them.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields.iter().map(|(n, v)| (self.get(n), self.get(v)))
    }

    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.fields().filter(move |(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).map(|(_, v)| v)
    }
}

/// A field value as `str`: its bytes as Latin-1, as HTTP defines field values as octets
/// (RFC 9110 §5.5), so nothing a client sends is lost or refused.
fn latin1<'py>(py: Python<'py>, bytes: &[u8]) -> Bound<'py, PyString> {
    if bytes.is_ascii() {
        // SAFETY: ASCII is valid UTF-8.
        return PyString::new(py, unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    PyString::new(py, &bytes.iter().map(|&b| char::from(b)).collect::<String>())
}

fn lowercase<'py>(py: Python<'py>, name: &[u8]) -> Bound<'py, PyString> {
    latin1(py, &name.to_ascii_lowercase())
}

/// "host:port" ("[host]:port" for IPv6) of a socket address as the connection has it, the
/// path of a Unix socket, "" if unknown.
fn address(py: Python<'_>, addr: Option<&Py<PyAny>>) -> PyResult<String> {
    let Some(addr) = addr.map(|a| a.bind(py)) else { return Ok(String::new()) };
    if let Ok(t) = addr.cast::<PyTuple>() {
        if t.len() >= 2 {
            let host: String = t.get_item(0)?.str()?.extract()?;
            let port = t.get_item(1)?;
            if port.is_none() {
                // A Unix socket (the ASGI scope's `(path, None)`).
                return Ok(host);
            }
            let port = port.str()?;
            return Ok(if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") });
        }
    }
    if addr.is_none() {
        return Ok(String::new());
    }
    addr.str()?.extract()
}

#[pyclass(module = "swordfish.rsgi", name = "Scope", frozen)]
pub struct Scope {
    pub head: Arc<RequestHead>,
    websocket: bool,
    https: bool,
    server: Option<Py<PyAny>>,
    client: Option<Py<PyAny>>,
    /// The client host and scheme a trusted proxy gave (`--proxy-headers`).
    forwarded: GilCell<Option<(Option<String>, bool)>>,
    headers: PyOnceLock<Py<Headers>>,
}

impl Scope {
    pub fn new(py: Python<'_>, view: &RequestView<'_>, websocket: bool) -> Result<Scope, Reject> {
        Ok(Scope {
            head: Arc::new(RequestHead::new(view.buf, view.head, view.h2)?),
            websocket,
            https: view.https,
            server: view.server.map(|s| s.clone_ref(py)),
            client: view.client.map(|s| s.clone_ref(py)),
            forwarded: GilCell::new(None),
            headers: PyOnceLock::new(),
        })
    }

    pub fn is_websocket(&self) -> bool {
        self.websocket
    }
}

#[pymethods]
impl Scope {
    #[getter]
    fn proto<'py>(&self, py: Python<'py>) -> &Bound<'py, PyString> {
        if self.websocket {
            intern!(py, "ws")
        } else {
            intern!(py, "http")
        }
    }

    #[getter]
    fn rsgi_version<'py>(&self, py: Python<'py>) -> &Bound<'py, PyString> {
        intern!(py, RSGI_VERSION)
    }

    #[getter]
    fn http_version<'py>(&self, py: Python<'py>) -> &Bound<'py, PyString> {
        if self.head.h2 {
            intern!(py, "2")
        } else if self.head.minor == 0 {
            intern!(py, "1")
        } else {
            intern!(py, "1.1")
        }
    }

    #[getter]
    fn server(&self, py: Python<'_>) -> PyResult<String> {
        address(py, self.server.as_ref())
    }

    #[getter]
    fn client(&self, py: Python<'_>) -> PyResult<String> {
        if let Some((Some(host), _)) = &*self.forwarded.lock(py)? {
            return Ok(if host.contains(':') { format!("[{host}]:0") } else { format!("{host}:0") });
        }
        address(py, self.client.as_ref())
    }

    #[getter]
    fn scheme<'py>(&self, py: Python<'py>) -> PyResult<&Bound<'py, PyString>> {
        let https = match &*self.forwarded.lock(py)? {
            Some((_, https)) => *https,
            None => self.https,
        };
        Ok(if https { intern!(py, "https") } else { intern!(py, "http") })
    }

    /// `--proxy-headers`: the client's host (its port unknown: 0; None: the connection's
    /// client) and whether the client spoke HTTPS, as the trusted proxy in front said.
    #[pyo3(signature = (host, https))]
    fn _forward(&self, py: Python<'_>, host: Option<String>, https: bool) -> PyResult<()> {
        *self.forwarded.lock(py)? = Some((host, https));
        Ok(())
    }

    /// What the access log reads: the keys of an ASGI scope it uses, `headers` (names
    /// lowercased) only when asked for.
    #[pyo3(signature = (headers=false))]
    fn log_view<'py>(&self, py: Python<'py>, headers: bool) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let client = match &*self.forwarded.lock(py)? {
            Some((Some(host), _)) => Some((host.as_str(), 0).into_pyobject(py)?.into_any().unbind()),
            _ => self.client.as_ref().map(|c| c.clone_ref(py)),
        };
        d.set_item(intern!(py, "client"), client)?;
        d.set_item(intern!(py, "method"), self.method(py))?;
        let path = self.head.get(&self.head.path);
        d.set_item(intern!(py, "raw_path"), PyBytes::new(py, if path.is_empty() { b"/" } else { path }))?;
        d.set_item(intern!(py, "query_string"), PyBytes::new(py, self.head.get(&self.head.query)))?;
        let version = match (self.head.h2, self.head.minor) {
            (true, _) => "2",
            (false, 1) => "1.1",
            (false, _) => "1.0",
        };
        d.set_item(intern!(py, "http_version"), version)?;
        if headers {
            let fields = self
                .head
                .fields()
                .map(|(n, v)| (PyBytes::new(py, &n.to_ascii_lowercase()), PyBytes::new(py, v)))
                .collect::<Vec<_>>();
            d.set_item(intern!(py, "headers"), fields)?;
        }
        Ok(d)
    }

    #[getter]
    fn method<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        method_str(py, self.head.method())
    }

    /// Percent-decoded; "/" for an absolute-form target without a path.
    #[getter]
    fn path<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        let raw = self.head.get(&self.head.path);
        if raw.is_empty() {
            return intern!(py, "/").clone();
        }
        PyString::new(py, &String::from_utf8_lossy(&percent_decode(raw)))
    }

    #[getter]
    fn query_string<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        latin1(py, self.head.get(&self.head.query))
    }

    #[getter]
    fn authority<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyString>> {
        self.head.authority.as_ref().map(|a| latin1(py, self.head.get(a)))
    }

    #[getter]
    fn headers(&self, py: Python<'_>) -> PyResult<Py<Headers>> {
        let h = self.headers.get_or_try_init(py, || Py::new(py, Headers { head: self.head.clone() }))?;
        Ok(h.clone_ref(py))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("<Scope {} {} {}>", self.proto(py), String::from_utf8_lossy(self.head.method()), self.path(py))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.server)?;
        visit.call(&self.client)?;
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        if let Some(h) = self.headers.get(py) {
            visit.call(h)?;
        }
        Ok(())
    }
}

/// The request's fields as a read-only mapping: names lower-case, look-ups
/// case-insensitive, `get` the first value of a name and `get_all` every one, in order.
#[pyclass(module = "swordfish.rsgi", name = "Headers", frozen, mapping)]
pub struct Headers {
    head: Arc<RequestHead>,
}

#[pymethods]
impl Headers {
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.head.fields().map(|(n, _)| lowercase(py, n)))
    }

    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.head.fields().map(|(_, v)| latin1(py, v)))
    }

    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.head.fields().map(|(n, v)| (lowercase(py, n), latin1(py, v))))
    }

    #[pyo3(signature = (key, default=None))]
    fn get<'py>(&self, py: Python<'py>, key: &str, default: Option<Bound<'py, PyAny>>) -> Bound<'py, PyAny> {
        match self.head.values(key).next() {
            Some(v) => latin1(py, v).into_any(),
            None => default.unwrap_or_else(|| py.None().into_bound(py)),
        }
    }

    fn get_all<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.head.values(key).map(|v| latin1(py, v)))
    }

    fn __getitem__<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyString>> {
        match self.head.values(key).next() {
            Some(v) => Ok(latin1(py, v)),
            None => Err(PyKeyError::new_err(key.to_owned())),
        }
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> bool {
        key.extract::<&str>().is_ok_and(|k| self.head.values(k).next().is_some())
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.keys(py)?.try_iter()?.into_any())
    }

    fn __len__(&self) -> usize {
        self.head.fields.len()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("Headers({})", self.items(py)?.repr()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse::{find_head_end, parse_head, Limits};

    const LIMITS: Limits =
        Limits { request_line: 1000, header_size: 1000, field_size: 1000, header_count: 10, body_size: 1000 };

    fn head_of(raw: &[u8]) -> RequestHead {
        let end = find_head_end(raw, &LIMITS).ok().flatten().expect("a complete head");
        let head = parse_head(raw, end, &LIMITS).expect("a valid head");
        RequestHead::new(raw, &head, false).expect("a servable target")
    }

    #[test]
    fn origin_form_splits_into_path_and_query() {
        let h = head_of(b"GET /a%20b?x=1&y HTTP/1.1\r\nHost: h\r\nX-Two: 1\r\nx-two: 2\r\n\r\nbody after");
        assert_eq!(h.method(), b"GET");
        assert_eq!(h.get(&h.path), b"/a%20b");
        assert_eq!(h.get(&h.query), b"x=1&y");
        assert_eq!(h.authority, None);
        assert_eq!(h.minor, 1);
        // The copy ends with the head: the body that followed is not kept.
        assert!(h.buf.ends_with(b"\r\n\r\n"));
        assert_eq!(h.values("X-TWO").collect::<Vec<_>>(), [b"1", b"2"]);
        assert_eq!(h.fields().count(), 3);
    }

    #[test]
    fn absolute_form_names_the_authority() {
        let h = head_of(b"GET http://example.org:8080/p?q HTTP/1.0\r\n\r\n");
        assert_eq!(h.get(&h.path), b"/p");
        assert_eq!(h.get(&h.query), b"q");
        assert_eq!(h.authority.as_ref().map(|a| h.get(a)), Some(&b"example.org:8080"[..]));
        assert_eq!(h.minor, 0);
        // No path at all: the scope says "/" (an empty range here).
        let h = head_of(b"GET http://example.org?q=2 HTTP/1.1\r\nHost: example.org\r\n\r\n");
        assert_eq!((h.get(&h.path), h.get(&h.query)), (&b""[..], &b"q=2"[..]));
    }

    #[test]
    fn a_target_no_interface_serves_is_refused() {
        let raw = b"GET ftp://h/x HTTP/1.1\r\nHost: h\r\n\r\n";
        let end = find_head_end(raw, &LIMITS).ok().flatten().expect("a complete head");
        let head = parse_head(raw, end, &LIMITS).expect("a valid head");
        assert!(RequestHead::new(raw, &head, false).is_err());
    }
}
