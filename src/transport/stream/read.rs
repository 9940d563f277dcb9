//! The read path: bytes sized to what the kernel holds, or the BufferedProtocol's buffer;
//! end-of-file and the write pipe's "other end went away".

use super::*;
use crate::transport::native::Feed;

impl StreamCore {
    /// `read_closed`: the event said the peer closed, so end-of-file (or an error) may be
    /// pending behind the data; a read that returns data then asks for a re-arm.
    pub(super) fn read_ready(&self, py: Python<'_>, read_closed: bool) -> PyResult<()> {
        let buffered = {
            let inner = self.inner(py)?;
            if !inner.reg_read || inner.conn_lost > 0 && self.kind == Kind::Socket {
                return Ok(());
            }
            inner.buffered
        };
        match self.kind {
            Kind::WritePipe => self.write_pipe_peer_closed(py),
            _ if buffered => self.read_into_buffer(py, read_closed),
            _ => self.read_bytes(py, read_closed),
        }
    }

    pub(super) fn read_bytes(&self, py: Python<'_>, read_closed: bool) -> PyResult<()> {
        let native = self.inner.try_lock(py).and_then(|i| Some((i.native?, i.protocol.as_ref()?.clone_ref(py))));
        if let Some((feed, protocol)) = native {
            return self.read_native(py, feed, protocol.bind(py), read_closed);
        }
        // Small messages are read through the loop's kept buffer and copied out (no
        // allocation of the maximum read size, no FIONREAD call); after a large read the next
        // one is sized to what the kernel holds, so large messages are read in one piece
        // without a copy and without a fresh 256 KiB buffer (an mmap) each time.
        let large = self.large_reads.load(Ordering::Relaxed);
        let (fd, kind) = (self.fd, self.kind);
        // SAFETY: the reads below write at most `len` bytes at `buf`, which the pybuf
        // functions provide (a bytes object's storage of at least that size).
        let read = |buf: *mut libc::c_void, len: usize| unsafe {
            match kind {
                Kind::Socket => libc::recv(fd, buf, len, 0),
                _ => libc::read(fd, buf, len),
            }
        };
        // `full`: a read of this many bytes may have left more behind.
        let (got, full) = if large {
            let pending = bytes_pending(fd);
            let size = match pending {
                0 => FALLBACK_READ,
                n => n.min(MAX_READ),
            };
            // Reading all of a known amount empties the stream.
            let full = if pending == 0 || pending > MAX_READ { size } else { usize::MAX };
            (read_sized(py, size, read)?, full)
        } else {
            (read_into_bytes(self.lp.get(), py, MAX_READ, read)?, MAX_READ)
        };
        let obj = match got {
            Ok(obj) => obj,
            Err(err) => return self.read_failed(py, err),
        };
        let n = obj.as_bytes().len();
        if n == 0 {
            return self.on_eof(py);
        }
        // A read the kept buffer was handed over to counts as large.
        self.large_reads.store(n > COPY_OUT_LIMIT, Ordering::Relaxed);
        if read_closed || n == full {
            // The kernel may hold more (or the end-of-file): no new edge would come. A
            // shorter read emptied the stream (epoll(7)), so the next data raises an event.
            self.lp.get().io_rearm(py, self.fd)?;
        }
        match self.call_protocol(py, intern!(py, "data_received"), (obj,)) {
            Some(Err(e)) if self.kind == Kind::ReadPipe => self.report_callback_error(py, e),
            Some(Err(e)) => self.fatal(py, e, "Fatal error: protocol.data_received() call failed."),
            _ => Ok(()),
        }
    }

    /// A native protocol takes bytes, not a bytes object: read into the loop's buffer and
    /// hand it the slice (no allocation, no FIONREAD, no Python-level call).
    fn read_native(&self, py: Python<'_>, feed: Feed, protocol: &Bound<'_, PyAny>, read_closed: bool) -> PyResult<()> {
        let fd = self.fd;
        // SAFETY: recv writes at most `len` bytes at `buf`, which read_into_slice provides.
        let recv = |buf: *mut libc::c_void, len: usize| unsafe { libc::recv(fd, buf, len, 0) };
        let got = read_into_slice(self.lp.get(), py, MAX_READ, recv, |data| {
            if data.is_empty() {
                return Ok(None);
            }
            if read_closed || data.len() == MAX_READ {
                // The kernel may hold more (or the end-of-file): no new edge would come.
                self.lp.get().io_rearm(py, fd)?;
            }
            Ok(Some(feed(protocol, data)))
        })?;
        match got {
            Err(err) => self.read_failed(py, err),
            Ok(Err(err)) => Err(err),
            Ok(Ok(None)) => self.on_eof(py),
            Ok(Ok(Some(Err(e)))) => self.fatal(py, e, "Fatal error: protocol.data_received() call failed."),
            Ok(Ok(Some(Ok(())))) => Ok(()),
        }
    }

    pub(super) fn read_failed(&self, py: Python<'_>, err: io::Error) -> PyResult<()> {
        if matches!(err.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) {
            return Ok(());
        }
        let msg = match self.kind {
            Kind::Socket => "Fatal read error on socket transport",
            _ => "Fatal read error on pipe transport",
        };
        self.fatal(py, os_error(py, err), msg)
    }

    /// A read pipe's `data_received` that raised is reported like a failed callback (the
    /// stdlib calls it without a guard); the transport stays open.
    pub(super) fn report_callback_error(&self, py: Python<'_>, err: PyErr) -> PyResult<()> {
        if is_exit(py, &err) {
            return Err(err);
        }
        let Some(t) = self.transport_obj(py) else { return Ok(()) };
        let exc = err.into_value(py);
        t.bind(py).call_method1(intern!(py, "_report_callback_error"), (exc,))?;
        Ok(())
    }

    pub(super) fn read_into_buffer(&self, py: Python<'_>, read_closed: bool) -> PyResult<()> {
        let buf = match self.call_protocol(py, intern!(py, "get_buffer"), (-1,)) {
            None => return Ok(()),
            Some(Ok(b)) => b,
            Some(Err(e)) => return self.fatal(py, e, "Fatal error: protocol.get_buffer() call failed."),
        };
        // The stdlib's order: len(buf) belongs to get_buffer's checks; a buffer that cannot
        // be written into fails in the read itself (recv_into's TypeError).
        match buf.len() {
            Ok(0) => {
                let e = PyRuntimeError::new_err("get_buffer() returned an empty buffer");
                return self.fatal(py, e, "Fatal error: protocol.get_buffer() call failed.");
            }
            Err(e) => return self.fatal(py, e, "Fatal error: protocol.get_buffer() call failed."),
            Ok(_) => {}
        }
        let n = {
            let view = match View::writable(&buf) {
                Ok(v) if v.len() > 0 => v,
                Ok(_) => {
                    let e = PyRuntimeError::new_err("get_buffer() returned an empty buffer");
                    return self.fatal(py, e, "Fatal error: protocol.get_buffer() call failed.");
                }
                Err(_) => {
                    let e = PyTypeError::new_err(format!(
                        "recv_into() argument 1 must be read-write bytes-like object, not {}",
                        buf.get_type().name()?
                    ));
                    return self.fatal(py, e, "Fatal read error on socket transport");
                }
            };
            // SAFETY: the view is writable and stays valid until dropped below.
            let n = unsafe { libc::recv(self.fd, view.as_mut_ptr(), view.len(), 0) };
            if n > 0 && (n as usize == view.len() || read_closed) {
                // The kernel may hold more: no new edge would come for it.
                self.lp.get().io_rearm(py, self.fd)?;
            }
            n
        };
        if n < 0 {
            return self.read_failed(py, io::Error::last_os_error());
        }
        if n == 0 {
            return self.on_eof(py);
        }
        match self.call_protocol(py, intern!(py, "buffer_updated"), (n as usize,)) {
            Some(Err(e)) => self.fatal(py, e, "Fatal error: protocol.buffer_updated() call failed."),
            _ => Ok(()),
        }
    }

    pub(super) fn on_eof(&self, py: Python<'_>) -> PyResult<()> {
        let Some(t) = self.transport_obj(py) else { return Ok(()) };
        if self.kind == Kind::ReadPipe {
            // The stdlib's read pipe: eof_received and connection_lost both come later.
            let pending = {
                let mut inner = self.inner(py)?;
                inner.closing = true;
                self.schedule_connection_lost(py, &mut inner, py.None())?
            };
            t.bind(py).call_method0(intern!(py, "_schedule_eof_received"))?;
            return self.call_soon_lost(py, pending);
        }
        t.bind(py).call_method0(intern!(py, "_log_eof"))?;
        let keep_open = match self.call_protocol(py, intern!(py, "eof_received"), ()) {
            None => return Ok(()),
            Some(Ok(v)) => v.is_truthy()?,
            Some(Err(e)) => return self.fatal(py, e, "Fatal error: protocol.eof_received() call failed."),
        };
        if keep_open {
            let mut inner = self.inner(py)?;
            // Like the stdlib's `_remove_reader`: not a pause, nothing more will come.
            inner.started = false;
            self.sync(py, &mut inner)
        } else {
            self.close_impl(py)
        }
    }

    /// The read end of a write pipe went away.
    pub(super) fn write_pipe_peer_closed(&self, py: Python<'_>) -> PyResult<()> {
        let had_data = !self.inner(py)?.wbuf.is_empty();
        let exc = if had_data { PyBrokenPipeError::new_err(()).into_value(py).into_any() } else { py.None() };
        self.close_pipe(py, exc)
    }
}

/// Bytes waiting to be read (FIONREAD); 0 when unknown, at end-of-file or on error.
fn bytes_pending(fd: RawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) } == 0 && n > 0 {
        n as usize
    } else {
        0
    }
}
