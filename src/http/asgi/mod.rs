//! The ASGI 3 side of the protocol: the `receive` and `send` callables (small native objects
//! bound to one request), the awaitable they return when nothing has to wait, and the end
//! of the app's task. The `http` scope is built in `scope`, `receive()` is `receive`, the
//! messages given to `send()` are read in `messages` and written out in `send`.

use super::conn::{Act, Conn, Request};
use super::protocol::HttpProtocol;
use super::response::{reason, simple_response};
use crate::clock::monotonic;
use pyo3::exceptions::{PyOSError, PyStopIteration};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::{create_exception, intern, PyTraverseError, PyVisit};

mod messages;
mod receive;
mod scope;
mod send;

pub use receive::{disconnect_message, take_body_message};
pub use scope::build_scope;
pub use send::pathsend_done;

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
        receive::receive(proto, self.gen)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.proto)
    }
}

#[pymethods]
impl Send {
    fn __call__(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        send::send(self.proto.bind(py), self.gen, message)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.proto)
    }
}

/// The app's task is done: take its outcome (which also marks an exception as retrieved).
pub fn task_finished(proto: &Bound<'_, HttpProtocol>, gen: u64, task: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = proto.py();
    // `exception()` of a cancelled task raises CancelledError: one call either way.
    let exc = match task.call_method0(intern!(py, "exception")) {
        Ok(e) => (!e.is_none()).then(|| e.unbind()),
        Err(e) if e.is_instance_of::<pyo3::exceptions::asyncio::CancelledError>(py) => None,
        Err(e) => return Err(e),
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
                    acts.push(Act::Write(simple_response(500, req.head_method, state.date_header, state.server_header.as_deref())));
                }
                // The request gets its access-log line even though its response is a 500 or
                // was cut short (not when the client left before anything was sent).
                if let Some(scope) = req.scope.take() {
                    let (status, size) = if req.head_written {
                        (req.status, req.sent)
                    } else {
                        (500, if req.head_method { 0 } else { reason(500).len() as u64 })
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
            // exception raised after it is still the app's error, unless it is the one
            // `send` raised because the connection is gone (the server may have refused the
            // rest of the body and closed).
            Some(req) => {
                req.task_done = true;
                if let Some(e) = exc.filter(|e| !e.bind(py).is_instance_of::<ClientDisconnected>()) {
                    acts.push(Act::LogError("Exception in ASGI application".to_owned(), Some(e)));
                }
            }
            None => {
                if let Some(e) = exc.filter(|e| !e.bind(py).is_instance_of::<ClientDisconnected>()) {
                    acts.push(Act::LogError("Exception in ASGI application".to_owned(), Some(e)));
                }
            }
        }
    }
    HttpProtocol::run_acts(proto, acts)
}
