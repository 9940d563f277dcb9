//! `start_response` and `write` (PEP 3333) for one request, on its app thread. The status
//! and headers are checked when given, kept, and made into the response head only when
//! the first body bytes (or the body's end) go out, so an app may still replace them with
//! `exc_info` until then, and a generator that calls `start_response` lazily works. Each
//! send waits while the connection's write buffer is full, so a slow client holds the app
//! thread rather than growing the server's memory.

use super::bridge::{OutPart, Post};
use super::exchange::{Exchange, Shared};
use crate::http::head::{HeadBuilder, ResponseHead};
use crate::http::ClientDisconnected;
use crate::sync::lock_unpoisoned;
use pyo3::exceptions::{PyAssertionError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use std::sync::{Arc, Mutex, MutexGuard};

/// Fields that belong to a connection, not a response, which a WSGI app may not set
/// (PEP 3333, "Other HTTP Features").
const HOP_BY_HOP: [&[u8]; 8] = [
    b"connection",
    b"keep-alive",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
];

#[derive(Default)]
struct Reply {
    /// Status code and reason phrase.
    status: Option<(u16, Vec<u8>)>,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    head_sent: bool,
}

/// Whether a send reached the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    Queued,
    /// The client is gone (or the connection ended the response): stop sending.
    Gone,
}

#[pyclass(module = "swordfish._native", frozen)]
pub struct StartResponse {
    ex: Arc<Exchange>,
    reply: Mutex<Reply>,
}

fn text_bytes(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    let text = value
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a str, not {}", type_name(value))))?;
    let text = text.to_cow()?;
    // Latin-1: every character one byte (PEP 3333, "Unicode Issues").
    text.chars()
        .map(|c| u8::try_from(u32::from(c)).ok())
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| PyValueError::new_err(format!("{what} {text:?} is not latin-1")))
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

/// "200 OK" as (200, "OK").
fn parse_status(status: &[u8]) -> PyResult<(u16, Vec<u8>)> {
    let invalid = || PyValueError::new_err(format!("invalid status {:?}", String::from_utf8_lossy(status)));
    let code = status.get(..3).ok_or_else(invalid)?;
    if !code.iter().all(u8::is_ascii_digit) || status.get(3).is_some_and(|&b| b != b' ') {
        return Err(invalid());
    }
    let code = code.iter().fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
    Ok((code, status.get(4..).unwrap_or_default().to_vec()))
}

fn parse_headers(headers: &Bound<'_, PyAny>) -> PyResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let list = headers
        .cast::<PyList>()
        .map_err(|_| PyTypeError::new_err(format!("headers must be a list, not {}", type_name(headers))))?;
    let mut out = Vec::with_capacity(list.len());
    for item in list.iter() {
        let pair = item
            .cast::<PyTuple>()
            .ok()
            .filter(|t| t.len() == 2)
            .ok_or_else(|| PyTypeError::new_err(format!("a header must be a (name, value) tuple, not {item:?}")))?;
        let name = text_bytes(&pair.get_item(0)?, "a header name")?;
        let value = text_bytes(&pair.get_item(1)?, "a header value")?;
        if HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h)) {
            return Err(PyAssertionError::new_err(format!(
                "hop-by-hop header {:?} not allowed in a WSGI response",
                String::from_utf8_lossy(&name)
            )));
        }
        out.push((name, value));
    }
    Ok(out)
}

impl StartResponse {
    pub fn new(ex: Arc<Exchange>) -> StartResponse {
        StartResponse { ex, reply: Mutex::new(Reply::default()) }
    }

    fn reply(&self) -> MutexGuard<'_, Reply> {
        lock_unpoisoned(&self.reply)
    }

    pub fn head_sent(&self) -> bool {
        self.reply().head_sent
    }

    /// The response head, if it has not gone out yet (it goes with what is sent next).
    fn head_once(&self) -> PyResult<Option<ResponseHead>> {
        let mut reply = self.reply();
        if reply.head_sent {
            return Ok(None);
        }
        let head = self.head(&reply)?;
        reply.head_sent = true;
        Ok(Some(head))
    }

    fn head(&self, reply: &Reply) -> PyResult<ResponseHead> {
        let Some((status, reason)) = &reply.status else {
            return Err(PyAssertionError::new_err("the WSGI application sent a body before calling start_response()"));
        };
        let error = |e: crate::http::head::HeadError| PyValueError::new_err(e.to_string());
        self.ex.with_rules(|rules| {
            let mut builder = HeadBuilder::with_reason(*status, reason).map_err(error)?;
            for (name, value) in &reply.headers {
                builder.field(rules, name, value).map_err(error)?;
            }
            builder.finish(rules).map_err(error)
        })
    }

    /// Send `file` (an open regular file, `remaining` bytes from `offset` to its end) as the
    /// whole body, with the loop's `sendfile`, and wait until it is out: the app's iterable
    /// (which closes the file) is closed after. The app's Content-Length, if smaller, is
    /// what is sent.
    pub fn send_file(&self, py: Python<'_>, file: Py<PyAny>, offset: u64, remaining: u64) -> PyResult<Sent> {
        let gone = self.ex.wait_for(py, Shared::writable, |s| s.gone);
        if gone {
            return Ok(Sent::Gone);
        }
        let Some(head) = self.head_once()? else {
            return Err(PyAssertionError::new_err("a file as the body after the response started"));
        };
        let size = head.length.map_or(remaining, |n| n.min(remaining));
        self.ex.post(py, Post::File { ex: self.ex.clone(), head, file, offset, size })?;
        let gone = self.ex.wait_for(py, |s| s.file_done || s.gone, |s| s.gone);
        Ok(if gone { Sent::Gone } else { Sent::Queued })
    }

    /// Send a body part (`None`: no bytes), the head before the first; `more`: the body
    /// goes on. Waits (GIL released) while writing is paused.
    pub fn send(&self, py: Python<'_>, body: Option<Bound<'_, PyBytes>>, more: bool) -> PyResult<Sent> {
        let size = body.as_ref().map_or(0, |b| b.as_bytes().len());
        let gone = self.ex.wait_for(py, Shared::writable, |s| {
            s.in_flight += size;
            s.gone
        });
        if gone {
            return Ok(Sent::Gone);
        }
        let mut parts = Vec::with_capacity(2);
        if let Some(head) = self.head_once()? {
            parts.push(OutPart::Head(head));
        }
        let body = match body {
            Some(b) => b.unbind(),
            None => PyBytes::new(py, b"").unbind(),
        };
        parts.push(OutPart::Body(body, more));
        self.ex.post(py, Post::Respond(self.ex.clone(), parts))?;
        Ok(Sent::Queued)
    }
}

#[pymethods]
impl StartResponse {
    #[pyo3(signature = (status, headers, exc_info=None))]
    fn __call__(
        slf: &Bound<'_, Self>,
        status: &Bound<'_, PyAny>,
        headers: &Bound<'_, PyAny>,
        exc_info: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let this = slf.get();
        let exc_info = exc_info.filter(|e| !e.is_none());
        {
            let reply = this.reply();
            match exc_info {
                // PEP 3333: with the head out, the error goes back to the app, which ends.
                Some(info) if reply.head_sent => {
                    let exc = info.get_item(1)?;
                    let tb = info.get_item(2)?;
                    let exc = if tb.is_none() { exc } else { exc.call_method1("with_traceback", (tb,))? };
                    return Err(PyErr::from_value(exc));
                }
                Some(_) => {}
                None if reply.status.is_some() => {
                    return Err(PyAssertionError::new_err("start_response() called again without exc_info"));
                }
                None => {}
            }
        }
        let parsed = parse_status(&text_bytes(status, "the status")?)?;
        let fields = parse_headers(headers)?;
        let mut reply = this.reply();
        reply.status = Some(parsed);
        reply.headers = fields;
        drop(reply);
        Ok(slf.getattr("write")?.unbind())
    }

    /// The imperative body API (PEP 3333's `write`), for apps that need it.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = data
            .cast::<PyBytes>()
            .map_err(|_| PyTypeError::new_err(format!("write() takes bytes, not {}", type_name(data))))?;
        if data.as_bytes().is_empty() {
            return Ok(());
        }
        match self.send(py, Some(data.clone()), true)? {
            Sent::Queued => Ok(()),
            Sent::Gone => Err(ClientDisconnected::new_err("the client disconnected")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        assert_eq!(parse_status(b"200 OK").ok(), Some((200, b"OK".to_vec())));
        assert_eq!(parse_status(b"404 Not Here").ok(), Some((404, b"Not Here".to_vec())));
        assert_eq!(parse_status(b"204").ok(), Some((204, Vec::new())));
        assert!(parse_status(b"20 OK").is_err());
        assert!(parse_status(b"2000 OK").is_err());
        assert!(parse_status(b"abc OK").is_err());
    }
}
