//! Scheduling callbacks: the handles that `call_soon`, `call_later` and `call_at` make (and
//! reuse), the ready queue and the timer queue they go into, and waking a parked loop.

use super::{LoopCore, Queue, Ready};
use crate::call_args::CallArgs;
use crate::context::Captured;
use crate::handles::{hand_back, hide_from_gc, Handle, HandleContext, TimerHandle};
use crate::pyutil::vectorcall_kw;
use crate::tasks::StepArg;
use pyo3::prelude::*;
use pyo3::{ffi, intern};
use std::sync::atomic::Ordering;

impl LoopCore {
    /// Debug-mode checks of the stdlib (thread, callback type); returns the source traceback.
    pub(super) fn debug_prepare(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        method: &str,
        check_thread: bool,
    ) -> PyResult<Option<Py<PyAny>>> {
        if !slf.get().debug() {
            return Ok(None);
        }
        let tb = slf.call_method1(intern!(slf.py(), "_debug_prepare"), (callback, method, check_thread))?;
        Ok(if tb.is_none() { None } else { Some(tb.unbind()) })
    }

    pub(super) fn handle_context(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        context: Option<Bound<'_, PyAny>>,
    ) -> HandleContext {
        match context {
            Some(c) => HandleContext::Given(c.unbind()),
            // asyncio.sleep()'s timer callback reads and sets no context variable: the
            // context copy it would get is never observable, so skip it.
            None if callback.is(slf.get().context_free_callback.bind(slf.py())) => HandleContext::Unneeded,
            None => HandleContext::CopyCurrent,
        }
    }

    pub(super) fn new_handle(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        args: CallArgs,
        context: HandleContext,
        source_tb: Option<Py<PyAny>>,
    ) -> PyResult<Handle> {
        let h = Handle::new(slf.py(), callback.clone().unbind(), args, context, &slf.get().shared)?;
        if source_tb.is_some() {
            h.set_source_traceback(slf.py(), source_tb)?;
        }
        Ok(h)
    }

    /// A handle for `callback` without a delay (a spare one refilled when there is), queued
    /// among the ready callbacks or for the end of this iteration.
    pub(super) fn schedule_soon(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        args: CallArgs,
        context: HandleContext,
        method: &str,
        check_thread: bool,
        queue: Queue,
    ) -> PyResult<Py<Handle>> {
        let this = slf.get();
        let py = slf.py();
        this.check_closed()?;
        let tb = Self::debug_prepare(slf, callback, method, check_thread)?;
        let spare = if this.debug() { None } else { this.spare.lock(py)?.take_handle() };
        let handle = match spare {
            Some(h) => {
                h.get().refill(py, callback.clone().unbind(), args, context)?;
                h
            }
            None => {
                let h = Py::new(py, Self::new_handle(slf, callback, args, context, tb)?)?;
                this.hold(h.bind(py).as_any());
                h
            }
        };
        let mut st = this.state.lock(py)?;
        match queue {
            Queue::Ready => st.ready.push_back(Ready::Call(handle.clone_ref(py))),
            Queue::IterationEnd => st.at_end.push(handle.clone_ref(py)),
        }
        Ok(handle)
    }

    /// Run `callback` at the end of this iteration, after the callbacks ready now and before
    /// the held writes go out; one added while those run waits for the next iteration's
    /// end. Unlike `call_soon`'s, it is not among `callbacks_waiting`: a connection that
    /// writes what its streams answered this iteration (HTTP/2's flush) does not make the
    /// applications started after it wait for a later iteration.
    pub(crate) fn call_at_iteration_end(slf: &Bound<'_, Self>, callback: &Bound<'_, PyAny>) -> PyResult<()> {
        let context = Self::handle_context(slf, callback, None);
        Self::schedule_soon(slf, callback, CallArgs::Zero, context, "call_soon", false, Queue::IterationEnd)?;
        Ok(())
    }

    pub(super) fn schedule_at(
        slf: &Bound<'_, Self>,
        when: f64,
        callback: &Bound<'_, PyAny>,
        args: CallArgs,
        context: HandleContext,
        method: &str,
    ) -> PyResult<Py<TimerHandle>> {
        let this = slf.get();
        let py = slf.py();
        this.check_closed()?;
        let tb = Self::debug_prepare(slf, callback, method, true)?;
        let spare = if this.debug() { None } else { this.spare.lock(py)?.take_timer() };
        let timer = match spare {
            Some(t) => {
                let base = t.bind(py).as_super();
                base.get().refill(py, callback.clone().unbind(), args, context)?;
                t.get().reschedule(when);
                t
            }
            None => {
                let base = Self::new_handle(slf, callback, args, context, tb)?;
                let init = PyClassInitializer::from(base).add_subclass(TimerHandle::new(when));
                let t = Py::new(py, init)?;
                this.hold(t.bind(py).as_any());
                t
            }
        };
        this.state.lock(py)?.timers.push(when, timer.clone_ref(py));
        Ok(timer)
    }

    /// A handle the loop lets go of (it ran, or was dropped as cancelled): kept for reuse
    /// when nothing else refers to it, otherwise handed back to the GC.
    pub(super) fn release(&self, py: Python<'_>, handle: Py<Handle>) {
        let h = handle.bind(py);
        if self.debug() || !Handle::recyclable(h) || h.get().empty(py).is_err() {
            hand_back(h);
            return;
        }
        self.keep_spare(py, handle);
    }

    /// Callbacks are queued for the next round of the ready queue (what the running round
    /// has scheduled so far, or everything between iterations).
    pub fn callbacks_waiting(&self, py: Python<'_>) -> bool {
        self.state.lock(py).is_ok_and(|st| !st.ready.is_empty())
    }

    /// Keep an emptied, unreferenced handle for reuse.
    pub(super) fn keep_spare(&self, py: Python<'_>, handle: Py<Handle>) {
        if let Ok(mut spare) = self.spare.lock(py) {
            spare.keep(handle.into_bound(py));
        }
    }

    /// A handle the loop now holds: hidden from the GC outside debug mode (see `hide_from_gc`;
    /// debug mode keeps handles visible to its tools).
    pub(super) fn hold(&self, handle: &Bound<'_, PyAny>) {
        if !self.debug() {
            hide_from_gc(handle);
        }
    }

    pub(super) fn wake(&self) {
        // One wake-up per park: the first caller clears the flag, so a thread posting many
        // callbacks while the loop waits for the GIL makes one eventfd write, not one each.
        if self.parked.swap(false, Ordering::SeqCst) {
            // A failed wake means the eventfd counter is saturated: the loop is woken anyway.
            let _ = self.waker.wake();
        }
    }

    /// A handle for a native watcher callback: no arguments, and no context (native code
    /// reads no context variable).
    pub(crate) fn native_handle(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<Handle> {
        self.native_handle_with(py, callback, CallArgs::Zero)
    }

    /// A handle for native code, with arguments (the report of a failed task step).
    pub(crate) fn native_handle_with(&self, py: Python<'_>, callback: Py<PyAny>, args: CallArgs) -> PyResult<Handle> {
        Handle::new(py, callback, args, HandleContext::Unneeded, &self.shared)
    }

    /// Whether this loop is the calling thread's running loop. Then `Future()` and
    /// `Task(coro)` find it by themselves: passing `loop=` would make CPython build a
    /// keyword dict for every future and task (the C types have no vectorcall).
    /// Always false before Python 3.12: there every running-loop lookup is a `getpid()`
    /// system call, and the loop-less constructor makes two, dearer than the dict.
    pub(super) fn is_running_here(slf: &Bound<'_, Self>) -> bool {
        let py = slf.py();
        let Some(get_running_loop) = &slf.get().get_running_loop else { return false };
        // SAFETY: a call with the GIL held; the new reference is released here.
        unsafe {
            let running = ffi::PyObject_CallNoArgs(get_running_loop.as_ptr());
            if running.is_null() {
                drop(PyErr::fetch(py));
                return false;
            }
            let here = running == slf.as_ptr();
            ffi::Py_DECREF(running);
            here
        }
    }

    /// `create_future()` for native code: a native future unless debug mode or a task
    /// factory asks for the C types (see `crate::tasks`).
    pub(crate) fn new_future<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let this = slf.get();
        if this.native_tasks.load(Ordering::Relaxed) && !this.debug() && this.task_factory.lock(slf.py())?.is_none() {
            return crate::tasks::new_future(slf);
        }
        if Self::is_running_here(slf) {
            return this.future_type.bind(slf.py()).call0();
        }
        vectorcall_kw(slf.py(), &this.future_type, &[slf.as_any()], &this.kw_loop)
    }

    /// Queue the next step of a native task (`crate::tasks`), as `call_soon` would queue
    /// the C task's step or wake-up: "Event loop is closed" on a closed loop.
    pub(crate) fn push_step(slf: &Bound<'_, Self>, task: Py<PyAny>, arg: StepArg) -> PyResult<()> {
        let this = slf.get();
        this.check_closed()?;
        this.state.lock(slf.py())?.ready.push_back(Ready::Step(task, arg));
        Ok(())
    }

    /// `call_soon(callback, arg, context=...)` for a native future's done callback: its
    /// captured context, or None for a copy of the current one.
    pub(crate) fn call_soon_with_context(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        arg: &Bound<'_, PyAny>,
        context: Option<Captured>,
    ) -> PyResult<()> {
        let args = CallArgs::One(arg.clone().unbind());
        let context = match context {
            Some(c) => HandleContext::Captured(c),
            None => Self::handle_context(slf, callback, None),
        };
        Self::schedule_soon(slf, callback, args, context, "call_soon", true, Queue::Ready)?;
        Ok(())
    }

    /// `call_soon(callback)` for native code.
    pub(crate) fn call_soon_internal_noarg(slf: &Bound<'_, Self>, callback: &Bound<'_, PyAny>) -> PyResult<()> {
        let context = Self::handle_context(slf, callback, None);
        Self::schedule_soon(slf, callback, CallArgs::Zero, context, "call_soon", false, Queue::Ready)?;
        Ok(())
    }

    /// `call_soon(callback, arg)` for native code.
    pub(crate) fn call_soon_internal(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        arg: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let args = CallArgs::One(arg.clone().unbind());
        let context = Self::handle_context(slf, callback, None);
        Self::schedule_soon(slf, callback, args, context, "call_soon", false, Queue::Ready)?;
        Ok(())
    }
}
