//! The response API of a connection on the loop, as an interface drives it: the parts of a
//! response as Python objects, given to the connection's writing side (`writing`), and the
//! writes and waits that follow (writing paused, a file body to send); also the end of a
//! request's application. The interface checks its own messages.

use super::head::ResponseHead;
use super::link::{Act, Conn, Loop, LoopAct};
use super::protocol::HttpProtocol;
use super::writing::{self, Taken, Unfinished};
use crate::event_loop::create_future;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

pub use super::writing::RespondError;

/// A part of the response, as an interface on the loop gives it.
pub enum Part<'py> {
    /// A part with no Python object in it (a head, trailers), as the connection's writing
    /// side takes it.
    Plain(writing::Part<'py, Loop>),
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
    /// A file of this size is the body: the interface sends it, then calls `file_sent`;
    /// or, `open`, the connection sends it.
    File {
        size: u64,
        open: Option<OpenFile>,
    },
}

impl Part<'_> {
    pub fn head(head: ResponseHead, trailers: bool) -> Self {
        Part::Plain(writing::Part::Head { head, trailers })
    }

    /// Serialized trailer fields; `more`: others follow.
    pub fn trailers(fields: Vec<u8>, more: bool) -> Self {
        Part::Plain(writing::Part::Trailers { fields, more })
    }
}

/// A file the connection sends as the body: swordfish's socket transport queues it and
/// sends it with `sendfile(2)`; any other goes through `sender` (a coroutine function:
/// see `send_file_body`).
pub struct OpenFile {
    pub file: std::fs::File,
    pub offset: u64,
    pub sender: Py<PyAny>,
}

/// The connection's transport failed or was aborted (its `connection_lost` is to come).
/// Another loop's transport only says it is closing, which the connection's own close also
/// makes it; no response part is written after that either.
fn transport_broken(py: Python<'_>, c: &Conn) -> PyResult<bool> {
    if let Some(core) = c.objects.stream() {
        return Ok(core.get().broken(py));
    }
    match &c.objects.transport {
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
                    Ok(Ok(Some(size))) => file = Some((c.objects.transport.as_ref().map(|t| t.clone_ref(py)), size)),
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
            c.objects.drain_waiters.push(fut.clone_ref(py));
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
        let st = &self.state.get().settings;
        let taken = match part {
            Part::Plain(part) => c.take_part(st, gen, part, acts),
            Part::Body { body, more } => {
                let object = || body.clone().unbind();
                c.take_part(st, gen, writing::Part::Body { data: body.as_bytes(), object: &object, more }, acts)
            }
            Part::Text { text, more } => {
                let data = text.to_str()?.as_bytes();
                let object = || PyBytes::new(py, data).unbind();
                c.take_part(st, gen, writing::Part::Body { data, object: &object, more }, acts)
            }
            Part::File { size, open } => {
                let open = open.map(|OpenFile { file, offset, sender }| {
                    c.objects.file_sender = Some(sender);
                    (file, offset)
                });
                c.take_part(st, gen, writing::Part::File { size, open }, acts)
            }
        };
        match taken {
            Err(e) => Ok(Err(e)),
            Ok((taken, read_on)) => {
                if read_on {
                    self.advance(py, c, acts)?;
                }
                Ok(Ok(match taken {
                    Taken::Done => None,
                    Taken::File(size) => Some(size),
                }))
            }
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
        let transport = this.lock(py)?.objects.transport.as_ref().map_or_else(|| py.None(), |t| t.clone_ref(py));
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
            if c.file_sent(&this.state.get().settings, gen, ok, &mut acts) {
                this.advance(py, &mut c, &mut acts)?;
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

impl AppEnd {
    /// What the error log says of an application that left its response so.
    pub fn message(&self, how: Unfinished) -> &'static str {
        match how {
            Unfinished::Raised => self.raised,
            Unfinished::ReturnedBeforeStart => self.returned_before_start,
            Unfinished::ReturnedBeforeEnd => self.returned_before_end,
        }
    }
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
        let st = &this.state.get().settings;
        st.active_requests.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        let mut acts = Vec::new();
        {
            let mut c = this.lock(py)?;
            c.objects.apps.retain(|(g, _)| *g != gen);
            let lost = c.lost();
            if lost && c.objects.apps.is_empty() {
                acts.push(Act::World(LoopAct::Forget)); // see connection_lost
            }
            match c.app_unfinished(st, gen, exc.is_some(), &mut acts) {
                Some(how) => {
                    if !lost {
                        acts.push(Act::World(LoopAct::LogError(words.message(how).to_owned(), exc)));
                    }
                }
                // The response is complete (its request body may still be arriving): an
                // exception raised after it is still the application's error, unless it is
                // the one raised because the connection is gone (the server may have refused
                // the rest of the body and closed).
                None => {
                    if let Some(e) = exc.filter(|_| !disconnected) {
                        acts.push(Act::World(LoopAct::LogError(words.raised.to_owned(), Some(e))));
                    }
                }
            }
        }
        Self::run_acts(slf, acts)
    }
}
