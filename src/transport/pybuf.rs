//! What the transports share for talking to Python: buffer views over bytes-like objects and
//! running protocol callbacks inside a `contextvars.Context`.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

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

/// Run `f` inside `ctx` (a `contextvars.Context`), as a handle runs its callback.
pub fn in_context<R>(py: Python<'_>, ctx: &Py<PyAny>, f: impl FnOnce() -> PyResult<R>) -> PyResult<R> {
    // SAFETY: ctx is a contextvars.Context the caller holds a reference to.
    if unsafe { ffi::PyContext_Enter(ctx.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let result = f();
    // SAFETY: entered above on this thread.
    if unsafe { ffi::PyContext_Exit(ctx.as_ptr()) } != 0 {
        let exit_err = PyErr::fetch(py);
        if result.is_ok() {
            return Err(exit_err);
        }
    }
    result
}
