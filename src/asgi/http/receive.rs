//! `receive()`: the request body as `http.request` messages (with flow control), then
//! `http.disconnect`.

use super::super::ready;
use crate::carrier::Carrier;
use crate::event_loop::create_future;
use crate::http::body::BodyRead;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

pub fn disconnect_message(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "type"), intern!(py, "http.disconnect"))?;
    Ok(d.into_any().unbind())
}

/// An `http.request` message.
pub fn body_message(py: Python<'_>, data: Bound<'_, PyBytes>, more: bool) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "type"), intern!(py, "http.request"))?;
    d.set_item(intern!(py, "body"), data)?;
    d.set_item(intern!(py, "more_body"), more)?;
    Ok(d.into_any().unbind())
}

pub(super) fn receive(py: Python<'_>, carrier: &Carrier, gen: u64) -> PyResult<Py<PyAny>> {
    let lp = carrier.state().lp.bind(py);
    match carrier.read_body(py, gen, || Ok(create_future(lp)?.unbind()))? {
        BodyRead::Now(msg) => ready(py, msg),
        BodyRead::Wait(fut) => Ok(fut),
    }
}
