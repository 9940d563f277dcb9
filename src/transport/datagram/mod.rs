//! `DatagramCore`: the native half of swordfish's datagram transport (UDP over IPv4 and
//! IPv6, Unix datagram sockets, and any other non-stream socket handed to
//! `create_datagram_endpoint`).
//!
//! It follows the stdlib's `_SelectorDatagramTransport` state for state: one datagram read
//! per readiness event and handed to `datagram_received(data, addr)`, an immediate send when
//! nothing is queued, otherwise a queue of `(bytes, destination)` flushed when the socket is
//! writable, `error_received` for OS errors (never fatal), write flow control, and the
//! closing rules (`close()` flushes the queue first, `abort()` drops it).
//!
//! Reads, sends and the address conversions are native for IPv4, IPv6 and Unix sockets
//! (the socket module's formats: `(host, port)`, `(host, port, flowinfo, scope_id)`, a path
//! `str` or an abstract-namespace `bytes`, None for an unnamed sender). Every other family,
//! and every address form that the native conversion does not cover (host names, scoped
//! IPv6 literals, out-of-range ports, ...), goes through the Python socket's own
//! `recvfrom`/`sendto`, so the results and error messages are the socket module's.
//!
//! The Python class in `swordfish._datagram_transport` (a real `asyncio.DatagramTransport`)
//! wraps the core and keeps the rare paths: construction, extra info, error reporting,
//! write-limit validation and `connection_lost`.

mod address;
mod api;

use crate::context::{copy_current as copy_context, in_context};
use crate::event_loop::LoopCore;
use crate::pyutil::{is_exit, os_error};
use crate::reactor::Readiness;
use crate::sync::{GilCell, GilGuard};
use crate::transport::pybuf::View;
use crate::transport::IoTarget;
use address::*;
use pyo3::exceptions::{PyAttributeError, PyBlockingIOError, PyInterruptedError, PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyInt, PyMemoryView, PyString, PyTuple, PyWeakrefReference};
use pyo3::{ffi, intern, PyTraverseError, PyVisit};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;

/// The largest datagram one read takes (the stdlib's `max_size`); longer ones are truncated,
/// as `socket.recvfrom(max_size)` truncates them.
const MAX_SIZE: usize = 256 * 1024;
const LOG_THRESHOLD_FOR_CONNLOST_WRITES: u32 = 5;
const FATAL_READ: &str = "Fatal read error on datagram transport";
const FATAL_WRITE: &str = "Fatal write error on datagram transport";

extern "C" {
    // POSIX, in every libc; the libc crate does not declare them.
    fn inet_ntop(
        af: libc::c_int,
        src: *const libc::c_void,
        dst: *mut libc::c_char,
        size: libc::socklen_t,
    ) -> *const libc::c_char;
    fn inet_pton(af: libc::c_int, src: *const libc::c_char, dst: *mut libc::c_void) -> libc::c_int;
}

thread_local! {
    /// One receive buffer per thread, reused by every datagram transport: the datagram is
    /// copied into a `bytes` of its exact size, so no transport keeps 256 KiB to itself.
    static RECV_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Where a datagram goes.
enum Dest {
    /// The socket is connected (its `peername` is set): `send()`.
    Connected,
    /// `sendto()` with an address converted natively.
    Native(SockAddr),
    /// `sock.sendto(data, addr)` through the socket module (address forms, or families, the
    /// native conversion does not cover; `None` included, which the socket module refuses).
    Python(Option<Py<PyAny>>),
}

struct Queued {
    data: Py<PyBytes>,
    dest: Dest,
}

/// How a send or a read failed, sorted the way the stdlib's `except` clauses sort it.
enum Failure {
    /// BlockingIOError, InterruptedError: try again when the socket is ready.
    WouldBlock,
    /// Any other OSError: for `protocol.error_received`.
    Os(PyErr),
    /// SystemExit, KeyboardInterrupt: leave the loop.
    Exit(PyErr),
    /// Anything else: the transport's fatal-error path.
    Other(PyErr),
}

fn classify(py: Python<'_>, err: PyErr) -> Failure {
    if err.is_instance_of::<PyBlockingIOError>(py) || err.is_instance_of::<PyInterruptedError>(py) {
        Failure::WouldBlock
    } else if err.is_instance_of::<PyOSError>(py) {
        Failure::Os(err)
    } else if is_exit(py, &err) {
        Failure::Exit(err)
    } else {
        Failure::Other(err)
    }
}

/// `bytes(data)`: the stdlib queues an immutable copy of what it could not send at once.
fn bytes_of(data: &Bound<'_, PyAny>) -> PyResult<Py<PyBytes>> {
    if let Ok(b) = data.cast_exact::<PyBytes>() {
        return Ok(b.clone().unbind());
    }
    // SAFETY: returns a new reference or NULL with an exception set.
    let b = unsafe { Bound::from_owned_ptr_or_err(data.py(), ffi::PyBytes_FromObject(data.as_ptr()))? };
    Ok(b.cast_into::<PyBytes>()?.unbind())
}

struct Inner {
    /// The Python transport handed to the protocol, weakly: while the descriptor is
    /// registered the loop holds it (`IoTarget::Datagram`), as the stdlib's selector holds
    /// its handles, so there is no reference cycle through the core and an abandoned
    /// transport is finalized (and its socket closed) as soon as the loop lets go of it.
    /// None once the connection is lost.
    transport: Option<Py<PyWeakrefReference>>,
    protocol: Option<Py<PyAny>>,
    /// The Python socket, for the socket module's own `recvfrom`/`sendto`.
    sock: Option<Py<PyAny>>,
    /// The default destination (`remote_addr`), None when there is none.
    address: Option<Py<PyAny>>,
    /// `address` converted once, when it converts natively.
    address_dest: Option<SockAddr>,
    /// What reads run in: a copy of the context at creation (or at `resume_reading`).
    read_context: Option<Py<PyAny>>,
    /// What the queue flush runs in: a copy of the context of the send that started it.
    write_context: Option<Py<PyAny>>,
    attached: bool,
    /// Connection lost: the socket is closed and the descriptor must not be touched.
    closed: bool,
    lost_called: bool,
    /// What the stdlib's reader/writer registrations would be.
    reader: bool,
    writer: bool,
    paused: bool,
    closing: bool,
    conn_lost: u32,
    protocol_paused: bool,
    high: f64,
    low: f64,
    queue: VecDeque<Queued>,
    /// The stdlib's `_buffer_size`: queued bytes (plus a header per datagram on 3.13).
    size: usize,
    /// Interest currently registered with the loop.
    reg_read: bool,
    reg_write: bool,
}

#[pyclass(module = "swordfish._native", frozen)]
pub struct DatagramCore {
    fd: RawFd,
    family: libc::c_int,
    /// Reads are native for the families whose addresses we convert.
    native_read: bool,
    /// `extra['peername']` is set: the stdlib then uses `send()`, never `sendto()`.
    connected: bool,
    /// Bytes counted per queued datagram besides its data (8 on 3.13, else 0).
    header: usize,
    /// Before 3.13 an empty datagram is silently not sent.
    drop_empty: bool,
    lp: Py<LoopCore>,
    inner: GilCell<Inner>,
}

impl DatagramCore {
    fn inner(&self, py: Python<'_>) -> PyResult<GilGuard<'_, Inner>> {
        self.inner.lock(py)
    }

    /// Bring the loop's registration in line with the reader/writer state.
    fn sync(&self, py: Python<'_>, inner: &mut Inner) -> PyResult<()> {
        if !inner.attached {
            return Ok(());
        }
        let (r, w) = (inner.reader, inner.writer);
        if (r, w) != (inner.reg_read, inner.reg_write) {
            self.lp.get().io_update(py, self.fd, r, w).map_err(|e| os_error(py, e))?;
            inner.reg_read = r;
            inner.reg_write = w;
        }
        Ok(())
    }

    fn transport_obj(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let weak = self.inner.try_lock(py).and_then(|i| i.transport.as_ref().map(|t| t.clone_ref(py)))?;
        weak.bind(py).upgrade().map(Bound::unbind)
    }

    fn call_protocol<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyString>,
        args: impl pyo3::call::PyCallArgs<'py>,
    ) -> PyResult<()> {
        let proto = self.inner(py)?.protocol.as_ref().map(|p| p.clone_ref(py));
        match proto {
            Some(p) => p.bind(py).call_method1(name, args).map(drop),
            None => Ok(()),
        }
    }

    fn error_received(&self, py: Python<'_>, err: PyErr) -> PyResult<()> {
        let exc = err.into_value(py);
        self.call_protocol(py, intern!(py, "error_received"), (exc,))
    }

    /// The transport's `_fatal_error(exc, message)`: report (unless an OSError), then close.
    fn fatal(&self, py: Python<'_>, err: PyErr, message: &str) -> PyResult<()> {
        if is_exit(py, &err) {
            return Err(err);
        }
        let Some(t) = self.transport_obj(py) else { return Ok(()) };
        let exc = err.into_value(py);
        t.bind(py).call_method1(intern!(py, "_fatal_error"), (exc, message))?;
        Ok(())
    }

    /// An exception from a protocol callback run by a readiness event: where the stdlib's
    /// handle would report `Exception in callback ...` (the transport carries on).
    fn settle(&self, py: Python<'_>, result: PyResult<()>, method: &str) -> PyResult<()> {
        let Err(err) = result else { return Ok(()) };
        if is_exit(py, &err) {
            return Err(err);
        }
        let Some(t) = self.transport_obj(py) else {
            err.write_unraisable(py, None);
            return Ok(());
        };
        let exc = err.into_value(py);
        if let Err(e) = t.bind(py).call_method1(intern!(py, "_report_callback_error"), (exc, method)) {
            if is_exit(py, &e) {
                return Err(e);
            }
            e.write_unraisable(py, Some(t.bind(py)));
        }
        Ok(())
    }

    fn maybe_pause_protocol(&self, py: Python<'_>) -> PyResult<()> {
        {
            let mut inner = self.inner(py)?;
            if (inner.size as f64) <= inner.high || inner.protocol_paused {
                return Ok(());
            }
            inner.protocol_paused = true;
        }
        self.flow_callback(py, "pause_writing")
    }

    fn maybe_resume_protocol(&self, py: Python<'_>) -> PyResult<()> {
        {
            let mut inner = self.inner(py)?;
            if !(inner.protocol_paused && (inner.size as f64) <= inner.low) {
                return Ok(());
            }
            inner.protocol_paused = false;
        }
        self.flow_callback(py, "resume_writing")
    }

    fn flow_callback(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let name_obj = PyString::new(py, name);
        match self.call_protocol(py, &name_obj, ()) {
            Err(e) if is_exit(py, &e) => Err(e),
            Err(e) => {
                let Some(t) = self.transport_obj(py) else { return Ok(()) };
                let exc = e.into_value(py);
                let msg = format!("protocol.{name}() failed");
                t.bind(py).call_method1(intern!(py, "_report_flow_error"), (msg, exc))?;
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// `loop.call_soon(transport._call_connection_lost, exc)`.
    fn schedule_lost(&self, py: Python<'_>, exc: Py<PyAny>) -> PyResult<()> {
        if let Some(t) = self.transport_obj(py) {
            let cb = t.bind(py).getattr(intern!(py, "_call_connection_lost"))?;
            LoopCore::call_soon_internal(self.lp.bind(py), &cb, exc.bind(py))?;
        }
        Ok(())
    }

    /// One `send`/`sendto` system call; EINTR runs the signal handlers and retries (PEP 475).
    fn sys_send(&self, py: Python<'_>, data: &[u8], to: Option<&SockAddr>) -> Result<(), Failure> {
        loop {
            let ptr = data.as_ptr() as *const libc::c_void;
            // SAFETY: `data` and `to` outlive the call; the descriptor is ours (not closed:
            // callers check `closed`).
            let n = unsafe {
                match to {
                    None => libc::send(self.fd, ptr, data.len(), libc::MSG_NOSIGNAL),
                    Some(sa) => libc::sendto(self.fd, ptr, data.len(), libc::MSG_NOSIGNAL, sa.as_ptr(), sa.len),
                }
            };
            if n >= 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => py.check_signals().map_err(|e| classify(py, e))?,
                io::ErrorKind::WouldBlock => return Err(Failure::WouldBlock),
                _ => return Err(Failure::Os(os_error(py, err))),
            }
        }
    }

    fn python_sendto(&self, py: Python<'_>, data: &Bound<'_, PyAny>, addr: &Option<Py<PyAny>>) -> Result<(), Failure> {
        let sock = match self.inner(py) {
            Ok(inner) => inner.sock.as_ref().map(|s| s.clone_ref(py)),
            Err(e) => return Err(Failure::Other(e)),
        };
        let Some(sock) = sock else {
            return Err(Failure::Other(PyAttributeError::new_err("'NoneType' object has no attribute 'sendto'")));
        };
        let addr = addr.as_ref().map_or_else(|| py.None(), |a| a.clone_ref(py));
        sock.bind(py).call_method1(intern!(py, "sendto"), (data, addr)).map(drop).map_err(|e| classify(py, e))
    }

    /// Send `data` (any bytes-like object) to `dest` now.
    fn send_now(&self, py: Python<'_>, data: &Bound<'_, PyAny>, dest: &Dest) -> Result<(), Failure> {
        let to = match dest {
            Dest::Python(addr) => return self.python_sendto(py, data, addr),
            Dest::Connected => None,
            Dest::Native(sa) => Some(sa),
        };
        if let Ok(b) = data.cast::<PyBytes>() {
            return self.sys_send(py, b.as_bytes(), to);
        }
        let view = View::readable(data).map_err(|e| classify(py, e))?;
        self.sys_send(py, view.as_slice(), to)
    }

    /// Called by the loop when the descriptor is ready.
    pub fn on_ready(slf: &Bound<'_, Self>, ev: Readiness) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        if ev.readable {
            let ctx = this.inner(py)?.read_context.as_ref().map(|c| c.clone_ref(py));
            if let Some(ctx) = ctx {
                in_context(py, &ctx, || this.read_ready(py))?;
            }
        }
        if ev.writable {
            let ctx = {
                let inner = this.inner(py)?;
                inner.write_context.as_ref().or(inner.read_context.as_ref()).map(|c| c.clone_ref(py))
            };
            if let Some(ctx) = ctx {
                in_context(py, &ctx, || this.write_ready(py))?;
            }
        }
        Ok(())
    }

    /// The stdlib's `_read_ready`: one datagram.
    ///
    /// The registration is edge-triggered. We read one datagram per event and, after each
    /// successful read (or error), ask the loop to re-arm the descriptor before its next
    /// poll: the kernel then reports it again if more datagrams are queued. This keeps the
    /// stdlib's rhythm exactly (one `datagram_received` per transport per loop iteration,
    /// interleaved with other callbacks, and `pause_reading()`/`close()`/`loop.stop()` from
    /// a callback take effect before the next datagram), at the price of one `epoll_ctl`
    /// per datagram instead of one `recvfrom` that fails with EAGAIN after a drained batch.
    /// EAGAIN itself needs no re-arm: the next datagram brings a new edge.
    fn read_ready(&self, py: Python<'_>) -> PyResult<()> {
        let sock = {
            let inner = self.inner(py)?;
            if !inner.reg_read || inner.conn_lost > 0 || inner.closed {
                return Ok(());
            }
            inner.sock.as_ref().map(|s| s.clone_ref(py))
        };
        let received = if self.native_read {
            self.recv_native(py)
        } else {
            match sock {
                Some(s) => recv_python(py, s.bind(py)),
                None => return Ok(()),
            }
        };
        match received {
            Ok((data, addr)) => {
                self.lp.get().io_rearm(py, self.fd)?;
                let r = self.call_protocol(py, intern!(py, "datagram_received"), (data, addr));
                self.settle(py, r, "_read_ready")
            }
            Err(Failure::WouldBlock) => Ok(()),
            Err(Failure::Os(e)) => {
                self.lp.get().io_rearm(py, self.fd)?;
                let r = self.error_received(py, e);
                self.settle(py, r, "_read_ready")
            }
            Err(Failure::Exit(e)) => Err(e),
            Err(Failure::Other(e)) => {
                let r = self.fatal(py, e, FATAL_READ);
                self.settle(py, r, "_read_ready")
            }
        }
    }

    fn recv_native<'py>(&self, py: Python<'py>) -> Result<(Bound<'py, PyBytes>, Bound<'py, PyAny>), Failure> {
        let mut sa = SockAddr::empty();
        let data = RECV_BUF.with(|cell| {
            let mut spare: Vec<u8> = Vec::new();
            let mut guard = cell.try_borrow_mut();
            // Busy only if a signal handler run during an interrupted read re-entered here.
            let buf: &mut Vec<u8> = match guard.as_deref_mut() {
                Ok(b) => b,
                Err(_) => &mut spare,
            };
            if buf.len() < MAX_SIZE {
                buf.resize(MAX_SIZE, 0);
            }
            loop {
                sa.len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                // SAFETY: the buffer has MAX_SIZE bytes and the address storage `sa.len`;
                // the descriptor is ours (callers check `closed`).
                let n = unsafe {
                    libc::recvfrom(
                        self.fd,
                        buf.as_mut_ptr() as *mut libc::c_void,
                        MAX_SIZE,
                        0,
                        sa.as_mut_ptr(),
                        &mut sa.len,
                    )
                };
                if n >= 0 {
                    return Ok(PyBytes::new(py, &buf[..n as usize]));
                }
                let err = io::Error::last_os_error();
                match err.kind() {
                    io::ErrorKind::Interrupted => py.check_signals().map_err(|e| classify(py, e))?,
                    io::ErrorKind::WouldBlock => return Err(Failure::WouldBlock),
                    _ => return Err(Failure::Os(os_error(py, err))),
                }
            }
        })?;
        let addr = sockaddr_to_py(py, &sa).map_err(|e| classify(py, e))?;
        Ok((data, addr))
    }

    /// The stdlib's `_sendto_ready`: flush the queue in order until the socket is full.
    fn write_ready(&self, py: Python<'_>) -> PyResult<()> {
        {
            let inner = self.inner(py)?;
            if !inner.reg_write || inner.closed {
                return Ok(());
            }
        }
        loop {
            let item = {
                let mut inner = self.inner(py)?;
                if inner.closed {
                    return Ok(());
                }
                match inner.queue.pop_front() {
                    Some(item) => {
                        let n = item.data.bind(py).as_bytes().len() + self.header;
                        inner.size = inner.size.saturating_sub(n);
                        item
                    }
                    None => break,
                }
            };
            let outcome = match &item.dest {
                Dest::Python(addr) => self.python_sendto(py, item.data.bind(py).as_any(), addr),
                Dest::Connected => self.sys_send(py, item.data.bind(py).as_bytes(), None),
                Dest::Native(sa) => self.sys_send(py, item.data.bind(py).as_bytes(), Some(sa)),
            };
            match outcome {
                Ok(()) => drop(item),
                Err(Failure::WouldBlock) => {
                    // Try again later, first in line.
                    let mut inner = self.inner(py)?;
                    inner.size += item.data.bind(py).as_bytes().len() + self.header;
                    inner.queue.push_front(item);
                    break;
                }
                Err(Failure::Os(e)) => {
                    // The stdlib stops here and stays registered for writing: on a level-
                    // triggered selector it comes back next iteration, so re-arm to do so.
                    drop(item);
                    self.lp.get().io_rearm(py, self.fd)?;
                    let r = self.error_received(py, e);
                    return self.settle(py, r, "_sendto_ready");
                }
                Err(Failure::Exit(e)) => return Err(e),
                Err(Failure::Other(e)) => {
                    drop(item);
                    let r = self.fatal(py, e, FATAL_WRITE);
                    return self.settle(py, r, "_sendto_ready");
                }
            }
        }
        self.maybe_resume_protocol(py)?; // may queue more
        let lost = {
            let mut inner = self.inner(py)?;
            if !inner.queue.is_empty() {
                return Ok(());
            }
            inner.writer = false;
            self.sync(py, &mut inner)?;
            inner.closing
        };
        if let Some(t) = lost.then(|| self.transport_obj(py)).flatten() {
            // The stdlib calls connection_lost at once here, not on the next iteration.
            let r = t.bind(py).call_method1(intern!(py, "_call_connection_lost"), (py.None(),)).map(drop);
            return self.settle(py, r, "_sendto_ready");
        }
        Ok(())
    }
}

fn recv_python<'py>(
    py: Python<'py>,
    sock: &Bound<'py, PyAny>,
) -> Result<(Bound<'py, PyBytes>, Bound<'py, PyAny>), Failure> {
    let r = sock.call_method1(intern!(py, "recvfrom"), (MAX_SIZE,)).map_err(|e| classify(py, e))?;
    let unpack = || -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyAny>)> {
        let (data, addr): (Bound<'py, PyAny>, Bound<'py, PyAny>) = r.extract()?;
        Ok((data.cast_into::<PyBytes>()?, addr))
    };
    unpack().map_err(|e| classify(py, e))
}
