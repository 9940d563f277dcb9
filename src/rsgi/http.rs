//! RSGI's HTTP protocol object: the request body (`await protocol()`, `async for`), the
//! client's going (`client_disconnect()`), the responses (`response_*`, a streamed one
//! through `StreamTransport`), and the end of the app's task. Each response is given to
//! the connection as parts (`http::respond`), so framing, keep-alive, flow control and
//! the access log are the connection's; files go out with `sendfile` as static files do.

use super::app::RsgiApp;
use super::scope::Scope;
use super::{bytes_arg, ProtocolClosed, ProtocolError};
use crate::carrier::Carrier;
use crate::event_loop::create_future;
use crate::http::app_task::{ready, ready_none, task_exception};
use crate::http::body::BodyRead;
use crate::http::head::{HeadBuilder, ResponseHead};
use crate::http::respond::{AppEnd, OpenFile, Part, RespondError, Responded};
use crate::http::ClientDisconnected;
use crate::sync::GilCell;
use crate::tasks::{send, Sent};
use pyo3::exceptions::{PyStopAsyncIteration, PyStopIteration, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};

pub const RSGI_APP_END: AppEnd = AppEnd {
    raised: "Exception in RSGI application",
    returned_before_start: "RSGI application returned without a response",
    returned_before_end: "RSGI application returned without completing its response",
};

/// Where the app stands with its request.
#[derive(Default)]
struct Stage {
    /// A response was given (the first wins; later ones are ignored, as granian does).
    responded: bool,
    /// A streamed response is open: it ends when the app's task does.
    streaming: bool,
    /// The whole body has been handed to the app.
    body_done: bool,
}

#[pyclass(module = "swordfish.rsgi", name = "HTTPProtocol", frozen)]
pub struct HttpProtocol {
    app: Py<RsgiApp>,
    conn: Carrier,
    gen: u64,
    stage: GilCell<Stage>,
}

/// Start the app's task for request `gen`.
pub fn start(app: &Bound<'_, RsgiApp>, carrier: &Carrier, scope: Bound<'_, Scope>, gen: u64) -> PyResult<()> {
    let py = scope.py();
    app.get().tasks.start(py, carrier, scope.into_any().unbind(), gen, |carrier, scope, gen, eager| {
        let protocol = Bound::new(
            py,
            HttpProtocol {
                app: app.clone().unbind(),
                conn: carrier.clone_ref(py),
                gen,
                stage: GilCell::new(Stage::default()),
            },
        )?;
        app.get().tasks.launch(
            py,
            carrier,
            gen,
            (scope, &protocol),
            eager,
            || protocol.getattr(intern!(py, "_task_done")),
            |task| HttpProtocol::task_done(&protocol, task),
            |exc| carrier.app_finished(py, gen, Some(exc), false, &RSGI_APP_END),
        )
    })
}

/// The status and headers of a response as the app gives them: `[(name, value), ...]`
/// of `str`, checked by the connection's rules for a head.
fn response_head(conn: &Carrier, status: u16, headers: &Bound<'_, PyAny>) -> PyResult<ResponseHead> {
    let invalid = |e: crate::http::head::HeadError| PyValueError::new_err(e.to_string());
    let rules = conn.state().settings.head_rules();
    let mut head = HeadBuilder::new(status).map_err(invalid)?;
    let mut field = |item: Bound<'_, PyAny>| -> PyResult<()> {
        let not_a_pair = || PyTypeError::new_err("each header must be a (name, value) tuple");
        let t = item.cast_into::<PyTuple>().map_err(|_| not_a_pair())?;
        if t.len() != 2 {
            return Err(not_a_pair());
        }
        let not_text = |_| PyTypeError::new_err("header names and values must be str");
        let name = t.get_item(0)?.cast_into::<PyString>().map_err(not_text)?;
        let value = t.get_item(1)?.cast_into::<PyString>().map_err(not_text)?;
        head.field(&rules, name.to_str()?.as_bytes(), value.to_str()?.as_bytes()).map_err(invalid)
    };
    if let Ok(list) = headers.cast::<PyList>() {
        for item in list.iter() {
            field(item)?;
        }
    } else {
        for item in headers.try_iter()? {
            field(item?)?;
        }
    }
    head.finish(&rules).map_err(invalid)
}

fn empty_body(py: Python<'_>) -> Part<'_> {
    Part::Body { body: PyBytes::new(py, b""), more: false }
}

/// The exception for a part the response could not take.
fn respond_error(e: RespondError) -> PyErr {
    match e {
        RespondError::Gone | RespondError::Finished => ProtocolClosed::new_err("the response is over"),
        RespondError::FileLength => PyValueError::new_err("content-length does not match the file's size"),
        RespondError::TooLong => PyValueError::new_err("response body longer than its content-length"),
        RespondError::TooShort => PyValueError::new_err("response body shorter than its content-length"),
        other => ProtocolError::new_err(format!("response out of turn: {other:?}")),
    }
}

impl HttpProtocol {
    /// Claim the response; false when one was given already.
    fn claim(&self, py: Python<'_>) -> PyResult<bool> {
        let mut stage = self.stage.lock(py)?;
        Ok(!std::mem::replace(&mut stage.responded, true))
    }

    /// Give the connection the head, then the whole body (`body`, the last part). A client
    /// already gone is no error: nobody is left to answer.
    fn respond_whole<'py>(
        &self,
        py: Python<'py>,
        status: u16,
        headers: &Bound<'py, PyAny>,
        body: Part<'py>,
    ) -> PyResult<()> {
        let head = response_head(&self.conn, status, headers)?;
        if !self.claim(py)? {
            return Ok(());
        }
        let parts = [Part::head(head, false), body];
        match self.conn.respond_parts(py, self.gen, parts)? {
            Ok(_) | Err(RespondError::Gone) => Ok(()),
            Err(e) => Err(respond_error(e)),
        }
    }

    /// `len` bytes of the file at `path` from `start`, or a 404 if it cannot be opened.
    fn respond_file(
        &self,
        py: Python<'_>,
        status: u16,
        headers: &Bound<'_, PyAny>,
        path: std::path::PathBuf,
        range: Option<(u64, u64)>,
    ) -> PyResult<()> {
        let head = response_head(&self.conn, status, headers)?;
        let opened = std::fs::File::open(&path).and_then(|f| Ok((f.metadata()?, f)));
        let (meta, file) = match opened {
            Ok((meta, file)) if meta.is_file() => (meta, file),
            // As granian: a file that is not there answers 404.
            _ => return self.respond_whole(py, 404, &PyList::empty(py), empty_body(py)),
        };
        let (offset, size) = match range {
            None => (0, meta.len()),
            Some((start, end)) if end > meta.len() => {
                return Err(PyValueError::new_err(format!(
                    "range {start}-{end} goes past the end of the file ({} bytes)",
                    meta.len()
                )))
            }
            Some((start, end)) => (start, end - start),
        };
        if !self.claim(py)? {
            return Ok(());
        }
        let sender = self.app.get().file_sender.clone_ref(py);
        let open = Some(OpenFile { file, offset, sender });
        let parts = [Part::head(head, false), Part::File { size, open }];
        match self.conn.respond_parts(py, self.gen, parts)? {
            Ok(_) | Err(RespondError::Gone) => Ok(()),
            Err(e) => Err(respond_error(e)),
        }
    }

    /// The app's task is done: a streamed response still open ends, then the connection
    /// hears how the app ended.
    fn task_done(slf: &Bound<'_, Self>, task: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let exc = task_exception(task)?;
        let streaming = std::mem::take(&mut this.stage.lock(py)?.streaming);
        if streaming && exc.is_none() {
            let body = PyBytes::new(py, b"");
            // Gone or finished: the connection has dealt with it.
            let _ = this.conn.respond(py, this.gen, Part::Body { body, more: false })?;
        }
        let disconnected = exc.as_ref().is_some_and(|e| {
            e.bind(py).is_instance_of::<ProtocolClosed>() || e.bind(py).is_instance_of::<ClientDisconnected>()
        });
        this.conn.app_finished(py, this.gen, exc, disconnected, &RSGI_APP_END)
    }
}

#[pymethods]
impl HttpProtocol {
    /// `await protocol()`: the whole body as `bytes`.
    fn __call__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let this = slf.get();
        if this.stage.lock(py)?.body_done {
            return ready(py, PyBytes::new(py, b"").into_any().unbind());
        }
        // The usual case: a body that came whole with its head, taken without a message.
        if let Some(body) = this.conn.take_whole_body(py, this.gen)? {
            this.stage.lock(py)?.body_done = true;
            return ready(py, PyBytes::new(py, body.bytes()).into_any().unbind());
        }
        Ok(Py::new(py, BodyReader::new(slf, true))?.into_any())
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next piece of the body; `StopAsyncIteration` after the last.
    fn __anext__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        if slf.get().stage.lock(slf.py())?.body_done {
            return Err(PyStopAsyncIteration::new_err(()));
        }
        Ok(Py::new(slf.py(), BodyReader::new(slf, false))?.into_any())
    }

    /// A future done once the client has gone (every caller's).
    fn client_disconnect(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let lp = self.app.get().tasks.lp.bind(py);
        let fut = create_future(lp)?.unbind();
        if !self.conn.watch_lost(py, &fut)? {
            crate::tasks::set_result(fut.bind(py), &py.None().into_bound(py))?;
        }
        Ok(fut)
    }

    fn response_empty(&self, py: Python<'_>, status: u16, headers: &Bound<'_, PyAny>) -> PyResult<()> {
        self.respond_whole(py, status, headers, empty_body(py))
    }

    fn response_str<'py>(
        &self,
        py: Python<'py>,
        status: u16,
        headers: &Bound<'py, PyAny>,
        body: &Bound<'py, PyString>,
    ) -> PyResult<()> {
        self.respond_whole(py, status, headers, Part::Text { text: body.clone(), more: false })
    }

    fn response_bytes<'py>(
        &self,
        py: Python<'py>,
        status: u16,
        headers: &Bound<'py, PyAny>,
        body: &Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let body = bytes_arg(body, "body")?;
        self.respond_whole(py, status, headers, Part::Body { body, more: false })
    }

    fn response_file(
        &self,
        py: Python<'_>,
        status: u16,
        headers: &Bound<'_, PyAny>,
        file: std::path::PathBuf,
    ) -> PyResult<()> {
        self.respond_file(py, status, headers, file, None)
    }

    /// Bytes `start` (inclusive) to `end` (exclusive) of the file.
    fn response_file_range(
        &self,
        py: Python<'_>,
        status: u16,
        headers: &Bound<'_, PyAny>,
        file: std::path::PathBuf,
        start: i64,
        end: i64,
    ) -> PyResult<()> {
        if start < 0 || end <= start {
            return Err(PyValueError::new_err(format!("invalid range {start}-{end}: it must be 0 <= start < end")));
        }
        self.respond_file(py, status, headers, file, Some((start as u64, end as u64)))
    }

    /// Start a response whose body the app sends piece by piece through the transport
    /// returned; it ends when the app's task does.
    fn response_stream(
        slf: &Bound<'_, Self>,
        status: u16,
        headers: &Bound<'_, PyAny>,
    ) -> PyResult<Py<StreamTransport>> {
        let py = slf.py();
        let this = slf.get();
        let head = response_head(&this.conn, status, headers)?;
        let transport = StreamTransport { conn: this.conn.clone_ref(py), gen: this.gen };
        if !this.claim(py)? {
            return Err(ProtocolError::new_err("a response was already given"));
        }
        match this.conn.respond(py, this.gen, Part::head(head, false))? {
            Ok(_) => this.stage.lock(py)?.streaming = true,
            Err(RespondError::Gone) => {}
            Err(e) => return Err(respond_error(e)),
        }
        Py::new(py, transport)
    }

    fn _task_done(slf: &Bound<'_, Self>, task: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::task_done(slf, task)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.app)?;
        self.conn.traverse(&visit)
    }
}

/// A streamed response's body: `await send_bytes(data)`, `await send_str(text)`; each
/// waits while the connection's write buffer is above its high-water mark.
#[pyclass(module = "swordfish.rsgi", name = "HTTPStreamTransport", frozen)]
pub struct StreamTransport {
    conn: Carrier,
    gen: u64,
}

impl StreamTransport {
    fn send(&self, py: Python<'_>, part: Part<'_>) -> PyResult<Py<PyAny>> {
        match self.conn.respond(py, self.gen, part)? {
            Ok(Responded::Drain(fut)) => Ok(fut),
            Ok(_) => ready_none(py),
            Err(e) => Err(respond_error(e)),
        }
    }
}

#[pymethods]
impl StreamTransport {
    fn send_bytes(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.send(py, Part::Body { body: bytes_arg(data, "send_bytes's data")?, more: true })
    }

    fn send_str(&self, py: Python<'_>, data: &Bound<'_, PyString>) -> PyResult<Py<PyAny>> {
        self.send(py, Part::Text { text: data.clone(), more: true })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.conn.traverse(&visit)
    }
}

/// The awaitable of `await protocol()` (`whole`) or of one step of `async for`: it reads
/// body messages from the connection, waiting on its futures, until it has what it gives.
#[pyclass(module = "swordfish._native", name = "BodyReader", frozen)]
pub struct BodyReader {
    owner: Py<HttpProtocol>,
    whole: bool,
    state: GilCell<Reading>,
}

#[derive(Default)]
struct Reading {
    /// What `whole` has collected.
    collected: Vec<u8>,
    /// The future waited on, and its iterator.
    waiting: Option<(Py<PyAny>, Py<PyAny>)>,
}

/// What one body message gives the reader.
enum Step {
    /// Read on.
    More,
    /// The awaitable's result.
    Value(Py<PyAny>),
    /// The `async for` is over.
    End,
}

impl BodyReader {
    fn new(owner: &Bound<'_, HttpProtocol>, whole: bool) -> Self {
        BodyReader { owner: owner.clone().unbind(), whole, state: GilCell::new(Reading::default()) }
    }

    /// `msg`: `(data, more)`, or None once nothing more comes (the client left, or the
    /// response is complete).
    fn take(&self, py: Python<'_>, msg: &Bound<'_, PyAny>) -> PyResult<Step> {
        let owner = self.owner.get();
        let (data, more) = match msg.cast::<PyTuple>() {
            Ok(t) => (t.get_item(0)?.cast_into::<PyBytes>()?, t.get_item(1)?.is_truthy()?),
            Err(_) => {
                owner.stage.lock(py)?.body_done = true;
                if self.whole {
                    return Err(ClientDisconnected::new_err("the client disconnected before sending its whole body"));
                }
                return Ok(Step::End);
            }
        };
        if !more {
            owner.stage.lock(py)?.body_done = true;
        }
        if !self.whole {
            return Ok(if data.as_bytes().is_empty() && !more {
                Step::End
            } else {
                Step::Value(data.into_any().unbind())
            });
        }
        let mut state = self.state.lock(py)?;
        if !more && state.collected.is_empty() {
            return Ok(Step::Value(data.into_any().unbind()));
        }
        state.collected.extend_from_slice(data.as_bytes());
        if more {
            return Ok(Step::More);
        }
        Ok(Step::Value(PyBytes::new(py, &std::mem::take(&mut state.collected)).into_any().unbind()))
    }

    /// Run until the awaitable yields a future (`Ok(Some)`), or ends (an exception:
    /// `StopIteration` with its result, `StopAsyncIteration`, or the error).
    fn step(&self, py: Python<'_>, resumed: Option<Py<PyAny>>) -> PyResult<Option<Py<PyAny>>> {
        let owner = self.owner.get();
        let mut resumed = resumed;
        loop {
            let msg = match resumed.take() {
                Some(msg) => msg,
                None => {
                    let lp = owner.app.get().tasks.lp.bind(py);
                    match owner.conn.read_body(py, owner.gen, || Ok(create_future(lp)?.unbind()))? {
                        BodyRead::Now(msg) => msg,
                        BodyRead::Wait(fut) => {
                            let iter = fut.bind(py).call_method0(intern!(py, "__await__"))?;
                            match send(&iter) {
                                Sent::Yielded(y) => {
                                    self.state.lock(py)?.waiting = Some((fut, iter.unbind()));
                                    return Ok(Some(y.unbind()));
                                }
                                Sent::Returned(msg) => msg.unbind(),
                                Sent::Raised(e) => return Err(e),
                            }
                        }
                    }
                }
            };
            match self.take(py, msg.bind(py))? {
                Step::More => continue,
                Step::Value(v) => return Err(PyStopIteration::new_err((v,))),
                Step::End => return Err(PyStopAsyncIteration::new_err(())),
            }
        }
    }

    /// Resumed by the task: the future waited on is done.
    fn resume(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let waiting = self.state.lock(py)?.waiting.take();
        let Some((fut, iter)) = waiting else { return self.step(py, None) };
        match send(iter.bind(py)) {
            Sent::Yielded(y) => {
                // Not done after all: wait on.
                self.state.lock(py)?.waiting = Some((fut, iter));
                Ok(Some(y.unbind()))
            }
            Sent::Returned(msg) => self.step(py, Some(msg.unbind())),
            Sent::Raised(e) => Err(e),
        }
    }
}

#[pymethods]
impl BodyReader {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.resume(py)
    }

    fn send(&self, py: Python<'_>, _value: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
        self.resume(py)
    }

    /// The app's task is cancelled (or anything else thrown in) while it waits: the
    /// future waited on is cancelled, so the connection gives the next body bytes to the
    /// next reader instead of to it.
    #[pyo3(signature = (typ, val=None, tb=None))]
    fn throw(
        &self,
        py: Python<'_>,
        typ: Bound<'_, PyAny>,
        val: Option<Bound<'_, PyAny>>,
        tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let _ = tb;
        if let Some((fut, _)) = self.state.lock(py)?.waiting.take() {
            fut.bind(py).call_method0(intern!(py, "cancel"))?;
        }
        let exc = match val.filter(|v| !v.is_none()) {
            Some(v) => v,
            None if typ.is_instance_of::<pyo3::types::PyType>() => typ.call0()?,
            None => typ,
        };
        Err(PyErr::from_value(exc))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.owner)?;
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        if let Some(state) = self.state.try_lock(py) {
            if let Some((fut, iter)) = &state.waiting {
                visit.call(fut)?;
                visit.call(iter)?;
            }
        }
        Ok(())
    }
}
