//! The ASGI 3 interface: `AsgiApp` (the application and the constant parts of its scopes)
//! is the `Dispatch` of the HTTP/1.1 connection; `http` serves the `http` scope and
//! `websocket` the `websocket` scope. Shared by
//! the scopes: the task start (`start`), the awaitable returned when nothing has to wait
//! (`Ready`) and `ClientDisconnected`.

pub mod app;
pub mod http;
pub mod start;
pub mod websocket;

pub use crate::http::ClientDisconnected;
use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::{PyTraverseError, PyVisit};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<app::AsgiApp>()?;
    m.add_class::<http::Receive>()?;
    m.add_class::<http::Send>()?;
    m.add_class::<Ready>()?;
    m.add_class::<websocket::WsSession>()?;
    m.add_class::<crate::ws::conn::WsProtocol>()?;
    Ok(())
}

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

pub fn ready_none(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let r = READY_NONE.get_or_try_init(py, || Py::new(py, Ready { value: None }))?;
    Ok(r.clone_ref(py).into_any())
}

pub fn ready(py: Python<'_>, value: Py<PyAny>) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, Ready { value: Some(value) })?.into_any())
}
