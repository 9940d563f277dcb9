//! Captured contexts.
//!
//! asyncio runs every callback and every task in a copy of the context that was current
//! when it was scheduled (`contextvars.copy_context()`). Each copy is a GC-tracked object
//! that lives as long as its callback or task waits, and at large task counts they are a
//! fifth of everything the cyclic GC walks. When no context variable is set — most
//! programs, most of the time — the copy is an empty context, and an empty context made
//! later cannot be told from it. So an empty copy is not kept: `Captured::Empty` stands for
//! it, and an empty context is made when an object is needed (the callback runs, or someone
//! asks for it with `get_context()`, and from then on that object is kept).

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// Stands for `Captured::Empty` where a plain object reference is stored (a future's
/// callbacks, kept at one word each): a private `object()`.
static EMPTY_MARKER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn empty_marker(py: Python<'_>) -> PyResult<&'static Py<PyAny>> {
    EMPTY_MARKER.get_or_try_init(py, || Ok(py.get_type::<PyAny>().call0()?.unbind()))
}

/// A copy of a context taken earlier.
pub enum Captured {
    Object(Py<PyAny>),
    /// A copy of a context that had no variable; no object made yet.
    Empty,
}

impl Captured {
    /// A copy of the current context, as `contextvars.copy_context()` makes it.
    pub fn current(py: Python<'_>) -> PyResult<Captured> {
        let copy = copy_current(py)?;
        Ok(if is_empty(copy.bind(py)) { Captured::Empty } else { Captured::Object(copy) })
    }

    /// The context object; an empty copy is made now and kept, so that every caller gets
    /// the same object.
    pub fn object(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let made = match self {
            Captured::Object(c) => return Ok(c.clone_ref(py)),
            Captured::Empty => new_empty(py)?,
        };
        *self = Captured::Object(made.clone_ref(py));
        Ok(made)
    }

    /// The object to run in without keeping it: the stored one, or a new empty context.
    pub fn to_run_in(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self {
            Captured::Object(c) => Ok(c.clone_ref(py)),
            Captured::Empty => new_empty(py),
        }
    }

    pub fn as_object(&self) -> Option<&Py<PyAny>> {
        match self {
            Captured::Object(c) => Some(c),
            Captured::Empty => None,
        }
    }

    /// As one object reference: the context, or the empty marker.
    pub fn into_stored(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self {
            Captured::Object(c) => Ok(c),
            Captured::Empty => Ok(empty_marker(py)?.clone_ref(py)),
        }
    }

    /// Back from `into_stored`.
    pub fn from_stored(py: Python<'_>, stored: Py<PyAny>) -> Captured {
        if is_empty_marker(py, &stored) {
            Captured::Empty
        } else {
            Captured::Object(stored)
        }
    }
}

/// Whether a stored reference is the empty marker (see `Captured::into_stored`).
pub fn is_empty_marker(py: Python<'_>, stored: &Py<PyAny>) -> bool {
    EMPTY_MARKER.get(py).is_some_and(|m| m.is(stored))
}

/// `contextvars.copy_context()`.
pub fn copy_current(py: Python<'_>) -> PyResult<Py<PyAny>> {
    // SAFETY: a C API call with the GIL held; the result is a new reference or NULL.
    unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyContext_CopyCurrent()).map(Bound::unbind) }
}

/// `contextvars.Context()`: a context with no variable.
pub fn new_empty(py: Python<'_>) -> PyResult<Py<PyAny>> {
    // SAFETY: as above.
    unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyContext_New()).map(Bound::unbind) }
}

/// Whether a context holds no variable (`len(ctx) == 0`).
pub fn is_empty(ctx: &Bound<'_, PyAny>) -> bool {
    // SAFETY: a C API call on a live object with the GIL held.
    let n = unsafe { ffi::PyObject_Size(ctx.as_ptr()) };
    if n < 0 {
        drop(PyErr::take(ctx.py()));
        return false;
    }
    n == 0
}

/// Run `f` inside `ctx` (a `contextvars.Context`), as `ctx.run(...)` does, without building a
/// bound method: how handles, task steps and transport callbacks enter their context.
pub fn in_context<T>(py: Python<'_>, ctx: &Py<PyAny>, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    // SAFETY: a live context object; entering and leaving it are paired below.
    if unsafe { ffi::PyContext_Enter(ctx.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let result = f();
    // SAFETY: the same context, entered above and still current.
    if unsafe { ffi::PyContext_Exit(ctx.as_ptr()) } != 0 {
        let exit_err = PyErr::fetch(py);
        return result.and(Err(exit_err));
    }
    result
}
