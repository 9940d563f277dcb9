//! `TlsCore`: TLS for swordfish transports, built on the stdlib's `ssl` module in memory-BIO
//! mode. It sits between a stream transport (whose protocol it is) and the application's
//! protocol: bytes from the socket go into the incoming BIO, `SSLObject` turns them into
//! application data; application writes go through `SSLObject.write` and leave through the
//! outgoing BIO. The `ssl.SSLContext` is the user's own, so certificates, SNI, ALPN and
//! client certificates all behave as in the stdlib.
//!
//! States follow the TLS connection: handshake, wrapped (data flows), flushing (close
//! requested, reading what is left), shutdown (close_notify exchange), unwrapped. The Python
//! class `swordfish._tls.SSLTransport` is what the application sees; it delegates here and
//! keeps the rare paths (error reports, extra info).

use super::stream::StreamCore;
use crate::event_loop::LoopCore;
use crate::sync::{lock, try_lock};
use pyo3::exceptions::{PyConnectionAbortedError, PyConnectionResetError, PyKeyboardInterrupt, PySystemExit, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};
use pyo3::{intern, PyTraverseError, PyVisit};
use std::collections::VecDeque;
use std::sync::Mutex;

/// The most one `SSLObject.read` returns.
const MAX_READ: usize = 256 * 1024;
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

/// The `ssl` exception types the state machine tells apart.
struct SslErrors {
    want_read: Py<PyAny>,
    syscall: Py<PyAny>,
    ssl_error: Py<PyAny>,
    cert_error: Py<PyAny>,
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
    waiter: Option<Py<PyAny>>,
    /// The C-level SSL object behind the `ssl.SSLObject`.
    ssl: Py<PyAny>,
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
    sslobj: Py<PyAny>,
    incoming: Py<PyAny>,
    outgoing: Py<PyAny>,
    errors: SslErrors,
    /// As given (a number of seconds): the timeout message shows it the way Python does.
    handshake_timeout: Py<PyAny>,
    shutdown_timeout: Py<PyAny>,
    inner: Mutex<Inner>,
}

fn is_exit(py: Python<'_>, err: &PyErr) -> bool {
    err.is_instance_of::<PyKeyboardInterrupt>(py) || err.is_instance_of::<PySystemExit>(py)
}

impl TlsCore {
    fn inner(&self) -> PyResult<std::sync::MutexGuard<'_, Inner>> {
        lock(&self.inner)
    }

    fn state(&self) -> PyResult<State> {
        Ok(self.inner()?.state)
    }

    fn set_state(&self, s: State) -> PyResult<()> {
        self.inner()?.state = s;
        Ok(())
    }

    fn is_again(&self, py: Python<'_>, err: &PyErr) -> bool {
        let v = err.value(py);
        v.is_instance(self.errors.want_read.bind(py)).unwrap_or(false)
            || v.is_instance(self.errors.syscall.bind(py)).unwrap_or(false)
    }

    fn is_ssl_error(&self, py: Python<'_>, err: &PyErr) -> bool {
        err.value(py).is_instance(self.errors.ssl_error.bind(py)).unwrap_or(false)
    }

    fn ssl(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.inner()?.ssl.clone_ref(py))
    }

    fn app_transport(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        try_lock(&self.inner).and_then(|i| i.app_transport.as_ref().map(|t| t.clone_ref(py)))
    }

    fn app_protocol(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        try_lock(&self.inner).and_then(|i| i.app_protocol.as_ref().map(|t| t.clone_ref(py)))
    }

    fn raw(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        try_lock(&self.inner).and_then(|i| i.raw.as_ref().map(|t| t.clone_ref(py)))
    }

    fn call_later(&self, py: Python<'_>, delay: &Py<PyAny>, slf: &Bound<'_, Self>, method: &str) -> PyResult<Py<PyAny>> {
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
        let Some(w) = self.inner()?.waiter.take() else { return Ok(()) };
        let w = w.bind(py);
        if w.call_method0(intern!(py, "cancelled"))?.is_truthy()? {
            return Ok(());
        }
        match exc {
            Some(e) => w.call_method1(intern!(py, "set_exception"), (e,))?,
            None => w.call_method1(intern!(py, "set_result"), (py.None(),))?,
        };
        Ok(())
    }

    // -- handshake ------------------------------------------------------------------------

    fn start_handshake(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        this.set_state(State::Handshake)?;
        let timer = this.call_later(py, &this.handshake_timeout, slf, "_check_handshake_timeout")?;
        this.inner()?.handshake_timer = Some(timer);
        Self::do_handshake(slf)
    }

    fn do_handshake(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let ssl = this.ssl(py)?;
        match ssl.bind(py).call_method0(intern!(py, "do_handshake")) {
            Ok(_) => Self::on_handshake_complete(slf, None),
            Err(e) if this.is_again(py, &e) => this.process_outgoing(py),
            Err(e) if this.is_ssl_error(py, &e) => Self::on_handshake_complete(slf, Some(e)),
            Err(e) => Err(e),
        }
    }

    fn on_handshake_complete(slf: &Bound<'_, Self>, failure: Option<PyErr>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let timer = this.inner()?.handshake_timer.take();
        Self::cancel_timer(py, timer)?;
        let sslobj = this.sslobj.bind(py);
        let outcome = match failure {
            Some(e) => Err(e),
            None => {
                this.set_state(State::Wrapped)?;
                sslobj.call_method0(intern!(py, "getpeercert"))
            }
        };
        let peercert = match outcome {
            Ok(p) => p,
            Err(e) => {
                this.set_state(State::Unwrapped)?;
                let msg = if e.value(py).is_instance(this.errors.cert_error.bind(py)).unwrap_or(false) {
                    "SSL handshake failed on verifying the certificate"
                } else {
                    "SSL handshake failed"
                };
                let exc = e.clone_ref(py).into_value(py).into_any();
                this.fatal(py, e, msg)?;
                return this.wakeup_waiter(py, Some(exc));
            }
        };
        let t = this.app_transport(py);
        if let Some(t) = &t {
            t.bind(py).call_method1(intern!(py, "_handshake_done"), (peercert,))?;
        }
        let connect = {
            let mut inner = this.inner()?;
            if inner.app_state == AppState::Init {
                inner.app_state = AppState::Connected;
                true
            } else {
                false
            }
        };
        if connect {
            if let (Some(p), Some(t)) = (this.app_protocol(py), &t) {
                p.bind(py).call_method1(intern!(py, "connection_made"), (t,))?;
            }
        }
        this.wakeup_waiter(py, None)?;
        Self::do_read(slf)
    }

    // -- reading --------------------------------------------------------------------------

    fn do_read(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let (state, paused, buffered) = {
            let i = this.inner()?;
            (i.state, i.app_reading_paused, i.app_buffered)
        };
        if !matches!(state, State::Wrapped | State::Flushing) {
            return Ok(());
        }
        let result = (|| -> PyResult<()> {
            if !paused {
                if buffered {
                    Self::read_buffered(slf)?;
                } else {
                    Self::read_copied(slf)?;
                }
                // Application data queued before a close still goes out before close_notify.
                if this.inner()?.backlog.is_empty() {
                    this.process_outgoing(py)?;
                } else {
                    this.do_write(py)?;
                }
            }
            this.control_ssl_reading(py)
        })();
        match result {
            Err(e) => this.fatal(py, e, "Fatal error on SSL protocol"),
            Ok(()) => Ok(()),
        }
    }

    fn read_copied(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let ssl = this.ssl(py)?;
        let mut chunks: Vec<Bound<'_, PyAny>> = Vec::new();
        let mut close_notify = false;
        loop {
            match ssl.bind(py).call_method1(intern!(py, "read"), (MAX_READ,)) {
                Ok(chunk) => {
                    if chunk.len()? == 0 {
                        close_notify = true;
                        break;
                    }
                    chunks.push(chunk);
                }
                Err(e) if this.is_again(py, &e) => break,
                Err(e) => return Err(e),
            }
        }
        if !chunks.is_empty() {
            let data = if chunks.len() == 1 {
                chunks.pop().expect("one chunk")
            } else {
                PyBytes::new(py, b"").call_method1(intern!(py, "join"), (chunks,))?
            };
            if let Some(p) = this.app_protocol(py) {
                p.bind(py).call_method1(intern!(py, "data_received"), (data,))?;
            }
        }
        if close_notify {
            this.call_eof_received(py)?;
            Self::start_shutdown(slf)?;
        }
        Ok(())
    }

    fn read_buffered(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let Some(p) = this.app_protocol(py) else { return Ok(()) };
        let pending: usize = this.incoming.bind(py).getattr(intern!(py, "pending"))?.extract()?;
        let buf = p.bind(py).call_method1(intern!(py, "get_buffer"), (pending,))?;
        let wants = buf.len()?;
        if wants == 0 {
            return Err(pyo3::exceptions::PyRuntimeError::new_err("get_buffer() returned an empty buffer"));
        }
        let ssl = this.ssl(py)?;
        let count: usize = match ssl.bind(py).call_method1(intern!(py, "read"), (wants, &buf)) {
            Ok(n) => n.extract()?,
            Err(e) if this.is_again(py, &e) => return Ok(()),
            Err(e) => return Err(e),
        };
        if count > 0 {
            if count == wants {
                // The buffer is full: more may be decrypted already; read it next.
                let cb = slf.getattr(intern!(py, "_do_read"))?;
                LoopCore::call_soon_internal_noarg(this.lp.bind(py), &cb)?;
            }
            p.bind(py).call_method1(intern!(py, "buffer_updated"), (count,))?;
        } else {
            this.call_eof_received(py)?;
            Self::start_shutdown(slf)?;
        }
        Ok(())
    }

    fn call_eof_received(&self, py: Python<'_>) -> PyResult<()> {
        let call = {
            let mut inner = self.inner()?;
            if inner.app_state == AppState::Connected {
                inner.app_state = AppState::Eof;
                true
            } else {
                false
            }
        };
        if !call {
            return Ok(());
        }
        let Some(p) = self.app_protocol(py) else { return Ok(()) };
        match p.bind(py).call_method0(intern!(py, "eof_received")) {
            Ok(keep_open) => {
                if keep_open.is_truthy()? {
                    let log = py.import("asyncio.log")?.getattr("logger")?;
                    log.call_method1("warning", ("returning true from eof_received() has no effect when using ssl",))?;
                }
                Ok(())
            }
            Err(e) => self.fatal(py, e, "Error calling eof_received()"),
        }
    }

    fn control_ssl_reading(&self, py: Python<'_>) -> PyResult<()> {
        let size: usize = self.incoming.bind(py).getattr(intern!(py, "pending"))?.extract()?;
        let action = {
            let mut inner = self.inner()?;
            if size >= inner.read_high && !inner.ssl_reading_paused {
                inner.ssl_reading_paused = true;
                Some("pause_reading")
            } else if size <= inner.read_low && inner.ssl_reading_paused {
                inner.ssl_reading_paused = false;
                Some("resume_reading")
            } else {
                None
            }
        };
        if let (Some(m), Some(raw)) = (action, self.raw(py)) {
            raw.bind(py).call_method0(m)?;
        }
        Ok(())
    }

    // -- writing --------------------------------------------------------------------------

    fn write_appdata(&self, py: Python<'_>, items: Vec<Bound<'_, PyAny>>) -> PyResult<()> {
        {
            let mut inner = self.inner()?;
            if matches!(inner.state, State::Flushing | State::Shutdown | State::Unwrapped) {
                if inner.conn_lost >= LOG_THRESHOLD_FOR_CONNLOST_WRITES {
                    let log = py.import("asyncio.log")?.getattr("logger")?;
                    log.call_method1("warning", ("SSL connection is closed",))?;
                }
                inner.conn_lost += 1;
                return Ok(());
            }
            for item in items {
                let bytes = match item.cast_into::<PyBytes>() {
                    Ok(b) => b,
                    // bytearray and memoryview may change after write() returns.
                    Err(e) => {
                        let obj = e.into_inner();
                        PyBytes::new(py, &obj.extract::<Vec<u8>>().or_else(|_| {
                            obj.call_method0(intern!(py, "tobytes")).and_then(|b| b.extract::<Vec<u8>>())
                        })?)
                    }
                };
                inner.backlog_size += bytes.len()?;
                inner.backlog.push_back(bytes.unbind());
            }
            if inner.state != State::Wrapped {
                return Ok(());
            }
        }
        if let Err(e) = self.do_write(py) {
            return self.fatal(py, e, "Fatal error on SSL protocol");
        }
        Ok(())
    }

    fn do_write(&self, py: Python<'_>) -> PyResult<()> {
        let ssl = self.ssl(py)?;
        loop {
            let Some(data) = self.inner()?.backlog.front().map(|d| d.clone_ref(py)) else { break };
            let len = data.bind(py).len()?;
            let count: usize = match ssl.bind(py).call_method1(intern!(py, "write"), (&data,)) {
                Ok(n) => n.extract()?,
                Err(e) if self.is_again(py, &e) => break,
                Err(e) => return Err(e),
            };
            let mut inner = self.inner()?;
            inner.backlog_size -= count.min(inner.backlog_size);
            if count < len {
                let rest = PyBytes::new(py, &data.bind(py).as_bytes()[count..]).unbind();
                if let Some(front) = inner.backlog.front_mut() {
                    *front = rest;
                }
            } else {
                inner.backlog.pop_front();
            }
        }
        self.process_outgoing(py)
    }

    /// Send what the SSL object produced, unless the socket transport asked us to wait.
    fn process_outgoing(&self, py: Python<'_>) -> PyResult<()> {
        let (paused, raw, raw_core) = {
            let i = self.inner()?;
            (i.ssl_writing_paused, i.raw.as_ref().map(|r| r.clone_ref(py)), i.raw_core.as_ref().map(|r| r.clone_ref(py)))
        };
        if !paused {
            let data = self.outgoing.bind(py).call_method0(intern!(py, "read"))?;
            if data.len()? > 0 {
                match (raw_core, raw) {
                    (Some(core), _) => core.get().write_data(py, &data)?,
                    (None, Some(raw)) => {
                        raw.bind(py).call_method1(intern!(py, "write"), (data,))?;
                    }
                    _ => {}
                }
            }
        }
        self.control_app_writing(py)
    }

    fn write_buffer_size(&self, py: Python<'_>) -> PyResult<usize> {
        let pending: usize = self.outgoing.bind(py).getattr(intern!(py, "pending"))?.extract()?;
        Ok(pending + self.inner()?.backlog_size)
    }

    fn control_app_writing(&self, py: Python<'_>) -> PyResult<()> {
        let size = self.write_buffer_size(py)?;
        let action = {
            let mut inner = self.inner()?;
            if size >= inner.write_high && !inner.app_writing_paused {
                inner.app_writing_paused = true;
                Some("pause_writing")
            } else if size <= inner.write_low && inner.app_writing_paused {
                inner.app_writing_paused = false;
                Some("resume_writing")
            } else {
                None
            }
        };
        let Some(method) = action else { return Ok(()) };
        let Some(p) = self.app_protocol(py) else { return Ok(()) };
        if let Err(e) = p.bind(py).call_method0(method) {
            if is_exit(py, &e) {
                return Err(e);
            }
            if let Some(t) = self.app_transport(py) {
                let msg = format!("protocol.{method}() failed");
                t.bind(py).call_method1(intern!(py, "_report_flow_error"), (msg, e.into_value(py)))?;
            }
        }
        Ok(())
    }

    // -- closing --------------------------------------------------------------------------

    fn start_shutdown(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let state = {
            let mut inner = this.inner()?;
            if matches!(inner.state, State::Flushing | State::Shutdown | State::Unwrapped) {
                return Ok(());
            }
            inner.closed = true;
            inner.state
        };
        if state == State::Handshake {
            return this.abort(py, py.None());
        }
        this.set_state(State::Flushing)?;
        let timer = this.call_later(py, &this.shutdown_timeout, slf, "_check_shutdown_timeout")?;
        this.inner()?.shutdown_timer = Some(timer);
        Self::do_flush(slf)
    }

    fn do_flush(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::do_read(slf)?;
        slf.get().set_state(State::Shutdown)?;
        Self::do_shutdown(slf)
    }

    fn do_shutdown(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let eof = this.inner()?.eof_received;
        if !eof {
            let ssl = this.ssl(py)?;
            match ssl.bind(py).call_method0(intern!(py, "shutdown")) {
                Ok(_) => {}
                Err(e) if this.is_again(py, &e) => return this.process_outgoing(py),
                Err(e) if this.is_ssl_error(py, &e) => return this.on_shutdown_complete(py, Some(e)),
                Err(e) => return Err(e),
            }
        }
        this.process_outgoing(py)?;
        this.call_eof_received(py)?;
        this.on_shutdown_complete(py, None)
    }

    fn on_shutdown_complete(&self, py: Python<'_>, failure: Option<PyErr>) -> PyResult<()> {
        let timer = self.inner()?.shutdown_timer.take();
        Self::cancel_timer(py, timer)?;
        match failure {
            Some(e) => self.fatal(py, e, "Error occurred during shutdown"),
            None => {
                if let Some(raw) = self.raw(py) {
                    raw.bind(py).call_method0(intern!(py, "close"))?;
                }
                Ok(())
            }
        }
    }

    fn abort(&self, py: Python<'_>, exc: Py<PyAny>) -> PyResult<()> {
        self.set_state(State::Unwrapped)?;
        if let Some(raw) = self.raw(py) {
            raw.bind(py).call_method1(intern!(py, "_force_close"), (exc,))?;
        }
        Ok(())
    }

    fn check_data(data: &Bound<'_, PyAny>) -> PyResult<()> {
        if data.is_instance_of::<PyBytes>()
            || data.is_instance_of::<PyByteArray>()
            || data.is_instance_of::<PyMemoryView>()
        {
            return Ok(());
        }
        Err(PyTypeError::new_err(format!(
            "data: expecting a bytes-like instance, got {}",
            data.get_type().name()?
        )))
    }
}

/// The stdlib's flow-control defaults: `high` from `low` or a default, `low` a quarter.
pub fn flow_limits(high: Option<i64>, low: Option<i64>, default_high: i64) -> PyResult<(usize, usize)> {
    let hi = high.unwrap_or_else(|| match low {
        None => default_high,
        Some(l) => 4 * l,
    });
    let lo = low.unwrap_or(hi / 4);
    if !(hi >= lo && lo >= 0) {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "high ({hi}) must be >= low ({lo}) must be >= 0"
        )));
    }
    Ok((hi as usize, lo as usize))
}

#[pymethods]
impl TlsCore {
    /// `sslobj` is the `ssl.SSLObject` wrapped around `incoming`/`outgoing`.
    #[new]
    #[pyo3(signature = (lp, app_protocol, app_buffered, sslobj, incoming, outgoing, waiter, handshake_timeout, shutdown_timeout, call_connection_made))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        lp: &Bound<'_, LoopCore>,
        app_protocol: Py<PyAny>,
        app_buffered: bool,
        sslobj: Py<PyAny>,
        incoming: Py<PyAny>,
        outgoing: Py<PyAny>,
        waiter: Option<Py<PyAny>>,
        handshake_timeout: Py<PyAny>,
        shutdown_timeout: Py<PyAny>,
        call_connection_made: bool,
    ) -> PyResult<Self> {
        let ssl_mod = py.import("ssl")?;
        let errors = SslErrors {
            want_read: ssl_mod.getattr("SSLWantReadError")?.unbind(),
            syscall: ssl_mod.getattr("SSLSyscallError")?.unbind(),
            ssl_error: ssl_mod.getattr("SSLError")?.unbind(),
            cert_error: ssl_mod.getattr("CertificateError")?.unbind(),
        };
        let c_ssl = sslobj.bind(py).getattr("_sslobj")?.unbind();
        let (read_high, read_low) = flow_limits(None, None, 256 * 1024)?;
        let (write_high, write_low) = flow_limits(None, None, 512 * 1024)?;
        Ok(TlsCore {
            lp: lp.clone().unbind(),
            sslobj,
            incoming,
            outgoing,
            errors,
            handshake_timeout,
            shutdown_timeout,
            inner: Mutex::new(Inner {
                state: State::Unwrapped,
                app_state: if call_connection_made { AppState::Init } else { AppState::Connected },
                raw: None,
                raw_core: None,
                app_transport: None,
                app_protocol: Some(app_protocol),
                app_buffered,
                waiter,
                ssl: c_ssl,
                backlog: VecDeque::new(),
                backlog_size: 0,
                conn_lost: 0,
                eof_received: false,
                closed: false,
                app_reading_paused: false,
                ssl_reading_paused: false,
                app_writing_paused: false,
                ssl_writing_paused: false,
                write_high,
                write_low,
                read_high,
                read_low,
                handshake_timer: None,
                shutdown_timer: None,
            }),
        })
    }

    fn _set_app_transport(&self, t: Py<PyAny>) -> PyResult<()> {
        self.inner()?.app_transport = Some(t);
        Ok(())
    }

    fn _set_app_protocol(&self, p: Py<PyAny>, buffered: bool) -> PyResult<()> {
        let old = {
            let mut i = self.inner()?;
            i.app_buffered = buffered;
            i.app_protocol.replace(p)
        };
        drop(old);
        Ok(())
    }

    fn _get_app_protocol(&self, py: Python<'_>) -> Py<PyAny> {
        self.app_protocol(py).unwrap_or_else(|| py.None())
    }

    fn _raw_transport(&self, py: Python<'_>) -> Py<PyAny> {
        self.raw(py).unwrap_or_else(|| py.None())
    }

    // -- the socket transport's protocol --------------------------------------------------

    fn connection_made(slf: &Bound<'_, Self>, transport: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let core = transport
            .getattr(intern!(py, "_core"))
            .ok()
            .and_then(|c| c.cast_into::<StreamCore>().ok())
            .map(Bound::unbind);
        {
            let mut i = slf.get().inner()?;
            i.raw = Some(transport.clone().unbind());
            i.raw_core = core;
        }
        Self::start_handshake(slf)
    }

    fn connection_lost(&self, py: Python<'_>, exc: Py<PyAny>) -> PyResult<()> {
        let _ = self.outgoing.bind(py).call_method0(intern!(py, "read"));
        let (notify, protocol, timers, backlog, raw, core, t) = {
            let mut i = self.inner()?;
            let backlog = std::mem::take(&mut i.backlog);
            i.backlog_size = 0;
            i.conn_lost += 1;
            i.closed = true;
            let notify = i.state != State::Handshake
                && matches!(i.app_state, AppState::Connected | AppState::Eof);
            if notify {
                i.app_state = AppState::Lost;
            }
            i.state = State::Unwrapped;
            let timers = (i.handshake_timer.take(), i.shutdown_timer.take());
            (notify, i.app_protocol.take(), timers, backlog, i.raw.take(), i.raw_core.take(), i.app_transport.take())
        };
        drop((backlog, raw, core));
        if notify {
            if let Some(p) = &protocol {
                let cb = p.bind(py).getattr(intern!(py, "connection_lost"))?;
                LoopCore::call_soon_internal(self.lp.bind(py), &cb, exc.bind(py))?;
            }
        }
        if let Some(t) = t {
            t.bind(py).call_method0(intern!(py, "_connection_lost"))?;
        }
        Self::cancel_timer(py, timers.0)?;
        Self::cancel_timer(py, timers.1)?;
        let exc = if exc.is_none(py) { None } else { Some(exc) };
        self.wakeup_waiter(py, exc)
    }

    fn data_received(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        this.incoming.bind(py).call_method1(intern!(py, "write"), (data,))?;
        match this.state()? {
            State::Handshake => Self::do_handshake(slf),
            State::Wrapped => Self::do_read(slf),
            State::Flushing => Self::do_flush(slf),
            State::Shutdown => Self::do_shutdown(slf),
            State::Unwrapped => Ok(()),
        }
    }

    fn eof_received(slf: &Bound<'_, Self>) -> PyResult<Option<bool>> {
        let this = slf.get();
        let py = slf.py();
        this.inner()?.eof_received = true;
        let result = (|| -> PyResult<Option<bool>> {
            match this.state()? {
                State::Handshake => {
                    let e = PyConnectionResetError::new_err(());
                    Self::on_handshake_complete(slf, Some(e))?;
                }
                State::Wrapped => {
                    this.set_state(State::Flushing)?;
                    if this.inner()?.app_reading_paused {
                        return Ok(Some(true));
                    }
                    Self::do_flush(slf)?;
                }
                State::Flushing => {
                    this.do_write(py)?;
                    this.set_state(State::Shutdown)?;
                    Self::do_shutdown(slf)?;
                }
                State::Shutdown => Self::do_shutdown(slf)?,
                State::Unwrapped => {}
            }
            Ok(None)
        })();
        if result.is_err() {
            if let Some(raw) = this.raw(py) {
                raw.bind(py).call_method0(intern!(py, "close"))?;
            }
        }
        result
    }

    fn pause_writing(&self) -> PyResult<()> {
        self.inner()?.ssl_writing_paused = true;
        Ok(())
    }

    fn resume_writing(&self, py: Python<'_>) -> PyResult<()> {
        self.inner()?.ssl_writing_paused = false;
        self.process_outgoing(py)
    }

    fn _check_handshake_timeout(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        if this.state()? == State::Handshake {
            let msg = format!(
                "SSL handshake is taking longer than {} seconds: aborting the connection",
                this.handshake_timeout.bind(py).str()?
            );
            let e = PyConnectionAbortedError::new_err(msg);
            this.fatal(py, e, "Fatal error on transport")?;
        }
        Ok(())
    }

    fn _check_shutdown_timeout(&self, py: Python<'_>) -> PyResult<()> {
        if matches!(self.state()?, State::Flushing | State::Shutdown) {
            if let Some(raw) = self.raw(py) {
                let timeout = py.import("asyncio")?.getattr("TimeoutError")?;
                let exc = timeout.call1(("SSL shutdown timed out",))?;
                raw.bind(py).call_method1(intern!(py, "_force_close"), (exc,))?;
            }
        }
        Ok(())
    }

    fn _do_read(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::do_read(slf)
    }

    /// After `resume_reading()`: continue where reading stopped.
    fn _resume(slf: &Bound<'_, Self>) -> PyResult<()> {
        match slf.get().state()? {
            State::Wrapped => Self::do_read(slf),
            State::Flushing => Self::do_flush(slf),
            State::Shutdown => Self::do_shutdown(slf),
            _ => Ok(()),
        }
    }

    // -- the application's transport ------------------------------------------------------

    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::check_data(data)?;
        if data.len()? == 0 {
            return Ok(());
        }
        self.write_appdata(py, vec![data.clone()])
    }

    fn writelines(&self, py: Python<'_>, list_of_data: &Bound<'_, PyAny>) -> PyResult<()> {
        let items: Vec<Bound<'_, PyAny>> = list_of_data.try_iter()?.collect::<PyResult<_>>()?;
        for item in &items {
            Self::check_data(item)?;
        }
        let items: Vec<Bound<'_, PyAny>> = items.into_iter().filter(|i| i.len().map_or(true, |n| n > 0)).collect();
        if items.is_empty() {
            return Ok(());
        }
        self.write_appdata(py, items)
    }

    fn is_closing(&self) -> PyResult<bool> {
        Ok(self.inner()?.closed)
    }

    /// `close()` of the application's transport: flush, exchange close_notify, close.
    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        {
            let mut i = slf.get().inner()?;
            if i.closed {
                return Ok(());
            }
            i.closed = true;
        }
        Self::start_shutdown_from_app(slf)
    }

    fn _start_shutdown(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::start_shutdown_from_app(slf)
    }

    #[pyo3(signature = (exc=None))]
    fn _force_close(&self, py: Python<'_>, exc: Option<Py<PyAny>>) -> PyResult<()> {
        self.inner()?.closed = true;
        self.abort(py, exc.unwrap_or_else(|| py.None()))
    }

    fn is_reading(&self) -> PyResult<bool> {
        Ok(!self.inner()?.app_reading_paused)
    }

    fn pause_reading(&self) -> PyResult<()> {
        self.inner()?.app_reading_paused = true;
        Ok(())
    }

    fn resume_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        {
            let mut i = this.inner()?;
            if !i.app_reading_paused {
                return Ok(());
            }
            i.app_reading_paused = false;
        }
        let cb = slf.getattr(intern!(slf.py(), "_resume"))?;
        LoopCore::call_soon_internal_noarg(this.lp.bind(slf.py()), &cb)
    }

    #[pyo3(signature = (high=None, low=None))]
    fn set_write_buffer_limits(&self, py: Python<'_>, high: Option<i64>, low: Option<i64>) -> PyResult<()> {
        let (hi, lo) = flow_limits(high, low, 512 * 1024)?;
        {
            let mut i = self.inner()?;
            i.write_high = hi;
            i.write_low = lo;
        }
        self.control_app_writing(py)
    }

    fn get_write_buffer_limits(&self) -> PyResult<(usize, usize)> {
        let i = self.inner()?;
        Ok((i.write_low, i.write_high))
    }

    fn get_write_buffer_size(&self, py: Python<'_>) -> PyResult<usize> {
        self.write_buffer_size(py)
    }

    #[pyo3(signature = (high=None, low=None))]
    fn set_read_buffer_limits(&self, py: Python<'_>, high: Option<i64>, low: Option<i64>) -> PyResult<()> {
        let (hi, lo) = flow_limits(high, low, 256 * 1024)?;
        {
            let mut i = self.inner()?;
            i.read_high = hi;
            i.read_low = lo;
        }
        self.control_ssl_reading(py)
    }

    fn get_read_buffer_limits(&self) -> PyResult<(usize, usize)> {
        let i = self.inner()?;
        Ok((i.read_low, i.read_high))
    }

    fn get_read_buffer_size(&self, py: Python<'_>) -> PyResult<usize> {
        self.incoming.bind(py).getattr(intern!(py, "pending"))?.extract()
    }

    fn _append_backlog(&self, data: Bound<'_, PyBytes>) -> PyResult<()> {
        let mut i = self.inner()?;
        i.backlog_size += data.len()?;
        i.backlog.push_back(data.unbind());
        Ok(())
    }

    #[getter]
    fn _app_writing_paused(&self) -> PyResult<bool> {
        Ok(self.inner()?.app_writing_paused)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.lp)?;
        visit.call(&self.sslobj)?;
        if let Some(i) = try_lock(&self.inner) {
            visit.call(&i.raw)?;
            visit.call(&i.raw_core)?;
            visit.call(&i.app_transport)?;
            visit.call(&i.app_protocol)?;
            visit.call(&i.waiter)?;
            visit.call(&i.handshake_timer)?;
            visit.call(&i.shutdown_timer)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        let taken = try_lock(&self.inner).map(|mut i| {
            (
                i.raw.take(),
                i.raw_core.take(),
                i.app_transport.take(),
                i.app_protocol.take(),
                i.waiter.take(),
                i.handshake_timer.take(),
                i.shutdown_timer.take(),
            )
        });
        drop(taken);
    }
}

impl TlsCore {
    fn start_shutdown_from_app(slf: &Bound<'_, Self>) -> PyResult<()> {
        // The stdlib marks the transport closed first, then starts the shutdown (which
        // returns at once when one is under way).
        let this = slf.get();
        let state = this.state()?;
        if matches!(state, State::Flushing | State::Shutdown | State::Unwrapped) {
            return Ok(());
        }
        {
            let mut i = this.inner()?;
            i.closed = true;
        }
        if state == State::Handshake {
            return this.abort(slf.py(), slf.py().None());
        }
        Self::start_shutdown(slf)
    }
}
