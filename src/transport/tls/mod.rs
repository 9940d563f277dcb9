//! `TlsCore`: TLS for swordfish transports. It sits between a stream transport (whose
//! protocol it is) and the application's protocol: bytes from the socket go into the record
//! layer (`engine.rs`), which turns them into application data; application writes are
//! encrypted there and leave through the socket transport. The record layer is the stdlib's
//! `ssl` in memory-BIO mode with the user's own `ssl.SSLContext` (certificates, SNI, ALPN and
//! client certificates behave as in the stdlib), or rustls for a server that asks for it.
//!
//! States follow the TLS connection: handshake, wrapped (data flows), flushing (close
//! requested, reading what is left), shutdown (close_notify exchange), unwrapped. The Python
//! class `swordfish._tls.SSLTransport` is what the application sees; it delegates here and
//! keeps the rare paths (error reports, extra info).

mod api;
mod engine;
mod output;
pub mod records;
mod server_config;
mod session;

pub use server_config::RustlsServerConfig;

/// The socket transport's native read path for a `TlsCore` on rustls (see
/// `transport::native`). OpenSSL's takes the bytes object its memory BIO is written from.
pub fn native_reader(protocol: &Bound<'_, PyAny>) -> Option<crate::transport::native::Feed> {
    let core = protocol.cast::<TlsCore>().ok()?;
    core.get().engine.sslobj().is_none().then_some(feed)
}

fn feed(protocol: &Bound<'_, PyAny>, data: &[u8]) -> PyResult<()> {
    TlsCore::feed(protocol.cast::<TlsCore>()?, data)
}

use crate::event_loop::LoopCore;
use crate::pyutil::is_exit;
use crate::sync::{GilCell, GilGuard};
use crate::transport::stream::{Held, Hold, StreamCore};
use engine::{Engine, Plain, SslErrors, Step};
use pyo3::exceptions::{PyConnectionAbortedError, PyConnectionResetError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView, PySlice};
use pyo3::{intern, PyTraverseError, PyVisit};
use std::collections::VecDeque;

const LOG_THRESHOLD_FOR_CONNLOST_WRITES: u32 = 5;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Unwrapped,
    Handshake,
    Wrapped,
    Flushing,
    Shutdown,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum AppState {
    Init,
    Connected,
    Eof,
    Lost,
}

struct Inner {
    state: State,
    app_state: AppState,
    /// The Python transport under us (a socket transport) and its native core.
    raw: Option<Py<PyAny>>,
    raw_core: Option<Py<StreamCore>>,
    app_transport: Option<Py<PyAny>>,
    app_protocol: Option<Py<PyAny>>,
    app_buffered: bool,
    /// The application's protocol reads natively (`transport::native`): decrypted data goes
    /// to it as a slice.
    app_feed: Option<crate::transport::native::Feed>,
    waiter: Option<Py<PyAny>>,
    /// Application data accepted by `write()` but not yet given to `SSLObject.write`.
    backlog: VecDeque<Py<PyBytes>>,
    backlog_size: usize,
    conn_lost: u32,
    eof_received: bool,
    closed: bool,
    app_reading_paused: bool,
    ssl_reading_paused: bool,
    app_writing_paused: bool,
    ssl_writing_paused: bool,
    write_high: usize,
    write_low: usize,
    read_high: usize,
    read_low: usize,
    handshake_timer: Option<Py<PyAny>>,
    shutdown_timer: Option<Py<PyAny>>,
}

#[pyclass(module = "swordfish._native", frozen)]
pub struct TlsCore {
    lp: Py<LoopCore>,
    engine: Engine,
    errors: SslErrors,
    /// As given (a number of seconds): the timeout message shows it the way Python does.
    handshake_timeout: Py<PyAny>,
    shutdown_timeout: Py<PyAny>,
    inner: GilCell<Inner>,
}

impl TlsCore {
    fn inner(&self, py: Python<'_>) -> PyResult<GilGuard<'_, Inner>> {
        self.inner.lock(py)
    }

    fn state(&self, py: Python<'_>) -> PyResult<State> {
        Ok(self.inner(py)?.state)
    }

    fn set_state(&self, py: Python<'_>, s: State) -> PyResult<()> {
        self.inner(py)?.state = s;
        Ok(())
    }

    fn is_ssl_error(&self, py: Python<'_>, err: &PyErr) -> bool {
        err.value(py).is_instance(self.errors.ssl_error.bind(py)).unwrap_or(false)
    }

    fn app_transport(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.inner.try_lock(py).and_then(|i| i.app_transport.as_ref().map(|t| t.clone_ref(py)))
    }

    fn app_protocol(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.inner.try_lock(py).and_then(|i| i.app_protocol.as_ref().map(|t| t.clone_ref(py)))
    }

    fn raw(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.inner.try_lock(py).and_then(|i| i.raw.as_ref().map(|t| t.clone_ref(py)))
    }

    fn call_later(
        &self,
        py: Python<'_>,
        delay: &Py<PyAny>,
        slf: &Bound<'_, Self>,
        method: &str,
    ) -> PyResult<Py<PyAny>> {
        let cb = slf.getattr(method)?;
        Ok(self.lp.bind(py).call_method1(intern!(py, "call_later"), (delay, cb))?.unbind())
    }

    fn cancel_timer(py: Python<'_>, t: Option<Py<PyAny>>) -> PyResult<()> {
        if let Some(t) = t {
            t.bind(py).call_method0(intern!(py, "cancel"))?;
        }
        Ok(())
    }

    /// Report through the Python transport (`_fatal_error`): it closes the socket transport
    /// and calls the exception handler as the stdlib does.
    fn fatal(&self, py: Python<'_>, err: PyErr, message: &str) -> PyResult<()> {
        if is_exit(py, &err) {
            return Err(err);
        }
        let Some(t) = self.app_transport(py) else { return Ok(()) };
        let exc = err.into_value(py);
        t.bind(py).call_method1(intern!(py, "_fatal_error"), (exc, message))?;
        Ok(())
    }

    fn wakeup_waiter(&self, py: Python<'_>, exc: Option<Py<PyAny>>) -> PyResult<()> {
        let Some(w) = self.inner(py)?.waiter.take() else { return Ok(()) };
        let w = w.bind(py);
        if w.call_method0(intern!(py, "cancelled"))?.is_truthy()? {
            return Ok(());
        }
        match exc {
            Some(e) => crate::tasks::set_exception(w, e.bind(py))?,
            None => crate::tasks::set_result(w, &py.None().into_bound(py))?,
        }
        Ok(())
    }
}
