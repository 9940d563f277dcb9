//! What Python sees of `StreamCore`: the transport methods the Python class delegates to.

use super::*;

#[pymethods]
impl StreamCore {
    /// `kind`: "socket", "read-pipe" or "write-pipe". Registers the descriptor with the loop
    /// (as the stdlib's transport table does) without watching it yet: `_start()` does.
    #[new]
    fn py_new(py: Python<'_>, lp: &Bound<'_, LoopCore>, fd: RawFd, kind: &str, transport: Py<PyAny>) -> PyResult<Self> {
        let kind = match kind {
            "socket" => Kind::Socket,
            "read-pipe" => Kind::ReadPipe,
            "write-pipe" => Kind::WritePipe,
            other => return Err(PyValueError::new_err(format!("unknown transport kind {other:?}"))),
        };
        if fd < 0 {
            return Err(PyValueError::new_err(format!("Invalid file descriptor: {fd}")));
        }
        // SAFETY: returns a new reference or NULL with an exception set.
        let context = copy_context(py)?;
        Ok(StreamCore {
            fd,
            kind,
            lp: lp.clone().unbind(),
            large_reads: AtomicBool::new(false),
            inner: GilCell::new(Inner {
                transport: Some(transport),
                protocol: None,
                native: None,
                buffered: false,
                context: Some(context),
                attached: false,
                started: false,
                paused: false,
                closing: false,
                eof: false,
                conn_lost: 0,
                lost_scheduled: false,
                protocol_paused: false,
                high: DEFAULT_HIGH_WATER,
                low: DEFAULT_HIGH_WATER / 4,
                wbuf: WriteBuffer::default(),
                deferred: false,
                empty_waiter: None,
                reg_read: false,
                reg_write: false,
            }),
        })
    }

    /// Join the loop's descriptor table (the loop must not be closed).
    fn _attach(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        this.lp.get().io_attach(py, this.fd, IoTarget::Stream(slf.clone().unbind()))?;
        this.inner(py)?.attached = true;
        Ok(())
    }

    /// Start watching the descriptor for reads (scheduled right after `connection_made`).
    #[pyo3(signature = (watch_reads=true))]
    fn _start(&self, py: Python<'_>, watch_reads: bool) -> PyResult<()> {
        let mut inner = self.inner(py)?;
        inner.started = watch_reads;
        self.sync(py, &mut inner)
    }

    /// Lend the descriptor to other code (`loop.sendfile`): leave the loop's table and stop
    /// watching, keeping every other state; `_reclaim()` undoes it.
    fn _lend(&self, py: Python<'_>) -> PyResult<()> {
        let mut inner = self.inner(py)?;
        if inner.attached {
            inner.attached = false;
            inner.reg_read = false;
            inner.reg_write = false;
            self.lp.get().io_detach(py, self.fd)?;
        }
        Ok(())
    }

    fn _reclaim(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        if this.inner(py)?.attached || this.inner(py)?.lost_scheduled {
            return Ok(());
        }
        this.lp.get().io_attach(py, this.fd, IoTarget::Stream(slf.clone().unbind()))?;
        let mut inner = this.inner(py)?;
        inner.attached = true;
        this.sync(py, &mut inner)
    }

    /// Leave the loop's descriptor table: the descriptor is about to be closed.
    fn _detach(&self, py: Python<'_>) -> PyResult<()> {
        let (protocol, transport, waiter) = {
            let mut inner = self.inner(py)?;
            if inner.attached {
                inner.attached = false;
                inner.reg_read = false;
                inner.reg_write = false;
                self.lp.get().io_detach(py, self.fd)?;
            }
            (inner.protocol.take(), inner.transport.take(), inner.empty_waiter.take())
        };
        drop((protocol, transport, waiter));
        Ok(())
    }

    fn set_protocol(&self, py: Python<'_>, protocol: Py<PyAny>, buffered: bool) -> PyResult<()> {
        let old = {
            let mut inner = self.inner(py)?;
            inner.buffered = buffered && self.kind == Kind::Socket;
            inner.native = match self.kind {
                Kind::Socket => crate::transport::native::recognise(protocol.bind(py)),
                _ => None,
            };
            inner.protocol.replace(protocol)
        };
        drop(old);
        Ok(())
    }

    fn get_protocol(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.inner(py)?.protocol.as_ref().map_or_else(|| py.None(), |p| p.clone_ref(py)))
    }

    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_data(data)?;
        if data.len()? == 0 {
            return self.write_checks(py);
        }
        self.write_with(py, |inner| self.write_locked(py, inner, data, true))
    }

    /// Queue every chunk, then write them with one vectored write.
    fn writelines(&self, py: Python<'_>, list_of_data: &Bound<'_, PyAny>) -> PyResult<()> {
        let items: Vec<Bound<'_, PyAny>> = list_of_data.try_iter()?.collect::<PyResult<_>>()?;
        for item in &items {
            self.check_data(item)?;
        }
        {
            let mut inner = self.inner(py)?;
            if self.kind == Kind::Socket {
                // Before 3.12 the stdlib's writelines() is write(b"".join(...)): its messages.
                let own = py.version_info() >= (3, 12);
                if inner.eof {
                    return Err(PyRuntimeError::new_err(if own {
                        "Cannot call writelines() after write_eof()"
                    } else {
                        "Cannot call write() after write_eof()"
                    }));
                }
                if inner.empty_waiter.is_some() {
                    return Err(PyRuntimeError::new_err(if own {
                        "unable to writelines; sendfile is in progress"
                    } else {
                        "unable to write; sendfile is in progress"
                    }));
                }
            }
            if items.is_empty() {
                return Ok(());
            }
            if self.swallow_write(py, &mut inner)? {
                return Ok(());
            }
            let was_empty = inner.wbuf.is_empty();
            for item in &items {
                self.write_locked(py, &mut inner, item, false)?;
            }
            if !was_empty {
                drop(inner);
                return self.maybe_pause_protocol(py);
            }
            // Nothing was queued before: write now, as write() would.
        }
        self.flush_now(py)
    }

    fn write_eof(&self, py: Python<'_>) -> PyResult<()> {
        if self.kind != Kind::Socket {
            return self.close_impl(py);
        }
        self.flush_deferred(py)?;
        let shutdown_now = {
            let mut inner = self.inner(py)?;
            if inner.closing || inner.eof {
                return Ok(());
            }
            inner.eof = true;
            inner.wbuf.is_empty()
        };
        if shutdown_now {
            self.shutdown_write(py)?;
        }
        Ok(())
    }

    fn can_write_eof(&self) -> bool {
        true
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.close_impl(py)
    }

    /// Close at once, dropping what is queued: `abort()` and fatal errors.
    #[pyo3(signature = (exc=None))]
    fn _force_close(&self, py: Python<'_>, exc: Option<Py<PyAny>>) -> PyResult<()> {
        let exc = exc.unwrap_or_else(|| py.None());
        if self.kind != Kind::Socket {
            return self.close_pipe(py, exc);
        }
        let (pending, dropped) = {
            let mut inner = self.inner(py)?;
            if inner.conn_lost > 0 {
                return Ok(());
            }
            let dropped = inner.wbuf.clear();
            inner.deferred = false;
            inner.closing = true;
            inner.conn_lost += 1;
            (self.schedule_connection_lost(py, &mut inner, exc)?, dropped)
        };
        drop(dropped);
        self.call_soon_lost(py, pending)
    }

    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self._force_close(py, None)
    }

    fn is_closing(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.inner(py)?.closing)
    }

    fn is_reading(&self, py: Python<'_>) -> PyResult<bool> {
        let inner = self.inner(py)?;
        Ok(!inner.paused && !inner.closing)
    }

    fn pause_reading(&self, py: Python<'_>) -> PyResult<()> {
        {
            let mut inner = self.inner(py)?;
            if inner.closing || inner.paused {
                return Ok(());
            }
            inner.paused = true;
            self.sync(py, &mut inner)?;
        }
        self.debug_log(py, "%r pauses reading")
    }

    /// The stdlib's debug-mode log lines (only in debug mode: a Python call).
    fn debug_log(&self, py: Python<'_>, fmt: &str) -> PyResult<()> {
        if !self.lp.get().debug() {
            return Ok(());
        }
        match self.transport_obj(py) {
            Some(t) => {
                t.bind(py).call_method1(intern!(py, "_debug_log"), (fmt,))?;
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn resume_reading(&self, py: Python<'_>) -> PyResult<()> {
        let mut inner = self.inner(py)?;
        if inner.closing || !inner.paused {
            return Ok(());
        }
        inner.paused = false;
        // Like the stdlib, resuming adds the reader back even after an end-of-file that
        // eof_received() kept open (which stopped reading): the EOF is reported again.
        inner.started = true;
        self.sync(py, &mut inner)?;
        drop(inner);
        self.debug_log(py, "%r resumes reading")
    }

    #[pyo3(signature = (high=None, low=None))]
    fn set_write_buffer_limits(
        &self,
        py: Python<'_>,
        high: Option<Bound<'_, PyAny>>,
        low: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let high_v: Option<i64> = high.as_ref().map(|h| h.extract()).transpose()?;
        let low_v: Option<i64> = low.as_ref().map(|l| l.extract()).transpose()?;
        let (high, low) = crate::transport::flow_limits(high_v, low_v, DEFAULT_HIGH_WATER as i64)?;
        {
            let mut inner = self.inner(py)?;
            inner.high = high;
            inner.low = low;
        }
        self.maybe_pause_protocol(py)
    }

    fn get_write_buffer_limits(&self, py: Python<'_>) -> PyResult<(usize, usize)> {
        let inner = self.inner(py)?;
        Ok((inner.low, inner.high))
    }

    fn get_write_buffer_size(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.inner(py)?.wbuf.len())
    }

    /// (watching for reads, watching for writes, queued bytes): for `repr()`.
    fn _state(&self, py: Python<'_>) -> PyResult<(bool, bool, usize)> {
        let inner = self.inner(py)?;
        Ok((inner.reg_read, inner.reg_write, inner.wbuf.len()))
    }

    #[getter]
    fn _protocol_paused(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.inner(py)?.protocol_paused)
    }

    #[getter]
    fn _conn_lost(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.inner(py)?.conn_lost)
    }

    #[getter]
    fn _closed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.inner(py)?.lost_scheduled)
    }

    /// For `loop.sendfile`: a future done once the write queue is empty; writes are refused
    /// until `_reset_empty_waiter()`.
    fn _make_empty_waiter(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.flush_deferred(py)?;
        let empty = {
            let inner = self.inner(py)?;
            if inner.empty_waiter.is_some() {
                return Err(PyRuntimeError::new_err("Empty waiter is already set"));
            }
            inner.wbuf.is_empty()
        };
        let waiter = self.lp.bind(py).call_method0(intern!(py, "create_future"))?;
        if empty {
            crate::tasks::set_result(&waiter, &py.None().into_bound(py))?;
        }
        self.inner(py)?.empty_waiter = Some(waiter.clone().unbind());
        Ok(waiter.unbind())
    }

    fn _reset_empty_waiter(&self, py: Python<'_>) -> PyResult<()> {
        let old = self.inner(py)?.empty_waiter.take();
        drop(old);
        Ok(())
    }

    #[getter]
    fn _transport_repr(&self, py: Python<'_>) -> PyResult<String> {
        crate::transport::describe_transport(py, self.transport_obj(py), self.fd)
    }

    fn fileno(&self) -> RawFd {
        self.fd
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        visit.call(&self.lp)?;
        if let Some(inner) = self.inner.try_lock(py) {
            visit.call(&inner.transport)?;
            visit.call(&inner.protocol)?;
            visit.call(&inner.context)?;
            visit.call(&inner.empty_waiter)?;
        }
        Ok(())
    }

    fn __clear__(&self, py: Python<'_>) {
        let taken = self
            .inner
            .try_lock(py)
            .map(|mut i| (i.transport.take(), i.protocol.take(), i.context.take(), i.empty_waiter.take()));
        drop(taken);
    }
}
