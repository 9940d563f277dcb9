//! The TLS state machine: writing (application data into the SSL object and out to the
//! socket transport) and closing (flush, close_notify, abort).

use super::*;

impl TlsCore {
    // -- writing --------------------------------------------------------------------------

    pub(super) fn write_appdata(&self, py: Python<'_>, items: Vec<Bound<'_, PyAny>>) -> PyResult<()> {
        {
            let mut inner = self.inner(py)?;
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
                        // Its raw bytes, whatever the item format (an `array('i')` view
                        // is four bytes an item, not one) or layout.
                        let obj = e.into_inner();
                        PyMemoryView::from(&obj)?.call_method0(intern!(py, "tobytes"))?.cast_into::<PyBytes>()?
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

    /// Application data from a native protocol (`transport::Writer`), encrypted at once
    /// when nothing waits before it (an owned buffer without a bytes object made from it, a
    /// bytes object as it is), otherwise queued as `write` would. `hold`: the records are
    /// held for the end of the loop iteration as the protocol's own writes would be over a
    /// plain socket (`StreamCore::write_deferred`).
    pub fn write_held(&self, py: Python<'_>, mut data: Held<'_>, hold: Option<Hold>) -> PyResult<()> {
        if data.as_bytes().is_empty() {
            return Ok(());
        }
        let direct = self.inner(py).map(|i| i.state == State::Wrapped && i.backlog.is_empty())?;
        if !direct {
            let item = match &data {
                Held::Owned(v) => PyBytes::new(py, v),
                Held::Shared(b) => b.clone(),
            };
            return self.write_appdata(py, vec![item.into_any()]);
        }
        let r = self.engine.write(py, &mut data, &self.errors).and_then(|count| {
            // A memory BIO and rustls take everything: the rest is queued only in case not.
            let (count, bytes) = (count.unwrap_or(0), data.as_bytes());
            if count < bytes.len() {
                let mut inner = self.inner(py)?;
                inner.backlog_size += bytes.len() - count;
                inner.backlog.push_back(PyBytes::new(py, &bytes[count..]).unbind());
            }
            self.send_outgoing(py, hold)
        });
        match r {
            Err(e) => self.fatal(py, e, "Fatal error on SSL protocol"),
            Ok(()) => Ok(()),
        }
    }

    pub(super) fn do_write(&self, py: Python<'_>) -> PyResult<()> {
        loop {
            let Some(data) = self.inner(py)?.backlog.front().map(|d| d.clone_ref(py)) else { break };
            let len = data.bind(py).len()?;
            let Some(count) = self.engine.write(py, &mut Held::Shared(data.bind(py).clone()), &self.errors)? else {
                break;
            };
            let mut inner = self.inner(py)?;
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
    pub(super) fn process_outgoing(&self, py: Python<'_>) -> PyResult<()> {
        self.send_outgoing(py, None)
    }

    /// `process_outgoing`, the records held for the end of the iteration when `hold` says
    /// so and the transport under us is swordfish's: each write of a held record would
    /// otherwise wake the client on its own (measured in docs/design.md).
    fn send_outgoing(&self, py: Python<'_>, hold: Option<Hold>) -> PyResult<()> {
        let (paused, raw, raw_core) = {
            let i = self.inner(py)?;
            (
                i.ssl_writing_paused,
                i.raw.as_ref().map(|r| r.clone_ref(py)),
                i.raw_core.as_ref().map(|r| r.clone_ref(py)),
            )
        };
        if !paused {
            if let Some(data) = self.engine.take_outgoing(py)? {
                match (raw_core, raw, hold, data) {
                    (Some(core), _, Some(hold), data) => StreamCore::write_deferred(core.bind(py), data, hold)?,
                    (Some(core), _, None, Held::Owned(v)) => core.get().write_now(py, &v, None)?,
                    (Some(core), _, None, Held::Shared(b)) => core.get().write_now(py, b.as_bytes(), Some(&b))?,
                    (None, Some(raw), _, data) => {
                        let data = match data {
                            Held::Owned(v) => PyBytes::new(py, &v),
                            Held::Shared(b) => b,
                        };
                        raw.bind(py).call_method1(intern!(py, "write"), (data,))?;
                    }
                    _ => {}
                }
            }
        }
        self.control_app_writing(py)
    }

    pub(super) fn write_buffer_size(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.engine.outgoing_pending(py)? + self.inner(py)?.backlog_size)
    }

    pub(super) fn control_app_writing(&self, py: Python<'_>) -> PyResult<()> {
        let size = self.write_buffer_size(py)?;
        let action = {
            let mut inner = self.inner(py)?;
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

    pub(super) fn start_shutdown(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let state = {
            let mut inner = this.inner(py)?;
            if matches!(inner.state, State::Flushing | State::Shutdown | State::Unwrapped) {
                return Ok(());
            }
            inner.closed = true;
            inner.state
        };
        if state == State::Handshake {
            return this.abort(py, py.None());
        }
        this.set_state(py, State::Flushing)?;
        let timer = this.call_later(py, &this.shutdown_timeout, slf, "_check_shutdown_timeout")?;
        this.inner(py)?.shutdown_timer = Some(timer);
        Self::do_flush(slf)
    }

    pub(super) fn do_flush(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::do_read(slf)?;
        slf.get().set_state(slf.py(), State::Shutdown)?;
        Self::do_shutdown(slf)
    }

    pub(super) fn do_shutdown(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let eof = this.inner(py)?.eof_received;
        if !eof {
            match this.engine.shutdown(py, &this.errors) {
                Ok(Step::Done) => {}
                Ok(Step::Again) => return this.process_outgoing(py),
                Err(e) if this.is_ssl_error(py, &e) => return this.on_shutdown_complete(py, Some(e)),
                Err(e) => return Err(e),
            }
        }
        this.process_outgoing(py)?;
        this.call_eof_received(py)?;
        this.on_shutdown_complete(py, None)
    }

    pub(super) fn on_shutdown_complete(&self, py: Python<'_>, failure: Option<PyErr>) -> PyResult<()> {
        let timer = self.inner(py)?.shutdown_timer.take();
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

    pub(super) fn abort(&self, py: Python<'_>, exc: Py<PyAny>) -> PyResult<()> {
        self.set_state(py, State::Unwrapped)?;
        if let Some(raw) = self.raw(py) {
            raw.bind(py).call_method1(intern!(py, "_force_close"), (exc,))?;
        }
        Ok(())
    }

    pub(super) fn check_data(data: &Bound<'_, PyAny>) -> PyResult<()> {
        if data.is_instance_of::<PyBytes>()
            || data.is_instance_of::<PyByteArray>()
            || data.is_instance_of::<PyMemoryView>()
        {
            return Ok(());
        }
        Err(PyTypeError::new_err(format!("data: expecting a bytes-like instance, got {}", data.get_type().name()?)))
    }
}
