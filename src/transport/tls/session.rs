//! The TLS state machine: handshake and reading (application data out of the SSL object).

use super::*;

impl TlsCore {
    // -- handshake ------------------------------------------------------------------------

    pub(super) fn start_handshake(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        this.set_state(py, State::Handshake)?;
        let timer = this.call_later(py, &this.handshake_timeout, slf, "_check_handshake_timeout")?;
        this.inner(py)?.handshake_timer = Some(timer);
        Self::do_handshake(slf)
    }

    pub(super) fn do_handshake(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        match this.engine.handshake(py, &this.errors) {
            Ok(Step::Done) => Self::on_handshake_complete(slf, None),
            Ok(Step::Again) => this.process_outgoing(py),
            Err(e) if this.is_ssl_error(py, &e) => Self::on_handshake_complete(slf, Some(e)),
            Err(e) => Err(e),
        }
    }

    pub(super) fn on_handshake_complete(slf: &Bound<'_, Self>, failure: Option<PyErr>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let timer = this.inner(py)?.handshake_timer.take();
        Self::cancel_timer(py, timer)?;
        let outcome = match failure {
            Some(e) => Err(e),
            None => {
                this.set_state(py, State::Wrapped)?;
                this.engine.peercert(py)
            }
        };
        let peercert = match outcome {
            Ok(p) => p,
            Err(e) => {
                if this.engine.sslobj().is_none() {
                    // rustls's alert (no_application_protocol, bad_certificate, ...) goes
                    // out before the socket closes, so the client learns why. The stdlib's
                    // transports, which the OpenSSL engine follows, close without it.
                    this.process_outgoing(py)?;
                }
                this.set_state(py, State::Unwrapped)?;
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
            let mut inner = this.inner(py)?;
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

    pub(super) fn do_read(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let (state, paused, buffered) = {
            let i = this.inner(py)?;
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
                if this.inner(py)?.backlog.is_empty() {
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

    pub(super) fn read_copied(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let (data, close_notify) = this.engine.read(py, &this.errors)?;
        if let Some(data) = data {
            this.deliver(py, data)?;
        }
        if close_notify {
            this.call_eof_received(py)?;
            Self::start_shutdown(slf)?;
        }
        Ok(())
    }

    /// Decrypted data to the application's protocol: as a slice to a native one, else to
    /// its `data_received`.
    fn deliver(&self, py: Python<'_>, data: Plain<'_>) -> PyResult<()> {
        let (protocol, feed) = {
            let Some(i) = self.inner.try_lock(py) else { return Ok(()) };
            (i.app_protocol.as_ref().map(|p| p.clone_ref(py)), i.app_feed)
        };
        let Some(p) = protocol else { return Ok(()) };
        match (feed, data) {
            (Some(feed), data) => data.with_slice(|s| feed(p.bind(py), s)),
            (None, Plain::Object(o)) => p.bind(py).call_method1(intern!(py, "data_received"), (o,)).map(drop),
            (None, Plain::Owned(v)) => {
                p.bind(py).call_method1(intern!(py, "data_received"), (PyBytes::new(py, &v),)).map(drop)
            }
        }
    }

    pub(super) fn read_buffered(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let Some(p) = this.app_protocol(py) else { return Ok(()) };
        let Some(ssl) = this.engine.c_ssl() else { return Self::read_buffered_plain(slf, p.bind(py)) };
        let ssl = ssl.bind(py);
        let pending = this.engine.incoming_pending(py)?;
        let buf = p.bind(py).call_method1(intern!(py, "get_buffer"), (pending,))?;
        let wants = buf.len()?;
        if wants == 0 {
            return Err(pyo3::exceptions::PyRuntimeError::new_err("get_buffer() returned an empty buffer"));
        }
        // One `read` gives at most one TLS record: fill the buffer from as many as have
        // arrived. None: nothing more is decrypted yet; Some(0): the peer's close_notify.
        let read = |n: usize, into: &Bound<'_, PyAny>| -> PyResult<Option<usize>> {
            match ssl.call_method1(intern!(py, "read"), (n, into)) {
                Ok(got) => Ok(Some(got.extract()?)),
                Err(e) if this.errors.is_again(py, &e) => Ok(None),
                Err(e) => Err(e),
            }
        };
        let (mut filled, mut eof) = (0, false);
        match read(wants, &buf)? {
            None => {}
            Some(0) => eof = true,
            Some(n) => {
                filled = n;
                if filled < wants {
                    let view = PyMemoryView::from(&buf)?;
                    while filled < wants {
                        let rest = view.get_item(PySlice::new(py, filled as isize, wants as isize, 1))?;
                        match read(wants - filled, &rest)? {
                            None => break,
                            Some(0) => {
                                eof = true;
                                break;
                            }
                            Some(n) => filled += n,
                        }
                    }
                }
                if filled == wants {
                    // The buffer is full: more may be decrypted already; read it next.
                    let cb = slf.getattr(intern!(py, "_do_read"))?;
                    LoopCore::call_soon_internal_noarg(this.lp.bind(py), &cb)?;
                }
            }
        }
        if filled > 0 {
            p.bind(py).call_method1(intern!(py, "buffer_updated"), (filled,))?;
        }
        if eof {
            this.call_eof_received(py)?;
            Self::start_shutdown(slf)?;
        }
        Ok(())
    }

    /// `read_buffered` where the record layer decrypts ahead (rustls): what it holds is
    /// copied into as many of the protocol's buffers as it takes, as the stdlib's transports
    /// fill a `BufferedProtocol` from a bytes object.
    fn read_buffered_plain(slf: &Bound<'_, Self>, p: &Bound<'_, PyAny>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let (data, close_notify) = this.engine.read(py, &this.errors)?;
        if let Some(data) = data {
            data.with_slice(|mut rest| {
                while !rest.is_empty() {
                    let buf = p.call_method1(intern!(py, "get_buffer"), (rest.len(),))?;
                    let view = crate::transport::pybuf::View::writable(&buf)?;
                    let n = view.len().min(rest.len());
                    if n == 0 {
                        return Err(pyo3::exceptions::PyRuntimeError::new_err("get_buffer() returned an empty buffer"));
                    }
                    // SAFETY: the view is writable, C-contiguous and at least `n` bytes long,
                    // and `rest` is Rust memory it cannot overlap.
                    unsafe { std::ptr::copy_nonoverlapping(rest.as_ptr(), view.as_mut_ptr().cast::<u8>(), n) };
                    drop(view);
                    p.call_method1(intern!(py, "buffer_updated"), (n,))?;
                    rest = &rest[n..];
                }
                Ok(())
            })?;
        }
        if close_notify {
            this.call_eof_received(py)?;
            Self::start_shutdown(slf)?;
        }
        Ok(())
    }

    pub(super) fn call_eof_received(&self, py: Python<'_>) -> PyResult<()> {
        let call = {
            let mut inner = self.inner(py)?;
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

    pub(super) fn control_ssl_reading(&self, py: Python<'_>) -> PyResult<()> {
        let size = self.engine.incoming_pending(py)?;
        let action = {
            let mut inner = self.inner(py)?;
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
}
