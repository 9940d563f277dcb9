//! The loop thread's side of WSGI: what the app threads post (response parts, a request for
//! more of the body, the app's end) is queued here and applied to the connection in one
//! loop callback per batch (`WsgiBridge`), since the connection is the loop thread's alone.
//! A post wakes the loop only when the queue was empty. Also the loop's answers to the app
//! thread: body bytes (`BodyWaiter`) and the end of a pause in writing (`Resume`).

use super::exchange::Exchange;
use super::pool::Pool;
use crate::carrier::Carrier;
use crate::event_loop::LoopCore;
use crate::http::body::BodyRead;
use crate::http::head::ResponseHead;
use crate::http::protocol::HttpProtocol;
use crate::http::respond::{AppEnd, Part, RespondError, Responded};
use crate::pyutil::report_step;
use crate::sync::lock_unpoisoned;
use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A part of a response, made on an app thread.
pub enum OutPart {
    Head(ResponseHead),
    Body(Py<PyBytes>, bool),
}

pub enum Post {
    Respond(Arc<Exchange>, Vec<OutPart>),
    /// The head, then `size` bytes of an open file from `offset`, sent by the loop's
    /// `sendfile` (the app thread waits for `Shared::file_done` before closing it).
    File {
        ex: Arc<Exchange>,
        head: ResponseHead,
        file: Py<PyAny>,
        offset: u64,
        size: u64,
    },
    /// The app wants more of the request body.
    Read(Arc<Exchange>),
    /// The app returned (or raised this) and its iterable is closed.
    Finished(Arc<Exchange>, Option<Py<PyAny>>),
}

pub const WSGI_APP_END: AppEnd = AppEnd {
    raised: "Exception in WSGI application",
    returned_before_start: "WSGI application returned without starting its response",
    returned_before_end: "WSGI application returned without completing its response",
};

#[pyclass(module = "swordfish._native", frozen)]
pub struct WsgiBridge {
    queue: Mutex<Vec<Post>>,
    pub lp: Py<PyAny>,
    /// `lp` when it is swordfish's loop: a thread woken on the loop's thread is unparked
    /// when the loop lets the GIL go (`LoopCore::unpark_on_release`).
    pub core: Option<Py<LoopCore>>,
    logger: Py<PyAny>,
    /// `sendfile(protocol, transport, file, offset, size, gen, done)`: the coroutine that
    /// sends a file as a response body and calls `done(ok)`; None where the loop cannot.
    pub sendfile: Option<Py<PyAny>>,
}

impl WsgiBridge {
    pub fn new(py: Python<'_>, lp: Py<PyAny>, logger: Py<PyAny>, sendfile: Option<Py<PyAny>>) -> WsgiBridge {
        let core = lp.bind(py).cast::<LoopCore>().ok().map(|c| c.clone().unbind());
        WsgiBridge { queue: Mutex::new(Vec::new()), lp, core, logger, sendfile }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Vec<Post>> {
        lock_unpoisoned(&self.queue)
    }

    /// From an app thread (holding the GIL): queue `post`, and schedule the drain if the
    /// queue was empty.
    pub fn post(slf: &Bound<'_, Self>, post: Post) -> PyResult<()> {
        let was_empty = {
            let mut q = slf.get().queue();
            let was_empty = q.is_empty();
            q.push(post);
            was_empty
        };
        if was_empty {
            slf.get().lp.call_method1(slf.py(), intern!(slf.py(), "call_soon_threadsafe"), (slf,))?;
        }
        Ok(())
    }
}

#[pymethods]
impl WsgiBridge {
    /// On the loop thread: apply everything posted so far, in order.
    fn __call__(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let posts = std::mem::take(&mut *slf.get().queue());
        for post in posts {
            let r = match post {
                Post::Respond(ex, parts) => respond(py, &ex, parts, &slf.get().logger),
                Post::File { ex, head, file, offset, size } => send_file(slf.get(), py, &ex, head, file, offset, size),
                Post::Read(ex) => read(py, &ex),
                Post::Finished(ex, exc) => finished(py, &ex, exc),
            };
            report_step(py, r, slf.as_any())?;
        }
        Ok(())
    }
}

fn respond(py: Python<'_>, ex: &Arc<Exchange>, parts: Vec<OutPart>, logger: &Py<PyAny>) -> PyResult<()> {
    let carrier = ex.carrier()?;
    let posted: usize =
        parts.iter().map(|p| if let OutPart::Body(b, _) = p { b.bind(py).as_bytes().len() } else { 0 }).sum();
    let r = apply(py, ex, carrier, parts, logger);
    ex.update(|s| s.in_flight = s.in_flight.saturating_sub(posted));
    r
}

fn apply(
    py: Python<'_>,
    ex: &Arc<Exchange>,
    carrier: &Carrier,
    parts: Vec<OutPart>,
    logger: &Py<PyAny>,
) -> PyResult<()> {
    for part in parts {
        let part = match part {
            OutPart::Head(head) => Part::head(head, false),
            OutPart::Body(body, more) => Part::Body { body: body.into_bound(py), more },
        };
        match carrier.respond(py, ex.gen, part)? {
            Ok(Responded::Ready) => {}
            Ok(Responded::Drain(fut)) => {
                ex.update(|s| s.paused = true);
                let resume = Py::new(py, Resume { ex: ex.clone() })?;
                fut.call_method1(py, intern!(py, "add_done_callback"), (resume,))?;
            }
            Ok(Responded::File(..)) => {}
            Err(e) => {
                ex.update(|s| s.gone = true);
                if let Some(text) = app_error(e) {
                    logger.call_method1(py, intern!(py, "error"), (text,))?;
                }
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The log line for a response the app got wrong (the connection closed it); None when
/// the client is simply gone.
pub fn app_error(e: RespondError) -> Option<&'static str> {
    match e {
        RespondError::Gone | RespondError::Finished => None,
        RespondError::TooLong => Some("WSGI response content longer than its Content-Length"),
        RespondError::TooShort => Some("WSGI response content shorter than its Content-Length"),
        _ => Some("WSGI response refused by the connection"),
    }
}

fn read(py: Python<'_>, ex: &Arc<Exchange>) -> PyResult<()> {
    let waiter = || BodyWaiter::made(py, ex, None);
    if let BodyRead::Now(msg) = ex.carrier()?.read_body(py, ex.gen, waiter)? {
        deliver(ex, msg.bind(py))?;
    }
    Ok(())
}

/// Hand a body message (`(bytes, more)`, or None: nothing more comes) to the app thread.
pub fn deliver(ex: &Exchange, msg: &Bound<'_, PyAny>) -> PyResult<()> {
    if msg.is_none() {
        ex.update(|s| {
            s.asked = false;
            s.truncated |= !s.body_ended;
            s.body_ended = true;
        });
        return Ok(());
    }
    let (data, more): (Bound<'_, PyBytes>, bool) = msg.extract()?;
    ex.update(|s| {
        s.asked = false;
        s.push_body(data.as_bytes(), more);
    });
    Ok(())
}

/// A body message for the interface: `(bytes, more)`.
pub fn body_message(py: Python<'_>, data: Bound<'_, PyBytes>, more: bool) -> PyResult<Py<PyAny>> {
    Ok(PyTuple::new(py, [data.into_any(), pyo3::types::PyBool::new(py, more).to_owned().into_any()])?
        .into_any()
        .unbind())
}

/// The app is done with request `ex` (raising `exc`), or never got it (the client left
/// while its body was collected).
pub fn finished(py: Python<'_>, ex: &Exchange, exc: Option<Py<PyAny>>) -> PyResult<()> {
    let disconnected = exc.is_none() && ex.lock().truncated;
    ex.carrier()?.app_finished(py, ex.gen, exc, disconnected, &WSGI_APP_END)
}

fn send_file(
    bridge: &WsgiBridge,
    py: Python<'_>,
    ex: &Arc<Exchange>,
    head: ResponseHead,
    file: Py<PyAny>,
    offset: u64,
    size: u64,
) -> PyResult<()> {
    // Only over HTTP/1.x (`Exchange::sends_files`).
    let proto = ex.carrier()?.h1().ok_or_else(|| PyRuntimeError::new_err("sendfile over HTTP/2"))?.bind(py);
    let gone = |r: Result<Responded, RespondError>| {
        if r.is_err() {
            ex.update(|s| {
                s.gone = true;
                s.file_done = true;
            });
        }
        r.ok()
    };
    if gone(HttpProtocol::respond(proto, ex.gen, Part::head(head, false))?).is_none() {
        return Ok(());
    }
    match gone(HttpProtocol::respond(proto, ex.gen, Part::File { size, open: None })?) {
        Some(Responded::File(transport, size)) => {
            let Some(sendfile) = &bridge.sendfile else {
                // The app thread posts a file only when the bridge can send one; should it
                // not, the response fails as a failed send would.
                gone(Err(RespondError::Gone));
                return HttpProtocol::file_sent(proto, ex.gen, false);
            };
            let done = Py::new(py, FileDone { ex: ex.clone() })?;
            let t = transport.unwrap_or_else(|| py.None());
            let coro = sendfile.call1(py, (proto, t, file, offset, size, ex.gen, done))?;
            bridge.lp.call_method1(py, intern!(py, "create_task"), (coro,))?;
        }
        // A bodiless response (HEAD, 304) or an empty file: nothing to send.
        Some(_) => ex.update(|s| s.file_done = true),
        None => {}
    }
    Ok(())
}

/// What the connection resolves when body bytes come for a request (the `done()` and
/// `set_result()` of a future): before the app has the request, the loop collects the
/// body's start (`pool` is then the pool to submit it to); after, the app thread is woken.
#[pyclass(module = "swordfish._native", frozen)]
pub struct BodyWaiter {
    ex: Arc<Exchange>,
    pool: Option<Arc<Pool>>,
    done: AtomicBool,
}

impl BodyWaiter {
    /// A waiter for `ex` (`pool`: the body's start is still being collected), as an object.
    pub fn made(py: Python<'_>, ex: &Arc<Exchange>, pool: Option<Arc<Pool>>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, BodyWaiter { ex: ex.clone(), pool, done: AtomicBool::new(false) })?.into_any())
    }
}

#[pymethods]
impl BodyWaiter {
    fn done(&self) -> bool {
        self.done.load(Ordering::Relaxed)
    }

    fn set_result(&self, py: Python<'_>, msg: &Bound<'_, PyAny>) -> PyResult<()> {
        self.done.store(true, Ordering::Relaxed);
        deliver(&self.ex, msg)?;
        match &self.pool {
            Some(pool) => pool.prefetch(py, &self.ex),
            None => Ok(()),
        }
    }
}

/// Called with whether the file of a response went out whole: the app thread may close it.
#[pyclass(module = "swordfish._native", frozen)]
pub struct FileDone {
    ex: Arc<Exchange>,
}

#[pymethods]
impl FileDone {
    fn __call__(&self, ok: bool) {
        self.ex.update(|s| {
            s.file_done = true;
            s.gone |= !ok;
        });
    }
}

/// Called when the connection's write buffer has drained: the app thread writes on.
#[pyclass(module = "swordfish._native", frozen)]
pub struct Resume {
    ex: Arc<Exchange>,
}

#[pymethods]
impl Resume {
    fn __call__(&self, _fut: &Bound<'_, PyAny>) {
        self.ex.update(|s| s.paused = false);
    }
}
