//! The ASGI `http` scope of a request: target split and percent-decoded, method, headers,
//! client and server addresses.

use super::super::app::AsgiApp;
use crate::http::dispatch::RequestView;
use crate::http::parse::Reject;
use crate::http::target::{method_str, percent_decode, split_target};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use std::borrow::Cow;

pub fn build_scope(py: Python<'_>, state: &AsgiApp, view: &RequestView<'_>) -> Result<Py<PyAny>, Reject> {
    let (buf, head) = (view.buf, view.head);
    let method = &buf[head.method.clone()];
    let (raw_path, query) = split_target(&buf[head.target.clone()], method)?;
    let fail = |_e: PyErr| Reject::BadRequest("scope");
    let headers = PyList::empty(py);
    for (n, v) in &head.headers {
        let name = &buf[n.clone()];
        let lname = PyBytes::new_with(py, name.len(), |out| {
            for (o, b) in out.iter_mut().zip(name) {
                *o = b.to_ascii_lowercase();
            }
            Ok(())
        })
        .map_err(fail)?;
        let pair = PyTuple::new(py, [lname.into_any(), PyBytes::new(py, &buf[v.clone()]).into_any()]).map_err(fail)?;
        headers.append(pair).map_err(fail)?;
    }
    let mut path = percent_decode(raw_path);
    // As the ASGI spec's WSGI section has it (and uvicorn does): `path` and `raw_path`
    // include `root_path`, which an app strips to route (PATH_INFO).
    let prefixed;
    let raw_path = if state.root_path.is_empty() {
        raw_path
    } else {
        path = Cow::Owned([&state.root_path[..], &path[..]].concat());
        prefixed = [&state.root_path_raw[..], raw_path].concat();
        &prefixed[..]
    };
    // SAFETY: the template is a dict; PyDict_Copy returns a new reference or NULL.
    let scope = unsafe { Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyDict_Copy(state.scope_template.as_ptr())) }
        .map_err(fail)?;
    let scope = scope.cast_into::<PyDict>().map_err(|_| Reject::BadRequest("scope"))?;
    let none = || py.None();
    let set = |k: &Bound<'_, PyString>, v: Bound<'_, PyAny>| scope.set_item(k, v).map_err(fail);
    // The template has HTTP/1.1, http, the shared server address, GET and no query.
    if view.h2 {
        set(intern!(py, "http_version"), intern!(py, "2").clone().into_any())?;
    } else if head.minor != 1 {
        set(intern!(py, "http_version"), intern!(py, "1.0").clone().into_any())?;
    }
    if !state.is_shared_server(py, view.server) {
        set(intern!(py, "server"), view.server.map_or_else(none, |s| s.clone_ref(py)).into_bound(py))?;
    }
    set(intern!(py, "client"), view.client.map_or_else(none, |s| s.clone_ref(py)).into_bound(py))?;
    if view.https {
        set(intern!(py, "scheme"), intern!(py, "https").clone().into_any())?;
    }
    if method != b"GET" {
        set(intern!(py, "method"), method_str(py, method).into_any())?;
    }
    set(intern!(py, "path"), PyString::new(py, &String::from_utf8_lossy(&path)).into_any())?;
    set(intern!(py, "raw_path"), PyBytes::new(py, raw_path).into_any())?;
    if !query.is_empty() {
        set(intern!(py, "query_string"), PyBytes::new(py, query).into_any())?;
    }
    set(intern!(py, "headers"), headers.into_any())?;
    // Fresh per request: nothing an app writes into them reaches another request.
    set(intern!(py, "asgi"), state.asgi_info.bind(py).copy().map_err(fail)?.into_any())?;
    let extensions = PyDict::new(py);
    for name in &state.extensions {
        extensions.set_item(name.bind(py), PyDict::new(py)).map_err(fail)?;
    }
    set(intern!(py, "extensions"), extensions.into_any())?;
    if let Some(ls) = &state.lifespan_state {
        set(intern!(py, "state"), ls.bind(py).copy().map_err(fail)?.into_any())?;
    }
    Ok(scope.into_any().unbind())
}
