//! The positional arguments a handle keeps for its callback.
//!
//! Most callbacks take one argument (the C `Future` schedules `callback(future)`) or two
//! (`asyncio.sleep` schedules `_set_result_unless_cancelled(future, result)`). Keeping those
//! without a tuple matters for the cyclic GC, not only for speed: a tuple the handle holds
//! until it runs cannot go back to the interpreter's tuple free list, so when thousands of
//! callbacks are queued at once (a burst of timers firing) the free list runs dry and each new
//! tuple counts towards the next collection; its release later does not undo that once a
//! collection has reset the count. The tuple the call itself builds is released at once and
//! stays on the free list.

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::{ffi, PyTraverseError, PyVisit};

pub enum CallArgs {
    Zero,
    One(Py<PyAny>),
    Two(Py<PyAny>, Py<PyAny>),
    Many(Py<PyTuple>),
}

impl CallArgs {
    pub fn from_tuple(args: &Bound<'_, PyTuple>) -> PyResult<Self> {
        Ok(match args.len() {
            0 => CallArgs::Zero,
            1 => CallArgs::One(args.get_item(0)?.unbind()),
            2 => CallArgs::Two(args.get_item(0)?.unbind(), args.get_item(1)?.unbind()),
            _ => CallArgs::Many(args.clone().unbind()),
        })
    }

    pub fn clone_ref(&self, py: Python<'_>) -> Self {
        match self {
            CallArgs::Zero => CallArgs::Zero,
            CallArgs::One(a) => CallArgs::One(a.clone_ref(py)),
            CallArgs::Two(a, b) => CallArgs::Two(a.clone_ref(py), b.clone_ref(py)),
            CallArgs::Many(t) => CallArgs::Many(t.clone_ref(py)),
        }
    }

    /// The arguments as the tuple the stdlib's `Handle._args` is.
    pub fn to_tuple(&self, py: Python<'_>) -> PyResult<Py<PyTuple>> {
        Ok(match self {
            CallArgs::Zero => PyTuple::empty(py).unbind(),
            CallArgs::One(a) => PyTuple::new(py, [a])?.unbind(),
            CallArgs::Two(a, b) => PyTuple::new(py, [a, b])?.unbind(),
            CallArgs::Many(t) => t.clone_ref(py),
        })
    }

    /// `func(*args)`, through vectorcall.
    pub fn call(&self, py: Python<'_>, func: &Py<PyAny>) -> PyResult<()> {
        let f = func.as_ptr();
        // SAFETY: `func` and the arguments are live references held by `self` and the caller,
        // and the GIL is held (`py`).
        let result = unsafe {
            match self {
                CallArgs::Zero => ffi::PyObject_CallNoArgs(f),
                CallArgs::One(a) => ffi::PyObject_CallOneArg(f, a.as_ptr()),
                CallArgs::Two(a, b) => {
                    let argv = [a.as_ptr(), b.as_ptr()];
                    ffi::PyObject_Vectorcall(f, argv.as_ptr(), 2, std::ptr::null_mut())
                }
                CallArgs::Many(t) => ffi::PyObject_Call(f, t.as_ptr(), std::ptr::null_mut()),
            }
        };
        // SAFETY: a new reference or null with an exception set, as the calls above return.
        unsafe { Bound::from_owned_ptr_or_err(py, result) }.map(drop)
    }

    pub fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self {
            CallArgs::Zero => Ok(()),
            CallArgs::One(a) => visit.call(a),
            CallArgs::Two(a, b) => {
                visit.call(a)?;
                visit.call(b)
            }
            CallArgs::Many(t) => visit.call(t),
        }
    }
}
