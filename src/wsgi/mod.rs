//! The WSGI interface (PEP 3333), served two ways. On the loop: HTTP parsing, framing and
//! the socket stay on the loop thread; the app runs on a pool of threads (`pool`), never on
//! the loop thread. Or by the thread engine (`engine`), without the loop: the thread that
//! reads a request runs its app and writes its answer, with the GIL only for the app. A request
//! crosses as one native object (`request`), its environ is built on the app thread
//! (`environ`), the body and the response's flow are shared per request (`exchange`,
//! `input`), and what the app sends (`start_response`, `response`, `file_wrapper`) goes
//! back to the loop in batches (`bridge`), or to the engine's connection (`exchange::Route`).
//! `app` is the `Dispatch` of the loop's connection.

pub mod app;
pub mod bridge;
pub mod cpu_share;
pub mod engine;
pub mod environ;
pub mod exchange;
pub mod file_wrapper;
pub mod idle_watch;
pub mod input;
pub mod pool;
pub mod request;
pub mod response;
pub mod start_response;

use pyo3::prelude::*;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<app::WsgiApp>()?;
    m.add_class::<bridge::WsgiBridge>()?;
    m.add_class::<bridge::BodyWaiter>()?;
    m.add_class::<bridge::Resume>()?;
    m.add_class::<bridge::FileDone>()?;
    m.add_class::<engine::WsgiEngine>()?;
    m.add_class::<file_wrapper::FileWrapper>()?;
    m.add_class::<input::WsgiInput>()?;
    m.add_class::<pool::StallCheck>()?;
    m.add_class::<request::WsgiRequest>()?;
    m.add_class::<start_response::StartResponse>()?;
    Ok(())
}
