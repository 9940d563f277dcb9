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

unsafe extern "C" fn dealloc(obj: *mut ffi::PyObject) {
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

unsafe extern "C" fn traverse(obj: *mut ffi::PyObject, visit: ffi::visitproc, arg: *mut c_void) -> c_int {
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

unsafe extern "C" fn clear(obj: *mut ffi::PyObject) -> c_int {
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

unsafe extern "C" fn finalize(obj: *mut ffi::PyObject) {
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

unsafe extern "C" fn repr(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
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

unsafe extern "C" fn iter_self(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
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

unsafe extern "C" fn am_send(
    obj: *mut ffi::PyObject,
    _arg: *mut ffi::PyObject,
    out: *mut *mut ffi::PyObject,
) -> ffi::PySendResult {
    unsafe {
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

unsafe extern "C" fn iternext(obj: *mut ffi::PyObject) -> *mut ffi::PyObject {
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

unsafe extern "C" fn send(obj: *mut ffi::PyObject, _value: *mut ffi::PyObject) -> *mut ffi::PyObject {
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
        unsafe extern "C" fn $name(obj: *mut ffi::PyObject, _unused: *mut ffi::PyObject) -> *mut ffi::PyObject {
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
        unsafe extern "C" fn $name(obj: *mut ffi::PyObject, a: *mut ffi::PyObject) -> *mut ffi::PyObject {
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

unsafe extern "C" fn add_done_callback(
    obj: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
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

unsafe extern "C" fn future_cancel(
    obj: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
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
        unsafe extern "C" fn $name(
            obj: *mut ffi::PyObject,
            args: *const *mut ffi::PyObject,
            nargs: ffi::Py_ssize_t,
            kwnames: *mut ffi::PyObject,
        ) -> *mut ffi::PyObject {
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
        unsafe extern "C" fn $name(
            obj: *mut ffi::PyObject,
            _args: *const *mut ffi::PyObject,
            nargs: ffi::Py_ssize_t,
            kwnames: *mut ffi::PyObject,
        ) -> *mut ffi::PyObject {
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
        unsafe extern "C" fn $name(obj: *mut ffi::PyObject, _closure: *mut c_void) -> *mut ffi::PyObject {
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
        unsafe extern "C" fn $name(obj: *mut ffi::PyObject, v: *mut ffi::PyObject, _closure: *mut c_void) -> c_int {
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
unsafe extern "C" fn get_class(obj: *mut ffi::PyObject, _closure: *mut c_void) -> *mut ffi::PyObject {
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
unsafe extern "C" fn set_class(_obj: *mut ffi::PyObject, _v: *mut ffi::PyObject, _closure: *mut c_void) -> c_int {
    unsafe {
        catch(-1, |_py| {
            Err(PyTypeError::new_err("__class__ assignment only supported for mutable types or ModuleType subclasses"))
        })
    }
}
