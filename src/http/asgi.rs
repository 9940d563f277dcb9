//! The ASGI 3 side of the protocol: the `http` scope, the `receive` and `send` callables
//! (small native objects bound to one request) and the awaitable they return when nothing
//! has to wait.

use super::config::HttpServerState;
use super::parse::{Head, Reject};
use super::protocol::{Act, Conn, HttpProtocol, Request};
use super::response::{bodiless, http_date, push_chunk_size, push_decimal, push_header, push_status_line, reason, simple_response, LAST_CHUNK};
use crate::clock::monotonic;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyStopIteration, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use pyo3::{create_exception, intern, PyTraverseError, PyVisit};
use std::borrow::Cow;

create_exception!(
    swordfish._native,
    ClientDisconnected,
    PyOSError,
    "Raised by an ASGI `send` after the client went away (ASGI spec 2.4)."
);

/// Above this size a body is written as its own object instead of being copied next to the
/// head.
const COPY_LIMIT: usize = 16 * 1024;

/// An awaitable that is already complete: `await` gets `value` without suspending.
#[pyclass(module = "swordfish._native", frozen)]
pub struct Ready {
    value: Option<Py<PyAny>>,
}

#[pymethods]
impl Ready {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        match &self.value {
            None => Ok(None),
            Some(v) => Err(PyStopIteration::new_err((v.clone_ref(py),))),
        }
    }

    fn send(&self, py: Python<'_>, _value: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
        self.__next__(py)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.value)
    }
}

static READY_NONE: PyOnceLock<Py<Ready>> = PyOnceLock::new();

fn ready_none(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let r = READY_NONE.get_or_try_init(py, || Py::new(py, Ready { value: None }))?;
    Ok(r.clone_ref(py).into_any())
}

fn ready(py: Python<'_>, value: Py<PyAny>) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, Ready { value: Some(value) })?.into_any())
}

// ---------------------------------------------------------------------------------------
// scope

fn percent_decode(raw: &[u8]) -> Cow<'_, [u8]> {
    if !raw.contains(&b'%') {
        return Cow::Borrowed(raw);
    }
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' && i + 2 < raw.len() {
            if let (Some(h), Some(l)) = (hex(raw[i + 1]), hex(raw[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    Cow::Owned(out)
}

/// (raw_path, query) of a request target in origin, absolute or asterisk form.
fn split_target<'a>(target: &'a [u8], method: &[u8]) -> Result<(&'a [u8], &'a [u8]), Reject> {
    let path_and_query = if target.first() == Some(&b'/') {
        target
    } else if target == b"*" && method == b"OPTIONS" {
        return Ok((target, b""));
    } else {
        let lower: Vec<u8> = target.iter().take(8).map(u8::to_ascii_lowercase).collect();
        let rest = if lower.starts_with(b"http://") {
            &target[7..]
        } else if lower.starts_with(b"https://") {
            &target[8..]
        } else {
            return Err(Reject::BadRequest("invalid request target"));
        };
        match rest.iter().position(|&b| b == b'/' || b == b'?') {
            Some(i) if rest[i] == b'/' => &rest[i..],
            Some(i) => return Ok((b"/", &rest[i + 1..])),
            None => return Ok((b"/", b"")),
        }
    };
    match path_and_query.iter().position(|&b| b == b'?') {
        Some(i) => Ok((&path_and_query[..i], &path_and_query[i + 1..])),
        None => Ok((path_and_query, b"")),
    }
}

fn method_str<'py>(py: Python<'py>, m: &[u8]) -> Bound<'py, PyString> {
    match m {
        b"GET" => intern!(py, "GET").clone(),
        b"POST" => intern!(py, "POST").clone(),
        b"HEAD" => intern!(py, "HEAD").clone(),
        b"PUT" => intern!(py, "PUT").clone(),
        b"DELETE" => intern!(py, "DELETE").clone(),
        b"OPTIONS" => intern!(py, "OPTIONS").clone(),
        b"PATCH" => intern!(py, "PATCH").clone(),
        _ => PyString::new(py, &String::from_utf8_lossy(m)),
    }
}

pub fn build_scope(py: Python<'_>, state: &HttpServerState, c: &Conn, head: &Head) -> Result<Py<PyAny>, Reject> {
    let buf = &c.rbuf;
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
    let version = if head.minor == 1 { intern!(py, "1.1") } else { intern!(py, "1.0") };
    set(intern!(py, "http_version"), version.clone().into_any())?;
    set(intern!(py, "server"), c.server.as_ref().map_or_else(none, |s| s.clone_ref(py)).into_bound(py))?;
    set(intern!(py, "client"), c.client.as_ref().map_or_else(none, |s| s.clone_ref(py)).into_bound(py))?;
    let scheme = if c.https { intern!(py, "https") } else { intern!(py, "http") };
    set(intern!(py, "scheme"), scheme.clone().into_any())?;
    set(intern!(py, "method"), method_str(py, method).into_any())?;
    set(intern!(py, "path"), PyString::new(py, &String::from_utf8_lossy(&path)).into_any())?;
    set(intern!(py, "raw_path"), PyBytes::new(py, raw_path).into_any())?;
    set(intern!(py, "query_string"), PyBytes::new(py, query).into_any())?;
    set(intern!(py, "headers"), headers.into_any())?;
    if let Some(ls) = &state.lifespan_state {
        set(intern!(py, "state"), ls.bind(py).copy().map_err(fail)?.into_any())?;
    }
    Ok(scope.into_any().unbind())
}

pub fn disconnect_message(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "type"), intern!(py, "http.disconnect"))?;
    Ok(d.into_any().unbind())
}

/// The next `http.request` message: all the body read so far.
pub fn take_body_message(py: Python<'_>, req: &mut Request) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "type"), intern!(py, "http.request"))?;
    d.set_item(intern!(py, "body"), PyBytes::new(py, &req.body_buf))?;
    req.body_buf.clear();
    if req.body_buf.capacity() > super::protocol::READ_HIGH_WATER * 2 {
        req.body_buf = Vec::new();
    }
    d.set_item(intern!(py, "more_body"), !req.body_done)?;
    if req.body_done {
        req.body_final_sent = true;
    }
    Ok(d.into_any().unbind())
}

// ---------------------------------------------------------------------------------------
// receive / send

/// `receive()` of one request. Also the done callback of the app's task (called with the
/// task): that saves an object per request.
#[pyclass(module = "swordfish._native", frozen)]
pub struct Receive {
    pub proto: Py<HttpProtocol>,
    pub gen: u64,
}

#[pyclass(module = "swordfish._native", frozen)]
pub struct Send {
    pub proto: Py<HttpProtocol>,
    pub gen: u64,
}

fn current<'a>(c: &'a mut Conn, gen: u64) -> Option<&'a mut Request> {
    c.req.as_mut().filter(|r| r.gen == gen)
}

#[pymethods]
impl Receive {
    #[pyo3(signature = (task=None))]
    fn __call__(&self, py: Python<'_>, task: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let proto = self.proto.bind(py);
        if let Some(task) = task {
            task_finished(proto, self.gen, task)?;
            return Ok(py.None());
        }
        receive(proto, self.gen)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.proto)
    }
}

fn receive(proto: &Bound<'_, HttpProtocol>, gen: u64) -> PyResult<Py<PyAny>> {
    let py = proto.py();
    let this = proto.get();
    let mut acts = Vec::new();
    let immediate = {
        let mut c = this.lock(py)?;
        let lost = c.lost;
        let mut resume = false;
        let result = match current(&mut c, gen) {
            None => Some(disconnect_message(py)?),
            Some(req) => {
                if req.expect_continue && !req.continue_sent && !req.head_written && !lost {
                    req.continue_sent = true;
                    acts.push(Act::Write(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec()));
                }
                if !req.body_buf.is_empty() || (req.body_done && !req.body_final_sent) {
                    resume = true;
                    Some(take_body_message(py, req)?)
                } else if lost || req.complete {
                    Some(disconnect_message(py)?)
                } else {
                    resume = true;
                    None
                }
            }
        };
        if resume && c.reading_paused && !c.lost {
            c.reading_paused = false;
            acts.push(Act::ResumeReading);
        }
        result
    };
    HttpProtocol::run_acts(proto, acts)?;
    if let Some(msg) = immediate {
        return ready(py, msg);
    }
    let fut = this.state.get().lp.call_method0(py, intern!(py, "create_future"))?;
    let mut c = this.lock(py)?;
    match current(&mut c, gen) {
        Some(req) => req.receive_waiter = Some(fut.clone_ref(py)),
        None => {
            drop(c);
            fut.call_method1(py, intern!(py, "set_result"), (disconnect_message(py)?,))?;
        }
    }
    Ok(fut)
}

/// What a `send` message asks for, read before the connection's lock is taken (reading it
/// may run Python code).
enum Message<'py> {
    Start { status: u16, head: Vec<u8>, length: Option<u64>, chunked: bool, close: bool, trailers: bool },
    Body { body: Bound<'py, PyBytes>, more: bool },
    Trailers { fields: Vec<u8>, more: bool },
    PathSend { path: Bound<'py, PyAny>, size: u64 },
}

fn get<'py>(msg: &Bound<'py, PyAny>, key: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyAny>>> {
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

/// Check and write the app's header fields; `each` sees every one and says whether it is
/// sent.
fn header_fields(py: Python<'_>, headers: Option<Bound<'_, PyAny>>, out: &mut Vec<u8>, mut each: impl FnMut(&[u8], &[u8]) -> bool) -> PyResult<()> {
    let Some(headers) = headers else { return Ok(()) };
    for item in headers.try_iter()? {
        let item = item?;
        let (name, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
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

fn read_message<'py>(state: &HttpServerState, msg: &Bound<'py, PyAny>) -> PyResult<Message<'py>> {
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
            let trailers = match get(msg, intern!(py, "trailers"))? {
                Some(t) => t.is_truthy()?,
                None => false,
            };
            let mut head = Vec::with_capacity(256);
            push_status_line(&mut head, status);
            let (mut length, mut chunked, mut close, mut date, mut server) = (None, false, false, false, false);
            let mut bad_length = false;
            // RFC 9110 §8.6, RFC 9112 §6.1: no framing headers on a 1xx or 204 response.
            let no_content = status == 204 || status < 200;
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
                    chunked = true;
                } else if n.eq_ignore_ascii_case(b"connection") {
                    close |= v.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
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
            Ok(Message::Start { status, head, length, chunked, close, trailers })
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
            header_fields(py, get(msg, intern!(py, "headers"))?, &mut fields, |_, _| true)?;
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

#[pymethods]
impl Send {
    fn __call__(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        send(self.proto.bind(py), self.gen, message)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.proto)
    }
}

/// Finish the head: framing, connection handling, the empty line.
fn close_head(req: &mut Request, body_len: usize, more: bool) -> Vec<u8> {
    let mut head = std::mem::take(&mut req.head);
    if !bodiless(req.status, req.head_method) && req.app_length.is_none() && !req.chunked {
        if req.trailers || more {
            if req.minor == 1 {
                head.extend_from_slice(b"transfer-encoding: chunked\r\n");
                req.chunked = true;
            } else {
                req.keep_alive = false; // HTTP/1.0: the end of the body is the end of the connection
            }
        } else {
            head.extend_from_slice(b"content-length: ");
            push_decimal(&mut head, body_len as u64);
            head.extend_from_slice(b"\r\n");
            req.app_length = Some(body_len as u64);
        }
    }
    if req.expect_continue && !req.continue_sent && !req.body_done {
        // The client waits for a 100 that a final response rules out: its body may never
        // come, so the connection cannot be reused. Say so (RFC 9110 §10.1.1).
        req.keep_alive = false;
    }
    if !req.keep_alive {
        head.extend_from_slice(b"connection: close\r\n");
    } else if req.minor == 0 {
        head.extend_from_slice(b"connection: keep-alive\r\n");
    }
    head.extend_from_slice(b"\r\n");
    req.head_written = true;
    head
}

fn send(proto: &Bound<'_, HttpProtocol>, gen: u64, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let py = proto.py();
    let this = proto.get();
    let state = this.state.get();
    let msg = read_message(state, message)?;
    let mut acts = Vec::new();
    let mut pathsend = None;
    let outcome: PyResult<()> = (|| {
        let mut c = this.lock(py)?;
        if c.lost {
            return Err(ClientDisconnected::new_err("the client disconnected"));
        }
        let Some(req) = current(&mut c, gen) else {
            return Err(ClientDisconnected::new_err("the response is complete"));
        };
        let mut done = false;
        let mut error = None;
        match msg {
            Message::Start { status, head, length, chunked, close, trailers } => {
                if req.started {
                    return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.start' sent, after response already started."));
                }
                req.started = true;
                req.status = status;
                req.head = head;
                req.app_length = length;
                req.chunked = chunked;
                req.trailers = trailers;
                if close {
                    req.keep_alive = false;
                }
            }
            Message::Body { body, more } => {
                if !req.started {
                    return Err(PyRuntimeError::new_err("Expected ASGI message 'http.response.start', but got 'http.response.body'."));
                }
                if req.body_finished {
                    return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.body' sent, after response already completed."));
                }
                let data = body.as_bytes();
                let mut out = if req.head_written { Vec::new() } else { close_head(req, data.len(), more) };
                let mut big = None;
                let has_body = !bodiless(req.status, req.head_method);
                let total = req.sent + data.len() as u64;
                if has_body && req.app_length.is_some_and(|n| total > n) {
                    // Nothing of this message goes out: the connection closes.
                    error = Some(PyRuntimeError::new_err("Response content longer than Content-Length"));
                    out.clear();
                } else if has_body {
                    if !more && req.app_length.is_some_and(|n| total < n) {
                        error = Some(PyRuntimeError::new_err("Response content shorter than Content-Length"));
                    }
                    if req.chunked && !data.is_empty() {
                        push_chunk_size(&mut out, data.len());
                    }
                    if data.len() > COPY_LIMIT {
                        big = Some(body.clone().unbind());
                    } else {
                        out.extend_from_slice(data);
                    }
                    req.sent = total;
                }
                let mut tail = Vec::new();
                if req.chunked && !data.is_empty() && has_body && error.is_none() {
                    tail.extend_from_slice(b"\r\n");
                }
                if !more {
                    req.body_finished = true;
                    if !req.trailers {
                        if req.chunked && !bodiless(req.status, req.head_method) {
                            tail.extend_from_slice(LAST_CHUNK);
                        }
                        done = true;
                    }
                }
                match big {
                    None => {
                        out.extend_from_slice(&tail);
                        if !out.is_empty() {
                            // A response that goes on waits for the end of the iteration:
                            // its next message (often the last) goes out in the same write.
                            acts.push(if done { Act::Write(out) } else { Act::WriteLater(out) });
                        }
                    }
                    Some(obj) => {
                        // One vectored write at the last piece: the head and tail are
                        // held with the body (by reference) until then.
                        if !out.is_empty() {
                            acts.push(Act::WriteLater(out));
                        }
                        acts.push(Act::WriteObj(obj, !done || !tail.is_empty()));
                        if !tail.is_empty() {
                            acts.push(if done { Act::Write(tail) } else { Act::WriteLater(tail) });
                        }
                    }
                }
            }
            Message::Trailers { fields, more } => {
                if !req.trailers || !req.body_finished {
                    return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.trailers'."));
                }
                if req.chunked && !bodiless(req.status, req.head_method) {
                    req.head.extend_from_slice(&fields);
                    if !more {
                        let mut out = b"0\r\n".to_vec();
                        out.extend_from_slice(&req.head);
                        out.extend_from_slice(b"\r\n");
                        req.head.clear();
                        acts.push(Act::Write(out));
                    }
                }
                done = !more;
            }
            Message::PathSend { path, size } => {
                if !req.started || req.head_written {
                    return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.pathsend'."));
                }
                if req.app_length.is_some_and(|n| n != size) {
                    return Err(PyRuntimeError::new_err("Content-Length does not match the file size"));
                }
                if req.chunked {
                    return Err(PyRuntimeError::new_err("'http.response.pathsend' with transfer-encoding"));
                }
                req.trailers = false;
                if req.head_method && req.app_length.is_none() && !bodiless(req.status, false) {
                    // The file's size is known: HEAD gets the content-length GET would.
                    req.head.extend_from_slice(b"content-length: ");
                    push_decimal(&mut req.head, size);
                    req.head.extend_from_slice(b"\r\n");
                    req.app_length = Some(size);
                }
                let out = close_head(req, size as usize, false);
                acts.push(Act::Write(out));
                req.body_finished = true;
                if bodiless(req.status, req.head_method) || size == 0 {
                    done = true;
                } else {
                    req.sent = size;
                    let transport = c.transport.as_ref().map(|t| t.clone_ref(py));
                    pathsend = Some((path.unbind(), transport));
                }
            }
        }
        if let Some(e) = error {
            let Some(req) = c.req.as_mut() else { return Err(e) };
            req.complete = true;
            req.keep_alive = false;
            c.closing = true;
            acts.push(Act::Close);
            return Err(e);
        }
        if done {
            response_complete(py, this, &mut c, &mut acts)?;
        }
        Ok(())
    })();
    HttpProtocol::run_acts(proto, acts)?;
    outcome?;
    if let Some((path, transport)) = pathsend {
        let t = transport.unwrap_or_else(|| py.None());
        return state.pathsend.call1(py, (proto, t, path, gen));
    }
    let c = this.lock(py)?;
    if c.writing_paused && !c.lost {
        drop(c);
        let fut = state.lp.call_method0(py, intern!(py, "create_future"))?;
        this.lock(py)?.drain_waiters.push(fut.clone_ref(py));
        return Ok(fut);
    }
    ready_none(py)
}

/// The last byte of the response is queued: log it, then go on with the connection.
fn response_complete(py: Python<'_>, this: &HttpProtocol, c: &mut Conn, acts: &mut Vec<Act>) -> PyResult<()> {
    let Some(req) = c.req.as_mut() else { return Ok(()) };
    req.complete = true;
    if let Some(scope) = req.scope.take() {
        acts.push(Act::AccessLog(Some(scope), None, req.status, req.sent, monotonic() - req.start));
    }
    if let Some(w) = req.receive_waiter.take() {
        acts.push(Act::Resolve(w, disconnect_message(py)?));
    }
    if req.body_done {
        this.finish_request(c, acts);
        this.advance(py, c, acts)?;
    } else if req.expect_continue && !req.continue_sent {
        // The client waits for 100 before sending the body: the connection cannot be reused.
        req.keep_alive = false;
        c.closing = true;
        acts.push(Act::Close);
    } else {
        // The rest of the body is read and dropped: reading may have paused on it.
        req.discard = true;
        req.body_buf = Vec::new();
        if c.reading_paused && !c.lost {
            c.reading_paused = false;
            acts.push(Act::ResumeReading);
        }
        this.advance(py, c, acts)?;
    }
    Ok(())
}

/// The app's task is done: take its outcome (which also marks an exception as retrieved).
pub fn task_finished(proto: &Bound<'_, HttpProtocol>, gen: u64, task: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = proto.py();
    let exc = if task.call_method0(intern!(py, "cancelled"))?.is_truthy()? {
        None
    } else {
        let e = task.call_method0(intern!(py, "exception"))?;
        (!e.is_none()).then(|| e.unbind())
    };
    app_finished(proto, gen, exc)
}

/// The app's task ended (with `exc` if it raised).
pub fn app_finished(proto: &Bound<'_, HttpProtocol>, gen: u64, exc: Option<Py<PyAny>>) -> PyResult<()> {
    let py = proto.py();
    let this = proto.get();
    let state = this.state.get();
    state.active_requests.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    let mut acts = Vec::new();
    {
        let mut c = this.lock(py)?;
        c.apps.retain(|(g, _)| *g != gen);
        let lost = c.lost;
        if lost && c.apps.is_empty() {
            acts.push(Act::Forget); // see connection_lost
        }
        match current(&mut c, gen) {
            Some(req) if !req.complete => {
                req.task_done = true;
                let msg = match (&exc, req.started) {
                    (Some(_), _) => "Exception in ASGI application",
                    (None, false) => "ASGI callable returned without starting response",
                    (None, true) => "ASGI callable returned without completing response",
                };
                if !lost {
                    acts.push(Act::LogError(msg.to_owned(), exc));
                }
                if !req.head_written && !lost {
                    acts.push(Act::Write(simple_response(500, state.date_header, state.server_header.as_deref())));
                }
                // The request gets its access-log line even though its response is a 500 or
                // was cut short (not when the client left before anything was sent).
                if let Some(scope) = req.scope.take() {
                    let (status, size) = if req.head_written {
                        (req.status, req.sent)
                    } else {
                        (500, reason(500).len() as u64)
                    };
                    if req.head_written || !lost {
                        acts.push(Act::AccessLog(Some(scope), None, status, size, monotonic() - req.start));
                    }
                }
                req.complete = true;
                req.keep_alive = false;
                c.closing = true;
                acts.push(Act::Close);
            }
            // The response is complete (its request body may still be arriving): an
            // exception raised after it is still the app's error.
            Some(req) => {
                req.task_done = true;
                if let Some(e) = exc {
                    acts.push(Act::LogError("Exception in ASGI application".to_owned(), Some(e)));
                }
            }
            None => {
                if let Some(e) = exc {
                    acts.push(Act::LogError("Exception in ASGI application".to_owned(), Some(e)));
                }
            }
        }
    }
    HttpProtocol::run_acts(proto, acts)
}

/// The file of a `pathsend` is sent (`ok`) or failed.
pub fn pathsend_done(slf: &Bound<'_, HttpProtocol>, gen: u64, ok: bool) -> PyResult<()> {
    let py = slf.py();
    let this = slf.get();
    let mut acts = Vec::new();
    {
        let mut c = this.lock(py)?;
        if current(&mut c, gen).is_none() {
            return Ok(());
        }
        if ok {
            response_complete(py, this, &mut c, &mut acts)?;
        } else {
            if let Some(req) = c.req.as_mut() {
                req.complete = true;
            }
            c.closing = true;
            acts.push(Act::Close);
        }
    }
    HttpProtocol::run_acts(slf, acts)
}
