//! `send()`: the response head, body and trailers written in order and framed (length or
//! chunked), `http.response.pathsend`, and what follows once the response is complete.

use super::super::conn::{Act, Conn, Request, TimerKind};
use super::super::protocol::HttpProtocol;
use super::super::response::{bodiless, push_chunk_size, push_decimal, reason, simple_response, LAST_CHUNK};
use super::messages::{read_message, Message};
use super::receive::disconnect_message;
use super::{current, ready_none, ClientDisconnected, COPY_LIMIT};
use crate::clock::monotonic;
use crate::transport::stream::Hold;
use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;

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

pub(super) fn send(proto: &Bound<'_, HttpProtocol>, gen: u64, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
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
            // The connection went on to its next request: this one's response is done.
            return Err(PyRuntimeError::new_err(format!(
                "Unexpected ASGI message '{}' sent, after response already completed.",
                msg.type_name()
            )));
        };
        let mut done = false;
        let mut error = None;
        match msg {
            Message::Start { status, head, length, close, trailers } => {
                if req.started {
                    return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.start' sent, after response already started."));
                }
                req.started = true;
                req.status = status;
                req.head = head;
                req.app_length = length;
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
                let fresh = !req.head_written;
                let mut out = if fresh { close_head(req, data.len(), more) } else { Vec::new() };
                let mut big = None;
                let has_body = !bodiless(req.status, req.head_method);
                let total = req.sent + data.len() as u64;
                if has_body && req.app_length.is_some_and(|n| total > n) {
                    // Nothing of this message goes out: the connection closes. If nothing went
                    // out before either, the client gets a 500, as for an app that failed
                    // before its response.
                    error = Some(PyRuntimeError::new_err("Response content longer than Content-Length"));
                    out.clear();
                    if fresh {
                        req.status = 500;
                        req.sent = if req.head_method { 0 } else { reason(500).len() as u64 };
                        acts.push(Act::Write(simple_response(500, req.head_method, state.date_header, state.server_header.as_deref())));
                    }
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
                // Every piece waits for the end of the loop iteration: a response that goes
                // on leaves with its next message (often the last) in one write, and small
                // complete responses of one iteration leave together (`Hold::IfSmall`).
                let hold = if done { Hold::IfSmall } else { Hold::Iteration };
                match big {
                    None => {
                        out.extend_from_slice(&tail);
                        if !out.is_empty() {
                            acts.push(Act::WriteLater(out, hold));
                        }
                    }
                    Some(obj) => {
                        // One vectored write at the last piece: the head and tail are
                        // held with the body (by reference) until then.
                        if !out.is_empty() {
                            acts.push(Act::WriteLater(out, Hold::Iteration));
                        }
                        acts.push(Act::WriteObj(obj, (!done || !tail.is_empty()).then_some(Hold::Iteration)));
                        if !tail.is_empty() {
                            acts.push(Act::WriteLater(tail, hold));
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
                        acts.push(Act::WriteLater(out, Hold::IfSmall));
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
                    pathsend = Some((path.unbind(), transport, size));
                }
            }
        }
        if let Some(e) = error {
            let Some(req) = c.req.as_mut() else { return Err(e) };
            if let Some(scope) = req.scope.take() {
                acts.push(Act::AccessLog(Some(scope), None, req.status, req.sent, monotonic() - req.start));
            }
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
    if let Some((path, transport, size)) = pathsend {
        let t = transport.unwrap_or_else(|| py.None());
        return state.pathsend.call1(py, (proto, t, path, gen, size));
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
    for w in std::mem::take(&mut req.receive_waiters) {
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
        // The rest of the body is read and dropped: reading may have paused on it. It has
        // the keep-alive timeout to arrive, or a client could hold the connection forever.
        req.discard = true;
        req.body_buf = Vec::new();
        if c.reading_paused && !c.lost {
            c.reading_paused = false;
            acts.push(Act::ResumeReading);
        }
        this.set_timer(c, TimerKind::KeepAlive, this.state.get().timeout_keep_alive, acts);
        this.advance(py, c, acts)?;
    }
    Ok(())
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
