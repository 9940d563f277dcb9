//! `sock_recv`, `sock_recv_into` and `sock_sendall` on plain non-blocking sockets.
//!
//! The stdlib tries the socket call at once and, when it would block, installs a reader or
//! writer that retries it, plus a done-callback that removes the watcher again. Here the
//! system call is made natively both times, so the common case costs no Python frame, no
//! `BlockingIOError` and no argument tuple. The watcher is an ordinary reader/writer handle
//! whose callback is a `SockOp`: `add_reader` replacing it, `remove_reader` and the check for
//! a transport on the descriptor behave as in the stdlib. A watcher removes itself when its
//! operation completes; when the awaiting coroutine leaves early (cancelled), it removes the
//! watcher itself (`abandon`, called from `_sockets.py`).

use crate::event_loop::{LoopCore, Which};
use crate::pyutil::os_error;
use crate::sync::GilCell;
use crate::transport::pybuf::{read_into_bytes, retry_eintr, View};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{IntoPyObjectExt, PyTraverseError, PyVisit};
use std::io;
use std::os::fd::RawFd;

enum Op {
    Recv(usize),
    RecvInto(Py<PyAny>),
    SendAll { data: HeldView, sent: usize },
}

/// The view of what `sock_sendall` sends, held until the last byte is out (as the stdlib
/// holds its memoryview).
struct HeldView(View);

// SAFETY: a `HeldView` lives inside a `GilCell` (reached only with the GIL held) and is
// dropped by its owner's deallocation, which also runs with the GIL held.
unsafe impl Send for HeldView {}

/// The callback of a watcher waiting to finish one socket operation.
#[pyclass(module = "swordfish._native", frozen)]
pub struct SockOp {
    lp: Py<LoopCore>,
    sock: Py<PyAny>,
    fd: RawFd,
    which: Which,
    fut: Py<PyAny>,
    op: GilCell<Op>,
}

/// None: the call would block. Otherwise what the operation gives, or its error.
type Attempt = Option<PyResult<Py<PyAny>>>;

fn finished(py: Python<'_>, result: io::Result<Py<PyAny>>) -> Attempt {
    match result {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        Err(e) => Some(Err(os_error(py, e))),
        Ok(v) => Some(Ok(v)),
    }
}

/// `sock.recv(n)`, read through the loop's kept buffer (see `pybuf::read_into_bytes`).
fn recv(slf: &Bound<'_, LoopCore>, fd: RawFd, n: usize) -> Attempt {
    let py = slf.py();
    if n == 0 {
        // As `socket.recv(0)`: no system call, whatever the socket's state.
        return Some(Ok(PyBytes::new(py, b"").into_any().unbind()));
    }
    // SAFETY: `read_into_bytes` passes a writable buffer of `len` bytes it owns.
    match read_into_bytes(slf.get(), py, n, |buf, len| unsafe { libc::recv(fd, buf, len, 0) }) {
        Err(e) => Some(Err(e)),
        Ok(got) => finished(py, got.map(|b| b.into_any().unbind())),
    }
}

fn recv_into(py: Python<'_>, fd: RawFd, buf: &Bound<'_, PyAny>) -> Attempt {
    let view = match View::writable(buf) {
        Ok(v) => v,
        Err(_) => {
            let kind = buf.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            return Some(Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "recv_into() argument 'buffer' must be read-write bytes-like object, not {kind}"
            ))));
        }
    };
    if view.len() == 0 {
        // As `socket.recv_into` with an empty buffer: no system call.
        return Some(0usize.into_py_any(py));
    }
    // SAFETY: the view is writable and `view.len()` bytes long, and holds the buffer for the call.
    let got = retry_eintr(|| unsafe { libc::recv(fd, view.as_mut_ptr(), view.len(), 0) });
    match got {
        Ok(k) => Some(k.into_py_any(py)),
        Err(e) => finished(py, Err(e)),
    }
}

/// Send what is left of `data` until it is all out or the socket would block.
fn send_some(py: Python<'_>, fd: RawFd, data: &View, sent: &mut usize) -> Attempt {
    let bytes = data.as_slice();
    while *sent < bytes.len() {
        let rest = &bytes[*sent..];
        // SAFETY: `rest` is a live slice of the held view; send only reads it.
        match retry_eintr(|| unsafe { libc::send(fd, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) }) {
            Ok(k) => *sent += k,
            Err(e) => return finished(py, Err(e)),
        }
    }
    Some(Ok(py.None()))
}

impl SockOp {
    fn attempt(slf: &Bound<'_, Self>) -> Attempt {
        let py = slf.py();
        let this = slf.get();
        let mut op = match this.op.lock(py) {
            Ok(op) => op,
            Err(e) => return Some(Err(e)),
        };
        match &mut *op {
            Op::Recv(n) => recv(this.lp.bind(py), this.fd, *n),
            Op::RecvInto(buf) => recv_into(py, this.fd, buf.bind(py)),
            Op::SendAll { data, sent } => send_some(py, this.fd, &data.0, sent),
        }
    }

    /// Remove this operation's watcher, if it still is the one installed. `done`: the
    /// operation finished, so the socket's registration may linger for the next one.
    fn stop(slf: &Bound<'_, Self>, done: bool) -> PyResult<bool> {
        let this = slf.get();
        let py = slf.py();
        let sock = done.then(|| this.sock.bind(py));
        this.lp.get().unwatch(py, this.fd, this.which, |h| h.callback(py).is_some_and(|f| f.is(slf)), sock)
    }

    /// The operation would block now: return a future that a watcher completes.
    fn start<'py>(
        lp: &Bound<'py, LoopCore>,
        sock: &Bound<'py, PyAny>,
        fd: RawFd,
        which: Which,
        op: Op,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = lp.py();
        let fut = LoopCore::new_future(lp)?;
        let op = SockOp {
            lp: lp.clone().unbind(),
            sock: sock.clone().unbind(),
            fd,
            which,
            fut: fut.clone().unbind(),
            op: GilCell::new(op),
        };
        let handle = lp.get().native_handle(py, Bound::new(py, op)?.into_any().unbind())?;
        LoopCore::watch(lp, fd, handle, which, Some(sock))?;
        Ok(fut)
    }
}

#[pymethods]
impl SockOp {
    fn __call__(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let fut = slf.get().fut.bind(py);
        if crate::tasks::is_done(fut)? {
            // Cancelled: nothing may be consumed for a future nobody waits for.
            Self::stop(slf, false)?;
            return Ok(());
        }
        let Some(outcome) = Self::attempt(slf) else { return Ok(()) };
        Self::stop(slf, true)?;
        match outcome {
            Ok(v) => crate::tasks::set_result(fut, v.bind(py))?,
            Err(e) => crate::tasks::set_exception(fut, e.into_value(py).bind(py))?,
        }
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.lp)?;
        visit.call(&self.sock)?;
        visit.call(&self.fut)?;
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        if let Some(op) = self.op.try_lock(py) {
            if let Op::RecvInto(buf) = &*op {
                visit.call(buf)?;
            }
        }
        Ok(())
    }
}

/// The socket a `sock_*` call works on, and its descriptor.
pub struct Target<'a, 'py> {
    pub sock: &'a Bound<'py, PyAny>,
    pub fd: RawFd,
}

impl<'py> Target<'_, 'py> {
    /// The result now, or (when the socket would block) a future for it.
    fn now_or_later(
        &self,
        lp: &Bound<'py, LoopCore>,
        which: Which,
        first: Attempt,
        op: Op,
    ) -> PyResult<Bound<'py, PyAny>> {
        match first {
            Some(result) => Ok(result?.into_bound(lp.py())),
            None => SockOp::start(lp, self.sock, self.fd, which, op),
        }
    }
}

pub fn sock_recv<'py>(lp: &Bound<'py, LoopCore>, t: Target<'_, 'py>, n: isize) -> PyResult<Bound<'py, PyAny>> {
    let n = usize::try_from(n).map_err(|_| pyo3::exceptions::PyValueError::new_err("negative buffersize in recv"))?;
    t.now_or_later(lp, Which::Reader, recv(lp, t.fd, n), Op::Recv(n))
}

pub fn sock_recv_into<'py>(
    lp: &Bound<'py, LoopCore>,
    t: Target<'_, 'py>,
    buf: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let first = recv_into(lp.py(), t.fd, buf);
    t.now_or_later(lp, Which::Reader, first, Op::RecvInto(buf.clone().unbind()))
}

pub fn sock_sendall<'py>(
    lp: &Bound<'py, LoopCore>,
    t: Target<'_, 'py>,
    data: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let fd = t.fd;
    let view = View::readable(data)?;
    if view.len() == 0 {
        // Nothing to send, but a closed socket still says so, as `sock.send(b"")` does.
        // SAFETY: a length of zero: send reads nothing from the pointer.
        let got = retry_eintr(|| unsafe { libc::send(fd, view.as_mut_ptr(), 0, libc::MSG_NOSIGNAL) });
        return got.map(|_| lp.py().None().into_bound(lp.py())).map_err(|e| os_error(lp.py(), e));
    }
    let mut sent = 0;
    let first = send_some(lp.py(), fd, &view, &mut sent);
    t.now_or_later(lp, Which::Writer, first, Op::SendAll { data: HeldView(view), sent })
}

/// The coroutine waiting for `fut` left early: remove its watcher, if still installed.
pub fn abandon(lp: &Bound<'_, LoopCore>, fd: RawFd, fut: &Bound<'_, PyAny>, writing: bool) -> PyResult<bool> {
    let py = lp.py();
    let which = if writing { Which::Writer } else { Which::Reader };
    lp.get().unwatch(
        py,
        fd,
        which,
        |h| h.callback(py).is_some_and(|f| f.cast::<SockOp>().is_ok_and(|op| op.get().fut.is(fut))),
        None,
    )
}
