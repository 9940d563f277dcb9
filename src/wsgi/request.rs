//! `WsgiRequest`: a request head as the loop thread hands it to an app thread — one copy
//! of the head's bytes and where each part lies in it, and the connection's addresses. No
//! Python object but this one is made on the loop thread; the environ is built from it on
//! the app thread (`environ`).

use crate::http::dispatch::RequestView;
use crate::http::parse::{Head, Reject};
use crate::http::target::split_target;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use pyo3::{intern, PyTraverseError, PyVisit};
use std::ops::Range;

#[pyclass(module = "swordfish._native", frozen)]
pub struct WsgiRequest {
    /// The head's bytes, from the request line to the empty line.
    bytes: Vec<u8>,
    method: Range<usize>,
    target: Range<usize>,
    pub minor: u8,
    pub headers: Vec<(Range<usize>, Range<usize>)>,
    pub client: Option<Py<PyAny>>,
    pub server: Option<Py<PyAny>>,
    pub https: bool,
    /// The request came on an HTTP/2 stream.
    pub h2: bool,
}

impl WsgiRequest {
    /// The request of `head` (in `c`'s read buffer); refused if its target is not one.
    pub fn new(py: Python<'_>, view: &RequestView<'_>) -> Result<WsgiRequest, Reject> {
        let client = view.client.map(|a| a.clone_ref(py));
        let server = view.server.map(|a| a.clone_ref(py));
        let mut request = WsgiRequest::from_head(view.buf, view.head, client, server, view.https)?;
        request.h2 = view.h2;
        Ok(request)
    }

    /// The request of `head`, at the start of `rbuf`, from a connection with these
    /// addresses; refused if its target is not one.
    pub fn from_head(
        rbuf: &[u8],
        head: &Head,
        client: Option<Py<PyAny>>,
        server: Option<Py<PyAny>>,
        https: bool,
    ) -> Result<WsgiRequest, Reject> {
        let request = WsgiRequest {
            bytes: rbuf.get(..head.len).unwrap_or_default().to_vec(),
            method: head.method.clone(),
            target: head.target.clone(),
            minor: head.minor,
            headers: head.headers.clone(),
            client,
            server,
            https,
            h2: false,
        };
        request.split()?;
        Ok(request)
    }

    pub fn part(&self, r: &Range<usize>) -> &[u8] {
        self.bytes.get(r.clone()).unwrap_or_default()
    }

    pub fn method(&self) -> &[u8] {
        self.part(&self.method)
    }

    /// (raw path, query) of the target (checked when the request was made).
    pub fn split(&self) -> Result<(&[u8], &[u8]), Reject> {
        split_target(self.part(&self.target), self.method())
    }

    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers.iter().map(|(n, v)| (self.part(n), self.part(v)))
    }
}

#[pymethods]
impl WsgiRequest {
    /// What the access log reads: the keys of an ASGI scope it uses, `headers` (names
    /// lowercased, as ASGI has them) only when asked for.
    #[pyo3(signature = (headers=false))]
    fn log_view<'py>(&self, py: Python<'py>, headers: bool) -> PyResult<Bound<'py, PyDict>> {
        let (path, query) = self.split().unwrap_or((b"/", b""));
        let d = PyDict::new(py);
        d.set_item(intern!(py, "client"), self.client.as_ref().map(|c| c.clone_ref(py)))?;
        d.set_item(intern!(py, "method"), PyString::new(py, &String::from_utf8_lossy(self.method())))?;
        d.set_item(intern!(py, "raw_path"), PyBytes::new(py, path))?;
        d.set_item(intern!(py, "query_string"), PyBytes::new(py, query))?;
        let version = match (self.h2, self.minor) {
            (true, _) => "2",
            (false, 1) => "1.1",
            (false, _) => "1.0",
        };
        d.set_item(intern!(py, "http_version"), version)?;
        if headers {
            let fields = self
                .fields()
                .map(|(n, v)| (PyBytes::new(py, &n.to_ascii_lowercase()), PyBytes::new(py, v)))
                .collect::<Vec<_>>();
            d.set_item(intern!(py, "headers"), fields)?;
        }
        Ok(d)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.client)?;
        visit.call(&self.server)
    }
}
