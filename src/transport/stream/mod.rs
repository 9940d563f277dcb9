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

mod api;
mod read;
mod write;

use crate::context::{copy_current as copy_context, in_context};
use crate::event_loop::LoopCore;
use crate::pyutil::{is_exit, os_error};
use crate::reactor::Readiness;
use crate::sync::{GilCell, GilGuard};
use crate::transport::pybuf::{read_into_bytes, read_into_slice, read_sized, with_bytes, View, COPY_OUT_LIMIT};
use crate::transport::write_buffer::{write_once, Sink, WriteBuffer};
use crate::transport::IoTarget;
use pyo3::exceptions::{PyAssertionError, PyBrokenPipeError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};
use pyo3::{intern, PyTraverseError, PyVisit};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// The most one read takes (the stdlib's `max_size`), and a native protocol's read size.
const MAX_READ: usize = 256 * 1024;
/// The read size when the kernel does not say how much is waiting (below the allocator's
/// mmap threshold).
const FALLBACK_READ: usize = 64 * 1024;
/// After this many writes to a lost connection, each further one logs a warning.
const LOG_THRESHOLD_FOR_CONNLOST_WRITES: u32 = 5;
const DEFAULT_HIGH_WATER: usize = 64 * 1024;

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
    /// How `protocol` takes bytes natively, if it does (chosen by `set_protocol`).
    native: Option<super::native::Feed>,
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
    /// `wbuf` holds only writes held for the end of the loop iteration (`write_deferred`):
    /// nothing is registered for them, the loop flushes them before it polls.
    deferred: bool,
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
        self.attached && !self.wbuf.is_empty() && !self.lost_scheduled && !self.deferred
    }
}

#[pyclass(module = "swordfish._native", frozen)]
pub struct StreamCore {
    fd: RawFd,
    kind: Kind,
    lp: Py<LoopCore>,
    inner: GilCell<Inner>,
    /// The last read was large: size the next one with FIONREAD (see `read_bytes`).
    large_reads: AtomicBool,
}

/// How long `StreamCore::write_deferred` may hold bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Hold {
    /// Until the end of the loop iteration: the same step is likely to write more.
    Iteration,
    /// The protocol is done writing for now: held for the end of the iteration only while
    /// the connection holds at most `HOLD_SMALL` bytes, else written at once. Small writes
    /// of many connections then leave together, while a large one leaves at once: held,
    /// large responses of many connections were slower (a 10 KiB echo by 20%, each
    /// connection's write waiting for every other's request to be processed).
    IfSmall,
}

/// See `Hold::IfSmall`.
pub const HOLD_SMALL: usize = 2 * 1024;

/// Bytes for `StreamCore::write_deferred`: owned by the caller, or a bytes object queued
/// by reference.
pub enum Held<'py> {
    Owned(Vec<u8>),
    Shared(Bound<'py, PyBytes>),
}

impl Held<'_> {
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Held::Owned(v) => v,
            Held::Shared(b) => b.as_bytes(),
        }
    }
}

/// What to do once the transport's lock is released.
enum After {
    Nothing,
    Fatal(PyErr, &'static str),
}

impl StreamCore {
    fn inner(&self, py: Python<'_>) -> PyResult<GilGuard<'_, Inner>> {
        self.inner.lock(py)
    }

    /// Bring the loop's registration in line with what the transport wants.
    fn sync(&self, py: Python<'_>, inner: &mut Inner) -> PyResult<()> {
        let (r, w) = (inner.want_read(self.kind), inner.want_write());
        if (r, w) != (inner.reg_read, inner.reg_write) && inner.attached {
            self.lp.get().io_update(py, self.fd, r, w).map_err(|e| os_error(py, e))?;
            inner.reg_read = r;
            inner.reg_write = w;
        }
        Ok(())
    }

    fn transport_obj(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.inner.try_lock(py).and_then(|i| i.transport.as_ref().map(|t| t.clone_ref(py)))
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
    fn schedule_connection_lost(
        &self,
        py: Python<'_>,
        inner: &mut Inner,
        exc: Py<PyAny>,
    ) -> PyResult<Option<(Py<PyAny>, Py<PyAny>)>> {
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
        let proto = self.inner.try_lock(py).and_then(|i| i.protocol.as_ref().map(|p| p.clone_ref(py)))?;
        Some(proto.bind(py).call_method1(name, args))
    }

    fn maybe_pause_protocol(&self, py: Python<'_>) -> PyResult<()> {
        {
            let mut inner = self.inner(py)?;
            if inner.wbuf.len() <= inner.high || inner.protocol_paused {
                return Ok(());
            }
            inner.protocol_paused = true;
        }
        self.flow_callback(py, "pause_writing")
    }

    fn maybe_resume_protocol(&self, py: Python<'_>) -> PyResult<()> {
        {
            let mut inner = self.inner(py)?;
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

    /// The connection failed or was aborted: nothing written now reaches the peer (the
    /// protocol hears it in a callback soon).
    pub fn broken(&self, py: Python<'_>) -> bool {
        self.inner.try_lock(py).is_some_and(|i| i.conn_lost > 0)
    }

    /// Called by the loop when the descriptor is ready.
    pub fn on_ready(slf: &Bound<'_, Self>, ev: Readiness) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let ctx = match this.inner(py)?.context.as_ref() {
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

    fn close_impl(&self, py: Python<'_>) -> PyResult<()> {
        // Bytes held for the end of the iteration are written now, as `write()` would have.
        self.flush_deferred(py)?;
        let pending = {
            let mut inner = self.inner(py)?;
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
            let mut inner = self.inner(py)?;
            inner.closing = true;
            let dropped = inner.wbuf.clear();
            (self.schedule_connection_lost(py, &mut inner, exc)?, dropped)
        };
        drop(dropped);
        self.call_soon_lost(py, pending)
    }
}
