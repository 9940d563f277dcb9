//! The ASGI `http` scope: the `receive` and `send` callables (small native objects bound
//! to one request) and the end of the app's task. The scope is built in `scope`,
//! `receive()` is `receive`, the messages given to `send()` are read in `messages` and
//! turned into response parts in `send`.

use super::ClientDisconnected;
use crate::carrier::Carrier;
use crate::http::respond::AppEnd;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

mod messages;
mod receive;
mod scope;
mod send;

pub use messages::get as message_get;
pub use receive::{body_message, disconnect_message};
pub use scope::build_scope;

/// `receive()` of one request. Also the done callback of the app's task (called with the
/// task): that saves an object per request.
#[pyclass(module = "swordfish._native", frozen)]
pub struct Receive {
    pub carrier: Carrier,
    pub gen: u64,
}

#[pyclass(module = "swordfish._native", frozen)]
pub struct Send {
    pub carrier: Carrier,
    pub gen: u64,
}

#[pymethods]
impl Receive {
    #[pyo3(signature = (task=None))]
    fn __call__(&self, py: Python<'_>, task: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        if let Some(task) = task {
            task_finished(py, &self.carrier, self.gen, task)?;
            return Ok(py.None());
        }
        receive::receive(py, &self.carrier, self.gen)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.carrier.traverse(&visit)
    }
}

#[pymethods]
impl Send {
    fn __call__(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        send::send(py, &self.carrier, self.gen, message)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.carrier.traverse(&visit)
    }
}

/// The app's task is done: take its outcome (which also marks an exception as retrieved).
pub fn task_finished(py: Python<'_>, carrier: &Carrier, gen: u64, task: &Bound<'_, PyAny>) -> PyResult<()> {
    app_finished(py, carrier, gen, crate::http::app_task::task_exception(task)?)
}

const HTTP_APP_END: AppEnd = AppEnd {
    raised: "Exception in ASGI application",
    returned_before_start: "ASGI callable returned without starting response",
    returned_before_end: "ASGI callable returned without completing response",
};

/// The app's task ended (with `exc` if it raised).
pub fn app_finished(py: Python<'_>, carrier: &Carrier, gen: u64, exc: Option<Py<PyAny>>) -> PyResult<()> {
    let disconnected = exc.as_ref().is_some_and(|e| e.bind(py).is_instance_of::<ClientDisconnected>());
    carrier.app_finished(py, gen, exc, disconnected, &HTTP_APP_END)
}
