//! The state of a native task and its steps: running the coroutine up to its next `await`,
//! and arranging to be woken when what it awaits is done.
//!
//! This follows the C task of the running interpreter step for step (`task_step_impl`,
//! `task_step_handle_result_impl`, `task_wakeup`), with one difference in mechanism: when
//! the awaited object is a native future of the same loop, the task is registered on it as
//! a plain reference and woken by a `Ready::Step` on the loop's queue, where the C task
//! allocates a wake-up method object and the loop a handle.

use super::future::{alloc_instance, invalid_state, FutState, FutureCore};
use super::{future_core, globals, pytype, task_core};
use crate::context::Captured;
use crate::event_loop::LoopCore;
use crate::sync::GilCell;
use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError, PySystemExit, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use pyo3::{ffi, intern};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a queued step does first.
pub(crate) enum StepArg {
    /// Resume the coroutine (`coro.send(None)`).
    Send,
    /// Throw this exception into the coroutine.
    Throw(Py<PyAny>),
    /// The awaited future is done: resume with its outcome (`task_wakeup`).
    Wakeup(Py<PyAny>),
}

impl StepArg {
    pub(crate) fn object(&self) -> Option<&Py<PyAny>> {
        match self {
            StepArg::Send => None,
            StepArg::Throw(o) | StepArg::Wakeup(o) => Some(o),
        }
    }
}

/// Numbers for the names of unnamed tasks ("Task-N").
static TASK_COUNTER: AtomicU64 = AtomicU64::new(0);

/// What a task's `context` is. A task made where no context variable is set gets an empty
/// copy of the context, which is not made until needed (see `crate::context`): each step
/// runs in a new empty context, let go after the step unless the step leaves a variable in
/// it or something else refers to it. (A plain enum, so that zeroed memory is valid.)
#[repr(u8)]
#[derive(Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContextKind {
    /// The task's own context; None: the task is not initialised.
    #[default]
    Own = 0,
    /// An empty copy, not made (`context` is None).
    Empty = 1,
    /// The empty context made for the step running now.
    Step = 2,
}

#[derive(Default)]
pub(crate) struct TaskHot {
    pub coro: Option<Py<PyAny>>,
    pub context: Option<Py<PyAny>>,
    pub context_kind: ContextKind,
    pub fut_waiter: Option<Py<PyAny>>,
    /// The given name (a str); None: "Task-{number}", formatted when first asked.
    pub name: Option<Py<PyAny>>,
}

/// A task's own data (its future part is a `FutureCore` of its own, elsewhere in the
/// object: see `pytype::layout`). All zero is a valid, uninitialised task.
pub(crate) struct TaskCore {
    pub(crate) t: GilCell<TaskHot>,
    must_cancel: Cell<bool>,
    log_destroy_pending: Cell<bool>,
    num_cancels: Cell<i32>,
    number: Cell<u64>,
}

/// Both parts of a native task.
#[derive(Clone, Copy)]
pub(crate) struct TaskRef<'a> {
    pub fut: &'a FutureCore,
    pub task: &'a TaskCore,
}

/// `coroutines.iscoroutine(obj)`, with the C task's fast path for native coroutines.
fn is_coroutine(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    // SAFETY: `obj` is a live object we borrow; the check only reads its type.
    if unsafe { ffi::PyCoro_CheckExact(obj.as_ptr()) } != 0 {
        return Ok(true);
    }
    globals().iscoroutine.bind(obj.py()).call1((obj,))?.is_truthy()
}

pub(super) fn create<'py>(
    lp: &Bound<'py, LoopCore>,
    coro: &Bound<'py, PyAny>,
    name: Option<&Bound<'py, PyAny>>,
    context: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = lp.py();
    let g = globals();
    // In the C task's order: a task whose name cannot be made a string is dropped pending
    // (and reported so); one whose coroutine is not one is dropped quietly.
    let obj = alloc_instance(py, g.task.ty.as_ptr().cast())?;
    let core = task_core(&obj).ok_or_else(uninitialized)?;
    core.fut.init(py, lp.clone().unbind())?;
    if !is_coroutine(coro)? {
        return Err(PyTypeError::new_err(format!("a coroutine was expected, got {}", coro.repr()?)));
    }
    // The context copy is made after the task, as the C task makes it: the cyclic GC
    // visits objects in the order they were made, and an object it meets before the one
    // that refers to it costs it a move to the unreachable list and back, in every
    // collection.
    let (context, kind) = match context {
        Some(c) if !c.is_none() => (Some(c.clone().unbind()), ContextKind::Own),
        _ => match Captured::current(py)? {
            Captured::Object(c) => (Some(c), ContextKind::Own),
            Captured::Empty => (None, ContextKind::Empty),
        },
    };
    {
        let mut t = core.task.t.lock(py)?;
        t.coro = Some(coro.clone().unbind());
        t.context = context;
        t.context_kind = kind;
    }
    core.task.log_destroy_pending.set(true);
    match name {
        Some(n) if !n.is_none() => core.task.set_name(py, n)?,
        _ => core.task.number.set(TASK_COUNTER.fetch_add(1, Ordering::Relaxed) + 1),
    }
    LoopCore::push_step(lp, obj.clone().unbind(), StepArg::Send)?;
    g.register_task.bind(py).call1((&obj,))?;
    Ok(obj)
}

/// Run a queued step in the task's context.
pub(super) fn run_step(py: Python<'_>, task: Py<PyAny>, arg: StepArg) -> PyResult<()> {
    let task = task.into_bound(py);
    let core = task_core(&task).ok_or_else(uninitialized)?;
    let (ctx, made) = core.task.step_context(py)?;
    let result = crate::context::in_context(py, &ctx, || match arg {
        StepArg::Send => step(&task, core, None),
        StepArg::Throw(exc) => step(&task, core, Some(exc.into_bound(py))),
        StepArg::Wakeup(fut) => wakeup(&task, core, &fut.into_bound(py)),
    });
    if made {
        core.task.end_step_context(py, ctx);
    }
    result
}

/// The awaited future is done: step with its result or its exception (`task_wakeup`).
pub(super) fn wakeup(task: &Bound<'_, PyAny>, core: TaskRef<'_>, fut: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = task.py();
    let exc = match future_core(fut) {
        Some(fc) => match fc.outcome(py, false)? {
            Ok(_) => None,
            Err(e) => Some(e.into_value(py).into_bound(py).into_any()),
        },
        None => match fut.call_method0(intern!(py, "result")) {
            Ok(_) => None,
            Err(e) => Some(e.into_value(py).into_bound(py).into_any()),
        },
    };
    step(task, core, exc)
}

/// One step, between `_enter_task` and `_leave_task` (`task_step`).
fn step(task: &Bound<'_, PyAny>, core: TaskRef<'_>, exc: Option<Bound<'_, PyAny>>) -> PyResult<()> {
    let py = task.py();
    let g = globals();
    let lp = core.fut.lp(py)?;
    g.enter_task.bind(py).call1((lp.bind(py), task))?;
    let result = step_impl(task, core, exc);
    let left = g.leave_task.bind(py).call1((lp.bind(py), task));
    match (result, left) {
        (Err(e), Err(leave)) => {
            leave.set_context(py, Some(e));
            Err(leave)
        }
        (Err(e), Ok(_)) => Err(e),
        (Ok(()), Err(leave)) => Err(leave),
        (Ok(()), Ok(_)) => Ok(()),
    }
}

fn is_cancelled_error(py: Python<'_>, exc: &Bound<'_, PyAny>) -> PyResult<bool> {
    exc.is_instance(globals().cancelled_error.bind(py))
}

fn step_impl(task: &Bound<'_, PyAny>, core: TaskRef<'_>, exc: Option<Bound<'_, PyAny>>) -> PyResult<()> {
    let py = task.py();
    if core.fut.state() != FutState::Pending {
        let exc_repr = match &exc {
            Some(e) => e.repr()?.to_string(),
            None => "None".to_owned(),
        };
        return Err(invalid_state(py, &format!("_step(): already done: {} {}", task.repr()?, exc_repr)));
    }
    let mut exc = exc;
    if core.task.must_cancel.get() {
        let keep = match &exc {
            Some(e) => is_cancelled_error(py, e)?,
            None => false,
        };
        if !keep {
            exc = Some(core.fut.cancelled_error(py)?);
        }
        core.task.must_cancel.set(false);
    }
    let old_waiter = core.task.t.lock(py)?.fut_waiter.take();
    drop(old_waiter);
    let coro = core.task.t.lock(py)?.coro.as_ref().map(|c| c.clone_ref(py));
    let coro = coro.ok_or_else(uninitialized)?;
    let coro = coro.bind(py);
    let sent = match &exc {
        None => send(coro),
        Some(e) => match coro.call_method1(intern!(py, "throw"), (e,)) {
            Ok(yielded) => Sent::Yielded(yielded),
            Err(err) => stop_value(py, err),
        },
    };
    drop(exc);
    match sent {
        Sent::Returned(value) => {
            if core.task.must_cancel.get() {
                // Cancelled right before the coroutine returned.
                core.task.must_cancel.set(false);
                let msg = core.fut.cancel_message(py)?;
                core.fut.cancel(task, Some(msg.bind(py)))?;
            } else {
                core.fut.set_result(task, &value)?;
            }
            Ok(())
        }
        Sent::Raised(err) => {
            let value = err.into_value(py).into_bound(py).into_any();
            if is_cancelled_error(py, &value)? {
                core.fut.set_cancelled_exc(py, Some(value.unbind()))?;
                core.fut.cancel(task, None)?;
                return Ok(());
            }
            core.fut.set_exception(task, &value)?;
            if value.is_instance_of::<PyKeyboardInterrupt>() || value.is_instance_of::<PySystemExit>() {
                return Err(PyErr::from_value(value));
            }
            Ok(())
        }
        Sent::Yielded(result) => handle_yield(task, core, result),
    }
}

pub(crate) enum Sent<'py> {
    Yielded(Bound<'py, PyAny>),
    Returned(Bound<'py, PyAny>),
    Raised(PyErr),
}

/// `coro.send(None)` through the send protocol (no StopIteration object on return).
pub(crate) fn send<'py>(coro: &Bound<'py, PyAny>) -> Sent<'py> {
    let py = coro.py();
    let mut out: *mut ffi::PyObject = std::ptr::null_mut();
    // SAFETY: a live iterator-like object; `out` receives a new reference or stays null.
    let status = unsafe { ffi::PyIter_Send(coro.as_ptr(), ffi::Py_None(), &mut out) };
    match status {
        // SAFETY: on PYGEN_NEXT and PYGEN_RETURN, PyIter_Send stored a new, non-null
        // reference in `out`, which we take over.
        ffi::PySendResult::PYGEN_NEXT => Sent::Yielded(unsafe { Bound::from_owned_ptr(py, out) }),
        // SAFETY: as above.
        ffi::PySendResult::PYGEN_RETURN => Sent::Returned(unsafe { Bound::from_owned_ptr(py, out) }),
        ffi::PySendResult::PYGEN_ERROR => Sent::Raised(PyErr::fetch(py)),
    }
}

/// The outcome of `coro.throw(...)` that raised: StopIteration is a return.
fn stop_value(py: Python<'_>, err: PyErr) -> Sent<'_> {
    if err.is_instance_of::<pyo3::exceptions::PyStopIteration>(py) {
        let value = err.value(py).getattr(intern!(py, "value")).unwrap_or_else(|_| py.None().into_bound(py));
        return Sent::Returned(value);
    }
    Sent::Raised(err)
}

/// What the coroutine yielded (`task_step_handle_result_impl`).
fn handle_yield(task: &Bound<'_, PyAny>, core: TaskRef<'_>, result: Bound<'_, PyAny>) -> PyResult<()> {
    let py = task.py();
    if result.is(task) {
        let msg = format!("Task cannot await on itself: {}", task.repr()?);
        return error_soon(task, &msg);
    }
    let lp_ptr = core.fut.lp_ptr(py);
    if let Some(rc) = future_core(&result) {
        if rc.lp_ptr(py) != lp_ptr {
            return different_loop(task, &result);
        }
        if !rc.blocking() {
            return yield_instead_of_yield_from(task, &result);
        }
        rc.set_blocking(false);
        rc.add_task_waiter(&result, task)?;
        return wait_on(task, core, result, true);
    }
    if result.is_none() {
        // A bare yield gives up one loop iteration.
        return LoopCore::push_step(core.fut.lp(py)?.bind(py), task.clone().unbind(), StepArg::Send);
    }
    let blocking = match result.getattr_opt(intern!(py, "_asyncio_future_blocking"))? {
        Some(b) if !b.is_none() => Some(b.is_truthy()?),
        _ => None,
    };
    if let Some(blocking) = blocking {
        let other_loop = future_loop(&result)?;
        if other_loop.as_ptr() != lp_ptr {
            return different_loop(task, &result);
        }
        if !blocking {
            return yield_instead_of_yield_from(task, &result);
        }
        result.setattr(intern!(py, "_asyncio_future_blocking"), false)?;
        let wake = super::task_api::new_wakeup(task)?;
        let ctx = core.task.context(py)?;
        let kwargs = PyDict::new(py);
        kwargs.set_item(intern!(py, "context"), ctx)?;
        result.call_method(intern!(py, "add_done_callback"), (wake,), Some(&kwargs))?;
        return wait_on(task, core, result, false);
    }
    // SAFETY: `result` is a live object we hold; the check only reads its type.
    if unsafe { ffi::PyGen_Check(result.as_ptr()) } != 0 {
        let msg = format!(
            "yield was used instead of yield from for generator in task {} with {}",
            task.repr()?,
            result.repr()?
        );
        return error_soon(task, &msg);
    }
    let msg = format!("Task got bad yield: {}", result.repr()?);
    error_soon(task, &msg)
}

/// Record what the task now waits for, and pass on a cancellation asked for meanwhile.
fn wait_on(task: &Bound<'_, PyAny>, core: TaskRef<'_>, result: Bound<'_, PyAny>, native: bool) -> PyResult<()> {
    let py = task.py();
    let old = core.task.t.lock(py)?.fut_waiter.replace(result.clone().unbind());
    drop(old);
    if core.task.must_cancel.get() {
        let msg = core.fut.cancel_message(py)?;
        let cancelled = if native {
            cancel_native(&result, Some(msg.bind(py)))?
        } else {
            result.call_method1(intern!(py, "cancel"), (msg,))?.is_truthy()?
        };
        if cancelled {
            core.task.must_cancel.set(false);
        }
    }
    Ok(())
}

/// `obj.cancel(msg)` for a native future or task, without a method call.
pub(super) fn cancel_native(obj: &Bound<'_, PyAny>, msg: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    if let Some(t) = task_core(obj) {
        return t.cancel(obj, msg);
    }
    match future_core(obj) {
        Some(f) => f.cancel(obj, msg),
        None => obj.call_method1(intern!(obj.py(), "cancel"), (msg,))?.is_truthy(),
    }
}

/// `futures._get_loop(fut)`: `get_loop()`, else the `_loop` attribute.
fn future_loop<'py>(fut: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = fut.py();
    match fut.getattr_opt(intern!(py, "get_loop"))? {
        Some(get_loop) => get_loop.call0(),
        None => fut.getattr(intern!(py, "_loop")),
    }
}

fn different_loop(task: &Bound<'_, PyAny>, result: &Bound<'_, PyAny>) -> PyResult<()> {
    let msg = format!("Task {} got Future {} attached to a different loop", task.repr()?, result.repr()?);
    error_soon(task, &msg)
}

fn yield_instead_of_yield_from(task: &Bound<'_, PyAny>, result: &Bound<'_, PyAny>) -> PyResult<()> {
    let msg = format!("yield was used instead of yield from in task {} with {}", task.repr()?, result.repr()?);
    error_soon(task, &msg)
}

/// Queue a step that throws `RuntimeError(msg)` into the coroutine.
fn error_soon(task: &Bound<'_, PyAny>, msg: &str) -> PyResult<()> {
    let py = task.py();
    let exc = PyRuntimeError::new_err(msg.to_owned()).into_value(py).into_any();
    let core = task_core(task).ok_or_else(uninitialized)?;
    LoopCore::push_step(core.fut.lp(py)?.bind(py), task.clone().unbind(), StepArg::Throw(exc))
}

fn uninitialized() -> PyErr {
    PyRuntimeError::new_err("uninitialized Task object")
}

impl TaskCore {
    /// The task's context object (`get_context()`); from now on the task keeps it.
    pub(crate) fn context(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut t = self.t.lock(py)?;
        let obj = match (&t.context, t.context_kind) {
            (Some(c), ContextKind::Own) => return Ok(c.clone_ref(py)),
            (Some(c), ContextKind::Step) => c.clone_ref(py),
            (None, ContextKind::Empty) => crate::context::new_empty(py)?,
            _ => return Err(uninitialized()),
        };
        // What this replaces is `obj` itself or nothing: nothing is freed under the lock.
        t.context = Some(obj.clone_ref(py));
        t.context_kind = ContextKind::Own;
        Ok(obj)
    }

    /// The context a step runs in, and whether it is a new one made for this step.
    fn step_context(&self, py: Python<'_>) -> PyResult<(Py<PyAny>, bool)> {
        let mut t = self.t.lock(py)?;
        match (&t.context, t.context_kind) {
            (Some(c), _) => Ok((c.clone_ref(py), false)),
            (None, ContextKind::Empty) => {
                let c = crate::context::new_empty(py)?;
                t.context = Some(c.clone_ref(py));
                t.context_kind = ContextKind::Step;
                Ok((c, true))
            }
            (None, _) => Err(uninitialized()),
        }
    }

    /// After a step in a context made for it: the context is let go again when the step
    /// left no variable in it and nothing else refers to it (only the task and `ctx` do);
    /// otherwise it is the task's own from now on.
    fn end_step_context(&self, py: Python<'_>, ctx: Py<PyAny>) {
        // SAFETY: `ctx` is a strong reference we own, so the object is live; this only reads
        // its reference count.
        let unused = unsafe { ffi::Py_REFCNT(ctx.as_ptr()) } == 2 && crate::context::is_empty(ctx.bind(py));
        let Ok(mut t) = self.t.lock(py) else { return };
        // Already the task's own when `get_context()` was called during the step.
        if t.context_kind != ContextKind::Step || !t.context.as_ref().is_some_and(|c| c.is(&ctx)) {
            return;
        }
        if unused {
            t.context_kind = ContextKind::Empty;
            let old = t.context.take();
            drop(t);
            drop(old);
        } else {
            t.context_kind = ContextKind::Own;
        }
    }

    /// The coroutine, None once cleared.
    pub(crate) fn coro(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.t.lock(py)?.coro.as_ref().map_or_else(|| py.None(), |c| c.clone_ref(py)))
    }

    pub(crate) fn fut_waiter(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.t.lock(py)?.fut_waiter.as_ref().map_or_else(|| py.None(), |c| c.clone_ref(py)))
    }

    pub(crate) fn must_cancel(&self) -> bool {
        self.must_cancel.get()
    }

    pub(crate) fn log_destroy_pending(&self) -> bool {
        self.log_destroy_pending.get()
    }

    pub(crate) fn set_log_destroy_pending(&self, on: bool) {
        self.log_destroy_pending.set(on)
    }

    pub(crate) fn num_cancels(&self) -> i32 {
        self.num_cancels.get()
    }

    /// `Task.uncancel()` (3.11+).
    pub(crate) fn uncancel(&self) -> i32 {
        let n = self.num_cancels.get();
        if n > 0 {
            self.num_cancels.set(n - 1);
            if n == 1 && globals().minor >= 13 {
                self.must_cancel.set(false);
            }
        }
        self.num_cancels.get()
    }

    pub(crate) fn name(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut t = self.t.lock(py)?;
        if let Some(n) = &t.name {
            return Ok(n.clone_ref(py));
        }
        if self.number.get() == 0 {
            // Never named: creation failed on the name (the C task's name is then NULL).
            return Ok(py.None());
        }
        let name = PyString::new(py, &format!("Task-{}", self.number.get())).into_any().unbind();
        t.name = Some(name.clone_ref(py));
        Ok(name)
    }

    pub(crate) fn set_name(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let name = if value.is_exact_instance_of::<PyString>() { value.clone() } else { value.str()?.into_any() };
        let old = self.t.lock(py)?.name.replace(name.unbind());
        drop(old);
        Ok(())
    }

    /// # Safety
    /// `visit` and `arg` must come from the GC, in the `tp_traverse` of the task this part
    /// belongs to (so the thread is attached).
    pub(crate) unsafe fn traverse(&self, visit: ffi::visitproc, arg: *mut c_void) -> std::ffi::c_int {
        // SAFETY: the caller runs inside `tp_traverse`, which the GC calls with the thread
        // attached; the token only serves `try_lock` (no Python object is made or released here).
        let py = unsafe { Python::assume_attached() };
        let Some(t) = self.t.try_lock(py) else { return 0 };
        for o in [&t.coro, &t.context, &t.fut_waiter, &t.name].into_iter().flatten() {
            // SAFETY: `o` is a strong reference the task owns (a field of `TaskHot`, kept in
            // place by the borrow `t`); `visit`/`arg` are the GC's (the caller's guarantee).
            let r = unsafe { pytype::visit_ptr(o.as_ptr(), visit, arg) };
            if r != 0 {
                return r;
            }
        }
        0
    }

    pub(crate) fn clear(&self, py: Python<'_>) {
        let taken = self.t.try_lock(py).map(|mut t| std::mem::take(&mut *t));
        drop(taken);
    }
}

impl TaskRef<'_> {
    /// `Task.cancel(msg)`.
    pub(crate) fn cancel(&self, task: &Bound<'_, PyAny>, msg: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let py = task.py();
        self.fut.clear_log_tb();
        if self.fut.state() != FutState::Pending {
            return Ok(false);
        }
        if globals().minor >= 11 {
            self.task.num_cancels.set(self.task.num_cancels.get() + 1);
        }
        let waiter = self.task.t.lock(py)?.fut_waiter.as_ref().map(|w| w.clone_ref(py));
        if let Some(w) = waiter {
            let w = w.bind(py);
            let msg_obj = msg.cloned().unwrap_or_else(|| py.None().into_bound(py));
            let done = if future_core(w).is_some() {
                cancel_native(w, Some(&msg_obj))?
            } else {
                w.call_method1(intern!(py, "cancel"), (msg_obj,))?.is_truthy()?
            };
            if done {
                return Ok(true);
            }
        }
        self.task.must_cancel.set(true);
        self.fut.set_cancel_message(py, msg.filter(|m| !m.is_none()).map(|m| m.clone().unbind()))?;
        Ok(true)
    }

    /// The finalizer's report of a task destroyed while pending, then the future's.
    pub(crate) fn finalize(&self, task: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = task.py();
        if self.fut.state() == FutState::Pending && self.task.log_destroy_pending.get() {
            if let Ok(lp) = self.fut.lp(py) {
                let context = PyDict::new(py);
                context.set_item("message", "Task was destroyed but it is pending!")?;
                context.set_item("task", task)?;
                let handler = lp.bind(py).getattr(intern!(py, "call_exception_handler"))?;
                if let Err(e) = handler.call1((context,)) {
                    e.write_unraisable(py, Some(&handler));
                }
            }
        }
        self.fut.finalize(task)
    }
}
