//! Reading the messages an app gives `send()`, before any lock is taken (reading a message
//! may run Python code): their keys, status, headers and body, checked as the spec says;
//! the head's rules are the connection's (`http::head`).

use crate::http::config::HttpServerState;
use crate::http::head::{trailer_field, HeadBuilder, HeadError, ResponseHead};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

/// What a `send` message asks for, read before the connection's lock is taken (reading it
/// may run Python code).
pub(super) enum Message<'py> {
    Start { head: ResponseHead, trailers: bool },
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

pub fn get<'py>(msg: &Bound<'py, PyAny>, key: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyAny>>> {
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

/// Each of the app's `headers` as (name, value) bytes.
fn each_header(headers: Option<Bound<'_, PyAny>>, mut each: impl FnMut(&[u8], &[u8]) -> PyResult<()>) -> PyResult<()> {
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
        each(name.as_bytes(), value.as_bytes())?;
    }
    Ok(())
}

fn head_error(e: HeadError) -> PyErr {
    PyValueError::new_err(e.to_string())
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
            let trailers = match get(msg, intern!(py, "trailers"))? {
                Some(t) => t.is_truthy()?,
                None => false,
            };
            let rules = state.settings.head_rules();
            let mut head = HeadBuilder::new(status).map_err(head_error)?;
            each_header(get(msg, intern!(py, "headers"))?, |n, v| head.field(&rules, n, v).map_err(head_error))?;
            Ok(Message::Start { head: head.finish(&rules).map_err(head_error)?, trailers })
        }
        "http.response.body" => {
            let body = match get(msg, intern!(py, "body"))? {
                Some(b) => b,
                None => PyBytes::new(py, b"").into_any(),
            };
            if !body.is_instance_of::<PyBytes>()
                && !body.is_instance_of::<pyo3::types::PyByteArray>()
                && !body.is_instance_of::<pyo3::types::PyMemoryView>()
            {
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
            each_header(get(msg, intern!(py, "headers"))?, |n, v| {
                trailer_field(&mut fields, n, v).map_err(head_error)
            })?;
            let more = match get(msg, intern!(py, "more_trailers"))? {
                Some(m) => m.is_truthy()?,
                None => false,
            };
            Ok(Message::Trailers { fields, more })
        }
        "http.response.pathsend" => {
            let path = get(msg, intern!(py, "path"))?
                .ok_or_else(|| PyValueError::new_err("'http.response.pathsend' without 'path'"))?;
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
