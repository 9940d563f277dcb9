//! The Python face of the native `Future`: its type, slots, methods and attributes. The
//! task type repeats all of these (a task's C base defines them all again, so nothing can
//! be inherited from it) and overrides a few (`task_api`).

use super::future::{FutState, FutureCore};
use super::pytype::{
    self, catch, catch_obj, catch_unraisable, getset, method_kw, method_noargs, method_o, parse, slot,
};
use super::{future_core, globals, task_core};
use pyo3::exceptions::{PyAttributeError, PyRuntimeError, PyStopIteration, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;
use pyo3::{ffi, intern};
use std::ffi::{c_int, c_void};
use std::ptr;

/// The future part of `obj`, which the method table guarantees is one of our types.
fn core<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a FutureCore> {
    future_core(obj).ok_or_else(|| PyTypeError::new_err("not a swordfish future"))
}

/// Borrow `self` in a slot or method.
///
/// # Safety
/// `ptr` must be live for the duration of the call.
unsafe fn this<'a, 'py>(py: Python<'py>, ptr: *mut ffi::PyObject) -> Borrowed<'a, 'py, PyAny> {
    // Borrowed, not owned: in `tp_dealloc` the count is already zero, and an owned
    // reference would free the object again when dropped.
    // SAFETY: the caller guarantees `ptr` is live for the call and keeps the borrow (whose
    // lifetime it picks) within it; a null pointer would panic, not be undefined behaviour.
    unsafe { Borrowed::from_ptr(py, ptr) }
}

pub(super) fn create_type(py: Python<'_>, minor: u8) -> PyResult<pytype::NativeType> {
    let methods = future_methods(minor);
    pytype::create(
        py,
        c"swordfish.Future",
        &[(std::mem::size_of::<FutureCore>(), std::mem::align_of::<FutureCore>())],
        common_slots(pytype::method_table(methods), pytype::getset_table(future_getsets())),
    )
}

/// The slots both types share; `methods` and `getsets` are the type's tables.
pub(super) fn common_slots(methods: *mut c_void, getsets: *mut c_void) -> Vec<ffi::PyType_Slot> {
    vec![
        slot(ffi::Py_tp_dealloc, dealloc as *mut c_void),
        slot(ffi::Py_tp_traverse, traverse as *mut c_void),
        slot(ffi::Py_tp_clear, clear as *mut c_void),
        slot(ffi::Py_tp_finalize, finalize as *mut c_void),
        slot(ffi::Py_tp_repr, repr as *mut c_void),
        slot(ffi::Py_tp_iter, iter_self as *mut c_void),
        slot(ffi::Py_tp_iternext, iternext as *mut c_void),
        slot(ffi::Py_am_await, iter_self as *mut c_void),
        slot(ffi::Py_am_send, am_send as *mut c_void),
        slot(ffi::Py_tp_methods, methods),
        slot(ffi::Py_tp_getset, getsets),
    ]
}

/// The methods of `asyncio.Future`, as the task type also needs them.
pub(super) fn future_methods(minor: u8) -> Vec<ffi::PyMethodDef> {
    let mut m = vec![
        method_kw(c"add_done_callback", add_done_callback),
        method_kw(c"cancel", future_cancel),
        method_noargs(c"cancelled", cancelled),
        method_noargs(c"done", done),
        method_noargs(c"result", result),
        method_noargs(c"_make_cancelled_error", make_cancelled_error),
        // The await protocol's `send`: from 3.12, a coroutine resumed with a value
        // (`coro.send(x)`) passes it on with `send` to what it awaits, and a future ignores
        // it. (No `throw`/`close`: with them the type would pass for a coroutine.)
        method_o(c"send", send),
        class_getitem(),
    ];
    // From 3.12 these take their arguments the Argument Clinic way (with the defining
    // class), which words arity errors differently.
    if minor >= 12 {
        m.extend([
            method_kw(c"remove_done_callback", remove_done_callback_312),
            method_kw(c"exception", exception_312),
            method_kw(c"set_result", set_result_312),
            method_kw(c"set_exception", set_exception_312),
            method_kw(c"get_loop", get_loop_312),
        ]);
    } else {
        m.extend([
            method_o(c"remove_done_callback", remove_done_callback),
            method_noargs(c"exception", exception),
            method_o(c"set_result", set_result),
            method_o(c"set_exception", set_exception),
            method_noargs(c"get_loop", get_loop),
        ]);
    }
    if minor < 11 {
        m.push(method_noargs(c"_repr_info", repr_info));
    }
    m
}

/// `__class_getitem__`, as on the C types (`Future[int]`).
fn class_getitem() -> ffi::PyMethodDef {
    ffi::PyMethodDef {
        ml_name: c"__class_getitem__".as_ptr(),
        ml_meth: ffi::PyMethodDefPointer { PyCFunction: ffi::Py_GenericAlias },
        ml_flags: ffi::METH_O | ffi::METH_CLASS,
        ml_doc: std::ptr::null(),
    }
}

pub(super) fn future_getsets() -> Vec<ffi::PyGetSetDef> {
    vec![
        getset(c"_state", get_state, None),
        getset(c"_loop", get_loop_attr, None),
        getset(c"_callbacks", get_callbacks, None),
        getset(c"_result", get_result, None),
        getset(c"_exception", get_exception, None),
        getset(c"_log_traceback", get_log_traceback, Some(set_log_traceback)),
        getset(c"_source_traceback", get_source_traceback, None),
        getset(c"_cancel_message", get_cancel_message, Some(set_cancel_message)),
        getset(c"_asyncio_future_blocking", get_blocking, Some(set_blocking)),
        getset(c"__class__", get_class, Some(set_class)),
    ]
}

// -- slots ---------------------------------------------------------------------------------

/// `tp_dealloc`.
///
/// # Safety
/// Only for the interpreter: `obj` is an instance of one of our types whose reference count
/// has dropped to zero, and the thread is attached.
unsafe extern "C" fn dealloc(obj: *mut ffi::PyObject) {
    // SAFETY: `obj` is ours, at count zero, on the attached thread (the slot's contract). The
    // steps are those CPython asks of a GC heap type: the finalizer first (it holds the
    // object at a count of one while it runs, and reports a resurrection, after which
    // nothing may be torn down), then untracking, so the GC never traverses a half-cleared
    // object; weak references are cleared while the memory is intact; `clear` (valid at
    // count zero) releases what the object owns, and the Rust blocks are never dropped in
    // place (what `clear` leaves owns nothing, or leaks if its cell was borrowed); `ty` is
    // read before `tp_free` (the GC allocator's counterpart, inherited), and the reference
    // every instance of a heap type holds on it is given back last.
    unsafe {
        // The finalizer (the "never retrieved" and "destroyed but pending" reports) may
        // resurrect the object.
        if ffi::PyObject_CallFinalizerFromDealloc(obj) < 0 {
            return;
        }
        ffi::PyObject_GC_UnTrack(obj.cast());
        let ty = ffi::Py_TYPE(obj);
        if pytype::has_weakrefs(obj) {
            ffi::PyObject_ClearWeakRefs(obj);
        }
        clear(obj);
        match (*ty).tp_free {
            Some(free) => free(obj.cast()),
            None => ffi::PyObject_GC_Del(obj.cast()),
        }
        ffi::Py_DECREF(ty.cast());
    }
}

/// `tp_traverse`.
///
/// # Safety
/// Only for the GC: `obj` is a live instance of one of our types, `visit`/`arg` are the
/// GC's, and the thread is attached.
unsafe extern "C" fn traverse(obj: *mut ffi::PyObject, visit: ffi::visitproc, arg: *mut c_void) -> c_int {
    // SAFETY: the GC calls `tp_traverse` with the thread attached, on a live `obj` (borrowed:
    // the GC keeps it alive), with its own `visit`/`arg`, which is what the parts'
    // `traverse` and `visit_dict` need. Only strong references the object owns are
    // reported: the parts' fields, the dict, and the type, which every instance of a heap
    // type holds a reference to (and must visit).
    unsafe {
        let py = Python::assume_attached();
        let this = this(py, obj);
        let r = match future_core(&this) {
            Some(f) => f.traverse(visit, arg),
            None => 0,
        };
        if r != 0 {
            return r;
        }
        if let Some(t) = task_core(&this) {
            let r = t.task.traverse(visit, arg);
            if r != 0 {
                return r;
            }
        }
        // Instances of a heap type own a reference to it.
        let r = visit(ffi::Py_TYPE(obj).cast(), arg);
        if r != 0 {
            return r;
        }
        pytype::visit_dict(obj, visit, arg)
    }
}

/// `tp_clear`, also called by `dealloc`.
///
/// # Safety
/// `obj` is an instance of one of our types whose memory is valid (its count may be zero,
/// from `dealloc`), and the thread is attached.
unsafe extern "C" fn clear(obj: *mut ffi::PyObject) -> c_int {
    // SAFETY: the GC (or `dealloc`) calls this on the attached thread with `obj`'s memory
    // valid, as `attached`, `this` and `clear_dict` need; `obj` is only borrowed, since at
    // a count of zero an owned reference would free it again when dropped.
    unsafe {
        pytype::attached(|py| {
            let this = this(py, obj);
            if let Some(f) = future_core(&this) {
                f.clear(py);
            }
            if let Some(t) = task_core(&this) {
                t.task.clear(py);
            }
        });
        pytype::clear_dict(obj);
        0
    }
}

/// `tp_finalize`.
///
/// # Safety
/// Only for the interpreter: `obj` is an instance of one of our types with a count of at
/// least one for the call, and the thread is attached.
unsafe extern "C" fn finalize(obj: *mut ffi::PyObject) {
    // SAFETY: `tp_finalize` runs on the attached thread with `obj` held for the call (from
    // `dealloc`, `PyObject_CallFinalizerFromDealloc` resurrects it to a count of one), which
    // is what `catch_unraisable` and `this` need.
    unsafe {
        catch_unraisable(obj, |py| {
            let this = this(py, obj);
            match task_core(&this) {
                Some(t) => t.finalize(&this),
                None => core(&this)?.finalize(&this),
            }
        })
    }
}

/// `tp_repr`.
///
/// # Safety
/// Only for the interpreter: `obj` is live for the call, and the thread attached.
unsafe extern "C" fn repr(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: the interpreter calls `tp_repr` on the attached thread, holding `obj` for the
    // call, as `catch_obj` and `this` need.
    unsafe {
        catch_obj(|py| {
            let this = this(py, obj);
            let g = globals();
            if g.minor >= 11 {
                let f = if task_core(&this).is_some() { &g.task_repr } else { &g.future_repr };
                return Ok(f.bind(py).call1((&this,))?.unbind());
            }
            let info = this.call_method0(intern!(py, "_repr_info"))?;
            let joined = PyString::new(py, " ").call_method1(intern!(py, "join"), (info,))?;
            let name = this.get_type().name()?;
            Ok(PyString::new(py, &format!("<{name} {joined}>")).into_any().unbind())
        })
    }
}

/// `tp_iter` and `am_await`: the future itself.
///
/// # Safety
/// Only for the interpreter: `obj` is live for the call, and the thread attached.
unsafe extern "C" fn iter_self(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: `obj` is live (the caller holds it) and the thread attached; both slots must
    // return a new reference, which this increment makes.
    unsafe {
        ffi::Py_INCREF(obj);
    }
    obj
}

/// One turn of `await future`: the future itself while pending (the task waits for it),
/// then its result. A future is its own iterator, so awaiting allocates nothing.
fn send_turn<'py>(this: &Bound<'py, PyAny>) -> PyResult<Result<Bound<'py, PyAny>, Py<PyAny>>> {
    let py = this.py();
    let core = core(this)?;
    core.ensure_alive(py)?;
    if core.state() == FutState::Pending {
        if !core.blocking() {
            core.set_blocking(true);
            return Ok(Ok(this.clone()));
        }
        return Err(PyRuntimeError::new_err("await wasn't used with future"));
    }
    match core.outcome(py, true)? {
        Ok(v) => Ok(Err(v)),
        Err(e) => Err(e),
    }
}

/// `am_send`: one turn of `await`.
///
/// # Safety
/// Only for the interpreter: `obj` is live for the call, `out` valid for a write, and the
/// thread attached.
unsafe extern "C" fn am_send(
    obj: *mut ffi::PyObject,
    _arg: *mut ffi::PyObject,
    out: *mut *mut ffi::PyObject,
) -> ffi::PySendResult {
    // SAFETY: the interpreter calls `am_send` on the attached thread, holding `obj` for the
    // call, with `out` pointing at its result slot; it is NULL unless a turn succeeds (what
    // `PyIter_Send` documents for PYGEN_ERROR, and a debug build's `assert` checks), and on
    // PYGEN_NEXT and PYGEN_RETURN it receives a new reference, as the protocol asks.
    unsafe {
        *out = std::ptr::null_mut();
        catch(ffi::PySendResult::PYGEN_ERROR, |py| {
            Ok(match send_turn(&this(py, obj))? {
                Ok(yielded) => {
                    *out = yielded.into_ptr();
                    ffi::PySendResult::PYGEN_NEXT
                }
                Err(value) => {
                    *out = value.into_ptr();
                    ffi::PySendResult::PYGEN_RETURN
                }
            })
        })
    }
}

/// `tp_iternext`: one turn of `await` through the iterator protocol.
///
/// # Safety
/// Only for the interpreter: `obj` is live for the call, and the thread attached.
unsafe extern "C" fn iternext(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: called on the attached thread with `obj` held for the call, as `catch` and
    // `this` need; the result is a new reference, or null with an error set (`catch`) or,
    // for a None result, without one: both are ends `tp_iternext` may report.
    unsafe {
        catch(ptr::null_mut(), |py| {
            Ok(match send_turn(&this(py, obj))? {
                Ok(yielded) => yielded.into_ptr(),
                Err(value) if value.is_none(py) => ptr::null_mut(),
                Err(value) => return Err(stop_iteration(py, value)?),
            })
        })
    }
}

// -- methods -------------------------------------------------------------------------------

/// `send(value)`, a `METH_O` method.
///
/// # Safety
/// Only for the interpreter: `obj` is live for the call, and the thread attached.
unsafe extern "C" fn send(obj: *mut ffi::PyObject, _value: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: the interpreter calls methods on the attached thread, holding `self` for the
    // call (`core` checks that it is one of ours before its data is used).
    unsafe {
        catch(ptr::null_mut(), |py| match send_turn(&this(py, obj))? {
            Ok(yielded) => Ok(yielded.into_ptr()),
            Err(value) => Err(stop_iteration(py, value)?),
        })
    }
}

/// `StopIteration(value)`, or a bare `StopIteration()` for None, as generators return.
fn stop_iteration(py: Python<'_>, value: Py<PyAny>) -> PyResult<PyErr> {
    if value.is_none(py) {
        return Ok(PyStopIteration::new_err(()));
    }
    Ok(PyErr::from_value(py.get_type::<PyStopIteration>().call1((value,))?))
}

macro_rules! noargs {
    ($name:ident, |$py:ident, $this:ident| $body:expr) => {
        /// A `METH_NOARGS` method.
        ///
        /// # Safety
        /// Only for the interpreter: `obj` is live for the call, and the thread attached.
        unsafe extern "C" fn $name(obj: *mut ffi::PyObject, _unused: *mut ffi::PyObject) -> *mut ffi::PyObject {
            // SAFETY: the interpreter calls methods on the attached thread, holding `self`
            // for the call (`core` checks that it is one of ours before its data is used).
            unsafe {
                catch_obj(|$py| {
                    let $this = this($py, obj);
                    $body
                })
            }
        }
    };
}
pub(super) use noargs;

macro_rules! onearg {
    ($name:ident, |$py:ident, $this:ident, $arg:ident| $body:expr) => {
        /// A `METH_O` method.
        ///
        /// # Safety
        /// Only for the interpreter: `obj` and `a` are live for the call, and the thread
        /// attached.
        unsafe extern "C" fn $name(obj: *mut ffi::PyObject, a: *mut ffi::PyObject) -> *mut ffi::PyObject {
            // SAFETY: as for `noargs`; the `METH_O` argument `a` is a non-null object the
            // caller also holds for the call.
            unsafe {
                catch_obj(|$py| {
                    let $this = this($py, obj);
                    let $arg = Borrowed::from_ptr($py, a);
                    $body
                })
            }
        }
    };
}
pub(super) use onearg;

pub(super) fn none(py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(py.None())
}

pub(super) fn boolean(py: Python<'_>, b: bool) -> PyResult<Py<PyAny>> {
    Ok(pyo3::types::PyBool::new(py, b).to_owned().into_any().unbind())
}

noargs!(cancelled, |py, this| {
    let c = core(&this)?;
    c.ensure_alive(py)?;
    boolean(py, c.state() == FutState::Cancelled)
});

noargs!(done, |py, this| {
    let c = core(&this)?;
    c.ensure_alive(py)?;
    boolean(py, c.state() != FutState::Pending)
});

noargs!(result, |py, this| core(&this)?.result(py));

noargs!(exception, |py, this| core(&this)?.exception(py));

noargs!(get_loop, |py, this| Ok(core(&this)?.lp(py)?.into_any()));

noargs!(make_cancelled_error, |py, this| Ok(core(&this)?.make_cancelled_error(py)?.unbind()));

noargs!(repr_info, |py, this| {
    let g = globals();
    let f = if task_core(&this).is_some() { &g.task_repr } else { &g.future_repr };
    Ok(f.bind(py).call1((&this,))?.unbind())
});

onearg!(set_result, |py, this, value| {
    core(&this)?.set_result(&this, &value)?;
    none(py)
});

onearg!(set_exception, |py, this, exc| {
    core(&this)?.set_exception(&this, &exc)?;
    none(py)
});

onearg!(remove_done_callback, |py, this, func| {
    let n = core(&this)?.remove_done_callback(&this, &func)?;
    Ok(n.into_pyobject(py)?.into_any().unbind())
});

/// `add_done_callback(fn, *, context=None)`.
///
/// # Safety
/// Only for the interpreter, as a `METH_FASTCALL | METH_KEYWORDS` method: `obj` and the
/// arguments are live for the call, and the thread attached.
unsafe extern "C" fn add_done_callback(
    obj: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: called on the attached thread, holding `self` for the call, with `args`,
    // `nargs` and `kwnames` as the interpreter passed them, which is what `parse` needs.
    unsafe {
        catch_obj(|py| {
            let this = this(py, obj);
            let [func, context] = parse(py, "add_done_callback", args, nargs, kwnames, ["fn", "context"], 1, 1)?;
            let func = func.ok_or_else(|| {
                PyTypeError::new_err("add_done_callback() takes exactly 1 positional argument (0 given)")
            })?;
            core(&this)?.add_done_callback(&this, &func, context.as_deref())?;
            none(py)
        })
    }
}

/// `Future.cancel(msg=None)`.
///
/// # Safety
/// As `add_done_callback`.
unsafe extern "C" fn future_cancel(
    obj: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: as in `add_done_callback`.
    unsafe {
        catch_obj(|py| {
            let this = this(py, obj);
            let [msg] = parse(py, "cancel", args, nargs, kwnames, ["msg"], 0, 1)?;
            let done = core(&this)?.cancel(&this, msg.as_deref())?;
            boolean(py, done)
        })
    }
}

/// The arity check of a 3.12+ Clinic method taking one positional-only argument.
///
/// # Safety
/// `args`, `nargs` and `kwnames` must be what the interpreter passed to a
/// `METH_FASTCALL | METH_KEYWORDS` method, and the result must not outlive that call.
unsafe fn clinic_one<'a, 'py>(
    py: Python<'py>,
    fname: &str,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<Borrowed<'a, 'py, PyAny>> {
    // SAFETY: decoding the count the interpreter passed.
    let positional = unsafe { ffi::PyVectorcall_NARGS(nargs as usize) } as usize;
    // SAFETY: a tuple of names, or null.
    let keywords = if kwnames.is_null() { 0 } else { unsafe { ffi::PyTuple_Size(kwnames) as usize } };
    if positional + keywords > 1 {
        return Err(PyTypeError::new_err(format!(
            "{fname}() takes at most 1 argument ({} given)",
            positional + keywords
        )));
    }
    if positional == 0 {
        return Err(PyTypeError::new_err(format!("{fname}() takes exactly 1 positional argument (0 given)")));
    }
    // SAFETY: one live positional argument.
    Ok(unsafe { Borrowed::from_ptr(py, *args) })
}

/// The arity check of a 3.12+ Clinic method taking no argument.
fn clinic_none(fname: &str, nargs: ffi::Py_ssize_t, kwnames: *mut ffi::PyObject) -> PyResult<()> {
    // SAFETY: decoding the count the interpreter passed.
    if unsafe { ffi::PyVectorcall_NARGS(nargs as usize) } != 0 || !kwnames.is_null() {
        return Err(PyTypeError::new_err(format!("{fname}() takes no arguments")));
    }
    Ok(())
}

macro_rules! clinic312 {
    ($name:ident, $fname:literal, one, |$py:ident, $this:ident, $arg:ident| $body:expr) => {
        /// A 3.12+ Clinic method of one positional-only argument.
        ///
        /// # Safety
        /// Only for the interpreter, as a `METH_FASTCALL | METH_KEYWORDS` method: `obj` and
        /// the arguments are live for the call, and the thread attached.
        unsafe extern "C" fn $name(
            obj: *mut ffi::PyObject,
            args: *const *mut ffi::PyObject,
            nargs: ffi::Py_ssize_t,
            kwnames: *mut ffi::PyObject,
        ) -> *mut ffi::PyObject {
            // SAFETY: called on the attached thread, holding `self` for the call, with
            // `args`, `nargs` and `kwnames` as the interpreter passed them, which is what
            // `clinic_one` needs; its borrow does not leave this call.
            unsafe {
                catch_obj(|$py| {
                    let $this = this($py, obj);
                    let $arg = clinic_one($py, $fname, args, nargs, kwnames)?;
                    $body
                })
            }
        }
    };
    ($name:ident, $fname:literal, none, |$py:ident, $this:ident| $body:expr) => {
        /// A 3.12+ Clinic method of no argument.
        ///
        /// # Safety
        /// Only for the interpreter, as a `METH_FASTCALL | METH_KEYWORDS` method: `obj` is
        /// live for the call, and the thread attached.
        unsafe extern "C" fn $name(
            obj: *mut ffi::PyObject,
            _args: *const *mut ffi::PyObject,
            nargs: ffi::Py_ssize_t,
            kwnames: *mut ffi::PyObject,
        ) -> *mut ffi::PyObject {
            // SAFETY: called on the attached thread, holding `self` for the call; the
            // arguments are only counted (`args` is never read).
            unsafe {
                catch_obj(|$py| {
                    let $this = this($py, obj);
                    clinic_none($fname, nargs, kwnames)?;
                    $body
                })
            }
        }
    };
}

clinic312!(remove_done_callback_312, "remove_done_callback", one, |py, this, func| {
    let n = core(&this)?.remove_done_callback(&this, &func)?;
    Ok(n.into_pyobject(py)?.into_any().unbind())
});

clinic312!(set_result_312, "set_result", one, |py, this, value| {
    core(&this)?.set_result(&this, &value)?;
    none(py)
});

clinic312!(set_exception_312, "set_exception", one, |py, this, exc| {
    core(&this)?.set_exception(&this, &exc)?;
    none(py)
});

clinic312!(exception_312, "exception", none, |py, this| core(&this)?.exception(py));

clinic312!(get_loop_312, "get_loop", none, |py, this| Ok(core(&this)?.lp(py)?.into_any()));

// -- attributes ----------------------------------------------------------------------------

macro_rules! getter {
    ($name:ident, |$py:ident, $this:ident| $body:expr) => {
        /// A getter.
        ///
        /// # Safety
        /// Only for the interpreter: `obj` is live for the call, and the thread attached.
        unsafe extern "C" fn $name(obj: *mut ffi::PyObject, _closure: *mut c_void) -> *mut ffi::PyObject {
            // SAFETY: the interpreter calls getters on the attached thread, holding `obj` for
            // the call (`core` checks that it is one of ours before its data is used).
            unsafe {
                catch_obj(|$py| {
                    let $this = this($py, obj);
                    $body
                })
            }
        }
    };
}
pub(super) use getter;

macro_rules! setter {
    ($name:ident, |$py:ident, $this:ident, $value:ident| $body:expr) => {
        /// A setter.
        ///
        /// # Safety
        /// Only for the interpreter: `obj` is live for the call, `v` null (a deletion) or
        /// live for the call, and the thread attached.
        unsafe extern "C" fn $name(obj: *mut ffi::PyObject, v: *mut ffi::PyObject, _closure: *mut c_void) -> c_int {
            // SAFETY: the interpreter calls setters on the attached thread, holding `obj` and
            // `v` for the call; a null `v` (a deletion) is refused before it is borrowed.
            unsafe {
                catch(-1, |$py| {
                    if v.is_null() {
                        return Err(PyAttributeError::new_err("cannot delete attribute"));
                    }
                    let $this = this($py, obj);
                    let $value = Borrowed::from_ptr($py, v);
                    $body;
                    Ok(0)
                })
            }
        }
    };
}
pub(super) use setter;

getter!(get_state, |py, this| {
    let g = globals();
    let c = core(&this)?;
    Ok(match c.state() {
        FutState::Pending => g.s_pending.clone_ref(py),
        FutState::Cancelled => g.s_cancelled.clone_ref(py),
        FutState::Finished => g.s_finished.clone_ref(py),
    }
    .into_any())
});

getter!(get_loop_attr, |py, this| Ok(core(&this)?.lp(py).map_or_else(|_| py.None(), |l| l.into_any())));

getter!(get_callbacks, |py, this| core(&this)?.callbacks_list(py));

getter!(get_result, |py, this| core(&this)?.raw_result(py));

getter!(get_exception, |py, this| core(&this)?.raw_exception(py));

getter!(get_log_traceback, |py, this| boolean(py, core(&this)?.log_tb()));

setter!(set_log_traceback, |py, this, value| {
    if value.is_truthy()? {
        return Err(PyValueError::new_err("_log_traceback can only be set to False"));
    }
    core(&this)?.clear_log_tb()
});

getter!(get_source_traceback, |py, this| {
    let _ = &this;
    none(py)
});

getter!(get_cancel_message, |py, this| core(&this)?.cancel_message(py));

setter!(set_cancel_message, |py, this, value| {
    core(&this)?.set_cancel_message(py, (!value.is_none()).then(|| value.to_owned().unbind()))?
});

getter!(get_blocking, |py, this| boolean(py, core(&this)?.blocking()));

setter!(set_blocking, |py, this, value| {
    let on = value.is_truthy()?;
    core(&this)?.set_blocking(on)
});

/// `__class__`: the asyncio class this object stands for (see `pytype`).
///
/// # Safety
/// Only for the interpreter: `obj` is live for the call, and the thread attached.
unsafe extern "C" fn get_class(obj: *mut ffi::PyObject, _closure: *mut c_void) -> *mut ffi::PyObject {
    // SAFETY: the interpreter calls getters on the attached thread, holding `obj` for the
    // call, as `catch_obj` and `this` need.
    unsafe {
        catch_obj(|py| {
            let this = this(py, obj);
            let g = globals();
            let cls = if task_core(&this).is_some() { &g.asyncio_task } else { &g.asyncio_future };
            Ok(cls.clone_ref(py))
        })
    }
}

/// Assigning `__class__` is refused as for any C object.
///
/// # Safety
/// Only for the interpreter: the thread is attached.
unsafe extern "C" fn set_class(_obj: *mut ffi::PyObject, _v: *mut ffi::PyObject, _closure: *mut c_void) -> c_int {
    // SAFETY: the interpreter calls setters on the attached thread, all that `catch`
    // needs; neither object is used.
    unsafe {
        catch(-1, |_py| {
            Err(PyTypeError::new_err("__class__ assignment only supported for mutable types or ModuleType subclasses"))
        })
    }
}
