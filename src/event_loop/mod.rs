//! `LoopCore`: the native half of `swordfish.Loop` — the ready queue, the timer queue, the
//! I/O registry and the loop iteration itself. The Python subclass adds the parts that are
//! not on the hot path (lifecycle bookkeeping, executors, sockets, signals, error reporting).
//!
//! This file holds the state and the methods Python calls; `scheduling` makes and queues
//! handles, `io_registry` keeps track of watched descriptors and epoll, and `iteration` is
//! one turn of the loop.

use crate::call_args::CallArgs;
use crate::clock::monotonic;
use crate::handles::{hand_back, Handle, LoopShared, TimerHandle};
use crate::intmap::IntMap;
use crate::pyutil::{fileobj_to_fd, os_error, vectorcall_kw};
use crate::reactor::{self, Poller, Readiness, WAKER_TOKEN};
use crate::sock_ops;
use crate::spare::SparePool;
use crate::sync::GilCell;
use crate::tasks::StepArg;
use crate::timers::TimerQueue;
use crate::transport::stream::StreamCore;
use crate::transport::IoTarget;
use mio::{Registry, Waker};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};
use pyo3::{ffi, intern, PyTraverseError, PyVisit};
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

mod io_registry;
mod iteration;
mod scheduling;

use io_registry::IoEntry;
pub(crate) use io_registry::Which;

/// Where a callback scheduled without a delay waits: among the ready callbacks (for the
/// next iteration, when scheduled from a callback), or for the end of this iteration.
enum Queue {
    Ready,
    IterationEnd,
}

/// One entry of the ready queue: a callback, a native transport's readiness event, or the
/// next step of a native task (`crate::tasks`).
enum Ready {
    Call(Py<Handle>),
    Io(IoTarget, Readiness),
    Step(Py<PyAny>, StepArg),
}

#[derive(Default)]
struct State {
    ready: VecDeque<Ready>,
    timers: TimerQueue<Py<TimerHandle>>,
    io: IntMap<RawFd, IoEntry>,
    /// Descriptors whose entry lingers (see `Linger`), with when it started.
    lingering: Vec<(RawFd, u64)>,
    /// Loop iterations so far.
    iteration: u64,
    /// Descriptors that fired in the last iteration and must be re-armed before polling.
    rearm: Vec<RawFd>,
    /// Stream transports holding writes for the end of this iteration
    /// (`StreamCore::write_deferred`).
    deferred: Vec<Py<StreamCore>>,
    /// Bytes held so in this iteration (see `HOLD_BUDGET`).
    held_bytes: usize,
    /// Callbacks for the end of this iteration, after its ready callbacks and before its
    /// held writes (`call_at_iteration_end`).
    at_end: Vec<Py<Handle>>,
    stopping: bool,
    /// The last iteration polled for I/O (see `run_once`).
    polled: bool,
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
    /// `asyncio.events._get_running_loop`, see `is_running_here`; None before Python 3.12,
    /// where that call costs a `getpid()` system call (two with the loop-less constructor).
    get_running_loop: Option<Py<PyAny>>,
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
    /// Whether `create_future`/`create_task` make swordfish's native futures and tasks
    /// (`crate::tasks`) when nothing asks for the C ones (debug mode, a task factory).
    native_tasks: AtomicBool,
    /// Threads to unpark once the loop lets the GIL go (see `unpark_on_release`), and
    /// whether there are any (looked at every iteration, without the lock).
    handoffs: Mutex<Vec<std::thread::Thread>>,
    handoffs_held: AtomicBool,
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

    /// The kept read buffer, taken out (see `pybuf::read_into_bytes`).
    pub(crate) fn recv_buffer<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        let taken = self.recv_spare.lock(py).ok()?.take();
        taken.map(|b| b.into_bound(py))
    }

    /// Unpark `thread` once the loop lets the GIL go: just before its next waiting poll
    /// (with the GIL released), or before a poll that does not wait, or when the loop stops
    /// or closes (or its owner calls `release_handoffs`). For the loop's thread, which holds
    /// the GIL. A thread that needs the GIL and is unparked at once runs (the scheduler lets
    /// a thread just woken preempt the one that woke it) only to find the GIL taken, and
    /// sleeps again until the loop lets it go: two switches for nothing, at every hand-over
    /// from the loop to a thread (docs/design.md, WSGI, has the measurements).
    pub(crate) fn unpark_on_release(&self, thread: std::thread::Thread) {
        self.handoffs().push(thread);
        self.handoffs_held.store(true, Ordering::Release);
    }

    /// Unpark the threads `unpark_on_release` holds.
    pub(crate) fn release_handoffs(&self) {
        if self.handoffs_held.load(Ordering::Relaxed) && self.handoffs_held.swap(false, Ordering::Acquire) {
            let threads = std::mem::take(&mut *self.handoffs());
            threads.into_iter().for_each(|t| t.unpark());
        }
    }

    fn handoffs(&self) -> std::sync::MutexGuard<'_, Vec<std::thread::Thread>> {
        crate::sync::lock_unpoisoned(&self.handoffs)
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
            handoffs: Mutex::new(Vec::new()),
            handoffs_held: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            shared: Arc::new(LoopShared::default()),
            task_factory: GilCell::new(None),
            future_type: asyncio.getattr("Future")?.unbind(),
            task_type: asyncio.getattr("Task")?.unbind(),
            context_free_callback: py.import("asyncio.futures")?.getattr("_set_result_unless_cancelled")?.unbind(),
            kw_loop: PyTuple::new(py, [PyString::intern(py, "loop")])?.unbind(),
            get_running_loop: if py.version_info() >= (3, 12) {
                Some(py.import("asyncio.events")?.getattr("_get_running_loop")?.unbind())
            } else {
                None
            },
            kw_loop_name: PyTuple::new(py, [PyString::intern(py, "loop"), PyString::intern(py, "name")])?.unbind(),
            spare: GilCell::new(SparePool::default()),
            recv_spare: GilCell::new(None),
            thread_id: GilCell::new(None),
            native_tasks: AtomicBool::new(true),
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
        let context = Self::handle_context(slf, callback, context);
        Self::schedule_soon(slf, callback, CallArgs::from_tuple(args)?, context, "call_soon", true, Queue::Ready)
    }

    #[pyo3(signature = (callback, *args, context=None))]
    fn call_soon_threadsafe(
        slf: &Bound<'_, Self>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<Handle>> {
        let context = Self::handle_context(slf, callback, context);
        let handle = Self::schedule_soon(
            slf,
            callback,
            CallArgs::from_tuple(args)?,
            context,
            "call_soon_threadsafe",
            false,
            Queue::Ready,
        )?;
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
        // Named call_at in debug-mode errors, as the stdlib's call_later hands over to it.
        let context = Self::handle_context(slf, callback, context);
        Self::schedule_at(slf, when, callback, CallArgs::from_tuple(args)?, context, "call_at")
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
        let context = Self::handle_context(slf, callback, context);
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
        this.release_handoffs();
        result
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Mark closed and drop every queued callback, timer and watcher.
    fn _close_core(&self, py: Python<'_>) -> PyResult<()> {
        self.closed.store(true, Ordering::SeqCst);
        self.release_handoffs();
        let (ready, at_end, timers, io, deferred) = {
            let mut st = self.state.lock(py)?;
            let io: Vec<(RawFd, IoEntry)> = st.io.drain().collect();
            for (fd, entry) in &io {
                let _ = reactor::update(&self.registry, *fd, entry.registered(), None);
            }
            st.rearm.clear();
            st.lingering.clear();
            let at_end = std::mem::take(&mut st.at_end);
            (std::mem::take(&mut st.ready), at_end, st.timers.drain(), io, std::mem::take(&mut st.deferred))
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
        for h in &at_end {
            hand_back(h.bind(py));
        }
        drop((ready, at_end, timers));
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

    /// Whether this loop makes native futures and tasks (see `native_tasks`).
    fn _native_tasks(&self) -> bool {
        self.native_tasks.load(Ordering::Relaxed)
    }

    fn _set_native_tasks(&self, enabled: bool) {
        self.native_tasks.store(enabled, Ordering::Relaxed);
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
        let plain = kwargs.is_none_or(|k| k.is_empty()) && !this.debug() && this.task_factory.lock(py)?.is_none();
        if !plain {
            return slf.call_method(intern!(py, "_create_task_slow"), (coro, name, context), kwargs);
        }
        if this.native_tasks.load(Ordering::Relaxed) && (context.is_none() || crate::tasks::globals().minor >= 11) {
            return crate::tasks::new_task(slf, coro, name, context);
        }
        if context.is_some() {
            return slf.call_method(intern!(py, "_create_task_slow"), (coro, name, context), kwargs);
        }
        match name {
            None if Self::is_running_here(slf) => this.task_type.bind(py).call1((coro,)),
            None => vectorcall_kw(py, &this.task_type, &[coro, slf.as_any()], &this.kw_loop),
            Some(n) => vectorcall_kw(py, &this.task_type, &[coro, slf.as_any(), n], &this.kw_loop_name),
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
    fn _sock_recv<'py>(
        slf: &Bound<'py, Self>,
        sock: &Bound<'py, PyAny>,
        fd: RawFd,
        n: isize,
    ) -> PyResult<Bound<'py, PyAny>> {
        sock_ops::sock_recv(slf, sock_ops::Target { sock, fd }, n)
    }

    /// `sock.recv_into(buf)` on a plain non-blocking socket: the count, or a future for it.
    fn _sock_recv_into<'py>(
        slf: &Bound<'py, Self>,
        sock: &Bound<'py, PyAny>,
        fd: RawFd,
        buf: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        sock_ops::sock_recv_into(slf, sock_ops::Target { sock, fd }, buf)
    }

    /// Send all of `data` on a plain non-blocking socket: None when done, else a future.
    fn _sock_sendall<'py>(
        slf: &Bound<'py, Self>,
        sock: &Bound<'py, PyAny>,
        fd: RawFd,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
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
                    Ready::Step(t, arg) => {
                        visit.call(t)?;
                        visit.call(arg.object())?;
                    }
                }
            }
            for h in &st.at_end {
                visit.call(h)?;
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
                visit.call(&e.fileobj)?;
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
            for h in &st.at_end {
                hand_back(h.bind(py));
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

/// `lp.call_soon(callback)`, except on swordfish's loop, where `callback` runs at the end of
/// this iteration (`LoopCore::call_at_iteration_end`): after the callbacks ready now, and
/// without counting among those that wait for the next one.
pub(crate) fn call_at_iteration_end(lp: &Bound<'_, PyAny>, callback: &Bound<'_, PyAny>) -> PyResult<()> {
    match lp.cast::<LoopCore>() {
        Ok(core) => LoopCore::call_at_iteration_end(core, callback),
        Err(_) => lp.call_method1(pyo3::intern!(lp.py(), "call_soon"), (callback,)).map(drop),
    }
}

/// `lp.create_future()`: on swordfish's loop without a Python method call.
pub(crate) fn create_future<'py>(lp: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    match lp.cast::<LoopCore>() {
        Ok(core) => LoopCore::new_future(core),
        Err(_) => lp.call_method0(pyo3::intern!(lp.py(), "create_future")),
    }
}
