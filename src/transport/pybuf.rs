//! What the transports share for talking to Python: buffer views over bytes-like objects,
//! reads into new bytes objects or native protocols (through the loop's kept read buffer), and running protocol
//! callbacks inside a `contextvars.Context`.

use crate::event_loop::LoopCore;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::io;

extern "C" {
    // Exported by CPython (PyAPI_FUNC) but not re-exported by pyo3-ffi.
    fn _PyBytes_Resize(bytes: *mut *mut ffi::PyObject, newsize: ffi::Py_ssize_t) -> libc::c_int;
}

/// A read of at most this many bytes is copied out of the loop's read buffer into a bytes
/// object of its own size; a larger one takes the buffer itself, cut to size.
pub const COPY_OUT_LIMIT: usize = 16 * 1024;
/// The smallest read buffer the loop allocates.
const MIN_KEPT: usize = 64 * 1024;
/// Read buffers larger than this are not kept between reads.
const KEEP_LIMIT: usize = 1 << 20;

/// Read at most `max` bytes into a new bytes object, with `read` (a `recv` or `read` call:
/// the count, or -1 and errno). The read goes into a buffer the loop keeps between reads, so
/// a read that would block allocates nothing, and a small message costs neither an
/// allocation of `max` bytes and a shrink nor a FIONREAD call to size it. The outer error
/// is Python's (no memory), the inner one the system call's; an empty result is end-of-file.
pub fn read_into_bytes<'py>(
    lp: &LoopCore,
    py: Python<'py>,
    max: usize,
    mut read: impl FnMut(*mut libc::c_void, usize) -> isize,
) -> PyResult<io::Result<Bound<'py, PyBytes>>> {
    let kept = lp.recv_buffer(py).filter(|b| b.as_bytes().len() >= max);
    let buf = match kept {
        Some(b) => b,
        // Big enough for the next small reads of any size as well.
        None => new_bytes(py, if max < MIN_KEPT { MIN_KEPT } else { max })?,
    };
    // SAFETY: nobody else refers to `buf` (new, or taken out of the loop's keeping), so its
    // contents may be written; it holds at least `max` bytes.
    let ptr = unsafe { ffi::PyBytes_AsString(buf.as_ptr()) };
    let n = match retry_eintr(|| read(ptr.cast(), max)) {
        Ok(n) => n,
        Err(e) => {
            keep(lp, py, buf);
            return Ok(Err(e));
        }
    };
    if n <= COPY_OUT_LIMIT {
        // SAFETY: the read wrote the first n bytes.
        let data = PyBytes::new(py, unsafe { std::slice::from_raw_parts(ptr as *const u8, n) });
        keep(lp, py, buf);
        return Ok(Ok(data));
    }
    shrink(py, buf, n).map(Ok)
}

/// Read at most `max` bytes into the loop's kept read buffer and hand them to `take` as a
/// slice, for a native protocol that parses them where they are: no bytes object per read,
/// and a buffer on the heap large enough that a 64 KiB WebSocket frame and its header come
/// in one read. `Ok(Err)` is the system call's error, an empty slice end-of-file.
pub fn read_into_slice<R>(
    lp: &LoopCore,
    py: Python<'_>,
    max: usize,
    mut read: impl FnMut(*mut libc::c_void, usize) -> isize,
    take: impl FnOnce(&[u8]) -> R,
) -> PyResult<io::Result<R>> {
    let buf = match lp.recv_buffer(py).filter(|b| b.as_bytes().len() >= max) {
        Some(b) => b,
        None => new_bytes(py, max)?,
    };
    // SAFETY: nobody else refers to `buf` (new, or taken out of the loop's keeping, so that a
    // read made while `take` runs gets a buffer of its own); it holds at least `max` bytes.
    let ptr = unsafe { ffi::PyBytes_AsString(buf.as_ptr()) };
    let result = retry_eintr(|| read(ptr.cast(), max)).map(|n| {
        // SAFETY: the read wrote the first n bytes, and nothing else writes them while the
        // slice lives.
        take(unsafe { std::slice::from_raw_parts(ptr as *const u8, n) })
    });
    keep(lp, py, buf);
    Ok(result)
}

/// Give the read buffer back to the loop, unless it is too large to keep.
fn keep(lp: &LoopCore, py: Python<'_>, buf: Bound<'_, PyBytes>) {
    if buf.as_bytes().len() <= KEEP_LIMIT {
        lp.keep_recv_buffer(py, buf);
    }
}

/// Read at most `size` bytes into a new bytes object of that size, cut to what was read.
pub fn read_sized<'py>(
    py: Python<'py>,
    size: usize,
    mut read: impl FnMut(*mut libc::c_void, usize) -> isize,
) -> PyResult<io::Result<Bound<'py, PyBytes>>> {
    let buf = new_bytes(py, size)?;
    // SAFETY: a new bytes object only we refer to, of `size` bytes.
    let ptr = unsafe { ffi::PyBytes_AsString(buf.as_ptr()) };
    match retry_eintr(|| read(ptr.cast(), size)) {
        Err(e) => Ok(Err(e)),
        Ok(n) => shrink(py, buf, n).map(Ok),
    }
}

/// Make a system call (the count, or -1 and errno), again while a signal interrupts it
/// (PEP 475).
pub fn retry_eintr(mut call: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let n = call();
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// An uninitialised bytes object of `n` bytes.
fn new_bytes(py: Python<'_>, n: usize) -> PyResult<Bound<'_, PyBytes>> {
    // SAFETY: PyBytes_FromStringAndSize with a null pointer allocates without filling.
    unsafe {
        let obj = ffi::PyBytes_FromStringAndSize(std::ptr::null(), n as ffi::Py_ssize_t);
        Bound::from_owned_ptr_or_err(py, obj).map(|b| b.cast_into_unchecked())
    }
}

/// `buf`, cut to its first `n` bytes.
fn shrink<'py>(py: Python<'py>, buf: Bound<'py, PyBytes>, n: usize) -> PyResult<Bound<'py, PyBytes>> {
    if n == buf.as_bytes().len() {
        return Ok(buf);
    }
    let mut obj = buf.into_ptr();
    // SAFETY: we own the only reference; on failure _PyBytes_Resize frees it and sets an error.
    unsafe {
        if _PyBytes_Resize(&mut obj, n as ffi::Py_ssize_t) != 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, obj).cast_into_unchecked())
    }
}

/// A contiguous buffer view (PyBUF_SIMPLE, or writable as `socket.recv_into` asks), released
/// on drop. A non-contiguous object is refused with Python's BufferError.
pub struct View(ffi::Py_buffer);

impl View {
    pub fn readable(obj: &Bound<'_, PyAny>) -> PyResult<View> {
        View::get(obj, ffi::PyBUF_SIMPLE)
    }

    pub fn writable(obj: &Bound<'_, PyAny>) -> PyResult<View> {
        View::get(obj, ffi::PyBUF_WRITABLE)
    }

    fn get(obj: &Bound<'_, PyAny>, flags: std::os::raw::c_int) -> PyResult<View> {
        // SAFETY: Py_buffer is plain data filled in by PyObject_GetBuffer.
        let mut view: ffi::Py_buffer = unsafe { std::mem::zeroed() };
        // SAFETY: `obj` is a live object we hold; the call fills `view` or sets an error.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut view, flags) } != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(View(view))
    }

    pub fn len(&self) -> usize {
        self.0.len.max(0) as usize
    }

    pub fn as_slice(&self) -> &[u8] {
        if self.0.len <= 0 || self.0.buf.is_null() {
            return &[];
        }
        // SAFETY: both flag sets give one contiguous block of `len` bytes.
        unsafe { std::slice::from_raw_parts(self.0.buf as *const u8, self.0.len as usize) }
    }

    /// Where a read may write (only meaningful for a writable view).
    pub fn as_mut_ptr(&self) -> *mut libc::c_void {
        self.0.buf
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // SAFETY: obtained by PyObject_GetBuffer; the GIL is held wherever views live.
        unsafe { ffi::PyBuffer_Release(&mut self.0) }
    }
}

/// Run `f` on the bytes of a bytes-like object without copying them.
pub fn with_bytes<R>(data: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> PyResult<R>) -> PyResult<R> {
    if let Ok(b) = data.cast::<PyBytes>() {
        return f(b.as_bytes());
    }
    let view = View::readable(data)?;
    f(view.as_slice())
}
