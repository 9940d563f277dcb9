//! `receive()`: the request body as `http.request` messages (with flow control), then
//! `http.disconnect`.

use super::super::ready;
use crate::event_loop::create_future;
use crate::http::conn::{Act, Expect};
use crate::http::protocol::HttpProtocol;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

pub fn disconnect_message(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "type"), intern!(py, "http.disconnect"))?;
    Ok(d.into_any().unbind())
}

/// An `http.request` message.
pub fn body_message(py: Python<'_>, data: &[u8], more: bool) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "type"), intern!(py, "http.request"))?;
    d.set_item(intern!(py, "body"), PyBytes::new(py, data))?;
    d.set_item(intern!(py, "more_body"), more)?;
    Ok(d.into_any().unbind())
}

pub(super) fn receive(proto: &Bound<'_, HttpProtocol>, gen: u64) -> PyResult<Py<PyAny>> {
    let py = proto.py();
    let this = proto.get();
    let mut acts = Vec::new();
    let immediate = {
        let mut c = this.lock(py)?;
        let lost = c.lost();
        let mut resume = false;
        let result = match c.current(gen) {
            None => Some(disconnect_message(py)?),
            Some(req) => {
                if req.expect == Expect::Waiting && !req.writing.head_written() && !lost {
                    req.expect = Expect::Answered;
                    acts.push(Act::Write(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec()));
                }
                if this.body_ready(req) {
                    resume = true;
                    Some(this.take_body(py, req)?)
                } else if lost || req.complete() {
                    Some(disconnect_message(py)?)
                } else {
                    resume = true;
                    None
                }
            }
        };
        if resume && c.reading_paused && !c.lost() {
            c.reading_paused = false;
            acts.push(Act::ResumeReading);
        }
        result
    };
    HttpProtocol::run_acts(proto, acts)?;
    if let Some(msg) = immediate {
        return ready(py, msg);
    }
    let fut = create_future(this.state.get().lp.bind(py))?.unbind();
    let mut c = this.lock(py)?;
    match c.current(gen) {
        Some(req) => {
            // Calls the app gave up on (a receive() under a timeout that ran out) go first,
            // or polling for a disconnect that way would pile them up.
            let mut pending = Vec::with_capacity(req.receive_waiters.len() + 1);
            for w in req.receive_waiters.drain(..) {
                let done = crate::tasks::is_done(w.bind(py));
                if !done.unwrap_or(false) {
                    pending.push(w);
                }
            }
            pending.push(fut.clone_ref(py));
            req.receive_waiters = pending;
        }
        None => {
            drop(c);
            crate::tasks::set_result(fut.bind(py), disconnect_message(py)?.bind(py))?;
        }
    }
    Ok(fut)
}
