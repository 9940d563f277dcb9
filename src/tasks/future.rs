//! The state of a native future, shared by `Future` and `Task` (a task is a future too), and
//! the operations the C `Future` implements: results, exceptions, cancellation and the
//! done callbacks.

use super::{future_core, globals, pytype, task_core};
use crate::context::Captured;
use crate::event_loop::LoopCore;
use crate::sync::GilCell;
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use pyo3::{ffi, intern};
use std::cell::Cell;
use std::ffi::c_void;

#[repr(u8)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum FutState {
    Pending = 0,
    Cancelled = 1,
    Finished = 2,
}

/// A done callback. `context` None marks a native task waiting for this future: it is
/// woken by queueing its next step, with no handle and no wake-up object. A context of
/// Python None (given as `context=None`) means a copy of the context current when the
/// callback is scheduled; a captured empty context is stored as its marker (see
/// `Captured::into_stored`).
pub(crate) struct Callback {
    pub func: Py<PyAny>,
    pub context: Option<Py<PyAny>>,
}

/// The first done callback, kept in two fields because zeroed memory must read as "none":
/// Rust promises that only for an `Option` of a pointer type (`Py` is a transparent
/// `NonNull`), not for an `Option<Callback>`, whose `None` the compiler may lay out as it
/// likes. `context` is None whenever `func` is.
#[derive(Default)]
pub(crate) struct FirstCallback {
    func: Option<Py<PyAny>>,
    context: Option<Py<PyAny>>,
}

impl FirstCallback {
    fn is_none(&self) -> bool {
        self.func.is_none()
    }

    fn set(&mut self, cb: Option<Callback>) {
        (self.func, self.context) = match cb {
            Some(Callback { func, context }) => (Some(func), context),
            None => (None, None),
        };
    }

    fn take(&mut self) -> Option<Callback> {
        let context = self.context.take();
        self.func.take().map(|func| Callback { func, context })
    }
}

/// What every future refers to. All `None` (zeroed memory) is a valid, uninitialised
/// future: then `lp` is None and every method reports "Future object is not initialized."
#[derive(Default)]
pub(crate) struct Hot {
    pub lp: Option<Py<LoopCore>>,
    pub result: Option<Py<PyAny>>,
    pub first: FirstCallback,
    /// What most futures never need, allocated when first needed: it keeps the future
    /// small (see `pytype`).
    pub cold: Option<Box<Cold>>,
}

#[derive(Default)]
pub(crate) struct Cold {
    pub exception: Option<Py<PyAny>>,
    /// The exception's traceback when it was set (3.11+ restore it on `result()`).
    pub exception_tb: Option<Py<PyAny>>,
    pub cancel_message: Option<Py<PyAny>>,
    /// The `CancelledError` that cancelled a task, to be re-raised (or chained) later.
    pub cancelled_exc: Option<Py<PyAny>>,
    /// The callbacks after the first.
    pub rest: Vec<Callback>,
}

impl Hot {
    fn cold(&mut self) -> &mut Cold {
        self.cold.get_or_insert_with(Default::default)
    }

    fn exception(&self) -> Option<&Py<PyAny>> {
        self.cold.as_ref().and_then(|c| c.exception.as_ref())
    }

    /// Every callback's `(func, context)`, in order.
    fn callbacks(&self) -> impl Iterator<Item = (&Py<PyAny>, Option<&Py<PyAny>>)> {
        let first = self.first.func.as_ref().map(|f| (f, self.first.context.as_ref()));
        first.into_iter().chain(self.cold.iter().flat_map(|c| c.rest.iter().map(|cb| (&cb.func, cb.context.as_ref()))))
    }

    /// Every callback's `(func, context)`, in order, the context to be changed.
    fn callbacks_mut(&mut self) -> impl Iterator<Item = (&Py<PyAny>, &mut Option<Py<PyAny>>)> {
        let first = self.first.func.as_ref().map(|f| (f, &mut self.first.context));
        first
            .into_iter()
            .chain(self.cold.iter_mut().flat_map(|c| c.rest.iter_mut().map(|cb| (&cb.func, &mut cb.context))))
    }

    /// Take every callback out, in order.
    fn take_callbacks(&mut self) -> Vec<Callback> {
        let mut all: Vec<Callback> = self.first.take().into_iter().collect();
        if let Some(c) = self.cold.as_mut() {
            all.append(&mut c.rest);
        }
        all
    }
}

pub(crate) struct FutureCore {
    pub(crate) f: GilCell<Hot>,
    state: Cell<FutState>,
    blocking: Cell<bool>,
    log_tb: Cell<bool>,
}

/// `exc` raised as the C code raises errors (`PyErr_SetObject`): chained to the exception
/// being handled, if any, as its `__context__`.
pub(crate) fn raised(py: Python<'_>, exc: Bound<'_, PyAny>) -> PyErr {
    // SAFETY: `exc` is a live exception instance; the error set is fetched right back.
    unsafe {
        ffi::PyErr_SetObject(ffi::Py_TYPE(exc.as_ptr()).cast(), exc.as_ptr());
    }
    PyErr::fetch(py)
}

fn not_initialized() -> PyErr {
    PyRuntimeError::new_err("Future object is not initialized.")
}

pub(crate) fn invalid_state(py: Python<'_>, msg: &str) -> PyErr {
    match globals().invalid_state_error.bind(py).call1((msg,)) {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

/// Allocate a native future bound to `lp`.
pub(super) fn alloc<'py>(lp: &Bound<'py, LoopCore>) -> PyResult<Bound<'py, PyAny>> {
    let g = globals();
    let obj = alloc_instance(lp.py(), g.future.ty.as_ptr().cast())?;
    let core = future_core(&obj).ok_or_else(not_initialized)?;
    core.init(lp.py(), lp.clone().unbind())?;
    Ok(obj)
}

/// A zeroed, GC-tracked instance of one of our types (the generic allocator zeroes it).
pub(super) fn alloc_instance(py: Python<'_>, ty: *mut ffi::PyTypeObject) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: our types use the generic allocator, which returns a zeroed, tracked object.
    unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_GenericAlloc(ty, 0)) }
}

impl FutureCore {
    pub(crate) fn init(&self, py: Python<'_>, lp: Py<LoopCore>) -> PyResult<()> {
        self.f.lock(py)?.lp = Some(lp);
        Ok(())
    }

    #[inline]
    pub(crate) fn state(&self) -> FutState {
        self.state.get()
    }

    #[inline]
    pub(crate) fn blocking(&self) -> bool {
        self.blocking.get()
    }

    #[inline]
    pub(crate) fn set_blocking(&self, on: bool) {
        self.blocking.set(on)
    }

    pub(crate) fn log_tb(&self) -> bool {
        self.log_tb.get()
    }

    pub(crate) fn clear_log_tb(&self) {
        self.log_tb.set(false)
    }

    pub(crate) fn lp(&self, py: Python<'_>) -> PyResult<Py<LoopCore>> {
        self.f.lock(py)?.lp.as_ref().map(|l| l.clone_ref(py)).ok_or_else(not_initialized)
    }

    /// The loop as a raw pointer, for identity checks (null when uninitialised).
    pub(crate) fn lp_ptr(&self, py: Python<'_>) -> *mut ffi::PyObject {
        self.f.try_lock(py).and_then(|f| f.lp.as_ref().map(|l| l.as_ptr())).unwrap_or(std::ptr::null_mut())
    }

    pub(crate) fn ensure_alive(&self, py: Python<'_>) -> PyResult<()> {
        if self.f.lock(py)?.lp.is_none() {
            return Err(not_initialized());
        }
        Ok(())
    }

    pub(crate) fn set_result(&self, this: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = this.py();
        self.ensure_alive(py)?;
        if self.state() != FutState::Pending {
            return Err(invalid_state(py, "invalid state"));
        }
        self.f.lock(py)?.result = Some(value.clone().unbind());
        self.state.set(FutState::Finished);
        self.schedule_callbacks(this)
    }

    pub(crate) fn set_exception(&self, this: &Bound<'_, PyAny>, exc: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = this.py();
        self.ensure_alive(py)?;
        if self.state() != FutState::Pending {
            return Err(invalid_state(py, "invalid state"));
        }
        // SAFETY: type checks on a live object.
        let exc = if unsafe { ffi::PyExceptionClass_Check(exc.as_ptr()) } != 0 {
            let made = exc.call0()?;
            if self.state() != FutState::Pending {
                return Err(invalid_state(py, "invalid state"));
            }
            made
        } else {
            exc.clone()
        };
        // SAFETY: `exc` is a live object we hold (the argument, or the instance just made);
        // the check only reads its type.
        if unsafe { ffi::PyExceptionInstance_Check(exc.as_ptr()) } == 0 {
            return Err(PyTypeError::new_err("invalid exception object"));
        }
        let stop = py.get_type::<pyo3::exceptions::PyStopIteration>();
        let exc = if globals().minor >= 13 {
            if exc.is_instance(&stop)? {
                let new = PyRuntimeError::new_err(
                    "StopIteration interacts badly with generators and cannot be raised into a Future",
                )
                .into_value(py)
                .into_bound(py);
                new.setattr("__cause__", &exc)?;
                new.setattr("__context__", &exc)?;
                new.into_any()
            } else {
                exc
            }
        } else {
            if exc.get_type().is(&stop) {
                return Err(PyTypeError::new_err(
                    "StopIteration interacts badly with generators and cannot be raised into a Future",
                ));
            }
            exc
        };
        // SAFETY: a new reference or null.
        let tb =
            unsafe { Bound::from_owned_ptr_or_opt(py, ffi::PyException_GetTraceback(exc.as_ptr())) }.map(Bound::unbind);
        {
            let mut f = self.f.lock(py)?;
            let cold = f.cold();
            cold.exception = Some(exc.unbind());
            cold.exception_tb = tb;
        }
        self.state.set(FutState::Finished);
        self.schedule_callbacks(this)?;
        self.log_tb.set(true);
        Ok(())
    }

    /// `Future.cancel(msg)`: the future part of a cancellation (a task's `cancel()` is
    /// different, see `TaskCore::cancel`).
    pub(crate) fn cancel(&self, this: &Bound<'_, PyAny>, msg: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let py = this.py();
        self.ensure_alive(py)?;
        self.log_tb.set(false);
        if self.state() != FutState::Pending {
            return Ok(false);
        }
        self.state.set(FutState::Cancelled);
        self.set_cancel_message(py, msg.filter(|m| !m.is_none()).map(|m| m.clone().unbind()))?;
        self.schedule_callbacks(this)?;
        Ok(true)
    }

    /// A new `CancelledError` for this future (the C `create_cancelled_error`): from 3.11,
    /// the one that cancelled a task, handed out once; else one with the cancel message.
    pub(crate) fn cancelled_error<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let g = globals();
        let (saved, msg) = {
            let mut f = self.f.lock(py)?;
            let Some(cold) = f.cold.as_mut() else {
                drop(f);
                return g.cancelled_error.bind(py).call0();
            };
            let saved = if g.minor >= 11 { cold.cancelled_exc.take() } else { None };
            (saved, cold.cancel_message.as_ref().map(|m| m.clone_ref(py)))
        };
        if let Some(exc) = saved {
            return Ok(exc.into_bound(py));
        }
        match msg {
            None => g.cancelled_error.bind(py).call0(),
            Some(m) => g.cancelled_error.bind(py).call1((m,)),
        }
    }

    /// 3.10 keeps the `CancelledError` that cancelled a task and chains it to the error
    /// raised for it: `consume` hands it over (as `_make_cancelled_error()` does), else a
    /// reference (every `result()` and `exception()` chains it again).
    fn cancel_context(&self, py: Python<'_>, exc: &Bound<'_, PyAny>, consume: bool) -> PyResult<()> {
        if globals().minor >= 11 {
            return Ok(());
        }
        let saved = {
            let mut f = self.f.lock(py)?;
            let slot = f.cold.as_mut().map(|c| &mut c.cancelled_exc);
            match slot {
                Some(slot) if consume => slot.take(),
                Some(slot) => slot.as_ref().map(|e| e.clone_ref(py)),
                None => None,
            }
        };
        if let Some(c) = saved {
            // SAFETY: a live exception; steals the reference to `c`.
            unsafe { ffi::PyException_SetContext(exc.as_ptr(), c.into_ptr()) };
        }
        Ok(())
    }

    /// `_make_cancelled_error()`.
    pub(crate) fn make_cancelled_error<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let exc = self.cancelled_error(py)?;
        self.cancel_context(py, &exc, true)?;
        Ok(exc)
    }

    /// The error a cancelled future raises (`future_set_cancelled_error`): raised as the C
    /// future raises it, chained to the exception being handled, if any.
    fn raise_cancelled(&self, py: Python<'_>) -> PyResult<PyErr> {
        let exc = self.cancelled_error(py)?;
        let err = raised(py, exc);
        self.cancel_context(py, &err.value(py).clone().into_any(), false)?;
        Ok(err)
    }

    /// `result()`: the value, or the exception to raise.
    pub(crate) fn result(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self.outcome(py, true)? {
            Ok(v) => Ok(v),
            Err(e) => Err(e),
        }
    }

    /// The outcome of a done future, marking an exception as retrieved: Ok(Ok(value)),
    /// Ok(Err(exception to raise)), or Err when the future is not done. `raise`: the
    /// exception is raised as `result()` raises it, chained to the exception being handled
    /// (a task being woken takes it without, as the C task's wake-up does).
    pub(crate) fn outcome(&self, py: Python<'_>, raise: bool) -> PyResult<Result<Py<PyAny>, PyErr>> {
        self.ensure_alive(py)?;
        match self.state() {
            FutState::Cancelled => return Ok(Err(self.raise_cancelled(py)?)),
            FutState::Pending => return Err(invalid_state(py, "Result is not set.")),
            FutState::Finished => {}
        }
        self.log_tb.set(false);
        let mut f = self.f.lock(py)?;
        if let Some(exc) = f.exception() {
            let exc = exc.clone_ref(py);
            // Each retrieval starts from the traceback the exception had when it was set
            // (the next one from none), as the C future does.
            let tb = f.cold().exception_tb.take();
            drop(f);
            // SAFETY: Py_None only takes the address of the None singleton, which lives as
            // long as the interpreter; it is passed on below as a borrowed reference.
            let tb_ptr = tb.as_ref().map_or(unsafe { ffi::Py_None() }, |t| t.as_ptr());
            // SAFETY: a live exception and traceback (or None).
            if unsafe { ffi::PyException_SetTraceback(exc.as_ptr(), tb_ptr) } < 0 {
                return Err(PyErr::fetch(py));
            }
            drop(tb);
            let exc = exc.into_bound(py);
            return Ok(Err(if raise { raised(py, exc) } else { PyErr::from_value(exc) }));
        }
        Ok(Ok(f.result.as_ref().map_or_else(|| py.None(), |r| r.clone_ref(py))))
    }

    /// `exception()`.
    pub(crate) fn exception(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.ensure_alive(py)?;
        match self.state() {
            FutState::Cancelled => return Err(self.raise_cancelled(py)?),
            FutState::Pending => return Err(invalid_state(py, "Exception is not set.")),
            FutState::Finished => {}
        }
        self.log_tb.set(false);
        let f = self.f.lock(py)?;
        Ok(f.exception().map_or_else(|| py.None(), |e| e.clone_ref(py)))
    }

    /// `add_done_callback(fn, context=...)`: without `context`, a copy of the current one;
    /// an explicit None is kept, and the callback then runs in a copy of the context current
    /// when it is scheduled (the C future's behaviour).
    pub(crate) fn add_done_callback(
        &self,
        this: &Bound<'_, PyAny>,
        func: &Bound<'_, PyAny>,
        context: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let py = this.py();
        self.ensure_alive(py)?;
        let context = match context {
            Some(c) => c.clone().unbind(),
            None => Captured::current(py)?.into_stored(py)?,
        };
        let cb = Callback { func: func.clone().unbind(), context: Some(context) };
        if self.state() != FutState::Pending {
            return self.schedule_one(this, cb);
        }
        self.push_callback(py, cb)
    }

    /// Wake `task` (a native task) when this future is done.
    pub(crate) fn add_task_waiter(&self, this: &Bound<'_, PyAny>, task: &Bound<'_, PyAny>) -> PyResult<()> {
        let cb = Callback { func: task.clone().unbind(), context: None };
        if self.state() != FutState::Pending {
            return self.schedule_one(this, cb);
        }
        self.push_callback(this.py(), cb)
    }

    fn push_callback(&self, py: Python<'_>, cb: Callback) -> PyResult<()> {
        let mut f = self.f.lock(py)?;
        if f.first.is_none() && f.cold.as_ref().is_none_or(|c| c.rest.is_empty()) {
            f.first.set(Some(cb));
        } else {
            f.cold().rest.push(cb);
        }
        Ok(())
    }

    /// `remove_done_callback(fn)`: remove every callback equal to `func`, return how many.
    pub(crate) fn remove_done_callback(&self, this: &Bound<'_, PyAny>, func: &Bound<'_, PyAny>) -> PyResult<usize> {
        let py = this.py();
        self.ensure_alive(py)?;
        // Compare outside the borrow: `__eq__` is Python code that may touch this future.
        let all = self.f.lock(py)?.take_callbacks();
        let mut kept = Vec::with_capacity(all.len());
        let mut removed = 0;
        let mut failure = None;
        for cb in all {
            if failure.is_none() {
                match callback_matches(py, &cb, func) {
                    Ok(true) => {
                        removed += 1;
                        continue;
                    }
                    Ok(false) => {}
                    Err(e) => failure = Some(e),
                }
            }
            kept.push(cb);
        }
        {
            let mut f = self.f.lock(py)?;
            // Callbacks added while comparing go after the kept ones.
            kept.extend(f.take_callbacks());
            let mut it = kept.into_iter();
            f.first.set(it.next());
            let rest: Vec<Callback> = it.collect();
            if !rest.is_empty() {
                f.cold().rest = rest;
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(removed),
        }
    }

    /// The callbacks as `_callbacks` shows them: None, or a list of (fn, context) pairs.
    pub(crate) fn callbacks_list(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let pairs: Vec<(Py<PyAny>, Option<Py<PyAny>>)> = {
            let mut f = self.f.lock(py)?;
            let mut pairs = Vec::new();
            for (func, context) in f.callbacks_mut() {
                // A context not made yet is made now and kept: `_callbacks` shows the same
                // object every time, and the callback runs in it.
                if context.as_ref().is_some_and(|c| crate::context::is_empty_marker(py, c)) {
                    *context = Some(crate::context::new_empty(py)?);
                }
                pairs.push((func.clone_ref(py), context.as_ref().map(|c| c.clone_ref(py))));
            }
            pairs
        };
        if pairs.is_empty() {
            return Ok(py.None());
        }
        let list = PyList::empty(py);
        for (func, context) in pairs {
            let (func, context) = match context {
                Some(c) => (func, c),
                None => {
                    let t = func.bind(py);
                    let core = task_core(t).ok_or_else(not_initialized)?;
                    (super::task_api::new_wakeup(t)?.unbind(), core.task.context(py)?)
                }
            };
            list.append(PyTuple::new(py, [func, context])?)?;
        }
        Ok(list.into_any().unbind())
    }

    /// Queue every done callback, in order, and forget them (the future is done now).
    pub(crate) fn schedule_callbacks(&self, this: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = this.py();
        let (first, rest) = {
            let mut f = self.f.lock(py)?;
            let rest = f.cold.as_mut().map(|c| std::mem::take(&mut c.rest)).unwrap_or_default();
            (f.first.take(), rest)
        };
        // Like the C future: a failure (a closed loop) drops the callbacks not yet queued.
        for cb in first.into_iter().chain(rest) {
            self.schedule_one(this, cb)?;
        }
        Ok(())
    }

    fn schedule_one(&self, this: &Bound<'_, PyAny>, cb: Callback) -> PyResult<()> {
        let py = this.py();
        let lp = self.lp(py)?;
        let lp = lp.bind(py);
        match cb.context {
            Some(ctx) => {
                let ctx = (!ctx.is_none(py)).then(|| Captured::from_stored(py, ctx));
                LoopCore::call_soon_with_context(lp, cb.func.bind(py), this, ctx)
            }
            None => LoopCore::push_step(lp, cb.func, super::StepArg::Wakeup(this.clone().unbind())),
        }
    }

    /// Visit every reference, for the cyclic GC; skipped while the fields are borrowed
    /// (then nothing is collected through them this time, which is always safe).
    ///
    /// # Safety
    /// `visit` and `arg` must come from the GC, in the `tp_traverse` of the object this
    /// future part belongs to (so the thread is attached).
    pub(crate) unsafe fn traverse(&self, visit: ffi::visitproc, arg: *mut c_void) -> std::ffi::c_int {
        // SAFETY: the caller runs inside `tp_traverse`, which the GC calls with the thread
        // attached; the token only serves `try_lock` (no Python object is made or released here).
        let py = unsafe { Python::assume_attached() };
        let Some(f) = self.f.try_lock(py) else { return 0 };
        // SAFETY: every pointer visited is null or a strong reference this future owns (a
        // field of `Hot`/`Cold`, kept in place by the borrow `f` for the whole traversal);
        // `visit`/`arg` are the GC's (the caller's guarantee).
        let one = |o: Option<&Py<PyAny>>| unsafe {
            pytype::visit_ptr(o.map_or(std::ptr::null_mut(), |o| o.as_ptr()), visit, arg)
        };
        macro_rules! visit {
            ($e:expr) => {
                let r = $e;
                if r != 0 {
                    return r;
                }
            };
        }
        // SAFETY: as for `one`: the loop is a strong reference the future owns.
        visit!(unsafe { pytype::visit_ptr(f.lp.as_ref().map_or(std::ptr::null_mut(), |l| l.as_ptr()), visit, arg) });
        visit!(one(f.result.as_ref()));
        for (func, context) in f.callbacks() {
            visit!(one(Some(func)));
            visit!(one(context));
        }
        if let Some(c) = &f.cold {
            for o in [&c.exception, &c.exception_tb, &c.cancel_message, &c.cancelled_exc] {
                visit!(one(o.as_ref()));
            }
        }
        0
    }

    /// Drop every reference (`tp_clear`, and deallocation).
    pub(crate) fn clear(&self, py: Python<'_>) {
        let taken = self.f.try_lock(py).map(|mut f| std::mem::take(&mut *f));
        drop(taken);
    }

    /// The finalizer's report of an exception never retrieved.
    pub(crate) fn finalize(&self, this: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = this.py();
        if !self.log_tb.get() {
            return Ok(());
        }
        self.log_tb.set(false);
        let (lp, exc) = {
            let f = self.f.lock(py)?;
            match (&f.lp, f.exception()) {
                (Some(l), Some(e)) => (l.clone_ref(py), e.clone_ref(py)),
                _ => return Ok(()),
            }
        };
        let context = pyo3::types::PyDict::new(py);
        let name = this.get_type().name()?;
        context.set_item("message", format!("{name} exception was never retrieved"))?;
        context.set_item("exception", exc)?;
        context.set_item("future", this)?;
        let handler = lp.bind(py).getattr(intern!(py, "call_exception_handler"))?;
        if let Err(e) = handler.call1((context,)) {
            e.write_unraisable(py, Some(&handler));
        }
        Ok(())
    }

    /// `_cancel_message`.
    pub(crate) fn cancel_message(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let f = self.f.lock(py)?;
        let msg = f.cold.as_ref().and_then(|c| c.cancel_message.as_ref());
        Ok(msg.map_or_else(|| py.None(), |m| m.clone_ref(py)))
    }

    pub(crate) fn set_cancel_message(&self, py: Python<'_>, msg: Option<Py<PyAny>>) -> PyResult<()> {
        let old = {
            let mut f = self.f.lock(py)?;
            if msg.is_none() && f.cold.is_none() {
                return Ok(());
            }
            std::mem::replace(&mut f.cold().cancel_message, msg)
        };
        drop(old);
        Ok(())
    }

    pub(crate) fn set_cancelled_exc(&self, py: Python<'_>, exc: Option<Py<PyAny>>) -> PyResult<()> {
        let old = std::mem::replace(&mut self.f.lock(py)?.cold().cancelled_exc, exc);
        drop(old);
        Ok(())
    }

    /// `_result` and `_exception` as the attributes show them.
    pub(crate) fn raw_result(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.f.lock(py)?.result.as_ref().map_or_else(|| py.None(), |r| r.clone_ref(py)))
    }

    pub(crate) fn raw_exception(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.f.lock(py)?.exception().map_or_else(|| py.None(), |r| r.clone_ref(py)))
    }
}

/// Whether a stored callback equals `func` (`remove_done_callback`, with the C future's
/// `==`). A native task waiting is compared as the `task_wakeup` callable the C task would
/// have registered.
fn callback_matches(py: Python<'_>, cb: &Callback, func: &Bound<'_, PyAny>) -> PyResult<bool> {
    let stored = cb.func.bind(py);
    if cb.context.is_none() {
        let wakeup = super::task_api::new_wakeup(stored)?;
        return wakeup.eq(func);
    }
    if stored.is(func) {
        return Ok(true);
    }
    stored.eq(func)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_memory_is_a_pending_future_with_nothing_in_it() {
        // SAFETY: every field of `FutureCore` is valid all-zero (the claim under test: an
        // `Option` of a pointer type, a `u8` enum whose 0 is a variant, `bool`); nothing
        // here creates or drops a Python object.
        let core: FutureCore = unsafe { std::mem::zeroed() };
        assert_eq!(core.state(), FutState::Pending);
        assert!(!core.blocking());
        let mut hot = core.f.into_inner();
        assert!(hot.lp.is_none() && hot.result.is_none() && hot.first.is_none() && hot.cold.is_none());
        assert_eq!(hot.callbacks().count(), 0);
        assert_eq!(hot.callbacks_mut().count(), 0);
        assert!(hot.take_callbacks().is_empty());
    }
}
