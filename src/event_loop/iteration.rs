//! One loop iteration: poll (waiting only when nothing is ready), move due timers and I/O
//! events to the ready queue, run what was ready, then write the transports' held bytes.

use super::{LoopCore, Ready, State};
use crate::clock::monotonic;
use crate::handles::{Failure, Handle, TimerHandle};
use crate::pyutil::{is_exit, os_error};
use crate::reactor::{self, Poller, Readiness};
use crate::sync::lock;
use crate::tasks::StepArg;
use crate::transport::stream::StreamCore;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The stdlib caps a single select() at one day.
const MAX_POLL_SECONDS: f64 = 86400.0;
/// Clean the timer queue when more than this many timers are queued and more than half of
/// them are cancelled (the stdlib's policy).
const MIN_TIMERS_FOR_CLEANUP: usize = 100;

/// What the connections of one iteration may hold for its end, in all. Held writes leave
/// together, which on loopback saves the receiver one wake-up per write, but they wait in
/// memory. With many connections holding a few KiB each, what is held can leave the CPU's
/// cache before it is written, and that costs more than it saves. Without limits, a 3 KiB
/// response to 400 connections (1.2 MiB held) was 6% slower held than written at once, and
/// 2 KiB (0.8 MiB) was 10% faster. The budget stays well under that, whatever the number
/// of connections. Past it, writes go out at once until held ones are written.
pub(crate) const HOLD_BUDGET: usize = 256 * 1024;

impl LoopCore {
    /// One iteration: poll for I/O (waiting only when nothing is ready), move due timers to
    /// the ready queue, then run every callback that was ready at that point.
    pub(super) fn run_once(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();

        let (timeout, deadline, cancelled_timers, skip_poll, expired, watching) = {
            let mut st = this.state.lock(py)?;
            st.iteration += 1;
            let expired = this.expire_lingering(&mut st);
            let cancelled = this.clean_timers(py, &mut st);
            for fd in std::mem::take(&mut st.rearm) {
                if let Some(entry) = st.io.get(&fd) {
                    let i = entry.interest();
                    // A failure means the fd was closed behind our back: nothing to wait for.
                    let _ = reactor::update(&this.registry, fd, i, i);
                }
            }
            let mut deadline = None;
            let timeout = if !st.ready.is_empty() || !st.at_end.is_empty() || !st.deferred.is_empty() || st.stopping {
                Some(Duration::ZERO)
            } else if let Some((when, _)) = st.timers.peek() {
                let secs = (when - monotonic()).clamp(0.0, MAX_POLL_SECONDS);
                if secs < MAX_POLL_SECONDS {
                    deadline = Some(when);
                }
                Some(Duration::from_secs_f64(secs))
            } else {
                None
            };
            if timeout != Some(Duration::ZERO) {
                this.parked.store(true, Ordering::SeqCst);
            }
            // With callbacks ready, a poll that does not wait is skipped when no descriptor
            // is registered (it could only report the waker, which matters only to a parked
            // loop), and every other time in a row: a busy loop then still sees ready I/O by
            // the next iteration, and the callbacks that I/O scheduled (a task woken by a
            // read) run without a system call in between. Stopping always polls, as the
            // stdlib documents for `stop()` before `run_forever()`.
            let watching = !st.io.is_empty();
            let skip_poll = timeout == Some(Duration::ZERO) && (!watching || (st.polled && !st.stopping));
            st.polled = !skip_poll;
            (timeout, deadline, cancelled, skip_poll, expired, watching)
        };
        drop(expired);
        for t in cancelled_timers {
            this.release(py, t.into_bound(py).into_super().unbind());
        }

        // Only a waiting poll releases the GIL. Threads woken by this iteration's callbacks
        // are unparked now, after the GIL is released if the poll waits (see
        // `unpark_on_release`).
        let waits = !skip_poll && timeout != Some(Duration::ZERO);
        if !waits {
            this.release_handoffs();
        }
        let events = if skip_poll {
            Vec::new()
        } else {
            let mut guard = lock(&this.poller)?;
            let poller: &mut Poller = &mut guard;
            let result = if !waits {
                poller.poll(timeout)
            } else {
                let r = py.detach(|| {
                    this.release_handoffs();
                    poller.park(timeout, deadline, watching)
                });
                this.parked.store(false, Ordering::SeqCst);
                r
            };
            result.map_err(|e| os_error(py, e))?;
            poller.ready().collect::<Vec<(RawFd, Readiness)>>()
        };
        // Run Python-level signal handlers now (a signal interrupts the poll).
        py.check_signals()?;

        let (stale, now) = {
            let mut st = this.state.lock(py)?;
            let mut stale: Vec<Py<Handle>> = Vec::new();
            for (fd, ev) in events {
                let (readable, writable) = (ev.readable, ev.writable);
                let Some(entry) = st.io.get(&fd) else { continue };
                let mut push = Vec::with_capacity(2);
                if let Some(o) = &entry.owner {
                    // Edge-triggered on purpose: the transport reads until the kernel is
                    // drained and asks for a re-arm when it may not be.
                    let ev = Readiness {
                        readable: readable && o.read,
                        writable: writable && o.write,
                        read_closed: ev.read_closed,
                    };
                    if ev.readable || ev.writable {
                        push.push(Ready::Io(o.target.clone_ref(py), ev));
                    }
                }
                let mut fired = false;
                if readable {
                    if let Some(r) = &entry.reader {
                        push.push(Ready::Call(r.clone_ref(py)));
                    }
                }
                if writable {
                    if let Some(w) = &entry.writer {
                        push.push(Ready::Call(w.clone_ref(py)));
                    }
                }
                for item in push {
                    match item {
                        Ready::Call(h) if h.get().is_cancelled() => stale.push(h),
                        Ready::Call(h) => {
                            st.ready.push_back(Ready::Call(h));
                            fired = true;
                        }
                        io => st.ready.push_back(io),
                    }
                }
                if fired {
                    st.rearm.push(fd);
                }
            }
            let now = monotonic();
            while let Some(timer) = st.timers.pop_due(now) {
                let t = timer.get();
                let was_scheduled = t.unschedule();
                let base = timer.bind(py).as_super();
                if base.get().is_cancelled() {
                    if was_scheduled {
                        this.shared.cancelled_timer_removed();
                    }
                    stale.push(base.clone().unbind());
                } else {
                    st.ready.push_back(Ready::Call(base.clone().unbind()));
                }
                drop(timer);
            }
            (stale, now)
        };
        let trimmed = this.spare.lock(py)?.trim(now);
        drop(trimmed);
        for h in stale {
            if !h.get().repeats() {
                this.release(py, h);
            }
        }

        // Exactly the callbacks ready now run in this iteration; what they schedule waits for
        // the next one. Taken in one batch; handles cancelled meanwhile are skipped by `run`.
        let batch: Vec<Ready> = this.state.lock(py)?.ready.drain(..).collect();
        let ran = Self::run_ready(slf, batch).and_then(|()| {
            let at_end = std::mem::take(&mut this.state.lock(py)?.at_end);
            Self::run_ready(slf, at_end.into_iter().map(Ready::Call).collect())
        });
        // Held writes go out even when a callback raised KeyboardInterrupt or SystemExit.
        let flushed = Self::flush_deferred(slf);
        ran.and(flushed)
    }

    /// Run one iteration's batch of ready callbacks and readiness events.
    pub(super) fn run_ready(slf: &Bound<'_, Self>, batch: Vec<Ready>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let debug = this.debug();
        let mut batch = batch.into_iter();
        while let Some(item) = batch.next() {
            let handle = match item {
                Ready::Call(h) => h,
                Ready::Step(task, arg) => {
                    if let Err(err) = Self::run_step(slf, task, arg) {
                        Self::requeue(this, py, batch)?;
                        return Err(err);
                    }
                    continue;
                }
                Ready::Io(target, ev) => {
                    if let Err(err) = target.dispatch(py, ev) {
                        if is_exit(py, &err) {
                            Self::requeue(this, py, batch)?;
                            return Err(err);
                        }
                        // The transports report their own errors; what escapes them (a
                        // failed internal call) still reaches the loop's exception handler.
                        Self::report_io_error(slf, err);
                    }
                    continue;
                }
            };
            // Nothing but the loop refers to it, so it will be reused: run it by emptying it.
            let reuse = !debug && !handle.get().repeats() && Handle::recyclable(handle.bind(py));
            let outcome = if debug { Self::run_debug(slf, &handle) } else { handle.get().run(py, reuse) };
            let failed = outcome.is_err();
            let outcome = match outcome {
                Err(failure) => Self::report(slf, &handle, failure),
                Ok(_) => Ok(()),
            };
            if reuse && !failed && Handle::recyclable(handle.bind(py)) {
                this.keep_spare(py, handle);
            } else if !handle.get().repeats() {
                this.release(py, handle);
            }
            if let Err(err) = outcome {
                Self::requeue(this, py, batch)?;
                return Err(err);
            }
        }
        Ok(())
    }

    /// Run a native task's step. What escapes it (KeyboardInterrupt and SystemExit, after
    /// the task took them as its exception, or a failure of the step machinery itself)
    /// is handled as a failed callback is: the first two leave the loop, the rest go to the
    /// exception handler with a handle showing the wake-up that failed.
    fn run_step(slf: &Bound<'_, Self>, task: Py<PyAny>, arg: StepArg) -> PyResult<()> {
        let py = slf.py();
        let woken_by = match &arg {
            StepArg::Wakeup(fut) => Some(fut.clone_ref(py)),
            _ => None,
        };
        let described = (task.clone_ref(py), woken_by);
        let Err(err) = crate::tasks::run_step(py, task, arg) else { return Ok(()) };
        if is_exit(py, &err) {
            return Err(err);
        }
        let (task, arg) = described;
        let func = crate::tasks::wakeup_callable(task.bind(py))?;
        let args = match arg {
            Some(a) => crate::call_args::CallArgs::One(a),
            None => crate::call_args::CallArgs::Zero,
        };
        let handle = Py::new(py, slf.get().native_handle_with(py, func.clone().unbind(), args.clone_ref(py))?)?;
        let failure = Failure { err, func: func.unbind(), args: args.to_tuple(py)? };
        Self::report(slf, &handle, failure)
    }

    /// Count `len` more bytes held until the end of this iteration, and hold `core`'s
    /// queued writes (when it is not held yet): what the callbacks of one iteration write
    /// to a connection goes out in one vectored write. Returns whether the iteration now
    /// holds more than `HOLD_BUDGET`: then the caller writes at once.
    pub(crate) fn hold_writes(&self, py: Python<'_>, core: Option<Py<StreamCore>>, len: usize) -> PyResult<bool> {
        let mut st = self.state.lock(py)?;
        st.deferred.extend(core);
        st.held_bytes += len;
        Ok(st.held_bytes > HOLD_BUDGET)
    }

    /// Held bytes of one transport were written (or dropped) before the end of the
    /// iteration.
    pub(crate) fn release_held(&self, py: Python<'_>, len: usize) -> PyResult<()> {
        let mut st = self.state.lock(py)?;
        st.held_bytes = st.held_bytes.saturating_sub(len);
        Ok(())
    }

    pub(super) fn flush_deferred(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let deferred = {
            let mut st = slf.get().state.lock(py)?;
            st.held_bytes = 0;
            std::mem::take(&mut st.deferred)
        };
        let mut deferred = deferred.into_iter();
        while let Some(core) = deferred.next() {
            if let Err(err) = StreamCore::flush_deferred_ready(core.bind(py)) {
                if is_exit(py, &err) {
                    // The rest still hold bytes: the next iteration writes them.
                    slf.get().state.lock(py)?.deferred.extend(deferred);
                    return Err(err);
                }
                Self::report_io_error(slf, err);
            }
        }
        Ok(())
    }

    pub(super) fn report_io_error(slf: &Bound<'_, Self>, err: PyErr) {
        let py = slf.py();
        let ctx = PyDict::new(py);
        let reported = ctx
            .set_item("message", "Unhandled error in a transport's readiness callback")
            .and_then(|_| ctx.set_item("exception", err.clone_ref(py).into_value(py)))
            .and_then(|_| slf.call_method1(intern!(py, "call_exception_handler"), (ctx,)));
        if let Err(e) = reported {
            e.write_unraisable(py, Some(slf.as_any()));
        }
    }

    /// Leaving the loop (KeyboardInterrupt, SystemExit): what did not run yet stays first in
    /// line, as in the stdlib.
    pub(super) fn requeue(this: &Self, py: Python<'_>, rest: impl Iterator<Item = Ready>) -> PyResult<()> {
        let rest: Vec<Ready> = rest.collect();
        let mut st = this.state.lock(py)?;
        for item in rest.into_iter().rev() {
            st.ready.push_front(item);
        }
        Ok(())
    }

    pub(super) fn run_debug(slf: &Bound<'_, Self>, handle: &Py<Handle>) -> Result<bool, Failure> {
        let py = slf.py();
        let _ = slf.setattr(intern!(py, "_current_handle"), handle.clone_ref(py));
        let t0 = monotonic();
        let outcome = handle.get().run(py, false);
        let dt = monotonic() - t0;
        let _ = slf.setattr(intern!(py, "_current_handle"), py.None());
        if let Err(err) = slf.call_method1(intern!(py, "_check_slow_callback"), (handle, dt)) {
            err.write_unraisable(py, Some(slf.as_any()));
        }
        outcome
    }

    /// An exception from a callback: SystemExit and KeyboardInterrupt leave the loop, the
    /// rest go to the exception handler (as in `asyncio.Handle._run`).
    pub(super) fn report(slf: &Bound<'_, Self>, handle: &Py<Handle>, failure: Failure) -> PyResult<()> {
        let py = slf.py();
        if is_exit(py, &failure.err) {
            return Err(failure.err);
        }
        let exc = failure.err.into_value(py);
        slf.call_method1(intern!(py, "_report_callback_error"), (handle, failure.func, failure.args, exc))?;
        Ok(())
    }

    /// Drop cancelled timers from the head of the queue, and rebuild the queue when most of
    /// it is cancelled. Returns the removed timers, to be dropped outside the lock.
    pub(super) fn clean_timers(&self, py: Python<'_>, st: &mut State) -> Vec<Py<TimerHandle>> {
        let mut removed = Vec::new();
        let cancelled = self.shared.cancelled_timers.load(Ordering::Relaxed);
        let queued = st.timers.len();
        let is_cancelled = |t: &Py<TimerHandle>| -> bool { t.bind(py).as_super().get().is_cancelled() };
        if queued > MIN_TIMERS_FOR_CLEANUP && cancelled * 2 > queued {
            removed = st.timers.extract_if(is_cancelled);
            for t in &removed {
                t.get().unschedule();
            }
            self.shared.cancelled_timers.store(0, Ordering::Relaxed);
        } else {
            while let Some((_, t)) = st.timers.peek() {
                if !is_cancelled(t) {
                    break;
                }
                if let Some(t) = st.timers.pop() {
                    if t.get().unschedule() {
                        self.shared.cancelled_timer_removed();
                    }
                    removed.push(t);
                }
            }
        }
        removed
    }
}
