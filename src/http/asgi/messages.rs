//! Reading the messages an app gives `send()`, before any lock is taken (reading a message
//! may run Python code): their keys, status, headers and body, checked as the spec says.

use super::super::config::HttpServerState;
use super::super::parse::forbidden_trailer;
use super::super::response::{http_date, push_header, push_status_line};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

/// What a `send` message asks for, read before the connection's lock is taken (reading it
/// may run Python code).
pub(super) enum Message<'py> {
    Start { status: u16, head: Vec<u8>, length: Option<u64>, close: bool, trailers: bool },
    Body { body: Bound<'py, PyBytes>, more: bool },
    Trailers { fields: Vec<u8>, more: bool },
    PathSend { path: Bound<'py, PyAny>, size: u64 },
}

impl Message<'_> {
    pub(super) fn type_name(&self) -> &'static str {
        match self {
            Message::Start { .. } => "http.response.start",
            Message::Body { .. } => "http.response.body",
            Message::Trailers { .. } => "http.response.trailers",
            Message::PathSend { .. } => "http.response.pathsend",
        }
    }
}

pub(super) fn get<'py>(msg: &Bound<'py, PyAny>, key: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyAny>>> {
    // Messages are nearly always plain dicts: look up without raising KeyError for the
    // optional keys (an exception per missing key is most of a send's cost).
    if let Ok(d) = msg.cast_exact::<PyDict>() {
        return d.get_item(key);
    }
    match msg.get_item(key) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyKeyError>(msg.py()) => Ok(None),
        Err(e) => Err(e),
    }
}

/// One header of the app's `headers`: the spec has them as `[name, value]`, and apps give
/// lists as often as tuples (uvicorn's own example does), or any other pair.
fn header_pair<'py>(item: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    const NOT_A_PAIR: &str = "each header must be a pair [name, value]";
    let wrong = || PyValueError::new_err(NOT_A_PAIR);
    if let Ok(t) = item.cast::<PyTuple>() {
        return if t.len() == 2 { Ok((t.get_item(0)?, t.get_item(1)?)) } else { Err(wrong()) };
    }
    if let Ok(l) = item.cast::<PyList>() {
        return if l.len() == 2 { Ok((l.get_item(0)?, l.get_item(1)?)) } else { Err(wrong()) };
    }
    if item.is_instance_of::<PyBytes>() || item.is_instance_of::<PyString>() {
        return Err(wrong());
    }
    let mut it = item.try_iter().map_err(|_| PyTypeError::new_err(NOT_A_PAIR))?;
    let mut next = || it.next().transpose();
    match (next()?, next()?, next()?) {
        (Some(n), Some(v), None) => Ok((n, v)),
        _ => Err(wrong()),
    }
}

/// Check and write the app's header fields; `each` sees every one and says whether it is
/// sent.
fn header_fields(py: Python<'_>, headers: Option<Bound<'_, PyAny>>, out: &mut Vec<u8>, mut each: impl FnMut(&[u8], &[u8]) -> bool) -> PyResult<()> {
    let Some(headers) = headers else { return Ok(()) };
    // A list (nearly always) is read by index, without an iterator object per response.
    let list = headers.cast::<PyList>().ok();
    let mut iter = if list.is_none() { Some(headers.try_iter()?) } else { None };
    for index in 0.. {
        let item = match (&list, iter.as_mut()) {
            (Some(list), _) if index < list.len() => list.get_item(index)?,
            (None, Some(it)) => match it.next() {
                Some(item) => item?,
                None => break,
            },
            _ => break,
        };
        let (name, value) = header_pair(&item)?;
        let name = name.cast::<PyBytes>().map_err(|_| PyTypeError::new_err("header names must be bytes"))?;
        let value = value.cast::<PyBytes>().map_err(|_| PyTypeError::new_err("header values must be bytes"))?;
        let (n, v) = (name.as_bytes(), value.as_bytes());
        let before = out.len();
        if !push_header(out, n, v) {
            return Err(PyValueError::new_err(format!("invalid header {:?}: {:?}", String::from_utf8_lossy(n), String::from_utf8_lossy(v))));
        }
        if !each(n, v) {
            out.truncate(before);
        }
    }
    let _ = py;
    Ok(())
}

pub(super) fn read_message<'py>(state: &HttpServerState, msg: &Bound<'py, PyAny>) -> PyResult<Message<'py>> {
    let py = msg.py();
    let typ = get(msg, intern!(py, "type"))?.ok_or_else(|| PyValueError::new_err("ASGI message without 'type'"))?;
    let typ = typ.cast::<PyString>().map_err(|_| PyTypeError::new_err("ASGI message 'type' must be str"))?;
    match typ.to_str()? {
        "http.response.start" => {
            let status: u16 = get(msg, intern!(py, "status"))?
                .ok_or_else(|| PyValueError::new_err("'http.response.start' without 'status'"))?
                .extract()?;
            if !(100..=999).contains(&status) {
                return Err(PyValueError::new_err(format!("invalid status {status}")));
            }
            if status < 200 {
                // RFC 9110 §15.2: an informational status is never the final response, and a
                // client would wait on for one.
                return Err(PyValueError::new_err(format!("status {status} is informational, not a response")));
            }
            let trailers = match get(msg, intern!(py, "trailers"))? {
                Some(t) => t.is_truthy()?,
                None => false,
            };
            let mut head = Vec::with_capacity(256);
            push_status_line(&mut head, status);
            let (mut length, mut close, mut date, mut server) = (None, false, false, false);
            let (mut bad_length, mut bad_coding) = (false, false);
            // RFC 9110 §8.6, RFC 9112 §6.1: no framing headers on a 204 response.
            let no_content = status == 204;
            let defaults = &state.default_headers;
            let mut replaced: u64 = 0;
            header_fields(py, get(msg, intern!(py, "headers"))?, &mut head, |n, v| {
                for (i, (name, _)) in defaults.iter().enumerate() {
                    if n.eq_ignore_ascii_case(name) {
                        replaced |= 1 << i;
                    }
                }
                let framing = n.eq_ignore_ascii_case(b"content-length") || n.eq_ignore_ascii_case(b"transfer-encoding");
                if framing && no_content {
                    return false;
                }
                if n.eq_ignore_ascii_case(b"content-length") {
                    let s = std::str::from_utf8(v).ok().filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
                    match s.and_then(|s| s.parse::<u64>().ok()) {
                        Some(l) if length.is_none() || length == Some(l) => length = Some(l),
                        _ => bad_length = true,
                    }
                } else if n.eq_ignore_ascii_case(b"transfer-encoding") {
                    // The framing is the server's (RFC 9112 §6.1): it chunks a body of unknown
                    // length itself, never towards HTTP/1.0 and never beside a Content-Length.
                    // An app's `chunked` is therefore left out; a coding the server does not
                    // apply could not be framed as the header says.
                    bad_coding |= !v.trim_ascii().eq_ignore_ascii_case(b"chunked");
                    return false;
                } else if n.eq_ignore_ascii_case(b"connection") {
                    // Connection management is the server's: an app's `close` is honoured,
                    // and the one Connection header is the server's own.
                    close |= v.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
                    return false;
                } else if n.eq_ignore_ascii_case(b"date") {
                    date = true;
                } else if n.eq_ignore_ascii_case(b"server") {
                    server = true;
                }
                true
            })?;
            if bad_length {
                return Err(PyValueError::new_err("invalid content-length response header"));
            }
            if bad_coding {
                return Err(PyValueError::new_err("unsupported transfer-encoding response header: the server frames the body, and applies no other coding"));
            }
            if state.date_header && !date {
                head.extend_from_slice(b"date: ");
                head.extend_from_slice(&http_date());
                head.extend_from_slice(b"\r\n");
            }
            if let (Some(s), false) = (&state.server_header, server) {
                push_header(&mut head, b"server", s);
            }
            for (i, (_, line)) in defaults.iter().enumerate() {
                if replaced & (1 << i) == 0 {
                    head.extend_from_slice(line);
                }
            }
            Ok(Message::Start { status, head, length, close, trailers })
        }
        "http.response.body" => {
            let body = match get(msg, intern!(py, "body"))? {
                Some(b) => b,
                None => PyBytes::new(py, b"").into_any(),
            };
            if !body.is_instance_of::<PyBytes>() && !body.is_instance_of::<pyo3::types::PyByteArray>() && !body.is_instance_of::<pyo3::types::PyMemoryView>() {
                return Err(PyTypeError::new_err("'body' must be bytes"));
            }
            let body = match body.cast_into::<PyBytes>() {
                Ok(b) => b,
                Err(e) => PyBytes::new(py, &e.into_inner().extract::<Vec<u8>>()?),
            };
            let more = match get(msg, intern!(py, "more_body"))? {
                Some(m) => m.is_truthy()?,
                None => false,
            };
            Ok(Message::Body { body, more })
        }
        "http.response.trailers" => {
            let mut fields = Vec::new();
            // Framing, routing and the like have no place in trailers: left out.
            header_fields(py, get(msg, intern!(py, "headers"))?, &mut fields, |n, _| !forbidden_trailer(n))?;
            let more = match get(msg, intern!(py, "more_trailers"))? {
                Some(m) => m.is_truthy()?,
                None => false,
            };
            Ok(Message::Trailers { fields, more })
        }
        "http.response.pathsend" => {
            let path = get(msg, intern!(py, "path"))?.ok_or_else(|| PyValueError::new_err("'http.response.pathsend' without 'path'"))?;
            let fspath: std::path::PathBuf = path.extract()?;
            let meta = std::fs::metadata(&fspath).map_err(|e| crate::pyutil::os_error(py, e))?;
            if !meta.is_file() {
                return Err(PyValueError::new_err("'http.response.pathsend' path is not a regular file"));
            }
            Ok(Message::PathSend { path, size: meta.len() })
        }
        other => Err(PyRuntimeError::new_err(format!("Unexpected ASGI message type '{other}'"))),
    }
}
