//! `wsgi.input`: the request body as a file the app reads on its thread (PEP 3333:
//! `read`, `readline`, `readlines`, iteration). Bytes come from the exchange's buffer; when
//! it runs short the app thread asks the connection for more (`Post::Read`) and waits with the
//! GIL released, so the body is streamed, never buffered whole: the loop reads the
//! socket only while the app asks, and pauses it beyond its high-water mark.

use super::bridge::Post;
use super::exchange::{Exchange, Shared};
use crate::http::ClientDisconnected;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::sync::Arc;

#[pyclass(module = "swordfish._native", frozen)]
pub struct WsgiInput {
    ex: Arc<Exchange>,
}

impl WsgiInput {
    pub fn new(ex: Arc<Exchange>) -> WsgiInput {
        WsgiInput { ex }
    }

    /// Wait until `enough` holds for the buffered body, or the body has ended; then `take`.
    fn fill<'py, R>(
        &self,
        py: Python<'py>,
        enough: impl Fn(&Shared) -> bool,
        take: impl Fn(Python<'py>, &mut Shared) -> R,
    ) -> PyResult<R> {
        loop {
            let ask = {
                let mut s = self.ex.lock();
                // A body cut short is never passed off as a whole one: a read that the bytes
                // buffered cannot satisfy fails (with chunked framing, a short read would
                // look like the body's end to the app).
                if s.truncated && !enough(&s) {
                    return Err(ClientDisconnected::new_err(
                        "the request body was cut short: the client left, or the server refused the rest",
                    ));
                }
                if enough(&s) || s.body_ended {
                    return Ok(take(py, &mut s));
                }
                !std::mem::replace(&mut s.asked, true)
            };
            if ask {
                self.ex.post(py, Post::Read(self.ex.clone()))?;
            }
            self.ex.wait_for(py, |s| !s.asked || s.body_ended, |_| ());
        }
    }

    /// Up to `size` bytes (all, if None) as `bytes`, made from the buffer directly.
    fn read_bytes<'py>(&self, py: Python<'py>, size: Option<usize>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = |py, s: &mut Shared, n| PyBytes::new(py, s.take_body(n));
        match size {
            None => self.fill(py, |_| false, move |py, s| bytes(py, s, usize::MAX)),
            Some(n) => self.fill(py, move |s| s.buffered() >= n, move |py, s| bytes(py, s, n)),
        }
    }

    fn read_line(&self, py: Python<'_>, limit: Option<usize>) -> PyResult<Vec<u8>> {
        let limit = limit.unwrap_or(usize::MAX);
        let line_len = move |s: &Shared| {
            let buffered = s.body.get(s.body_pos..).unwrap_or_default();
            let upto = buffered.len().min(limit);
            buffered.get(..upto).unwrap_or_default().iter().position(|&b| b == b'\n').map(|i| i + 1)
        };
        self.fill(
            py,
            move |s| line_len(s).is_some() || s.buffered() >= limit,
            move |_, s| {
                let n = line_len(s).unwrap_or(limit);
                s.take_body(n).to_vec()
            },
        )
    }
}

/// A size argument: None or negative means "all".
fn size_arg(size: Option<isize>) -> Option<usize> {
    size.and_then(|n| usize::try_from(n).ok())
}

#[pymethods]
impl WsgiInput {
    #[pyo3(signature = (size=None))]
    fn read<'py>(&self, py: Python<'py>, size: Option<isize>) -> PyResult<Bound<'py, PyBytes>> {
        self.read_bytes(py, size_arg(size))
    }

    #[pyo3(signature = (size=None))]
    fn readline<'py>(&self, py: Python<'py>, size: Option<isize>) -> PyResult<Bound<'py, PyBytes>> {
        let data = self.read_line(py, size_arg(size))?;
        Ok(PyBytes::new(py, &data))
    }

    /// Lines until the end, or until their total size reaches `hint` (as `io` does).
    #[pyo3(signature = (hint=None))]
    fn readlines<'py>(&self, py: Python<'py>, hint: Option<isize>) -> PyResult<Bound<'py, PyList>> {
        let hint = size_arg(hint).filter(|&h| h > 0);
        let lines = PyList::empty(py);
        let mut total = 0;
        loop {
            let line = self.read_line(py, None)?;
            if line.is_empty() {
                break;
            }
            total += line.len();
            lines.append(PyBytes::new(py, &line))?;
            if hint.is_some_and(|h| total >= h) {
                break;
            }
        }
        Ok(lines)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let line = self.read_line(py, None)?;
        Ok((!line.is_empty()).then(|| PyBytes::new(py, &line)))
    }
}
