//! `StreamCore`: the native half of swordfish's stream transports (TCP and Unix sockets,
//! read and write pipes). It owns the descriptor's registration with the loop, the read
//! path (one `bytes` object sized to the data, or the `BufferedProtocol`'s own buffer), the
//! write path (an immediate write when nothing is queued, then a queue flushed with one
//! vectored write) and the flow-control and closing state.
//!
//! The Python class in `swordfish._transports` (a real `asyncio.Transport` subclass, which
//! a native class cannot be) wraps it and keeps the rare paths: construction, extra info,
//! error reporting and `connection_lost`.
//!
//! Readiness events come straight from the loop (`IoTarget`): no Python handle per event.
//! The registration is edge-triggered; every read drains what the kernel holds (a short
//! read), so a new edge comes with new data, and a full read asks the loop to re-arm.

use super::write_buffer::{write_once, Sink, WriteBuffer};
use super::pybuf::{in_context, with_bytes, View};
use crate::handles::copy_context;
use super::IoTarget;
use crate::reactor::Readiness;
use crate::event_loop::LoopCore;
use crate::pyutil::os_error;
use crate::sync::{lock, try_lock};
use pyo3::exceptions::{
    PyAssertionError, PyBrokenPipeError, PyKeyboardInterrupt, PyRuntimeError, PySystemExit,
    PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};
use pyo3::{ffi, intern, PyTraverseError, PyVisit};
use std::io;
use std::os::fd::RawFd;
use std::sync::Mutex;

/// The most one read takes (the stdlib's `max_size`).
const MAX_READ: usize = 256 * 1024;
/// The read size when the kernel does not say how much is waiting (below the allocator's
/// mmap threshold).
const FALLBACK_READ: usize = 64 * 1024;
/// After this many writes to a lost connection, each further one logs a warning.
const LOG_THRESHOLD_FOR_CONNLOST_WRITES: u32 = 5;
const DEFAULT_HIGH_WATER: usize = 64 * 1024;

extern "C" {
    // Exported by CPython (PyAPI_FUNC) but not re-exported by pyo3-ffi.
    fn _PyBytes_Resize(bytes: *mut *mut ffi::PyObject, newsize: ffi::Py_ssize_t) -> libc::c_int;
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Socket,
    ReadPipe,
    WritePipe,
}

impl Kind {
    fn sink(self) -> Sink {
        match self {
            Kind::Socket => Sink::Socket,
            _ => Sink::Pipe,
        }
    }

    fn write_error(self) -> &'static str {
        match self {
            Kind::Socket => "Fatal write error on socket transport",
            _ => "Fatal write error on pipe transport",
        }
    }
}

struct Inner {
    /// The Python transport object handed to the protocol; None once the connection is lost.
    transport: Option<Py<PyAny>>,
    protocol: Option<Py<PyAny>>,
    buffered: bool,
    /// The context protocol callbacks run in (a copy taken when the transport was made).
    context: Option<Py<PyAny>>,
    attached: bool,
    started: bool,
    paused: bool,
    closing: bool,
    eof: bool,
    /// Writes attempted after the connection was lost (and the loss itself), as the stdlib.
    conn_lost: u32,
    lost_scheduled: bool,
    protocol_paused: bool,
    high: usize,
    low: usize,
    wbuf: WriteBuffer,
    empty_waiter: Option<Py<PyAny>>,
    /// Interest currently registered with the loop.
    reg_read: bool,
    reg_write: bool,
}

impl Inner {
    /// Whether the loop should report readability: reading started and not paused or closed;
    /// a write pipe reads only to learn that the other end went away.
    fn want_read(&self, kind: Kind) -> bool {
        self.attached
            && self.started
            && match kind {
                Kind::WritePipe => !self.lost_scheduled,
                _ => !self.paused && !self.closing,
            }
    }

    fn want_write(&self) -> bool {
        self.attached && !self.wbuf.is_empty() && !self.lost_scheduled
    }
}

#[pyclass(module = "swordfish._native", frozen)]
pub struct StreamCore {
    fd: RawFd,
    kind: Kind,
    lp: Py<LoopCore>,
    inner: Mutex<Inner>,
}

/// What to do once the transport's lock is released.
enum After {
    Nothing,
    Fatal(PyErr, &'static str),
}

fn is_exit(py: Python<'_>, err: &PyErr) -> bool {
    err.is_instance_of::<PyKeyboardInterrupt>(py) || err.is_instance_of::<PySystemExit>(py)
}

impl StreamCore {
    fn inner(&self) -> PyResult<std::sync::MutexGuard<'_, Inner>> {
        lock(&self.inner)
    }

    /// Bring the loop's registration in line with what the transport wants.
    fn sync(&self, py: Python<'_>, inner: &mut Inner) -> PyResult<()> {
        let (r, w) = (inner.want_read(self.kind), inner.want_write());
        if (r, w) != (inner.reg_read, inner.reg_write) && inner.attached {
            self.lp.get().io_update(self.fd, r, w).map_err(|e| os_error(py, e))?;
            inner.reg_read = r;
            inner.reg_write = w;
        }
        Ok(())
    }

    fn transport_obj(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        try_lock(&self.inner).and_then(|i| i.transport.as_ref().map(|t| t.clone_ref(py)))
    }

    /// Hand an error to the Python transport's `_fatal_error` (report, then close).
    fn fatal(&self, py: Python<'_>, err: PyErr, message: &str) -> PyResult<()> {
        if is_exit(py, &err) {
            return Err(err);
        }
        let Some(t) = self.transport_obj(py) else { return Ok(()) };
        let exc = err.into_value(py);
        if let Err(e) = t.bind(py).call_method1(intern!(py, "_fatal_error"), (exc, message)) {
            if is_exit(py, &e) {
                return Err(e);
            }
            e.write_unraisable(py, Some(t.bind(py)));
        }
        Ok(())
    }

    fn after(&self, py: Python<'_>, after: After) -> PyResult<()> {
        match after {
            After::Nothing => Ok(()),
            After::Fatal(e, msg) => self.fatal(py, e, msg),
        }
    }

    /// Schedule the Python transport's `_call_connection_lost(exc)` (once).
    fn schedule_connection_lost(&self, py: Python<'_>, inner: &mut Inner, exc: Py<PyAny>) -> PyResult<Option<(Py<PyAny>, Py<PyAny>)>> {
        if inner.lost_scheduled {
            return Ok(None);
        }
        inner.lost_scheduled = true;
        self.sync(py, inner)?;
        Ok(inner.transport.as_ref().map(|t| (t.clone_ref(py), exc)))
    }

    fn call_soon_lost(&self, py: Python<'_>, pending: Option<(Py<PyAny>, Py<PyAny>)>) -> PyResult<()> {
        if let Some((t, exc)) = pending {
            let cb = t.bind(py).getattr(intern!(py, "_call_connection_lost"))?;
            LoopCore::call_soon_internal(self.lp.bind(py), &cb, exc.bind(py))?;
        }
        Ok(())
    }

    /// Call a protocol method by name; errors come back to the caller.
    fn call_protocol<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, pyo3::types::PyString>,
        args: impl pyo3::call::PyCallArgs<'py>,
    ) -> Option<PyResult<Bound<'py, PyAny>>> {
        let proto = try_lock(&self.inner).and_then(|i| i.protocol.as_ref().map(|p| p.clone_ref(py)))?;
        Some(proto.bind(py).call_method1(name, args))
    }

    fn maybe_pause_protocol(&self, py: Python<'_>) -> PyResult<()> {
        {
            let mut inner = self.inner()?;
            if inner.wbuf.len() <= inner.high || inner.protocol_paused {
                return Ok(());
            }
            inner.protocol_paused = true;
        }
        self.flow_callback(py, "pause_writing")
    }

    fn maybe_resume_protocol(&self, py: Python<'_>) -> PyResult<()> {
        {
            let mut inner = self.inner()?;
            if !(inner.protocol_paused && inner.wbuf.len() <= inner.low) {
                return Ok(());
            }
            inner.protocol_paused = false;
        }
        self.flow_callback(py, "resume_writing")
    }

    fn flow_callback(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let name_obj = pyo3::types::PyString::new(py, name);
        match self.call_protocol(py, &name_obj, ()) {
            Some(Err(e)) if is_exit(py, &e) => Err(e),
            Some(Err(e)) => {
                let Some(t) = self.transport_obj(py) else { return Ok(()) };
                let exc = e.into_value(py);
                let msg = format!("protocol.{name}() failed");
                t.bind(py).call_method1(intern!(py, "_report_flow_error"), (msg, exc))?;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Called by the loop when the descriptor is ready.
    pub fn on_ready(slf: &Bound<'_, Self>, ev: Readiness) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let ctx = match this.inner()?.context.as_ref() {
            Some(c) => c.clone_ref(py),
            None => return Ok(()),
        };
        in_context(py, &ctx, || {
            if ev.readable {
                this.read_ready(py, ev.read_closed)?;
            }
            if ev.writable {
                this.write_ready(py)?;
            }
            Ok(())
        })
    }

    /// `read_closed`: the event said the peer closed, so end-of-file (or an error) may be
    /// pending behind the data; a read that returns data then asks for a re-arm.
    fn read_ready(&self, py: Python<'_>, read_closed: bool) -> PyResult<()> {
        let buffered = {
            let inner = self.inner()?;
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

    fn read_bytes(&self, py: Python<'_>, read_closed: bool) -> PyResult<()> {
        // Size the bytes object to what the kernel holds: one copy, and no 256 KiB
        // allocation (an mmap/munmap pair in the allocator) per small message.
        let pending = bytes_pending(self.fd);
        let size = match pending {
            0 => FALLBACK_READ,
            n => n.min(MAX_READ),
        };
        // SAFETY: a new, uninitialised bytes object that only we reference; filled by read()
        // and shrunk to the bytes read before anyone else sees it.
        let obj = unsafe {
            let mut obj = ffi::PyBytes_FromStringAndSize(std::ptr::null(), size as ffi::Py_ssize_t);
            if obj.is_null() {
                return Err(PyErr::fetch(py));
            }
            let buf = ffi::PyBytes_AsString(obj) as *mut libc::c_void;
            let n = match self.kind {
                Kind::Socket => libc::recv(self.fd, buf, size, 0),
                _ => libc::read(self.fd, buf, size),
            };
            if n <= 0 {
                let err = io::Error::last_os_error();
                ffi::Py_DECREF(obj);
                if n == 0 {
                    return self.on_eof(py);
                }
                return self.read_failed(py, err);
            }
            let n = n as usize;
            if read_closed || (n == size && (pending == 0 || pending > MAX_READ)) {
                // The kernel may hold more (or the end-of-file): no new edge would come.
                self.lp.get().io_rearm(self.fd)?;
            }
            if n < size && _PyBytes_Resize(&mut obj, n as ffi::Py_ssize_t) != 0 {
                return Err(PyErr::fetch(py));
            }
            Bound::from_owned_ptr(py, obj)
        };
        match self.call_protocol(py, intern!(py, "data_received"), (obj,)) {
            Some(Err(e)) if self.kind == Kind::ReadPipe => self.report_callback_error(py, e),
            Some(Err(e)) => self.fatal(py, e, "Fatal error: protocol.data_received() call failed."),
            _ => Ok(()),
        }
    }

    fn read_failed(&self, py: Python<'_>, err: io::Error) -> PyResult<()> {
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
    fn report_callback_error(&self, py: Python<'_>, err: PyErr) -> PyResult<()> {
        if is_exit(py, &err) {
            return Err(err);
        }
        let Some(t) = self.transport_obj(py) else { return Ok(()) };
        let exc = err.into_value(py);
        t.bind(py).call_method1(intern!(py, "_report_callback_error"), (exc,))?;
        Ok(())
    }

    fn read_into_buffer(&self, py: Python<'_>, read_closed: bool) -> PyResult<()> {
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
                self.lp.get().io_rearm(self.fd)?;
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

    fn on_eof(&self, py: Python<'_>) -> PyResult<()> {
        let Some(t) = self.transport_obj(py) else { return Ok(()) };
        if self.kind == Kind::ReadPipe {
            // The stdlib's read pipe: eof_received and connection_lost both come later.
            let pending = {
                let mut inner = self.inner()?;
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
            let mut inner = self.inner()?;
            // Like the stdlib's `_remove_reader`: not a pause, nothing more will come.
            inner.started = false;
            self.sync(py, &mut inner)
        } else {
            self.close_impl(py)
        }
    }

    /// The read end of a write pipe went away.
    fn write_pipe_peer_closed(&self, py: Python<'_>) -> PyResult<()> {
        let had_data = !self.inner()?.wbuf.is_empty();
        let exc = if had_data {
            PyBrokenPipeError::new_err(()).into_value(py).into_any()
        } else {
            py.None()
        };
        self.close_pipe(py, exc)
    }

    fn write_ready(&self, py: Python<'_>) -> PyResult<()> {
        let result = {
            let mut inner = self.inner()?;
            if !inner.reg_write || inner.conn_lost > 0 && self.kind == Kind::Socket {
                return Ok(());
            }
            inner.wbuf.flush(py, self.fd, self.kind.sink())
        };
        if let Err(e) = result {
            let (dropped, waiter) = {
                let mut inner = self.inner()?;
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
                w.bind(py).call_method1(intern!(py, "set_exception"), (exc,))?;
            }
            return Ok(());
        }
        self.maybe_resume_protocol(py)?;
        let (drained, closing, eof, waiter) = {
            let mut inner = self.inner()?;
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
            w.bind(py).call_method1(intern!(py, "set_result"), (py.None(),))?;
        }
        if closing {
            let pending = {
                let mut inner = self.inner()?;
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

    fn shutdown_write(&self, py: Python<'_>) -> PyResult<()> {
        // SAFETY: plain syscall on our descriptor.
        if unsafe { libc::shutdown(self.fd, libc::SHUT_WR) } != 0 {
            return Err(os_error(py, io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Bytes of a bytes-like object, or the stdlib's error for anything else.
    fn check_data(&self, data: &Bound<'_, PyAny>) -> PyResult<()> {
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
        Err(PyTypeError::new_err(format!(
            "data argument must be a bytes-like object, not '{tname}'"
        )))
    }

    /// Queue (or write at once) one chunk; the lock is held by the caller.
    fn write_locked(
        &self,
        py: Python<'_>,
        inner: &mut Inner,
        data: &Bound<'_, PyAny>,
        try_now: bool,
    ) -> PyResult<After> {
        with_bytes(data, |bytes| {
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
            match data.cast::<PyBytes>() {
                Ok(b) => inner.wbuf.push_shared(b.clone().unbind(), sent, bytes.len()),
                Err(_) => inner.wbuf.push_copy(&bytes[sent..]),
            }
            Ok(After::Nothing)
        })
    }

    /// A lost or closing connection swallows writes, warning after a few (the stdlib's rule).
    fn swallow_write(&self, py: Python<'_>, inner: &mut Inner) -> PyResult<bool> {
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

    fn close_impl(&self, py: Python<'_>) -> PyResult<()> {
        let pending = {
            let mut inner = self.inner()?;
            match self.kind {
                Kind::Socket => {
                    if inner.closing {
                        return Ok(());
                    }
                    inner.closing = true;
                    if inner.wbuf.is_empty() {
                        inner.conn_lost += 1;
                        self.schedule_connection_lost(py, &mut inner, py.None())?
                    } else {
                        self.sync(py, &mut inner)?;
                        None
                    }
                }
                Kind::ReadPipe => {
                    if inner.closing {
                        return Ok(());
                    }
                    inner.closing = true;
                    self.schedule_connection_lost(py, &mut inner, py.None())?
                }
                Kind::WritePipe => {
                    if inner.closing || inner.lost_scheduled {
                        return Ok(());
                    }
                    inner.closing = true;
                    if inner.wbuf.is_empty() {
                        self.schedule_connection_lost(py, &mut inner, py.None())?
                    } else {
                        None
                    }
                }
            }
        };
        self.call_soon_lost(py, pending)
    }

    /// A pipe's `_close(exc)`: drop pending writes, stop watching, lose the connection.
    fn close_pipe(&self, py: Python<'_>, exc: Py<PyAny>) -> PyResult<()> {
        let (pending, dropped) = {
            let mut inner = self.inner()?;
            inner.closing = true;
            let dropped = inner.wbuf.clear();
            (self.schedule_connection_lost(py, &mut inner, exc)?, dropped)
        };
        drop(dropped);
        self.call_soon_lost(py, pending)
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

impl StreamCore {
    /// `write(data)` for native callers (the TLS layer).
    pub fn write_data(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        self.write(py, data)
    }
}

#[pymethods]
impl StreamCore {
    /// `kind`: "socket", "read-pipe" or "write-pipe". Registers the descriptor with the loop
    /// (as the stdlib's transport table does) without watching it yet: `_start()` does.
    #[new]
    fn py_new(
        py: Python<'_>,
        lp: &Bound<'_, LoopCore>,
        fd: RawFd,
        kind: &str,
        transport: Py<PyAny>,
    ) -> PyResult<Self> {
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
            inner: Mutex::new(Inner {
                transport: Some(transport),
                protocol: None,
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
                empty_waiter: None,
                reg_read: false,
                reg_write: false,
            }),
        })
    }

    /// Join the loop's descriptor table (the loop must not be closed).
    fn _attach(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        this.lp.get().io_attach(slf.py(), this.fd, IoTarget::Stream(slf.clone().unbind()))?;
        this.inner()?.attached = true;
        Ok(())
    }

    /// Start watching the descriptor for reads (scheduled right after `connection_made`).
    #[pyo3(signature = (watch_reads=true))]
    fn _start(&self, py: Python<'_>, watch_reads: bool) -> PyResult<()> {
        let mut inner = self.inner()?;
        inner.started = watch_reads;
        self.sync(py, &mut inner)
    }

    /// Lend the descriptor to other code (`loop.sendfile`): leave the loop's table and stop
    /// watching, keeping every other state; `_reclaim()` undoes it.
    fn _lend(&self, py: Python<'_>) -> PyResult<()> {
        let mut inner = self.inner()?;
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
        if this.inner()?.attached || this.inner()?.lost_scheduled {
            return Ok(());
        }
        this.lp.get().io_attach(py, this.fd, IoTarget::Stream(slf.clone().unbind()))?;
        let mut inner = this.inner()?;
        inner.attached = true;
        this.sync(py, &mut inner)
    }

    /// Leave the loop's descriptor table: the descriptor is about to be closed.
    fn _detach(&self, py: Python<'_>) -> PyResult<()> {
        let (protocol, transport, waiter) = {
            let mut inner = self.inner()?;
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

    fn set_protocol(&self, protocol: Py<PyAny>, buffered: bool) -> PyResult<()> {
        let old = {
            let mut inner = self.inner()?;
            inner.buffered = buffered && self.kind == Kind::Socket;
            inner.protocol.replace(protocol)
        };
        drop(old);
        Ok(())
    }

    fn get_protocol(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.inner()?.protocol.as_ref().map_or_else(|| py.None(), |p| p.clone_ref(py)))
    }

    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_data(data)?;
        let after = {
            let mut inner = self.inner()?;
            if self.kind == Kind::Socket {
                if inner.eof {
                    return Err(PyRuntimeError::new_err("Cannot call write() after write_eof()"));
                }
                if inner.empty_waiter.is_some() {
                    return Err(PyRuntimeError::new_err("unable to write; sendfile is in progress"));
                }
            }
            if data.len()? == 0 {
                return Ok(());
            }
            if self.swallow_write(py, &mut inner)? {
                return Ok(());
            }
            let after = self.write_locked(py, &mut inner, data, true)?;
            self.sync(py, &mut inner)?;
            after
        };
        self.after(py, after)?;
        self.maybe_pause_protocol(py)
    }

    /// Queue every chunk, then write them with one vectored write.
    fn writelines(&self, py: Python<'_>, list_of_data: &Bound<'_, PyAny>) -> PyResult<()> {
        let items: Vec<Bound<'_, PyAny>> = list_of_data.try_iter()?.collect::<PyResult<_>>()?;
        for item in &items {
            self.check_data(item)?;
        }
        {
            let mut inner = self.inner()?;
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
        let flushed = {
            let mut inner = self.inner()?;
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
        self.maybe_pause_protocol(py)
    }

    fn write_eof(&self, py: Python<'_>) -> PyResult<()> {
        if self.kind != Kind::Socket {
            return self.close_impl(py);
        }
        let shutdown_now = {
            let mut inner = self.inner()?;
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
            let mut inner = self.inner()?;
            if inner.conn_lost > 0 {
                return Ok(());
            }
            let dropped = inner.wbuf.clear();
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

    fn is_closing(&self) -> PyResult<bool> {
        Ok(self.inner()?.closing)
    }

    fn is_reading(&self) -> PyResult<bool> {
        let inner = self.inner()?;
        Ok(!inner.paused && !inner.closing)
    }

    fn pause_reading(&self, py: Python<'_>) -> PyResult<()> {
        {
            let mut inner = self.inner()?;
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
        let mut inner = self.inner()?;
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
    fn set_write_buffer_limits(&self, py: Python<'_>, high: Option<Bound<'_, PyAny>>, low: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        let high_v: Option<i64> = high.as_ref().map(|h| h.extract()).transpose()?;
        let low_v: Option<i64> = low.as_ref().map(|l| l.extract()).transpose()?;
        let high_v = high_v.unwrap_or_else(|| match low_v {
            None => DEFAULT_HIGH_WATER as i64,
            Some(l) => 4 * l,
        });
        // Python's floor division (high=-1 gives low=-1, as in the stdlib's message).
        let low_v = low_v.unwrap_or(high_v.div_euclid(4));
        if !(high_v >= low_v && low_v >= 0) {
            return Err(PyValueError::new_err(format!(
                "high ({high_v}) must be >= low ({low_v}) must be >= 0"
            )));
        }
        {
            let mut inner = self.inner()?;
            inner.high = high_v as usize;
            inner.low = low_v as usize;
        }
        self.maybe_pause_protocol(py)
    }

    fn get_write_buffer_limits(&self) -> PyResult<(usize, usize)> {
        let inner = self.inner()?;
        Ok((inner.low, inner.high))
    }

    fn get_write_buffer_size(&self) -> PyResult<usize> {
        Ok(self.inner()?.wbuf.len())
    }

    /// (watching for reads, watching for writes, queued bytes): for `repr()`.
    fn _state(&self) -> PyResult<(bool, bool, usize)> {
        let inner = self.inner()?;
        Ok((inner.reg_read, inner.reg_write, inner.wbuf.len()))
    }

    #[getter]
    fn _protocol_paused(&self) -> PyResult<bool> {
        Ok(self.inner()?.protocol_paused)
    }

    #[getter]
    fn _conn_lost(&self) -> PyResult<u32> {
        Ok(self.inner()?.conn_lost)
    }

    #[getter]
    fn _closed(&self) -> PyResult<bool> {
        Ok(self.inner()?.lost_scheduled)
    }

    /// For `loop.sendfile`: a future done once the write queue is empty; writes are refused
    /// until `_reset_empty_waiter()`.
    fn _make_empty_waiter(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let empty = {
            let inner = self.inner()?;
            if inner.empty_waiter.is_some() {
                return Err(PyRuntimeError::new_err("Empty waiter is already set"));
            }
            inner.wbuf.is_empty()
        };
        let waiter = self.lp.bind(py).call_method0(intern!(py, "create_future"))?;
        if empty {
            waiter.call_method1(intern!(py, "set_result"), (py.None(),))?;
        }
        self.inner()?.empty_waiter = Some(waiter.clone().unbind());
        Ok(waiter.unbind())
    }

    fn _reset_empty_waiter(&self) -> PyResult<()> {
        let old = self.inner()?.empty_waiter.take();
        drop(old);
        Ok(())
    }

    #[getter]
    fn _transport_repr(&self, py: Python<'_>) -> PyResult<String> {
        match self.transport_obj(py) {
            Some(t) => Ok(t.bind(py).repr()?.to_string()),
            None => Ok(format!("<closed transport fd={}>", self.fd)),
        }
    }

    fn fileno(&self) -> RawFd {
        self.fd
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.lp)?;
        if let Some(inner) = try_lock(&self.inner) {
            visit.call(&inner.transport)?;
            visit.call(&inner.protocol)?;
            visit.call(&inner.context)?;
            visit.call(&inner.empty_waiter)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        let taken = try_lock(&self.inner).map(|mut i| {
            (i.transport.take(), i.protocol.take(), i.context.take(), i.empty_waiter.take())
        });
        drop(taken);
    }
}
