//! The response API of a connection, as an interface drives it: the head, held until the
//! first body part decides the framing; body parts framed by the `Encoder`; trailers; a
//! file as the body; then what follows a complete response (the next request, the rest of
//! an unread body, or closing). Also the end of a request's application. The interface
//! checks its own messages; the bytes on the wire are written here.

use super::conn::{Act, Conn, Expect, Reading, Request, TimerKind, Writing};
use super::encode::{EncodeError, Encoder};
use super::head::{frame_head, Framing, ResponseHead};
use super::protocol::HttpProtocol;
use super::response::{bodiless, push_decimal, reason};
use crate::event_loop::create_future;
use crate::transport::stream::Hold;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

/// Above this size a body part is written as its own object instead of being copied next
/// to the head.
const COPY_LIMIT: usize = 16 * 1024;

/// A part of the response.
pub enum Part<'py> {
    Head {
        head: ResponseHead,
        trailers: bool,
    },
    Body {
        body: Bound<'py, PyBytes>,
        more: bool,
    },
    /// A body part given as text, sent as its UTF-8 (RSGI's `str` bodies): copied once,
    /// where a `bytes` made of it would be copied twice.
    Text {
        text: Bound<'py, PyString>,
        more: bool,
    },
    /// Serialized trailer fields.
    Trailers {
        fields: Vec<u8>,
        more: bool,
    },
    /// A file of this size is the body: the interface sends it, then calls `file_sent`;
    /// or, `open`, the connection sends it.
    File {
        size: u64,
        open: Option<OpenFile>,
    },
}

/// A file the connection sends as the body: swordfish's socket transport queues it and
/// sends it with `sendfile(2)`; any other goes through `sender` (a coroutine function:
/// see `send_file_body`).
pub struct OpenFile {
    pub file: std::fs::File,
    pub offset: u64,
    pub sender: Py<PyAny>,
}

/// A part the response cannot take where it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RespondError {
    /// The client is gone.
    Gone,
    /// The connection went on to its next request: this response is complete.
    Finished,
    AlreadyStarted,
    NotStarted,
    /// A body part after the last one.
    BodyComplete,
    /// Trailers not announced with the head, or before the body's end.
    NoTrailers,
    /// A file as the body after the body started.
    FileNotAllowed,
    FileLength,
    TooLong,
    TooShort,
}

/// The connection's transport failed or was aborted (its `connection_lost` is to come).
/// Another loop's transport only says it is closing, which the connection's own close also
/// makes it; no response part is written after that either.
fn transport_broken(py: Python<'_>, c: &Conn) -> PyResult<bool> {
    if let Some(core) = &c.core {
        return Ok(core.get().broken(py));
    }
    match &c.transport {
        Some(t) => t.call_method0(py, pyo3::intern!(py, "is_closing"))?.is_truthy(py),
        None => Ok(false),
    }
}

/// What the interface does next.
pub enum Responded {
    Ready,
    /// Writing is paused: wait for this future.
    Drain(Py<PyAny>),
    /// Send the file of `Part::File` through this transport.
    File(Option<Py<PyAny>>, u64),
}

impl HttpProtocol {
    /// Give request `gen`'s response its next part.
    pub fn respond(slf: &Bound<'_, Self>, gen: u64, part: Part<'_>) -> PyResult<Result<Responded, RespondError>> {
        Self::respond_parts(slf, gen, [part])
    }

    /// Give request `gen`'s response several parts at once (a head and its whole body):
    /// taken under one lock, written in one go. Stops at the first part refused.
    pub fn respond_parts<'py>(
        slf: &Bound<'py, Self>,
        gen: u64,
        parts: impl IntoIterator<Item = Part<'py>>,
    ) -> PyResult<Result<Responded, RespondError>> {
        let py = slf.py();
        let this = slf.get();
        let mut acts = Vec::new();
        let mut file = None;
        let outcome = {
            let mut c = this.lock(py)?;
            let mut r = Ok(Ok(None));
            for part in parts {
                r = this.take_part(py, &mut c, gen, part, &mut acts);
                match r {
                    Ok(Ok(Some(size))) => file = Some((c.transport.as_ref().map(|t| t.clone_ref(py)), size)),
                    Ok(Ok(None)) => {}
                    _ => break,
                }
            }
            r
        };
        Self::run_acts(slf, acts)?;
        if let Err(e) = outcome? {
            return Ok(Err(e));
        }
        if let Some((transport, size)) = file {
            return Ok(Ok(Responded::File(transport, size)));
        }
        let mut c = this.lock(py)?;
        if c.writing_paused && !c.lost() {
            let fut = create_future(this.state.get().lp.bind(py))?.unbind();
            c.drain_waiters.push(fut.clone_ref(py));
            return Ok(Ok(Responded::Drain(fut)));
        }
        Ok(Ok(Responded::Ready))
    }

    /// `Ok(Some(size))`: a file of that size is to be sent.
    fn take_part(
        &self,
        py: Python<'_>,
        c: &mut Conn,
        gen: u64,
        part: Part<'_>,
        acts: &mut Vec<Act>,
    ) -> PyResult<Result<Option<u64>, RespondError>> {
        // A transport that broke says so to the protocol in a callback: until then, a write
        // would only be counted and warned about.
        if c.lost() || transport_broken(py, c)? {
            return Ok(Err(RespondError::Gone));
        }
        let closing = c.closing();
        let native_transport = c.core.is_some();
        let Some(req) = c.current(gen) else { return Ok(Err(RespondError::Finished)) };
        if closing && req.complete() {
            // The connection answered for the application (a refused body) and is closing:
            // nothing more reaches the client.
            return Ok(Err(RespondError::Gone));
        }
        let mut done = false;
        let mut error = None;
        let mut file = None;
        match part {
            Part::Head { head, trailers } => {
                if !matches!(req.writing, Writing::Init) {
                    return Ok(Err(RespondError::AlreadyStarted));
                }
                req.status = head.status;
                req.keep_alive &= !head.close;
                req.writing = Writing::Head { head, trailers };
            }
            Part::Body { body, more } => {
                if let Err(e) = self.take_body_part(
                    req,
                    body.as_bytes(),
                    || body.clone().unbind(),
                    more,
                    acts,
                    &mut done,
                    &mut error,
                ) {
                    return Ok(Err(e));
                }
            }
            Part::Text { text, more } => {
                let data = text.to_str()?.as_bytes();
                let object = || PyBytes::new(py, data).unbind();
                if let Err(e) = self.take_body_part(req, data, object, more, acts, &mut done, &mut error) {
                    return Ok(Err(e));
                }
            }
            Part::Trailers { fields: more_fields, more } => {
                let Writing::Trailers { encoder, fields } = &mut req.writing else {
                    return Ok(Err(RespondError::NoTrailers));
                };
                fields.extend_from_slice(&more_fields);
                if !more {
                    let mut out = Vec::new();
                    // Only a chunked body carries trailers; the length was checked at its end.
                    let _ = encoder.end(fields, &mut out);
                    if !out.is_empty() {
                        acts.push(Act::WriteLater(out, Hold::IfSmall));
                    }
                    done = true;
                }
            }
            Part::File { size, open } => {
                if !matches!(req.writing, Writing::Head { .. }) {
                    return Ok(Err(RespondError::FileNotAllowed));
                }
                let Writing::Head { head, .. } = std::mem::replace(&mut req.writing, Writing::Done) else {
                    return Ok(Err(RespondError::FileNotAllowed));
                };
                if head.length.is_some_and(|n| n != size) {
                    req.writing = Writing::Head { head, trailers: false };
                    return Ok(Err(RespondError::FileLength));
                }
                let mut head = head;
                if req.head_method && head.length.is_none() && !bodiless(head.status, false) {
                    // The file's size is known: HEAD gets the content-length GET would.
                    head.bytes.extend_from_slice(b"content-length: ");
                    push_decimal(&mut head.bytes, size);
                    head.bytes.extend_from_slice(b"\r\n");
                    head.length = Some(size);
                }
                let mut out = Vec::new();
                let encoder = self.close_head(req, head, Some(size), &mut out);
                acts.push(Act::Write(out));
                if encoder == Encoder::Bodiless || size == 0 {
                    done = true;
                } else {
                    req.sent = size;
                    match open {
                        // Queued behind the head: the response is complete, as one of
                        // bytes is once queued.
                        Some(OpenFile { file, offset, .. }) if native_transport => {
                            acts.push(Act::WriteFile { file, offset, len: size });
                            done = true;
                        }
                        Some(OpenFile { file, offset, sender }) => {
                            req.writing = Writing::File { by_connection: true };
                            acts.push(Act::SendFile { file, offset, len: size, gen, sender });
                        }
                        None => {
                            req.writing = Writing::File { by_connection: false };
                            file = Some(size);
                        }
                    }
                }
            }
        }
        if let Some(e) = error {
            let (status, sent) = (req.status, req.sent);
            self.record(req, status, sent, acts);
            req.writing = Writing::Done;
            req.keep_alive = false;
            c.close_after();
            acts.push(Act::Close);
            return Ok(Err(e));
        }
        if done {
            self.response_complete(py, c, acts)?;
        }
        Ok(Ok(file))
    }

    /// A body part (`data`; `object()` is the same bytes as an object, written by reference
    /// when large): framed, and the head before it if it is the first. `Err`: the response
    /// cannot take a body part where it stands; `error`: this part failed the response.
    #[allow(clippy::too_many_arguments)] // take_part's state, lent to one of its arms
    fn take_body_part(
        &self,
        req: &mut Request,
        data: &[u8],
        object: impl FnOnce() -> Py<PyBytes>,
        more: bool,
        acts: &mut Vec<Act>,
        done: &mut bool,
        error: &mut Option<RespondError>,
    ) -> Result<(), RespondError> {
        let state = self.state.get();
        let mut out = Vec::new();
        let fresh = match std::mem::replace(&mut req.writing, Writing::Done) {
            Writing::Head { head, trailers } => {
                let whole = (!more && !trailers).then_some(data.len() as u64);
                let encoder = self.close_head(req, head, whole, &mut out);
                req.writing = Writing::Body { encoder, trailers };
                true
            }
            w @ Writing::Body { .. } => {
                req.writing = w;
                false
            }
            w => {
                let e = if matches!(w, Writing::Init) { RespondError::NotStarted } else { RespondError::BodyComplete };
                req.writing = w;
                return Err(e);
            }
        };
        let Writing::Body { encoder, trailers } = &mut req.writing else {
            return Err(RespondError::NotStarted);
        };
        let (trailers, mut big, mut tail) = (*trailers, None, Vec::new());
        match encoder.chunk(data.len(), &mut out) {
            // Nothing of this part goes out: the connection closes. If nothing went
            // out before either, the client gets a 500, as for an application that
            // failed before its response.
            Err(_) => {
                *error = Some(RespondError::TooLong);
                out.clear();
                if fresh {
                    req.status = 500;
                    req.sent = if req.head_method { 0 } else { reason(500).len() as u64 };
                    acts.push(Act::Write(state.simple_response(500, req.head_method, b"")));
                }
            }
            Ok(framed) => {
                if framed.send {
                    if data.len() > COPY_LIMIT {
                        big = Some(object());
                    } else {
                        out.extend_from_slice(data);
                    }
                }
                if *encoder != Encoder::Bodiless {
                    req.sent += data.len() as u64;
                }
                tail.extend_from_slice(framed.suffix);
            }
        }
        if !more && error.is_none() {
            let encoder = *encoder;
            let mut scratch = Vec::new();
            if encoder.end(b"", if trailers { &mut scratch } else { &mut tail }) == Err(EncodeError::TooShort) {
                *error = Some(RespondError::TooShort);
            }
            if trailers {
                req.writing = Writing::Trailers { encoder, fields: Vec::new() };
            } else {
                *done = true;
            }
        }
        // Every piece waits for the end of the loop iteration: a response that goes
        // on leaves with its next part (often the last) in one write, and small
        // complete responses of one iteration leave together (`Hold::IfSmall`).
        let hold = if *done { Hold::IfSmall } else { Hold::Iteration };
        match big {
            None => {
                out.extend_from_slice(&tail);
                if !out.is_empty() {
                    acts.push(Act::WriteLater(out, hold));
                }
            }
            Some(obj) => {
                // One vectored write at the last piece: the head and tail are held
                // with the body (by reference) until then.
                if !out.is_empty() {
                    acts.push(Act::WriteLater(out, Hold::Iteration));
                }
                acts.push(Act::WriteObj(obj, (!*done || !tail.is_empty()).then_some(Hold::Iteration)));
                if !tail.is_empty() {
                    acts.push(Act::WriteLater(tail, hold));
                }
            }
        }
        Ok(())
    }

    /// Write the head's framing and end; the encoder for its body.
    pub(in crate::http) fn close_head(
        &self,
        req: &mut super::conn::Request,
        head: ResponseHead,
        whole: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Encoder {
        if req.expect == Expect::Waiting && !req.reading.is_read() {
            // The client waits for a 100 that a final response rules out: its body may never
            // come, so the connection cannot be reused. Say so (RFC 9110 §10.1.1).
            req.keep_alive = false;
        }
        let framing =
            Framing { status: head.status, head_method: req.head_method, minor: req.minor, length: head.length };
        *out = head.bytes;
        frame_head(out, &framing, whole, &mut req.keep_alive)
    }

    /// The last byte of the response is queued: log it, then go on with the connection.
    fn response_complete(&self, py: Python<'_>, c: &mut Conn, acts: &mut Vec<Act>) -> PyResult<()> {
        if self.end_response(py, c, acts)? {
            self.advance(py, c, acts)?;
        }
        Ok(())
    }

    /// The last byte of the response is queued: log it, and ready the connection for what
    /// follows. Whether it reads on (the caller then calls `advance`).
    pub(in crate::http) fn end_response(&self, py: Python<'_>, c: &mut Conn, acts: &mut Vec<Act>) -> PyResult<bool> {
        let dispatch = &self.state.get().dispatch;
        let Some(req) = c.req.as_mut() else { return Ok(false) };
        req.writing = Writing::Done;
        let (status, sent) = (req.status, req.sent);
        self.record(req, status, sent, acts);
        for w in std::mem::take(&mut req.receive_waiters) {
            acts.push(Act::Resolve(w, dispatch.disconnect_message(py, req.upgrade)?));
        }
        if req.reading.is_read() {
            self.finish_request(c, acts);
            Ok(true)
        } else if req.expect == Expect::Waiting {
            // The client waits for 100 before sending the body: the connection cannot be reused.
            req.keep_alive = false;
            c.close_after();
            acts.push(Act::Close);
            Ok(false)
        } else {
            // The rest of the body is read and dropped: reading may have paused on it. It has
            // the keep-alive timeout to arrive, or a client could hold the connection forever.
            if let Reading::Body(body) | Reading::Discard(body) = std::mem::replace(&mut req.reading, Reading::Done) {
                req.reading = Reading::Discard(body);
            }
            req.body_buf = Vec::new();
            if c.reading_paused && !c.lost() {
                c.reading_paused = false;
                acts.push(Act::ResumeReading);
            }
            self.set_timer(c, TimerKind::KeepAlive, self.state.get().timeout_keep_alive, acts);
            Ok(true)
        }
    }

    /// Hand `len` bytes of `file` from `offset` to `sender`, as the body of request `gen`:
    /// `sender(protocol, transport, file object, offset, len, gen, None)` is a coroutine
    /// function that calls `_pathsend_done` when they are out (or failed).
    pub(in crate::http) fn send_file_body(
        slf: &Bound<'_, Self>,
        sender: &Py<PyAny>,
        file: std::fs::File,
        offset: u64,
        len: u64,
        gen: u64,
    ) -> PyResult<()> {
        use std::os::fd::{AsRawFd, IntoRawFd};
        let py = slf.py();
        let this = slf.get();
        let transport = this.lock(py)?.transport.as_ref().map_or_else(|| py.None(), |t| t.clone_ref(py));
        let open = py.import(pyo3::intern!(py, "builtins"))?.getattr(pyo3::intern!(py, "open"))?;
        let fobj = open.call1((file.as_raw_fd(), pyo3::intern!(py, "rb")))?;
        // The file object owns the descriptor from here on, and closes it.
        let _ = file.into_raw_fd();
        let coro = sender.call1(py, (slf, transport, fobj, offset, len, gen, py.None()))?;
        this.state.get().lp.call_method1(py, pyo3::intern!(py, "create_task"), (coro,))?;
        Ok(())
    }

    /// The file sent as the body of request `gen` is out (`ok`) or failed.
    pub fn file_sent(slf: &Bound<'_, Self>, gen: u64, ok: bool) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let mut acts = Vec::new();
        {
            let mut c = this.lock(py)?;
            let Some(req) = c.current(gen) else { return Ok(()) };
            if ok {
                if let Some(m) = this.st(py).metrics() {
                    m.sent(req.sent);
                }
                this.response_complete(py, &mut c, &mut acts)?;
            } else {
                req.writing = Writing::Done;
                c.close_after();
                acts.push(Act::Close);
            }
        }
        Self::run_acts(slf, acts)
    }
}

/// How an application ended, in the interface's words (for the error log).
pub struct AppEnd {
    pub raised: &'static str,
    pub returned_before_start: &'static str,
    pub returned_before_end: &'static str,
}

impl HttpProtocol {
    /// The application of request `gen` returned, or raised `exc`. `disconnected`: `exc`
    /// is the error the interface raised because the client left (not logged once the
    /// response is complete).
    pub fn app_finished(
        slf: &Bound<'_, Self>,
        gen: u64,
        exc: Option<Py<PyAny>>,
        disconnected: bool,
        words: &AppEnd,
    ) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let state = this.state.get();
        state.active_requests.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        let mut acts = Vec::new();
        {
            let mut c = this.lock(py)?;
            c.apps.retain(|(g, _)| *g != gen);
            let lost = c.lost();
            if lost && c.apps.is_empty() {
                acts.push(Act::Forget); // see connection_lost
            }
            // A file the connection's own sender is sending goes on after the app returns
            // (RSGI's `response_file` returns at once): the response is not cut short.
            let file_goes_on = |req: &Request| matches!(req.writing, Writing::File { by_connection: true });
            match c.current(gen) {
                Some(req) if !req.complete() && !file_goes_on(req) => {
                    let msg = match (&exc, &req.writing) {
                        (Some(_), _) => words.raised,
                        (None, Writing::Init) => words.returned_before_start,
                        (None, _) => words.returned_before_end,
                    };
                    if !lost {
                        acts.push(Act::LogError(msg.to_owned(), exc));
                    }
                    let head_written = req.writing.head_written();
                    if !head_written && !lost {
                        acts.push(Act::Write(state.simple_response(500, req.head_method, b"")));
                    }
                    // The request gets its access-log line even though its response is a 500
                    // or was cut short (not when the client left before anything was sent).
                    let (status, size) = if head_written {
                        (req.status, req.sent)
                    } else {
                        (500, if req.head_method { 0 } else { reason(500).len() as u64 })
                    };
                    if head_written || !lost {
                        this.record(req, status, size, &mut acts);
                    }
                    req.writing = Writing::Done;
                    req.keep_alive = false;
                    c.close_after();
                    acts.push(Act::Close);
                }
                // The response is complete (its request body may still be arriving): an
                // exception raised after it is still the application's error, unless it is
                // the one raised because the connection is gone (the server may have refused
                // the rest of the body and closed).
                _ => {
                    if let Some(e) = exc.filter(|_| !disconnected) {
                        acts.push(Act::LogError(words.raised.to_owned(), Some(e)));
                    }
                }
            }
        }
        Self::run_acts(slf, acts)
    }
}
