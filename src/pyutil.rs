//! Glue between Rust values and Python conventions: file descriptors, OS errors, calls.

use pyo3::exceptions::{PyAttributeError, PyKeyboardInterrupt, PyOSError, PySystemExit, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyTuple};
use pyo3::{ffi, intern};
use std::os::fd::RawFd;

/// The stdlib's `selectors._fileobj_to_fd`: an int, or an object with `fileno()`.
pub fn fileobj_to_fd(obj: &Bound<'_, PyAny>) -> PyResult<RawFd> {
    fd_from_number(fileobj_number(obj)?)
}

/// The number an int or `fileno()` gives, not yet checked (a closed socket gives -1).
pub fn fileobj_number(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    let py = obj.py();
    let fd: i64 = if obj.is_instance_of::<PyInt>() {
        obj.extract()?
    } else {
        let invalid = || PyValueError::new_err(format!("Invalid file object: {}", repr(obj)));
        match obj.call_method0(intern!(py, "fileno")) {
            Ok(v) => match v.call_method0(intern!(py, "__index__")).and_then(|i| i.extract::<i64>()) {
                Ok(fd) => fd,
                Err(_) => return Err(invalid()),
            },
            Err(e)
                if e.is_instance_of::<PyAttributeError>(py)
                    || e.is_instance_of::<PyTypeError>(py)
                    || e.is_instance_of::<PyValueError>(py) =>
            {
                return Err(invalid())
            }
            Err(e) => return Err(e),
        }
    };
    Ok(fd)
}

pub fn fd_from_number(fd: i64) -> PyResult<RawFd> {
    let invalid = || PyValueError::new_err(format!("Invalid file descriptor: {fd}"));
    if fd < 0 {
        return Err(invalid());
    }
    RawFd::try_from(fd).map_err(|_| invalid())
}

fn repr(obj: &Bound<'_, PyAny>) -> String {
    obj.repr().map(|r| r.to_string()).unwrap_or_else(|_| "<object>".to_owned())
}

/// KeyboardInterrupt and SystemExit: the exceptions that leave the loop instead of being
/// reported (as `asyncio.Handle._run` lets them).
pub fn is_exit(py: Python<'_>, err: &PyErr) -> bool {
    err.is_instance_of::<PyKeyboardInterrupt>(py) || err.is_instance_of::<PySystemExit>(py)
}

/// A step of a protocol's collected work failed: reported as unraisable (on behalf of
/// `obj`) so that the next step still runs, except KeyboardInterrupt and SystemExit, which
/// go on out.
pub fn report_step(py: Python<'_>, result: PyResult<()>, obj: &Bound<'_, PyAny>) -> PyResult<()> {
    match result {
        Err(e) if is_exit(py, &e) => Err(e),
        Err(e) => {
            e.write_unraisable(py, Some(obj));
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

/// `OSError(errno, strerror)`: Python picks the subclass (PermissionError, …) from errno.
pub fn os_error(py: Python<'_>, err: std::io::Error) -> PyErr {
    match err.raw_os_error() {
        Some(code) => {
            let msg = std::io::Error::from_raw_os_error(code).to_string();
            // Strip Rust's " (os error N)" suffix to match Python's strerror.
            let msg = msg.split(" (os error").next().unwrap_or(&msg).to_owned();
            match py.get_type::<PyOSError>().call1((code, msg)) {
                Ok(exc) => PyErr::from_value(exc),
                Err(e) => e,
            }
        }
        None => PyOSError::new_err(err.to_string()),
    }
}

/// `callable(*args)` where the last `kwnames.len()` of `args` are keyword arguments.
pub fn vectorcall_kw<'py>(
    py: Python<'py>,
    callable: &Py<PyAny>,
    args: &[&Bound<'py, PyAny>],
    kwnames: &Py<PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let nkw = kwnames.bind(py).len();
    debug_assert!(nkw <= args.len());
    let ptrs: smallvec_like::Ptrs = args.iter().map(|a| a.as_ptr()).collect();
    let npos = args.len() - nkw;
    // SAFETY: `ptrs` holds the `args.len()` live objects `args` keeps: `npos` positional
    // ones, then the values of the `nkw` names in `kwnames`; the GIL is held (`py`); the
    // result is a new reference, or NULL with an exception set.
    unsafe {
        let r = ffi::PyObject_Vectorcall(callable.as_ptr(), ptrs.as_ptr(), npos, kwnames.as_ptr());
        Bound::from_owned_ptr_or_err(py, r)
    }
}

mod smallvec_like {
    /// At most a handful of arguments: a fixed array avoids a heap allocation per call.
    pub struct Ptrs {
        buf: [*mut pyo3::ffi::PyObject; 8],
        len: usize,
    }
    impl Ptrs {
        pub fn as_ptr(&self) -> *const *mut pyo3::ffi::PyObject {
            self.buf[..self.len].as_ptr()
        }
    }
    impl FromIterator<*mut pyo3::ffi::PyObject> for Ptrs {
        fn from_iter<I: IntoIterator<Item = *mut pyo3::ffi::PyObject>>(iter: I) -> Self {
            let mut p = Ptrs { buf: [std::ptr::null_mut(); 8], len: 0 };
            for (i, x) in iter.into_iter().take(8).enumerate() {
                p.buf[i] = x;
                p.len = i + 1;
            }
            p
        }
    }
}
