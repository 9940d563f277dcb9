//! The Python face of the native `Task`: the future's methods and attributes (a task
//! overrides `cancel`, `set_result` and `set_exception`) and the task's own.

use super::future_api::{self, boolean, getter, noargs, none, onearg, setter};
use super::pytype::{self, catch, catch_obj, getset, method_kw, method_noargs, method_o, parse};
use super::{globals, task_core, FutureCore, TaskCore, TaskRef};
use pyo3::exceptions::{PyAttributeError, PyRuntimeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{c_int, c_void, CStr};
use std::ptr;

fn core<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<TaskRef<'a>> {
    task_core(obj).ok_or_else(|| PyTypeError::new_err("not a swordfish task"))
}

/// # Safety
/// `ptr` must be live for the duration of the call.
unsafe fn this<'a, 'py>(py: Python<'py>, ptr: *mut ffi::PyObject) -> Borrowed<'a, 'py, PyAny> {
    // Borrowed, not owned: in `tp_dealloc` the count is already zero, and an owned
    // reference would free the object again when dropped.
    // SAFETY: the caller guarantees `ptr` is live for the call and keeps the borrow (whose
    // lifetime it picks) within it; a null pointer would panic, not be undefined behaviour.
    unsafe { Borrowed::from_ptr(py, ptr) }
}

pub(super) fn create_type(py: Python<'_>, minor: u8, has: &dyn Fn(&str) -> bool) -> PyResult<pytype::NativeType> {
    let overridden: [&CStr; 3] = [c"cancel", c"set_result", c"set_exception"];
    let mut methods: Vec<ffi::PyMethodDef> = future_api::future_methods(minor)
        .into_iter()
        .filter(|m| {
            // SAFETY: our names are static C strings.
            let name = unsafe { CStr::from_ptr(m.ml_name) };
            !overridden.contains(&name)
        })
        .collect();
    methods.extend([
        method_kw(c"cancel", task_cancel),
        method_o(c"set_result", task_set_result),
        method_o(c"set_exception", task_set_exception),
        method_noargs(c"get_coro", get_coro),
        method_noargs(c"get_context", get_context),
        method_noargs(c"get_name", get_name),
        method_o(c"set_name", set_name),
        method_noargs(c"cancelling", cancelling),
        method_noargs(c"uncancel", uncancel),
        method_kw(c"get_stack", get_stack),
        method_kw(c"print_stack", print_stack),
    ]);
    // The methods that came with later Pythons only where the interpreter's Task has them
    // (cancelling/uncancel from 3.11, get_context from 3.12).
    let versioned = ["cancelling", "uncancel", "get_context"];
    methods.retain(|m| {
        // SAFETY: as above.
        let name = unsafe { CStr::from_ptr(m.ml_name) }.to_str().unwrap_or("");
        !versioned.contains(&name) || has(name)
    });
    let mut getsets = future_api::future_getsets();
    getsets.extend([
        getset(c"_coro", get_coro_attr, None),
        getset(c"_fut_waiter", get_fut_waiter, None),
        getset(c"_must_cancel", get_must_cancel, None),
        getset(c"_log_destroy_pending", get_log_destroy_pending, Some(set_log_destroy_pending)),
    ]);
    pytype::create(
        py,
        c"swordfish.Task",
        &[
            (std::mem::size_of::<FutureCore>(), std::mem::align_of::<FutureCore>()),
            (std::mem::size_of::<TaskCore>(), std::mem::align_of::<TaskCore>()),
        ],
        future_api::common_slots(pytype::method_table(methods), pytype::getset_table(getsets)),
    )
}

/// The C task's `task_wakeup`: what a foreign future calls back when done.
struct WakeupDef(ffi::PyMethodDef);
// SAFETY: the definition is immutable after construction and only read by the interpreter.
unsafe impl Sync for WakeupDef {}

static WAKEUP_DEF: WakeupDef = WakeupDef(ffi::PyMethodDef {
    ml_name: c"task_wakeup".as_ptr(),
    ml_meth: ffi::PyMethodDefPointer { PyCFunction: task_wakeup },
    ml_flags: ffi::METH_O,
    ml_doc: ptr::null(),
});

/// A `task_wakeup` callable bound to `task`.
pub(super) fn new_wakeup<'py>(task: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: the definition is static; the function keeps a reference to `task`.
    unsafe {
        let def = ptr::addr_of!(WAKEUP_DEF.0).cast_mut();
        Bound::from_owned_ptr_or_err(task.py(), ffi::PyCFunction_NewEx(def, task.as_ptr(), ptr::null_mut()))
    }
}

onearg!(task_wakeup, |py, this, fut| {
    super::task::wakeup(&this, core(&this)?, &fut)?;
    none(py)
});

/// `Task.cancel(msg=None)`.
///
/// # Safety
/// Only for the interpreter, as a `METH_FASTCALL | METH_KEYWORDS` method: `obj` and the
/// arguments are live for the call, and the thread attached.
unsafe extern "C" fn task_cancel(
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
            let [msg] = parse(py, "cancel", args, nargs, kwnames, ["msg"], 0, 1)?;
            let done = core(&this)?.cancel(&this, msg.as_deref())?;
            boolean(py, done)
        })
    }
}

onearg!(task_set_result, |py, this, value| {
    let _ = (&this, &value, py);
    Err::<Py<PyAny>, _>(PyRuntimeError::new_err("Task does not support set_result operation"))
});

onearg!(task_set_exception, |py, this, value| {
    let _ = (&this, &value, py);
    Err::<Py<PyAny>, _>(PyRuntimeError::new_err("Task does not support set_exception operation"))
});

noargs!(get_coro, |py, this| core(&this)?.task.coro(py));

noargs!(get_context, |py, this| core(&this)?.task.context(py));

noargs!(get_name, |py, this| core(&this)?.task.name(py));

onearg!(set_name, |py, this, value| {
    core(&this)?.task.set_name(py, &value)?;
    none(py)
});

noargs!(cancelling, |py, this| Ok(core(&this)?.task.num_cancels().into_pyobject(py)?.into_any().unbind()));

noargs!(uncancel, |py, this| Ok(core(&this)?.task.uncancel().into_pyobject(py)?.into_any().unbind()));

/// `Task.get_stack(*, limit=None)`.
///
/// # Safety
/// As `task_cancel`.
unsafe extern "C" fn get_stack(
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
            let [limit] = parse(py, "get_stack", args, nargs, kwnames, ["limit"], 0, 0)?;
            let limit = limit.map_or_else(|| py.None().into_bound(py), |l| l.to_owned());
            Ok(globals().task_get_stack.bind(py).call1((&this, limit))?.unbind())
        })
    }
}

/// `Task.print_stack(*, limit=None, file=None)`.
///
/// # Safety
/// As `task_cancel`.
unsafe extern "C" fn print_stack(
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
            let [limit, file] = parse(py, "print_stack", args, nargs, kwnames, ["limit", "file"], 0, 0)?;
            let none = || py.None().into_bound(py);
            let limit = limit.map_or_else(none, |l| l.to_owned());
            let file = file.map_or_else(none, |f| f.to_owned());
            Ok(globals().task_print_stack.bind(py).call1((&this, limit, file))?.unbind())
        })
    }
}

getter!(get_coro_attr, |py, this| core(&this)?.task.coro(py));

getter!(get_fut_waiter, |py, this| core(&this)?.task.fut_waiter(py));

getter!(get_must_cancel, |py, this| boolean(py, core(&this)?.task.must_cancel()));

getter!(get_log_destroy_pending, |py, this| boolean(py, core(&this)?.task.log_destroy_pending()));

setter!(set_log_destroy_pending, |py, this, value| {
    let on = value.is_truthy()?;
    let _ = py;
    core(&this)?.task.set_log_destroy_pending(on)
});
