//! The write path: an immediate write when nothing is queued, the queue flushed when the
//! descriptor is writable, and what a lost connection does with writes.

use super::*;

impl StreamCore {
    pub(super) fn write_ready(&self, py: Python<'_>) -> PyResult<()> {
        let result = {
            let mut inner = self.inner(py)?;
            if !inner.reg_write || inner.conn_lost > 0 && self.kind == Kind::Socket {
                return Ok(());
            }
            inner.wbuf.flush(py, self.fd, self.kind.sink())
        };
        if let Err(e) = result {
            let (dropped, waiter) = {
                let mut inner = self.inner(py)?;
                let dropped = inner.wbuf.clear();
                if self.kind != Kind::Socket {
                    inner.conn_lost += 1;
                }
                self.sync(py, &mut inner)?;
                (dropped, inner.empty_waiter.as_ref().map(|w| w.clone_ref(py)))
            };
            drop(dropped);
            let err = os_error(py, e);
            let exc = err.clone_ref(py).into_value(py);
            self.fatal(py, err, self.kind.write_error())?;
            if let Some(w) = waiter {
                crate::tasks::set_exception(w.bind(py), exc.bind(py))?;
            }
            return Ok(());
        }
        self.maybe_resume_protocol(py)?;
        let (drained, closing, eof, waiter) = {
            let mut inner = self.inner(py)?;
            let drained = inner.wbuf.is_empty();
            if drained {
                self.sync(py, &mut inner)?;
            }
            (drained, inner.closing, inner.eof, inner.empty_waiter.as_ref().map(|w| w.clone_ref(py)))
        };
        if !drained {
            return Ok(());
        }
        if let Some(w) = waiter {
            crate::tasks::set_result(w.bind(py), &py.None().into_bound(py))?;
        }
        if closing {
            let pending = {
                let mut inner = self.inner(py)?;
                self.schedule_connection_lost(py, &mut inner, py.None())?
            };
            // The stdlib calls connection_lost at once here, not on the next iteration.
            // (`_lose_connection_now` reports what it raises to the exception handler; an
            // error escaping readiness dispatch would only reach sys.unraisablehook.)
            if let Some((t, exc)) = pending {
                t.bind(py).call_method1(intern!(py, "_lose_connection_now"), (exc,))?;
            }
        } else if eof && self.kind == Kind::Socket {
            self.shutdown_write(py)?;
        }
        Ok(())
    }

    pub(super) fn shutdown_write(&self, py: Python<'_>) -> PyResult<()> {
        // SAFETY: plain syscall on our descriptor.
        if unsafe { libc::shutdown(self.fd, libc::SHUT_WR) } != 0 {
            return Err(os_error(py, io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Bytes of a bytes-like object, or the stdlib's error for anything else.
    pub(super) fn check_data(&self, data: &Bound<'_, PyAny>) -> PyResult<()> {
        if data.is_instance_of::<PyBytes>()
            || data.is_instance_of::<PyByteArray>()
            || data.is_instance_of::<PyMemoryView>()
        {
            return Ok(());
        }
        if self.kind == Kind::WritePipe {
            return Err(PyAssertionError::new_err(data.repr()?.to_string()));
        }
        let tname = data.get_type().name()?;
        Err(PyTypeError::new_err(format!("data argument must be a bytes-like object, not '{tname}'")))
    }

    /// Queue (or write at once) one chunk; the lock is held by the caller.
    pub(super) fn write_locked(
        &self,
        py: Python<'_>,
        inner: &mut Inner,
        data: &Bound<'_, PyAny>,
        try_now: bool,
    ) -> PyResult<After> {
        with_bytes(data, |bytes| self.write_bytes_locked(py, inner, bytes, data.cast::<PyBytes>().ok(), try_now))
    }

    /// Queue (or write at once) `bytes`; what cannot go out at once is queued by reference
    /// when `shared` (the bytes object holding them) is given, else copied.
    pub(super) fn write_bytes_locked(
        &self,
        py: Python<'_>,
        inner: &mut Inner,
        bytes: &[u8],
        shared: Option<&Bound<'_, PyBytes>>,
        try_now: bool,
    ) -> PyResult<After> {
        if bytes.is_empty() {
            return Ok(After::Nothing);
        }
        let mut sent = 0;
        if try_now && inner.wbuf.is_empty() {
            match write_once(self.fd, bytes, self.kind.sink()) {
                Ok(n) => sent = n,
                Err(e) => {
                    if self.kind != Kind::Socket {
                        inner.conn_lost += 1;
                    }
                    return Ok(After::Fatal(os_error(py, e), self.kind.write_error()));
                }
            }
            if sent == bytes.len() {
                return Ok(After::Nothing);
            }
        }
        match shared {
            Some(b) => inner.wbuf.push_shared(b.clone().unbind(), sent, bytes.len()),
            None => inner.wbuf.push_copy(&bytes[sent..]),
        }
        Ok(After::Nothing)
    }

    /// The stdlib's refusals of `write()`, checked before anything else.
    pub(super) fn write_checks(&self, py: Python<'_>) -> PyResult<()> {
        let inner = self.inner(py)?;
        if self.kind == Kind::Socket {
            if inner.eof {
                return Err(PyRuntimeError::new_err("Cannot call write() after write_eof()"));
            }
            if inner.empty_waiter.is_some() {
                return Err(PyRuntimeError::new_err("unable to write; sendfile is in progress"));
            }
        }
        Ok(())
    }

    /// `write()` of non-empty data: `queue` writes or queues it with the lock held.
    pub(super) fn write_with(&self, py: Python<'_>, queue: impl FnOnce(&mut Inner) -> PyResult<After>) -> PyResult<()> {
        self.write_checks(py)?;
        let after = {
            let mut inner = self.inner(py)?;
            if self.swallow_write(py, &mut inner)? {
                return Ok(());
            }
            let after = queue(&mut inner)?;
            self.sync(py, &mut inner)?;
            after
        };
        self.after(py, after)?;
        self.maybe_pause_protocol(py)
    }

    /// `write()` of bytes a native protocol holds (the HTTP server's responses): written at
    /// once when nothing is queued, queued otherwise (by reference when `shared`, the bytes
    /// object holding them, is given, else copied); no Python call. Writes held for the end
    /// of the iteration go out with these, in one vectored write.
    pub fn write_now(&self, py: Python<'_>, data: &[u8], shared: Option<&Bound<'_, PyBytes>>) -> PyResult<()> {
        if data.is_empty() {
            return self.write_checks(py);
        }
        if !self.inner(py)?.deferred {
            return self.write_with(py, |inner| self.write_bytes_locked(py, inner, data, shared, true));
        }
        // Not `write_with`: it would weigh flow control before the held bytes are written,
        // and pause the protocol for bytes the kernel is about to take.
        self.write_checks(py)?;
        {
            let mut inner = self.inner(py)?;
            if self.swallow_write(py, &mut inner)? {
                return Ok(());
            }
            self.write_bytes_locked(py, &mut inner, data, shared, false)?;
        }
        self.flush_deferred(py)
    }

    /// Queue bytes a native protocol holds without a syscall: the loop writes them at the
    /// end of its iteration (`flush_deferred_ready`), together with whatever the same
    /// iteration writes after them. The HTTP server holds its responses so. Over the
    /// high-water mark it writes at once (flow control then sees what the kernel did not
    /// take), and so it does once the iteration holds more than the loop's `HOLD_BUDGET`.
    pub fn write_deferred(slf: &Bound<'_, Self>, data: Held<'_>, hold: Hold) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        this.write_checks(py)?;
        let len = data.as_bytes().len();
        if len == 0 {
            return Ok(());
        }
        let (schedule, deferred, mut over) = {
            let mut inner = this.inner(py)?;
            if this.swallow_write(py, &mut inner)? {
                return Ok(());
            }
            let schedule = inner.wbuf.is_empty();
            if schedule {
                inner.deferred = true;
            }
            match data {
                Held::Owned(v) => inner.wbuf.push_vec(v),
                Held::Shared(b) => inner.wbuf.push_shared(b.unbind(), 0, len),
            }
            let limit = if hold == Hold::IfSmall { inner.high.min(HOLD_SMALL) } else { inner.high };
            (schedule, inner.deferred, inner.wbuf.len() > limit)
        };
        if deferred {
            let core = schedule.then(|| slf.clone().unbind());
            over |= this.lp.get().hold_writes(py, core, len)?;
        }
        match (deferred, over) {
            (true, true) => this.flush_deferred(py),
            (true, false) => Ok(()),
            // Queued behind bytes that wait for the descriptor: as `write()` would be.
            (false, _) => this.maybe_pause_protocol(py),
        }
    }

    /// Queue `len` bytes of `file` from `offset` behind everything written before, to go
    /// out with `sendfile` as the socket takes them: a native protocol's file body (the HTTP
    /// server's static files), never copied through user space. Bytes held for the end of
    /// the iteration are written first. Flow control counts the file's bytes as queued.
    pub fn write_file(&self, py: Python<'_>, file: std::fs::File, offset: u64, len: u64) -> PyResult<()> {
        self.write_checks(py)?;
        if len == 0 {
            return Ok(());
        }
        self.flush_deferred(py)?;
        {
            let mut inner = self.inner(py)?;
            if self.swallow_write(py, &mut inner)? {
                return Ok(());
            }
            inner.wbuf.push_file(file, offset, len);
        }
        self.flush_now(py)
    }

    /// The loop's end-of-iteration flush, in the transport's context as readiness is.
    pub fn flush_deferred_ready(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let ctx = match this.inner(py)?.context.as_ref() {
            Some(c) => c.clone_ref(py),
            None => return Ok(()),
        };
        in_context(py, &ctx, || this.flush_deferred(py))
    }

    /// Write held bytes now (see `write_deferred`).
    pub(super) fn flush_deferred(&self, py: Python<'_>) -> PyResult<()> {
        let dropped = {
            let mut inner = self.inner(py)?;
            if !inner.deferred {
                return Ok(());
            }
            inner.deferred = false;
            self.lp.get().release_held(py, inner.wbuf.len())?;
            if !(inner.conn_lost > 0 || inner.lost_scheduled) {
                drop(inner);
                return self.flush_now(py);
            }
            inner.wbuf.clear()
        };
        drop(dropped);
        Ok(())
    }

    /// Write what is queued as far as the descriptor takes it, watch for the rest.
    pub(super) fn flush_now(&self, py: Python<'_>) -> PyResult<()> {
        let flushed = {
            let mut inner = self.inner(py)?;
            let r = inner.wbuf.flush(py, self.fd, self.kind.sink());
            if r.is_ok() {
                self.sync(py, &mut inner)?;
            } else {
                let dropped = inner.wbuf.clear();
                if self.kind != Kind::Socket {
                    inner.conn_lost += 1;
                }
                drop(inner);
                drop(dropped);
            }
            r
        };
        if let Err(e) = flushed {
            return self.fatal(py, os_error(py, e), self.kind.write_error());
        }
        // Writes held for the end of the iteration may have paused the protocol: no
        // writability edge would resume it once the kernel took them all.
        self.maybe_resume_protocol(py)?;
        self.maybe_pause_protocol(py)
    }

    /// A lost or closing connection swallows writes, warning after a few (the stdlib's rule).
    pub(super) fn swallow_write(&self, py: Python<'_>, inner: &mut Inner) -> PyResult<bool> {
        let lost = match self.kind {
            // A closing socket still takes writes while its queue drains (the stdlib's
            // rule), but not once the connection is lost: its descriptor is closed then,
            // and the number may already belong to another file.
            Kind::Socket => inner.conn_lost > 0 || inner.lost_scheduled,
            _ => inner.conn_lost > 0 || inner.closing,
        };
        if !lost {
            return Ok(false);
        }
        if inner.conn_lost >= LOG_THRESHOLD_FOR_CONNLOST_WRITES {
            let msg = match self.kind {
                Kind::Socket => "socket.send() raised exception.",
                _ => "pipe closed by peer or os.write(pipe, data) raised exception.",
            };
            py.import("asyncio.log")?.getattr("logger")?.call_method1("warning", (msg,))?;
        }
        inner.conn_lost += 1;
        Ok(true)
    }
}
