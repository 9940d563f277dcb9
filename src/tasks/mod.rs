//! swordfish's own `Future` and `Task`, whose state and logic are in Rust, and which pass
//! for `asyncio.Future` and `asyncio.Task` (`isinstance`, see `pytype`).
//!
//! Why: at large task counts the cyclic GC is half of every loop's run time, and CPython's
//! C task allocates GC-tracked objects on every await (a wake-up method object, a
//! `FutureIter`, a handle for the wake-up). A native task awaiting a native future wakes
//! without any of them: the future keeps the waiting task as a plain reference and puts
//! the task's next step straight on the loop's ready queue (`Ready::Step`), and a future is
//! its own `await` iterator.
//!
//! The loop makes them in `create_future`/`create_task` unless debug mode is on or a task
//! factory is set (then the C types are used, as in the stdlib). They behave as the C types
//! of the running interpreter do: the same methods, attributes, messages and per-version
//! differences (`cancelling`/`uncancel` from 3.11, `get_context` from 3.12, ...).

mod future;
mod future_api;
mod pytype;
mod task;
mod task_api;

pub(crate) use future::FutureCore;
pub(crate) use task::{send, Sent, StepArg, TaskCore, TaskRef};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};
use pytype::NativeType;
use std::sync::OnceLock;

/// What the native futures and tasks need from the interpreter, looked up once.
pub(crate) struct Globals {
    future: NativeType,
    task: NativeType,
    /// The classes the native types stand for (`__class__`).
    pub asyncio_future: Py<PyAny>,
    pub asyncio_task: Py<PyAny>,
    /// The interpreter's minor version (10 for 3.10, ...).
    pub minor: u8,
    pub cancelled_error: Py<PyAny>,
    pub invalid_state_error: Py<PyAny>,
    pub enter_task: Py<PyAny>,
    pub leave_task: Py<PyAny>,
    pub register_task: Py<PyAny>,
    pub iscoroutine: Py<PyAny>,
    /// `asyncio.futures._set_result_unless_cancelled`, `asyncio.sleep()`'s timer callback.
    pub sleep_callback: Py<PyAny>,
    /// `base_futures._future_repr` (3.11+) or `_future_repr_info` (3.10).
    pub future_repr: Py<PyAny>,
    /// `base_tasks._task_repr` (3.11+) or `_task_repr_info` (3.10).
    pub task_repr: Py<PyAny>,
    pub task_get_stack: Py<PyAny>,
    pub task_print_stack: Py<PyAny>,
    pub s_pending: Py<PyString>,
    pub s_cancelled: Py<PyString>,
    pub s_finished: Py<PyString>,
}

static GLOBALS: OnceLock<Globals> = OnceLock::new();

/// The globals; only None before the module finished loading.
pub(crate) fn globals() -> &'static Globals {
    // Set in `register`, before any loop (the only maker of native futures) can exist.
    GLOBALS.get().expect("swordfish._native.tasks used before registration")
}

/// Build the two types and add them to the module as `Future` and `Task`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let asyncio = py.import("asyncio")?;
    let asyncio_future = asyncio.getattr("Future")?;
    let asyncio_task = asyncio.getattr("Task")?.cast_into::<PyType>()?;
    let minor = py.version_info().minor;
    let has = |name: &str| asyncio_task.hasattr(name).unwrap_or(false);
    let future = future_api::create_type(py, minor)?;
    let task = task_api::create_type(py, minor, &has)?;
    let tasks = py.import("asyncio.tasks")?;
    let base_futures = py.import("asyncio.base_futures")?;
    let base_tasks = py.import("asyncio.base_tasks")?;
    let (future_repr, task_repr) = if minor >= 11 {
        (base_futures.getattr("_future_repr")?, base_tasks.getattr("_task_repr")?)
    } else {
        (base_futures.getattr("_future_repr_info")?, base_tasks.getattr("_task_repr_info")?)
    };
    let g = Globals {
        future,
        task,
        asyncio_future: asyncio_future.unbind(),
        asyncio_task: asyncio_task.into_any().unbind(),
        minor,
        cancelled_error: asyncio.getattr("CancelledError")?.unbind(),
        invalid_state_error: asyncio.getattr("InvalidStateError")?.unbind(),
        enter_task: tasks.getattr("_enter_task")?.unbind(),
        leave_task: tasks.getattr("_leave_task")?.unbind(),
        register_task: tasks.getattr("_register_task")?.unbind(),
        iscoroutine: py.import("asyncio.coroutines")?.getattr("iscoroutine")?.unbind(),
        sleep_callback: py.import("asyncio.futures")?.getattr("_set_result_unless_cancelled")?.unbind(),
        future_repr: future_repr.unbind(),
        task_repr: task_repr.unbind(),
        task_get_stack: base_tasks.getattr("_task_get_stack")?.unbind(),
        task_print_stack: base_tasks.getattr("_task_print_stack")?.unbind(),
        s_pending: PyString::intern(py, "PENDING").unbind(),
        s_cancelled: PyString::intern(py, "CANCELLED").unbind(),
        s_finished: PyString::intern(py, "FINISHED").unbind(),
    };
    m.add("Future", g.future.ty.bind(py))?;
    m.add("Task", g.task.ty.bind(py))?;
    // A second import of the extension (a sub-interpreter) would build other types; the
    // first ones stay in use, which is what the module's single-phase init implies anyway.
    let _ = GLOBALS.set(g);
    Ok(())
}

impl Globals {
    #[inline]
    pub(crate) fn is_future_type(&self, ty: *mut ffi::PyTypeObject) -> bool {
        ty == self.future.ty.as_ptr().cast()
    }

    #[inline]
    pub(crate) fn is_task_type(&self, ty: *mut ffi::PyTypeObject) -> bool {
        ty == self.task.ty.as_ptr().cast()
    }
}

/// The future part of a native future or task; None for any other object.
#[inline]
pub(crate) fn future_core<'a>(obj: &'a Bound<'_, PyAny>) -> Option<&'a FutureCore> {
    let g = globals();
    // SAFETY: `obj` is a live object (the borrow holds a reference); Py_TYPE only reads its
    // header.
    let ty = unsafe { ffi::Py_TYPE(obj.as_ptr()) };
    let sub = if g.is_future_type(ty) {
        &g.future
    } else if g.is_task_type(ty) {
        &g.task
    } else {
        return None;
    };
    // SAFETY: the type identifies the layout (block 0 of both types is the future part).
    // The comparison is exact: `Globals` keeps both types alive for good (their addresses
    // are never reused), neither can be subclassed (no `Py_TPFLAGS_BASETYPE`), and an
    // instance cannot change class (our `__class__` setter refuses, and `object`'s own
    // refuses a type of another layout). The block holds a valid `FutureCore` from
    // allocation on (zeroed memory is an uninitialised one, see `Hot`), only shared
    // references to it are made (it changes through `Cell`/`GilCell`), and the reference
    // lives as long as the borrow of `obj`, which keeps the object alive.
    Some(unsafe { pytype::data::<FutureCore>(obj.as_ptr(), sub.offsets[0]) })
}

/// Both parts of a native task; None for any other object.
#[inline]
pub(crate) fn task_core<'a>(obj: &'a Bound<'_, PyAny>) -> Option<TaskRef<'a>> {
    let g = globals();
    // SAFETY: as in `future_core`: reading the header of the live object `obj` borrows.
    let ty = unsafe { ffi::Py_TYPE(obj.as_ptr()) };
    if !g.is_task_type(ty) {
        return None;
    }
    // SAFETY: as in `future_core`; block 1 of the task type is the task part.
    unsafe {
        Some(TaskRef {
            fut: pytype::data::<FutureCore>(obj.as_ptr(), g.task.offsets[0]),
            task: pytype::data::<TaskCore>(obj.as_ptr(), g.task.offsets[1]),
        })
    }
}

/// A new native future bound to `lp`.
pub(crate) fn new_future<'py>(lp: &Bound<'py, crate::event_loop::LoopCore>) -> PyResult<Bound<'py, PyAny>> {
    future::alloc(lp)
}

/// A new native task running `coro` on `lp`, its first step queued.
pub(crate) fn new_task<'py>(
    lp: &Bound<'py, crate::event_loop::LoopCore>,
    coro: &Bound<'py, PyAny>,
    name: Option<&Bound<'py, PyAny>>,
    context: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    task::create(lp, coro, name, context)
}

/// The `task_wakeup` callable of a native task (for reports and foreign futures).
pub(crate) fn wakeup_callable<'py>(task: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    task_api::new_wakeup(task)
}

/// Whether `func` is `asyncio.futures._set_result_unless_cancelled`.
#[inline]
pub(crate) fn is_sleep_callback(func: &Bound<'_, PyAny>) -> bool {
    GLOBALS.get().is_some_and(|g| func.is(g.sleep_callback.bind(func.py())))
}

/// `_set_result_unless_cancelled(fut, value)`, done natively for a native future (the
/// callback `asyncio.sleep()` gives its timer), through `func` for anything else, a task
/// included (whose `set_result` refuses).
pub(crate) fn set_result_unless_cancelled(
    fut: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
    func: &Py<PyAny>,
) -> PyResult<()> {
    match plain_future_core(fut) {
        Some(core) if core.state() == future::FutState::Cancelled => Ok(()),
        Some(core) => core.set_result(fut, value),
        None => func.bind(fut.py()).call1((fut, value)).map(drop),
    }
}

/// `fut.done()`, answered without a method call for a native future or task.
pub(crate) fn is_done(fut: &Bound<'_, PyAny>) -> PyResult<bool> {
    match future_core(fut) {
        Some(core) => Ok(core.state() != future::FutState::Pending),
        None => fut.call_method0(pyo3::intern!(fut.py(), "done"))?.is_truthy(),
    }
}

/// The future part of a native future, but not of a task (whose `set_result` and
/// `set_exception` refuse).
fn plain_future_core<'a>(fut: &'a Bound<'_, PyAny>) -> Option<&'a FutureCore> {
    // SAFETY: reading the type of a live object.
    let ty = unsafe { ffi::Py_TYPE(fut.as_ptr()) };
    if globals().is_future_type(ty) {
        future_core(fut)
    } else {
        None
    }
}

/// `fut.set_result(value)`, without a method call for a native future.
pub(crate) fn set_result(fut: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
    match plain_future_core(fut) {
        Some(core) => core.set_result(fut, value),
        None => fut.call_method1(pyo3::intern!(fut.py(), "set_result"), (value,)).map(drop),
    }
}

/// `fut.set_exception(exc)`, without a method call for a native future.
pub(crate) fn set_exception(fut: &Bound<'_, PyAny>, exc: &Bound<'_, PyAny>) -> PyResult<()> {
    match plain_future_core(fut) {
        Some(core) => core.set_exception(fut, exc),
        None => fut.call_method1(pyo3::intern!(fut.py(), "set_exception"), (exc,)).map(drop),
    }
}

/// Run one queued step of a native task (`Ready::Step`).
pub(crate) fn run_step(py: Python<'_>, task: Py<PyAny>, arg: StepArg) -> PyResult<()> {
    task::run_step(py, task, arg)
}
