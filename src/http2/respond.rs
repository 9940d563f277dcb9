//! The request API of an HTTP/2 stream as the interfaces drive it (through `Carrier`):
//! response parts, body reads and the application's end, with the same outcomes the
//! HTTP/1.1 connection gives — a writer waits while the stream's queue or the transport
//! is full, a reader waits for the next DATA, an application that fails before its
//! response gets a 500 written for it (or, after its head went out, a reset stream).

use super::body::Chunks;
use super::core::BodyTake;
use super::protocol::{H2Protocol, Out};
use super::streams::record;
use super::writing::{self, Taken, Writing};
use crate::event_loop::create_future;
use crate::http::body::BodyRead;
use crate::http::conn::BodyBuf;
use crate::http::respond::{AppEnd, OpenFile, Part, RespondError, Responded};
use crate::http::writing::Part as Plain;
use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Body bytes as one Python `bytes`: the one copy they take on their way to the app.
pub(super) fn to_pybytes<'py>(py: Python<'py>, data: &Chunks) -> PyResult<Bound<'py, PyBytes>> {
    PyBytes::new_with(py, data.len(), |buf| {
        data.copy_to(buf);
        Ok(())
    })
}

/// A Python `bytes` kept alive by the `Bytes` that reads its buffer.
struct PyBytesOwner {
    _object: Py<PyBytes>,
    /// The object's buffer (its address, and its length).
    at: usize,
    len: usize,
}

impl AsRef<[u8]> for PyBytesOwner {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: a `bytes` object's buffer never changes and lives as long as the object,
        // which `_object` holds: `at` and `len` were read from it, with the GIL, when it
        // was wrapped.
        unsafe { std::slice::from_raw_parts(self.at as *const u8, self.len) }
    }
}

/// A body part as `Bytes` without copying it: `h2` takes it as it is, and copies it once,
/// into the frames it writes. Small parts are copied (an owner costs an allocation too).
fn shared(body: Bound<'_, PyBytes>) -> Bytes {
    let data = body.as_bytes();
    if data.len() <= super::core::SMALL_PART {
        return Bytes::copy_from_slice(data);
    }
    let (at, len) = (data.as_ptr() as usize, data.len());
    Bytes::from_owner(PyBytesOwner { _object: body.unbind(), at, len })
}

impl H2Protocol {
    /// Give stream `id`'s response its next part.
    pub fn respond(slf: &Bound<'_, Self>, id: u64, part: Part<'_>) -> PyResult<Result<Responded, RespondError>> {
        let py = slf.py();
        let this = slf.get();
        let id = id as u32;
        let part = match part {
            Part::Plain(Plain::Head { head, trailers }) => writing::Part::Head { head, trailers },
            Part::Plain(Plain::Trailers { fields, more }) => writing::Part::Trailers { fields, more },
            Part::Plain(Plain::Body { data, more, .. }) => {
                writing::Part::Body { data: Bytes::copy_from_slice(data), more }
            }
            Part::Body { body, more } => writing::Part::Body { data: shared(body), more },
            Part::Text { text, more } => {
                writing::Part::Body { data: Bytes::copy_from_slice(text.to_str()?.as_bytes()), more }
            }
            Part::File { size, open: Some(OpenFile { file, offset, .. }) } => {
                return Self::respond_file(slf, id, file, offset, size);
            }
            Part::Plain(Plain::File { .. }) | Part::File { open: None, .. } => {
                return Ok(Err(RespondError::FileNotAllowed));
            }
        };
        let mut outs = Vec::new();
        let result = {
            let mut c = this.lock(py)?;
            if c.lost {
                return Ok(Err(RespondError::Gone));
            }
            let head_method = c.streams.get(&id).is_some_and(|s| s.head_method);
            let (status, size) = match &part {
                writing::Part::Head { head, .. } => (Some(head.status), 0),
                writing::Part::Body { data, .. } => (None, data.len() as u64),
                writing::Part::Trailers { .. } => (None, 0),
            };
            let r = c.core.respond(id, head_method, part);
            let done = c.core.streams.get(&id).is_none_or(|s| matches!(s.writing, Writing::Done));
            let st = &this.state.get().settings;
            if let Some(s) = c.streams.get_mut(&id) {
                if let Some(status) = status.filter(|_| r.is_ok()) {
                    s.status = status;
                }
                if r.is_ok() && !head_method {
                    s.sent += size;
                }
                if r.is_ok() && done {
                    let status = s.status;
                    if let Some(out) = record(st, s, status) {
                        outs.push(out);
                    }
                }
            }
            H2Protocol::changed(&mut c, &mut outs);
            let wait = matches!(r, Ok(Taken::Wait)) || (r.is_ok() && c.writing_paused);
            match r {
                Err(e) => Err(e),
                Ok(_) if wait => {
                    let fut = create_future(this.state.get().lp.bind(py))?.unbind();
                    if let Some(s) = c.streams.get_mut(&id) {
                        s.drain.push(fut.clone_ref(py));
                    }
                    Ok(Responded::Drain(fut))
                }
                Ok(_) => Ok(Responded::Ready),
            }
        };
        Self::run(slf, outs)?;
        Ok(result)
    }

    /// A file as the body of stream `id`, read into DATA frames as the stream's window
    /// takes them.
    fn respond_file(
        slf: &Bound<'_, Self>,
        id: u32,
        file: std::fs::File,
        offset: u64,
        size: u64,
    ) -> PyResult<Result<Responded, RespondError>> {
        let py = slf.py();
        let this = slf.get();
        let mut outs = Vec::new();
        let result = {
            let mut c = this.lock(py)?;
            if c.lost {
                return Ok(Err(RespondError::Gone));
            }
            let head_method = c.streams.get(&id).is_some_and(|s| s.head_method);
            let r = c.core.respond_file(id, head_method, file, offset, size);
            let st = &this.state.get().settings;
            if let (Ok(()), Some(s)) = (&r, c.streams.get_mut(&id)) {
                s.sent = if head_method { 0 } else { size };
                let status = s.status;
                if let Some(out) = record(st, s, status) {
                    outs.push(out);
                }
            }
            H2Protocol::changed(&mut c, &mut outs);
            r.map(|()| Responded::Ready)
        };
        Self::run(slf, outs)?;
        Ok(result)
    }

    /// The next body message of stream `id`, or `waiter()` registered to get it.
    pub fn read_body(
        slf: &Bound<'_, Self>,
        id: u64,
        waiter: impl FnOnce() -> PyResult<Py<PyAny>>,
    ) -> PyResult<BodyRead> {
        let py = slf.py();
        let this = slf.get();
        let dispatch = &this.state.get().dispatch;
        let id = id as u32;
        let mut outs = Vec::new();
        let taken = {
            let mut c = this.lock(py)?;
            let t = if c.lost { BodyTake::Gone } else { c.core.take_body(id) };
            // Data: the window credit goes back to the client. Wait: the core looks at
            // the stream again (a response already complete ends the wait).
            if !matches!(t, BodyTake::Gone) {
                H2Protocol::changed(&mut c, &mut outs);
            }
            t
        };
        Self::run(slf, outs)?;
        match taken {
            BodyTake::Data(data, more) => Ok(BodyRead::Now(dispatch.body_message(py, to_pybytes(py, &data)?, more)?)),
            BodyTake::Gone => Ok(BodyRead::Now(dispatch.disconnect_message(py, false)?)),
            BodyTake::Wait => {
                let w = waiter()?;
                let mut c = this.lock(py)?;
                match c.streams.get_mut(&id) {
                    Some(s) => {
                        s.readers.retain(|r| !crate::tasks::is_done(r.bind(py)).unwrap_or(false));
                        s.readers.push(w.clone_ref(py));
                        Ok(BodyRead::Wait(w))
                    }
                    None => Ok(BodyRead::Now(dispatch.disconnect_message(py, false)?)),
                }
            }
        }
    }

    /// The whole body of stream `id`, if all of it has arrived and none was taken yet.
    pub fn take_whole_body(slf: &Bound<'_, Self>, id: u64) -> PyResult<Option<BodyBuf>> {
        let py = slf.py();
        let mut outs = Vec::new();
        let body = {
            let mut c = slf.get().lock(py)?;
            let id = id as u32;
            if c.lost || !c.core.body_whole(id) {
                return Ok(None);
            }
            match c.core.take_body(id) {
                BodyTake::Data(data, false) => {
                    H2Protocol::changed(&mut c, &mut outs);
                    Some(BodyBuf::from_parts(data.to_vec(), 0))
                }
                _ => None,
            }
        };
        Self::run(slf, outs)?;
        Ok(body)
    }

    /// The application of stream `id` returned, or raised `exc`.
    pub fn app_finished(
        slf: &Bound<'_, Self>,
        id: u64,
        exc: Option<Py<PyAny>>,
        disconnected: bool,
        words: &AppEnd,
    ) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let st = &this.state.get().settings;
        let id = id as u32;
        let mut outs = Vec::new();
        {
            let mut c = this.lock(py)?;
            let Some(mut s) = c.streams.remove(&id) else { return Ok(()) };
            st.active_requests.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            let lost = c.lost;
            // A tunnel's stream is its transport's to end (a WebSocket's closing handshake
            // goes on after its application returned).
            let tunnel = c.tunnels.contains_key(&id);
            let unfinished = if tunnel { None } else { c.core.app_unfinished(st, id, s.head_method, exc.is_some()) };
            let message = match unfinished {
                Some((how, answered)) => {
                    if let Some((status, sent)) = answered {
                        s.status = status;
                        s.sent = sent;
                    }
                    Some(words.message(how))
                }
                // The response is complete: an exception raised after it is still the
                // application's error, unless the client's leaving raised it.
                None => exc.as_ref().filter(|_| !disconnected).map(|_| words.raised),
            };
            if let Some(msg) = message.filter(|_| !lost) {
                outs.push(Out::LogError(msg.to_owned(), exc));
            }
            let status = s.status;
            if let Some(out) = record(st, &mut s, status) {
                outs.push(out);
            }
            if !s.readers.is_empty() {
                outs.push(Out::Disconnect(std::mem::take(&mut s.readers), s.upgrade));
            }
            if c.streams.is_empty() {
                c.idle_since = crate::clock::monotonic();
            }
            if lost && c.streams.is_empty() {
                outs.push(Out::Forget);
            }
            H2Protocol::changed(&mut c, &mut outs);
        }
        Self::run(slf, outs)
    }

    /// Resolve `waiter` (with None) once the connection is lost; false if it is already.
    pub fn watch_lost(&self, py: Python<'_>, waiter: &Py<PyAny>) -> PyResult<bool> {
        let mut c = self.lock(py)?;
        if c.lost {
            return Ok(false);
        }
        c.lost_waiters.retain(|w| !crate::tasks::is_done(w.bind(py)).unwrap_or(false));
        c.lost_waiters.push(waiter.clone_ref(py));
        Ok(true)
    }
}
