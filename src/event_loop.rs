//! `LoopCore`: the native half of `swordfish.Loop` — the ready queue, the timer queue, the
//! I/O registry and the loop iteration itself. The Python subclass adds the parts that are
//! not on the hot path (lifecycle bookkeeping, executors, sockets, signals, error reporting).

use crate::call_args::CallArgs;
use crate::clock::monotonic;
use crate::handles::{hand_back, hide_from_gc, Failure, Handle, HandleContext, LoopShared, TimerHandle};
use crate::pyutil::{fileobj_to_fd, is_exit, os_error, vectorcall_kw};
use crate::reactor::{self, Poller, Readiness, WAKER_TOKEN};
use crate::sock_ops;
use crate::spare::SparePool;
use crate::sync::{lock, GilCell};
use crate::timers::TimerQueue;
use crate::transport::stream::StreamCore;
use crate::transport::IoTarget;
use mio::{Registry, Waker};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};
use pyo3::{ffi, intern, PyTraverseError, PyVisit};
use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The stdlib caps a single select() at one day.
const MAX_POLL_SECONDS: f64 = 86400.0;
/// Clean the timer queue when more than this many timers are queued and more than half of
/// them are cancelled (the stdlib's policy).
const MIN_TIMERS_FOR_CLEANUP: usize = 100;

/// A native transport that owns a descriptor, and what it wants to hear about.
struct Owner {
    target: IoTarget,
    read: bool,
    write: bool,
}

/// A registration left in epoll after the socket operation that used it finished, for the
/// next operation on the same socket: a task that loops over `sock_recv` would otherwise
/// add and delete the registration every time (two `epoll_ctl` calls, an eighth of the
/// server's time in a ping-pong). It expires after two loop iterations without use.
struct Linger {
    interest: mio::Interest,
    /// The socket object: the registration is reused only for the same object, which this
    /// keeps alive, so a closed descriptor whose number went to a new socket (and which
    /// epoll dropped) is never taken for registered.
    sock: Py<PyAny>,
    since: u64,
}

#[derive(Default)]
struct IoEntry {
    reader: Option<Py<Handle>>,
    writer: Option<Py<Handle>>,
    owner: Option<Owner>,
    /// Only while the entry is otherwise unused.
    linger: Option<Linger>,
}

impl IoEntry {
    fn interest(&self) -> Option<mio::Interest> {
        let (r, w) = self.owner.as_ref().map_or((false, false), |o| (o.read, o.write));
        reactor::interest(self.reader.is_some() || r, self.writer.is_some() || w)
    }

    /// What epoll holds for the descriptor.
    fn registered(&self) -> Option<mio::Interest> {
        self.interest().or_else(|| self.linger.as_ref().map(|l| l.interest))
    }

    fn is_unused(&self) -> bool {
        self.reader.is_none() && self.writer.is_none() && self.owner.is_none()
    }

    fn slot(&mut self, which: Which) -> &mut Option<Py<Handle>> {
        match which {
            Which::Reader => &mut self.reader,
            Which::Writer => &mut self.writer,
        }
    }
}

/// One entry of the ready queue: a callback, or a native transport's readiness event.
enum Ready {
    Call(Py<Handle>),
    Io(IoTarget, Readiness),
}

#[derive(Default)]
struct State {
    ready: VecDeque<Ready>,
    timers: TimerQueue<Py<TimerHandle>>,
    io: HashMap<RawFd, IoEntry>,
    /// Descriptors whose entry lingers (see `Linger`), with when it started.
    lingering: Vec<(RawFd, u64)>,
    /// Loop iterations so far.
    iteration: u64,
    /// Descriptors that fired in the last iteration and must be re-armed before polling.
    rearm: Vec<RawFd>,
    /// Stream transports holding writes for the end of this iteration
    /// (`StreamCore::write_deferred`).
    deferred: Vec<Py<StreamCore>>,
    stopping: bool,
}

#[pyclass(module = "swordfish._native", subclass, frozen)]
pub struct LoopCore {
    state: GilCell<State>,
    poller: Mutex<Poller>,
    registry: Registry,
    waker: Waker,
    /// Set while the loop waits in the poller with a non-zero timeout: only then does
    /// `call_soon_threadsafe` need to wake it.
    parked: AtomicBool,
    closed: AtomicBool,
    shared: Arc<LoopShared>,
    task_factory: GilCell<Option<Py<PyAny>>>,
    future_type: Py<PyAny>,
    task_type: Py<PyAny>,
    /// `asyncio.futures._set_result_unless_cancelled`, see `new_handle`.
    context_free_callback: Py<PyAny>,
    kw_loop: Py<PyTuple>,
    /// `asyncio.events._get_running_loop`, see `is_running_here`.
    get_running_loop: Py<PyAny>,
    kw_loop_name: Py<PyTuple>,
    /// Handles and timers that ran and that nothing else refers to, kept for reuse (see
    /// `Handle::recyclable`). They refer to nothing while they wait here.
    spare: GilCell<SparePool>,
    /// The buffer reads go into, kept between reads (see `pybuf::read_into_bytes`).
    recv_spare: GilCell<Option<Py<PyBytes>>>,
    /// `threading.get_ident()` of the thread running the loop, None when it is not running
    /// (`_thread_id`, as the stdlib loop names it). Native so that `is_running()`, which
    /// every eager task's start asks, costs no Python frame.
    thread_id: GilCell<Option<Py<PyAny>>>,
}

#[derive(Clone, Copy)]
pub(crate) enum Which {
    Reader,
    Writer,
}

impl LoopCore {
    fn check_closed(&self) -> PyResult<()> {
        if self.closed.load(Ordering::Relaxed) {
            Err(PyRuntimeError::new_err("Event loop is closed"))
        } else {
            Ok(())
        }
    }

    pub(crate) fn debug(&self) -> bool {
        self.shared.debug.load(Ordering::Relaxed)
    }

    /// Debug-mode checks of the stdlib (thread, callback type); returns the source traceback.
    fn debug_prepare(
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

    fn handle_context(
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

    fn new_handle(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        args: CallArgs,
        context: Option<Bound<'_, PyAny>>,
        source_tb: Option<Py<PyAny>>,
    ) -> PyResult<Handle> {
        let context = Self::handle_context(slf, callback, context);
        let h = Handle::new(
            slf.py(),
            callback.clone().unbind(),
            args,
            context,
            &slf.get().shared,
        )?;
        if source_tb.is_some() {
            h.set_source_traceback(slf.py(), source_tb)?;
        }
        Ok(h)
    }

    fn schedule_soon(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        args: CallArgs,
        context: Option<Bound<'_, PyAny>>,
        method: &str,
        check_thread: bool,
    ) -> PyResult<Py<Handle>> {
        let this = slf.get();
        let py = slf.py();
        this.check_closed()?;
        let tb = Self::debug_prepare(slf, callback, method, check_thread)?;
        let spare = if this.debug() { None } else { this.spare.lock(py)?.take_handle() };
        let handle = match spare {
            Some(h) => {
                let ctx = Self::handle_context(slf, callback, context);
                h.get().refill(py, callback.clone().unbind(), args, ctx)?;
                h
            }
            None => {
                let h = Py::new(py, Self::new_handle(slf, callback, args, context, tb)?)?;
                this.hold(h.bind(py).as_any());
                h
            }
        };
        this.state.lock(py)?.ready.push_back(Ready::Call(handle.clone_ref(py)));
        Ok(handle)
    }

    fn schedule_at(
        slf: &Bound<'_, Self>,
        when: f64,
        callback: &Bound<'_, PyAny>,
        args: CallArgs,
        context: Option<Bound<'_, PyAny>>,
        method: &str,
    ) -> PyResult<Py<TimerHandle>> {
        let this = slf.get();
        let py = slf.py();
        this.check_closed()?;
        let tb = Self::debug_prepare(slf, callback, method, true)?;
        let spare = if this.debug() { None } else { this.spare.lock(py)?.take_timer() };
        let timer = match spare {
            Some(t) => {
                let ctx = Self::handle_context(slf, callback, context);
                let base = t.bind(py).as_super();
                base.get().refill(py, callback.clone().unbind(), args, ctx)?;
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
    fn release(&self, py: Python<'_>, handle: Py<Handle>) {
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
    fn keep_spare(&self, py: Python<'_>, handle: Py<Handle>) {
        if let Ok(mut spare) = self.spare.lock(py) {
            spare.keep(handle.into_bound(py));
        }
    }

    /// A handle the loop now holds: hidden from the GC outside debug mode (see `hide_from_gc`;
    /// debug mode keeps handles visible to its tools).
    fn hold(&self, handle: &Bound<'_, PyAny>) {
        if !self.debug() {
            hide_from_gc(handle);
        }
    }

    fn wake(&self) {
        // One wake-up per park: the first caller clears the flag, so a thread posting many
        // callbacks while the loop waits for the GIL makes one eventfd write, not one each.
        if self.parked.swap(false, Ordering::SeqCst) {
            // A failed wake means the eventfd counter is saturated: the loop is woken anyway.
            let _ = self.waker.wake();
        }
    }

    fn add_watcher(
        slf: &Bound<'_, Self>,
        fileobj: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        which: Which,
    ) -> PyResult<Py<Handle>> {
        let fd = fileobj_to_fd(fileobj)?;
        let handle = Self::new_handle(slf, callback, CallArgs::from_tuple(args)?, None, None)?;
        Self::watch(slf, fd, handle, which, None)
    }

    /// Make `handle` the reader or writer of `fd`, replacing (and cancelling) the one before.
    /// `drained`: the socket object whose operation just found `fd` would block. Then no
    /// data can be waiting unseen, and a lingering registration for that socket is used as
    /// it is (epoll is edge-triggered: whatever arrives from now on raises an event).
    pub(crate) fn watch(
        slf: &Bound<'_, Self>,
        fd: RawFd,
        handle: Handle,
        which: Which,
        drained: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Handle>> {
        let this = slf.get();
        let py = slf.py();
        this.check_closed()?;
        this.check_no_transport(py, fd)?;
        let handle = Py::new(py, handle)?;
        handle.get().mark_repeating();
        this.hold(handle.bind(py).as_any());
        let (replaced, linger) = {
            let mut st = this.state.lock(py)?;
            let entry = st.io.entry(fd).or_default();
            let old_interest = entry.registered();
            let linger = entry.linger.take();
            let slot = entry.slot(which);
            let previous = slot.replace(handle.clone_ref(py));
            let new_interest = entry.interest();
            let in_place = new_interest == old_interest
                && matches!((&linger, drained), (Some(l), Some(s)) if l.sock.is(s));
            let res = if in_place { Ok(()) } else { reactor::update(&this.registry, fd, old_interest, new_interest) };
            if let Err(e) = res {
                // Put things back as they were.
                let entry = st.io.get_mut(&fd).expect("entry inserted above");
                let ours = std::mem::replace(entry.slot(which), previous);
                if entry.is_unused() {
                    st.io.remove(&fd);
                }
                drop(st);
                if let Some(h) = &ours {
                    hand_back(h.bind(py));
                }
                drop((ours, linger));
                return Err(os_error(py, e));
            }
            (previous, linger)
        };
        drop(linger);
        if let Some(old) = replaced {
            Handle::retire(old.bind(py))?;
        }
        Ok(handle)
    }

    fn remove_watcher(slf: &Bound<'_, Self>, fileobj: &Bound<'_, PyAny>, which: Which) -> PyResult<bool> {
        let this = slf.get();
        let py = slf.py();
        let fd = fileobj_to_fd(fileobj)?;
        if this.closed.load(Ordering::Relaxed) {
            return Ok(false);
        }
        this.check_no_transport(py, fd)?;
        this.unwatch(py, fd, which, |_| true, None)
    }

    /// Remove the reader or writer of `fd` if `is_it` says it is the one to remove. `sock`:
    /// the socket whose finished operation it served; if nothing else uses `fd`, its
    /// registration lingers for that socket's next operation (see `Linger`).
    pub(crate) fn unwatch(
        &self,
        py: Python<'_>,
        fd: RawFd,
        which: Which,
        is_it: impl FnOnce(&Handle) -> bool,
        sock: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let removed = {
            let mut st = self.state.lock(py)?;
            let iteration = st.iteration;
            let Some(entry) = st.io.get_mut(&fd) else { return Ok(false) };
            let old_interest = entry.interest();
            let slot = entry.slot(which);
            if !slot.as_ref().is_some_and(|h| is_it(h.get())) {
                return Ok(false);
            }
            let removed = slot.take();
            let mut new_interest = entry.interest();
            if entry.is_unused() {
                match (sock, old_interest) {
                    (Some(sock), Some(interest)) => {
                        entry.linger = Some(Linger { interest, sock: sock.clone().unbind(), since: iteration });
                        st.lingering.push((fd, iteration));
                        new_interest = old_interest;
                    }
                    _ => {
                        st.io.remove(&fd);
                    }
                }
            }
            // Deregistering cannot fail in a way the caller could act on (the fd may be
            // closed already); modifying to the remaining interest can, so report that.
            let res = if new_interest == old_interest {
                Ok(())
            } else {
                reactor::update(&self.registry, fd, old_interest, new_interest)
            };
            if let Err(e) = res {
                drop(st);
                if let Some(h) = &removed {
                    Handle::retire(h.bind(py))?;
                }
                return Err(os_error(py, e));
            }
            removed
        };
        match removed {
            Some(h) => {
                Handle::retire(h.bind(py))?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// One iteration: poll for I/O (waiting only when nothing is ready), move due timers to
    /// the ready queue, then run every callback that was ready at that point.
    fn run_once(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();

        let (timeout, cancelled_timers, skip_poll, expired) = {
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
            let timeout = if !st.ready.is_empty() || !st.deferred.is_empty() || st.stopping {
                Some(Duration::ZERO)
            } else if let Some((when, _)) = st.timers.peek() {
                let secs = (when - monotonic()).clamp(0.0, MAX_POLL_SECONDS);
                Some(Duration::from_secs_f64(secs))
            } else {
                None
            };
            if timeout != Some(Duration::ZERO) {
                this.parked.store(true, Ordering::SeqCst);
            }
            // With callbacks ready and no descriptor registered, a poll could only report the
            // waker, which matters only to a parked loop: skip the syscall.
            let skip_poll = timeout == Some(Duration::ZERO) && st.io.is_empty();
            (timeout, cancelled, skip_poll, expired)
        };
        drop(expired);
        for t in cancelled_timers {
            this.release(py, t.into_bound(py).into_super().unbind());
        }

        // Every iteration polls, as the stdlib does: I/O that is ready is seen at the next
        // iteration even while callbacks keep the ready queue busy. Only a waiting poll
        // releases the GIL.
        let events = if skip_poll {
            Vec::new()
        } else {
            let mut guard = lock(&this.poller)?;
            let poller: &mut Poller = &mut guard;
            let result = if timeout == Some(Duration::ZERO) {
                poller.poll(timeout)
            } else {
                let r = py.detach(|| poller.poll(timeout));
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
        let ran = Self::run_ready(slf, batch);
        // Held writes go out even when a callback raised KeyboardInterrupt or SystemExit.
        let flushed = Self::flush_deferred(slf);
        ran.and(flushed)
    }

    /// Run one iteration's batch of ready callbacks and readiness events.
    fn run_ready(slf: &Bound<'_, Self>, batch: Vec<Ready>) -> PyResult<()> {
        let this = slf.get();
        let py = slf.py();
        let debug = this.debug();
        let mut batch = batch.into_iter();
        while let Some(item) = batch.next() {
            let handle = match item {
                Ready::Call(h) => h,
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
            let outcome = if debug {
                Self::run_debug(slf, &handle)
            } else {
                handle.get().run(py, reuse)
            };
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

    /// Hold `core`'s queued writes until the end of this iteration: what the callbacks of
    /// one iteration write to a connection goes out in one vectored write.
    pub(crate) fn defer_flush(&self, py: Python<'_>, core: Py<StreamCore>) -> PyResult<()> {
        self.state.lock(py)?.deferred.push(core);
        Ok(())
    }

    fn flush_deferred(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let deferred = std::mem::take(&mut slf.get().state.lock(py)?.deferred);
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

    /// Deregister what lingered unused for two iterations (see `Linger`); the caller drops
    /// what this returns once the state is unlocked (it holds socket objects).
    fn expire_lingering(&self, st: &mut State) -> Vec<Linger> {
        let State { io, lingering, iteration, .. } = st;
        let mut expired = Vec::new();
        lingering.retain(|&(fd, since)| {
            if *iteration - since < 2 {
                return true;
            }
            // A newer entry in the list stands for a registration that was reused since.
            if let Some(entry) = io.get_mut(&fd) {
                if let Some(l) = entry.linger.take_if(|l| l.since == since) {
                    let _ = reactor::update(&self.registry, fd, Some(l.interest), None);
                    io.remove(&fd);
                    expired.push(l);
                }
            }
            false
        });
        expired
    }

    fn report_io_error(slf: &Bound<'_, Self>, err: PyErr) {
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
    fn requeue(this: &Self, py: Python<'_>, rest: impl Iterator<Item = Ready>) -> PyResult<()> {
        let rest: Vec<Ready> = rest.collect();
        let mut st = this.state.lock(py)?;
        for item in rest.into_iter().rev() {
            st.ready.push_front(item);
        }
        Ok(())
    }

    fn check_no_transport(&self, py: Python<'_>, fd: RawFd) -> PyResult<()> {
        let target = {
            let st = self.state.lock(py)?;
            match st.io.get(&fd).and_then(|e| e.owner.as_ref()) {
                Some(o) => o.target.clone_ref(py),
                None => return Ok(()),
            }
        };
        match target.busy_message(py, fd) {
            Some(msg) => Err(PyRuntimeError::new_err(msg)),
            None => Ok(()),
        }
    }

    /// A native transport takes ownership of `fd` (not watched until `io_update`).
    pub(crate) fn io_attach(&self, py: Python<'_>, fd: RawFd, target: IoTarget) -> PyResult<()> {
        self.check_closed()?;
        let old = {
            let mut st = self.state.lock(py)?;
            let entry = st.io.entry(fd).or_default();
            let before = entry.registered();
            let linger = entry.linger.take();
            let old = entry.owner.replace(Owner { target, read: false, write: false });
            let after = entry.interest();
            let res = reactor::update(&self.registry, fd, before, after);
            drop(st);
            drop(linger);
            res.map_err(|e| os_error(py, e))?;
            old
        };
        drop(old);
        Ok(())
    }

    /// What the owning transport of `fd` wants to be told about.
    pub(crate) fn io_update(&self, py: Python<'_>, fd: RawFd, read: bool, write: bool) -> std::io::Result<()> {
        let mut st = self.state.lock(py).map_err(|_| std::io::Error::from(std::io::ErrorKind::WouldBlock))?;
        let Some(entry) = st.io.get_mut(&fd) else { return Ok(()) };
        let before = entry.interest();
        let Some(o) = entry.owner.as_mut() else { return Ok(()) };
        let (was_read, was_write) = (o.read, o.write);
        o.read = read;
        o.write = write;
        let after = entry.interest();
        if let Err(e) = reactor::update(&self.registry, fd, before, after) {
            if let Some(o) = entry.owner.as_mut() {
                o.read = was_read;
                o.write = was_write;
            }
            return Err(e);
        }
        Ok(())
    }

    /// The owning transport of `fd` lets go of it.
    pub(crate) fn io_detach(&self, py: Python<'_>, fd: RawFd) -> PyResult<()> {
        let old = {
            let mut st = self.state.lock(py)?;
            let Some(entry) = st.io.get_mut(&fd) else { return Ok(()) };
            let before = entry.interest();
            let old = entry.owner.take();
            let after = entry.interest();
            let unused = entry.is_unused();
            if unused {
                st.io.remove(&fd);
            }
            let _ = reactor::update(&self.registry, fd, before, after);
            old
        };
        drop(old);
        let _ = py;
        Ok(())
    }

    /// Ask for `fd` to be re-armed before the next poll (it may still be ready).
    pub(crate) fn io_rearm(&self, py: Python<'_>, fd: RawFd) -> PyResult<()> {
        self.state.lock(py)?.rearm.push(fd);
        Ok(())
    }

    /// A handle for a native watcher callback: no arguments, and no context (native code
    /// reads no context variable).
    pub(crate) fn native_handle(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<Handle> {
        Handle::new(py, callback, CallArgs::Zero, HandleContext::Unneeded, &self.shared)
    }

    /// The kept read buffer, taken out (see `pybuf::read_into_bytes`).
    pub(crate) fn recv_buffer<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        let taken = self.recv_spare.lock(py).ok()?.take();
        taken.map(|b| b.into_bound(py))
    }

    /// Keep a read buffer for the next read, if nothing else refers to it.
    pub(crate) fn keep_recv_buffer(&self, py: Python<'_>, buf: Bound<'_, PyBytes>) {
        // SAFETY: reading the reference count of an object we hold.
        let unshared = unsafe { ffi::Py_REFCNT(buf.as_ptr()) } == 1;
        if unshared {
            let old = self.recv_spare.lock(py).ok().and_then(|mut s| s.replace(buf.unbind()));
            drop(old); // outside the borrow
        }
    }

    /// Whether this loop is the calling thread's running loop. Then `Future()` and
    /// `Task(coro)` find it by themselves: passing `loop=` would make CPython build a
    /// keyword dict for every future and task (the C types have no vectorcall).
    fn is_running_here(slf: &Bound<'_, Self>) -> bool {
        let py = slf.py();
        // SAFETY: a call with the GIL held; the new reference is released here.
        unsafe {
            let running = ffi::PyObject_CallNoArgs(slf.get().get_running_loop.as_ptr());
            if running.is_null() {
                drop(PyErr::fetch(py));
                return false;
            }
            let here = running == slf.as_ptr();
            ffi::Py_DECREF(running);
            here
        }
    }

    /// `create_future()` for native code.
    pub(crate) fn new_future<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let this = slf.get();
        if Self::is_running_here(slf) {
            return this.future_type.bind(slf.py()).call0();
        }
        vectorcall_kw(slf.py(), &this.future_type, &[slf.as_any()], &this.kw_loop)
    }

    /// `call_soon(callback)` for native code.
    pub(crate) fn call_soon_internal_noarg(slf: &Bound<'_, Self>, callback: &Bound<'_, PyAny>) -> PyResult<()> {
        Self::schedule_soon(slf, callback, CallArgs::Zero, None, "call_soon", false)?;
        Ok(())
    }

    /// `call_soon(callback, arg)` for native code.
    pub(crate) fn call_soon_internal(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        arg: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let args = CallArgs::One(arg.clone().unbind());
        Self::schedule_soon(slf, callback, args, None, "call_soon", false)?;
        Ok(())
    }

    fn run_debug(slf: &Bound<'_, Self>, handle: &Py<Handle>) -> Result<bool, Failure> {
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
    fn report(slf: &Bound<'_, Self>, handle: &Py<Handle>, failure: Failure) -> PyResult<()> {
        let py = slf.py();
        if is_exit(py, &failure.err) {
            return Err(failure.err);
        }
        let exc = failure.err.into_value(py);
        slf.call_method1(
            intern!(py, "_report_callback_error"),
            (handle, failure.func, failure.args, exc),
        )?;
        Ok(())
    }

    /// Drop cancelled timers from the head of the queue, and rebuild the queue when most of
    /// it is cancelled. Returns the removed timers, to be dropped outside the lock.
    fn clean_timers(&self, py: Python<'_>, st: &mut State) -> Vec<Py<TimerHandle>> {
        let mut removed = Vec::new();
        let cancelled = self.shared.cancelled_timers.load(Ordering::Relaxed);
        let queued = st.timers.len();
        let is_cancelled =
            |t: &Py<TimerHandle>| -> bool { t.bind(py).as_super().get().is_cancelled() };
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

#[pymethods]
impl LoopCore {
    #[new]
    fn py_new(py: Python<'_>) -> PyResult<Self> {
        let (poller, registry) = Poller::new().map_err(|e| os_error(py, e))?;
        let waker = Waker::new(poller.registry(), WAKER_TOKEN).map_err(|e| os_error(py, e))?;
        let asyncio = py.import("asyncio")?;
        Ok(LoopCore {
            state: GilCell::new(State::default()),
            poller: Mutex::new(poller),
            registry,
            waker,
            parked: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            shared: Arc::new(LoopShared::default()),
            task_factory: GilCell::new(None),
            future_type: asyncio.getattr("Future")?.unbind(),
            task_type: asyncio.getattr("Task")?.unbind(),
            context_free_callback: py
                .import("asyncio.futures")?
                .getattr("_set_result_unless_cancelled")?
                .unbind(),
            kw_loop: PyTuple::new(py, [PyString::intern(py, "loop")])?.unbind(),
            get_running_loop: py.import("asyncio.events")?.getattr("_get_running_loop")?.unbind(),
            kw_loop_name: PyTuple::new(
                py,
                [PyString::intern(py, "loop"), PyString::intern(py, "name")],
            )?
            .unbind(),
            spare: GilCell::new(SparePool::default()),
            recv_spare: GilCell::new(None),
            thread_id: GilCell::new(None),
        })
    }

    fn is_running(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.thread_id.lock(py)?.is_some())
    }

    #[getter(_thread_id)]
    fn thread_id_get(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.thread_id.lock(py)?.as_ref().map_or_else(|| py.None(), |t| t.clone_ref(py)))
    }

    #[setter(_thread_id)]
    fn thread_id_set(&self, py: Python<'_>, value: Py<PyAny>) -> PyResult<()> {
        let value = (!value.is_none(py)).then_some(value);
        let old = std::mem::replace(&mut *self.thread_id.lock(py)?, value);
        drop(old);
        Ok(())
    }

    fn time(&self) -> f64 {
        monotonic()
    }

    #[pyo3(signature = (callback, *args, context=None))]
    fn call_soon(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<Handle>> {
        Self::schedule_soon(slf, callback, CallArgs::from_tuple(args)?, context, "call_soon", true)
    }

    #[pyo3(signature = (callback, *args, context=None))]
    fn call_soon_threadsafe(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<Handle>> {
        let handle = Self::schedule_soon(slf, callback, CallArgs::from_tuple(args)?, context, "call_soon_threadsafe", false)?;
        slf.get().wake();
        Ok(handle)
    }

    #[pyo3(signature = (delay, callback, *args, context=None))]
    fn call_later(
        slf: &Bound<'_, Self>,
        delay: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<TimerHandle>> {
        if delay.is_none() {
            return Err(PyTypeError::new_err("delay must not be None"));
        }
        let when = monotonic() + delay.extract::<f64>()?;
        Self::schedule_at(slf, when, callback, CallArgs::from_tuple(args)?, context, "call_later")
    }

    #[pyo3(signature = (when, callback, *args, context=None))]
    fn call_at(
        slf: &Bound<'_, Self>,
        when: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<TimerHandle>> {
        if when.is_none() {
            return Err(PyTypeError::new_err("when cannot be None"));
        }
        Self::schedule_at(slf, when.extract::<f64>()?, callback, CallArgs::from_tuple(args)?, context, "call_at")
    }

    /// Wake the loop if it is waiting for I/O (the stdlib's self-pipe write).
    fn _write_to_self(&self) {
        let _ = self.waker.wake();
    }

    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        self.state.lock(py)?.stopping = true;
        Ok(())
    }

    #[getter]
    fn _stopping(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.state.lock(py)?.stopping)
    }

    /// The body of `run_forever`: iterate until `stop()`.
    fn _run(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let result = loop {
            if let Err(e) = Self::run_once(slf) {
                break Err(e);
            }
            match this.state.lock(slf.py()) {
                Ok(st) if st.stopping => break Ok(()),
                Ok(_) => {}
                Err(e) => break Err(e),
            }
        };
        if let Ok(mut st) = this.state.lock(slf.py()) {
            st.stopping = false;
        }
        result
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Mark closed and drop every queued callback, timer and watcher.
    fn _close_core(&self, py: Python<'_>) -> PyResult<()> {
        self.closed.store(true, Ordering::SeqCst);
        let (ready, timers, io, deferred) = {
            let mut st = self.state.lock(py)?;
            let io: Vec<(RawFd, IoEntry)> = st.io.drain().collect();
            for (fd, entry) in &io {
                let _ = reactor::update(&self.registry, *fd, entry.registered(), None);
            }
            st.rearm.clear();
            st.lingering.clear();
            (std::mem::take(&mut st.ready), st.timers.drain(), io, std::mem::take(&mut st.deferred))
        };
        drop(deferred);
        for t in &timers {
            t.get().unschedule();
            hand_back(t.bind(py).as_super());
        }
        for item in &ready {
            if let Ready::Call(h) = item {
                hand_back(h.bind(py));
            }
        }
        drop((ready, timers));
        for (_, entry) in io {
            drop(entry.owner);
            for h in [entry.reader, entry.writer].into_iter().flatten() {
                Handle::retire(h.bind(py))?;
            }
        }
        Ok(())
    }

    fn get_debug(&self) -> bool {
        self.debug()
    }

    #[getter]
    fn _debug(&self) -> bool {
        self.debug()
    }

    fn _set_debug_flag(&self, enabled: bool) {
        self.shared.debug.store(enabled, Ordering::Relaxed);
    }

    fn create_future<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::new_future(slf)
    }

    #[pyo3(signature = (coro, *, name=None, context=None, **kwargs))]
    fn create_task<'py>(
        slf: &Bound<'py, Self>,
        coro: &Bound<'py, PyAny>,
        name: Option<&Bound<'py, PyAny>>,
        context: Option<&Bound<'py, PyAny>>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let this = slf.get();
        let py = slf.py();
        this.check_closed()?;
        let plain = context.is_none()
            && kwargs.is_none_or(|k| k.is_empty())
            && !this.debug()
            && this.task_factory.lock(py)?.is_none();
        if !plain {
            return slf.call_method(
                intern!(py, "_create_task_slow"),
                (coro, name, context),
                kwargs,
            );
        }
        match name {
            None if Self::is_running_here(slf) => this.task_type.bind(py).call1((coro,)),
            None => vectorcall_kw(py, &this.task_type, &[coro, slf.as_any()], &this.kw_loop),
            Some(n) => {
                vectorcall_kw(py, &this.task_type, &[coro, slf.as_any(), n], &this.kw_loop_name)
            }
        }
    }

    fn set_task_factory(&self, py: Python<'_>, factory: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        if let Some(f) = &factory {
            if !f.is_callable() {
                return Err(PyTypeError::new_err("task factory must be a callable or None"));
            }
        }
        let old = std::mem::replace(&mut *self.task_factory.lock(py)?, factory.map(Bound::unbind));
        drop(old);
        Ok(())
    }

    fn get_task_factory(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.task_factory.lock(py)?.as_ref().map_or_else(|| py.None(), |f| f.clone_ref(py)))
    }

    #[pyo3(signature = (fd, callback, *args))]
    fn _add_reader(
        slf: &Bound<'_, Self>,
        fd: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
    ) -> PyResult<Py<Handle>> {
        Self::add_watcher(slf, fd, callback, args, Which::Reader)
    }

    #[pyo3(signature = (fd, callback, *args))]
    fn _add_writer(
        slf: &Bound<'_, Self>,
        fd: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
    ) -> PyResult<Py<Handle>> {
        Self::add_watcher(slf, fd, callback, args, Which::Writer)
    }

    fn _remove_reader(slf: &Bound<'_, Self>, fd: &Bound<'_, PyAny>) -> PyResult<bool> {
        Self::remove_watcher(slf, fd, Which::Reader)
    }

    fn _remove_writer(slf: &Bound<'_, Self>, fd: &Bound<'_, PyAny>) -> PyResult<bool> {
        Self::remove_watcher(slf, fd, Which::Writer)
    }

    /// `sock.recv(n)` on a plain non-blocking socket: the bytes, or a future for them.
    fn _sock_recv<'py>(slf: &Bound<'py, Self>, sock: &Bound<'py, PyAny>, fd: RawFd, n: isize) -> PyResult<Bound<'py, PyAny>> {
        sock_ops::sock_recv(slf, sock_ops::Target { sock, fd }, n)
    }

    /// `sock.recv_into(buf)` on a plain non-blocking socket: the count, or a future for it.
    fn _sock_recv_into<'py>(slf: &Bound<'py, Self>, sock: &Bound<'py, PyAny>, fd: RawFd, buf: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        sock_ops::sock_recv_into(slf, sock_ops::Target { sock, fd }, buf)
    }

    /// Send all of `data` on a plain non-blocking socket: None when done, else a future.
    fn _sock_sendall<'py>(slf: &Bound<'py, Self>, sock: &Bound<'py, PyAny>, fd: RawFd, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        sock_ops::sock_sendall(slf, sock_ops::Target { sock, fd }, data)
    }

    /// The coroutine awaiting `fut` (from `_sock_recv`, …) left early: remove its watcher.
    fn _sock_abandon(slf: &Bound<'_, Self>, fd: RawFd, fut: &Bound<'_, PyAny>, writing: bool) -> PyResult<bool> {
        sock_ops::abandon(slf, fd, fut, writing)
    }

    /// (reader handle, writer handle) watching `fd`, for the socket helpers and tests.
    fn _watchers(&self, py: Python<'_>, fd: &Bound<'_, PyAny>) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
        let fd = fileobj_to_fd(fd)?;
        let st = self.state.lock(py)?;
        let get = |h: &Option<Py<Handle>>| h.as_ref().map_or_else(|| py.None(), |h| h.clone_ref(py).into_any());
        Ok(match st.io.get(&fd) {
            Some(e) => (get(&e.reader), get(&e.writer)),
            None => (py.None(), py.None()),
        })
    }

    /// Number of (ready callbacks, queued timers, watched fds): for tests and debugging.
    fn _stats(&self, py: Python<'_>) -> PyResult<(usize, usize, usize)> {
        let st = self.state.lock(py)?;
        Ok((st.ready.len(), st.timers.len(), st.io.len()))
    }

    /// Number of (spare handles, spare timers) kept for reuse: for tests.
    fn _spare_stats(&self, py: Python<'_>) -> PyResult<(usize, usize)> {
        Ok(self.spare.lock(py)?.len())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        if let Some(st) = self.state.try_lock(py) {
            for item in &st.ready {
                match item {
                    Ready::Call(h) => visit.call(h)?,
                    Ready::Io(t, ..) => t.visit(&visit)?,
                }
            }
            for t in st.timers.iter() {
                visit.call(t)?;
            }
            for c in &st.deferred {
                visit.call(c)?;
            }
            for e in st.io.values() {
                visit.call(&e.reader)?;
                visit.call(&e.writer)?;
                if let Some(l) = &e.linger {
                    visit.call(&l.sock)?;
                }
                if let Some(o) = &e.owner {
                    o.target.visit(&visit)?;
                }
            }
        }
        if let Some(f) = self.task_factory.try_lock(py) {
            visit.call(&*f)?;
        }
        Ok(())
    }

    fn __clear__(&self, py: Python<'_>) {
        let taken = self.state.try_lock(py).map(|mut st| std::mem::take(&mut *st));
        if let Some(st) = &taken {
            for item in &st.ready {
                if let Ready::Call(h) = item {
                    hand_back(h.bind(py));
                }
            }
            for t in st.timers.iter() {
                hand_back(t.bind(py).as_super());
            }
            for e in st.io.values() {
                for h in [&e.reader, &e.writer].into_iter().flatten() {
                    hand_back(h.bind(py));
                }
            }
        }
        let factory = self.task_factory.try_lock(py).and_then(|mut f| f.take());
        drop(taken);
        drop(factory);
    }
}
