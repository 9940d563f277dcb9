//! What Python sees of `TlsCore`: the socket transport's protocol, and the methods the
//! application's `SSLTransport` delegates to.

use super::*;
use crate::transport::flow_limits;

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
        let engine = Engine::openssl(py, sslobj, incoming, outgoing)?;
        let timeouts = (handshake_timeout, shutdown_timeout);
        Self::with_engine(py, lp, engine, app_protocol, app_buffered, waiter, timeouts, call_connection_made)
    }

    /// The server side of a connection with rustls as the record layer.
    #[staticmethod]
    #[pyo3(signature = (lp, app_protocol, app_buffered, config, waiter, handshake_timeout, shutdown_timeout, call_connection_made))]
    #[allow(clippy::too_many_arguments)]
    fn rustls_server(
        py: Python<'_>,
        lp: &Bound<'_, LoopCore>,
        app_protocol: Py<PyAny>,
        app_buffered: bool,
        config: &Bound<'_, RustlsServerConfig>,
        waiter: Option<Py<PyAny>>,
        handshake_timeout: Py<PyAny>,
        shutdown_timeout: Py<PyAny>,
        call_connection_made: bool,
    ) -> PyResult<Self> {
        let engine = Engine::rustls(config.get().config.clone())?;
        let timeouts = (handshake_timeout, shutdown_timeout);
        Self::with_engine(py, lp, engine, app_protocol, app_buffered, waiter, timeouts, call_connection_made)
    }

    /// The ALPN protocol the handshake chose (None: none, or not yet).
    fn selected_alpn_protocol(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.alpn(py)
    }

    /// As `SSLObject.cipher()`.
    fn cipher<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.engine.cipher(py)
    }

    fn _set_app_transport(&self, py: Python<'_>, t: Py<PyAny>) -> PyResult<()> {
        self.inner(py)?.app_transport = Some(t);
        Ok(())
    }

    fn _set_app_protocol(&self, py: Python<'_>, p: Py<PyAny>, buffered: bool) -> PyResult<()> {
        let old = {
            let mut i = self.inner(py)?;
            i.app_buffered = buffered;
            i.app_feed = crate::transport::native::recognise(p.bind(py));
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
            let mut i = slf.get().inner(py)?;
            i.raw = Some(transport.clone().unbind());
            i.raw_core = core;
        }
        Self::start_handshake(slf)
    }

    fn connection_lost(&self, py: Python<'_>, exc: Py<PyAny>) -> PyResult<()> {
        self.engine.discard_outgoing(py);
        let (notify, protocol, timers, backlog, raw, core, t) = {
            let mut i = self.inner(py)?;
            let backlog = std::mem::take(&mut i.backlog);
            i.backlog_size = 0;
            i.conn_lost += 1;
            i.closed = true;
            let notify = i.state != State::Handshake && matches!(i.app_state, AppState::Connected | AppState::Eof);
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
        slf.get().engine.feed(slf.py(), data)?;
        Self::advance(slf)
    }

    fn eof_received(slf: &Bound<'_, Self>) -> PyResult<Option<bool>> {
        let this = slf.get();
        let py = slf.py();
        this.inner(py)?.eof_received = true;
        let result = (|| -> PyResult<Option<bool>> {
            match this.state(py)? {
                State::Handshake => {
                    let e = PyConnectionResetError::new_err(());
                    Self::on_handshake_complete(slf, Some(e))?;
                }
                State::Wrapped => {
                    this.set_state(py, State::Flushing)?;
                    if this.inner(py)?.app_reading_paused {
                        return Ok(Some(true));
                    }
                    Self::do_flush(slf)?;
                }
                State::Flushing => {
                    this.do_write(py)?;
                    this.set_state(py, State::Shutdown)?;
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

    fn pause_writing(&self, py: Python<'_>) -> PyResult<()> {
        self.inner(py)?.ssl_writing_paused = true;
        Ok(())
    }

    fn resume_writing(&self, py: Python<'_>) -> PyResult<()> {
        self.inner(py)?.ssl_writing_paused = false;
        self.process_outgoing(py)
    }

    fn _check_handshake_timeout(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        if this.state(py)? == State::Handshake {
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
        if matches!(self.state(py)?, State::Flushing | State::Shutdown) {
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
        match slf.get().state(slf.py())? {
            State::Handshake => Ok(()), // the handshake reads whatever the app's state
            _ => Self::advance(slf),
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

    fn is_closing(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.inner(py)?.closed)
    }

    /// `close()` of the application's transport: flush, exchange close_notify, close.
    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        {
            let mut i = slf.get().inner(py)?;
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
        self.inner(py)?.closed = true;
        self.abort(py, exc.unwrap_or_else(|| py.None()))
    }

    fn is_reading(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(!self.inner(py)?.app_reading_paused)
    }

    fn pause_reading(&self, py: Python<'_>) -> PyResult<()> {
        self.inner(py)?.app_reading_paused = true;
        Ok(())
    }

    fn resume_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        {
            let mut i = this.inner(py)?;
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
            let mut i = self.inner(py)?;
            i.write_high = hi;
            i.write_low = lo;
        }
        self.control_app_writing(py)
    }

    fn get_write_buffer_limits(&self, py: Python<'_>) -> PyResult<(usize, usize)> {
        let i = self.inner(py)?;
        Ok((i.write_low, i.write_high))
    }

    fn get_write_buffer_size(&self, py: Python<'_>) -> PyResult<usize> {
        self.write_buffer_size(py)
    }

    #[pyo3(signature = (high=None, low=None))]
    fn set_read_buffer_limits(&self, py: Python<'_>, high: Option<i64>, low: Option<i64>) -> PyResult<()> {
        let (hi, lo) = flow_limits(high, low, 256 * 1024)?;
        {
            let mut i = self.inner(py)?;
            i.read_high = hi;
            i.read_low = lo;
        }
        self.control_ssl_reading(py)
    }

    fn get_read_buffer_limits(&self, py: Python<'_>) -> PyResult<(usize, usize)> {
        let i = self.inner(py)?;
        Ok((i.read_low, i.read_high))
    }

    fn get_read_buffer_size(&self, py: Python<'_>) -> PyResult<usize> {
        self.engine.incoming_pending(py)
    }

    fn _append_backlog(&self, py: Python<'_>, data: Bound<'_, PyBytes>) -> PyResult<()> {
        let mut i = self.inner(py)?;
        i.backlog_size += data.len()?;
        i.backlog.push_back(data.unbind());
        Ok(())
    }

    #[getter]
    fn _app_writing_paused(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.inner(py)?.app_writing_paused)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        visit.call(&self.lp)?;
        self.engine.traverse(&visit)?;
        if let Some(i) = self.inner.try_lock(py) {
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

    fn __clear__(&self, py: Python<'_>) {
        let taken = self.inner.try_lock(py).map(|mut i| {
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
    /// The ALPN protocol the handshake chose (None: none, or not yet).
    pub fn alpn(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.engine.alpn(py)
    }

    #[allow(clippy::too_many_arguments)]
    fn with_engine(
        py: Python<'_>,
        lp: &Bound<'_, LoopCore>,
        engine: Engine,
        app_protocol: Py<PyAny>,
        app_buffered: bool,
        waiter: Option<Py<PyAny>>,
        (handshake_timeout, shutdown_timeout): (Py<PyAny>, Py<PyAny>),
        call_connection_made: bool,
    ) -> PyResult<Self> {
        let (read_high, read_low) = flow_limits(None, None, 256 * 1024)?;
        let (write_high, write_low) = flow_limits(None, None, 512 * 1024)?;
        let app_feed = crate::transport::native::recognise(app_protocol.bind(py));
        Ok(TlsCore {
            lp: lp.clone().unbind(),
            engine,
            errors: SslErrors::new(py)?,
            handshake_timeout,
            shutdown_timeout,
            inner: GilCell::new(Inner {
                state: State::Unwrapped,
                app_state: if call_connection_made { AppState::Init } else { AppState::Connected },
                raw: None,
                raw_core: None,
                app_transport: None,
                app_protocol: Some(app_protocol),
                app_buffered,
                app_feed,
                waiter,
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

    /// Bytes from the socket as a slice (`transport::native`: no bytes object, no Python
    /// call), for a TLS core that is a socket transport's protocol.
    pub fn feed(slf: &Bound<'_, Self>, data: &[u8]) -> PyResult<()> {
        slf.get().engine.feed_slice(slf.py(), data)?;
        Self::advance(slf)
    }

    /// After bytes came: the step the state calls for.
    fn advance(slf: &Bound<'_, Self>) -> PyResult<()> {
        match slf.get().state(slf.py())? {
            State::Handshake => Self::do_handshake(slf),
            State::Wrapped => Self::do_read(slf),
            State::Flushing => Self::do_flush(slf),
            State::Shutdown => Self::do_shutdown(slf),
            State::Unwrapped => Ok(()),
        }
    }

    fn start_shutdown_from_app(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        // The stdlib marks the transport closed first, then starts the shutdown (which
        // returns at once when one is under way).
        let this = slf.get();
        let state = this.state(py)?;
        if matches!(state, State::Flushing | State::Shutdown | State::Unwrapped) {
            return Ok(());
        }
        {
            let mut i = this.inner(py)?;
            i.closed = true;
        }
        if state == State::Handshake {
            return this.abort(slf.py(), slf.py().None());
        }
        Self::start_shutdown(slf)
    }
}
