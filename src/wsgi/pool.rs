//! The app threads. A request is submitted once its body is complete or its first
//! `PREFETCH` bytes have arrived (the loop collects them), so a client that sends its
//! body slowly holds a connection but no thread. A thread that finishes a request takes
//! the next queued one without releasing the GIL, so a busy server hands requests over in
//! batches. Another thread is woken (or started, up to the configured number) for a queued
//! request only when no thread is serving, or when the process uses less than `BUSY` of a
//! CPU: the threads serving are then blocked (an app waiting on a database), not busy. With
//! the GIL, Python runs on one CPU at most, so on a CPU-bound app more threads would only
//! take turns holding it, and each switch between them costs more than it gives
//! (docs/design.md has the measurements). The queue is looked at again every `STALL` while
//! requests wait in it, and whenever the CPU would go idle (`idle_watch`). A thread that
//! has served long requests back to back for `TURN` while other threads also serve hands
//! the GIL over between two requests, so a thread back from a database call (or the loop,
//! with responses to send) does not wait for the interpreter's 5 ms switch interval behind
//! it. The thread woken is the one that went idle last: its stack and the app's objects it
//! touched are still in the caches, and the threads a burst started sleep on untouched.
//! While the process keeps half a CPU busy or more, app threads run in the batch
//! scheduling class (`idle_watch::Class`). A thread the loop wakes is unparked when the loop
//! lets the GIL go (`LoopCore::unpark_on_release`), not while the loop holds it.

use super::bridge::{deliver, finished, BodyWaiter, WsgiBridge};
use super::cpu_share::CpuShare;
use super::environ::KeyCache;
use super::exchange::Exchange;
use super::idle_watch;
use super::response;
use crate::http::body::BodyRead;
use crate::http::conn::Expect;
use crate::sync::{lock_unpoisoned, wait_timeout_unpoisoned};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// Body bytes collected on the loop before the app gets a request whose body is not
/// complete: at most this much (plus one read) is buffered per request while a client sends.
pub const PREFETCH: usize = 256 * 1024;
/// How often the loop looks at a queue that still holds requests.
const STALL: Duration = Duration::from_millis(2);
/// The share of one CPU the process uses at which it counts as busy: more threads would
/// only queue for the GIL.
const BUSY: f64 = 0.95;
/// How long a thread serving requests back to back keeps the GIL while others serve too.
const TURN: Duration = Duration::from_micros(300);
/// Requests shorter than this on average are served back to back however long the run:
/// handing over between them costs more than it gives.
const SHORT: Duration = Duration::from_micros(25);

/// What every app thread needs to serve a request.
pub struct AppContext {
    pub app: Py<PyAny>,
    pub environ: Py<PyDict>,
    /// `SCRIPT_NAME`, as bytes, for stripping from the path.
    pub root_path: Vec<u8>,
    pub keys: KeyCache,
}

impl AppContext {
    /// The context of `app`, whose requests' environs start as `environ`.
    pub fn new(app: Py<PyAny>, environ: Bound<'_, PyDict>) -> PyResult<AppContext> {
        let root_path = match environ.get_item("SCRIPT_NAME")? {
            Some(s) => s.extract::<String>()?.into_bytes(),
            None => Vec::new(),
        };
        Ok(AppContext { app, environ: environ.unbind(), root_path, keys: Default::default() })
    }
}

pub struct Pool {
    pub ctx: AppContext,
    /// The loop's side of the hand-off.
    pub bridge: Py<WsgiBridge>,
    /// A `StallCheck` is scheduled.
    check_armed: AtomicBool,
    shared: Arc<Shared>,
}

/// The thread that wakes an app thread. The loop's thread holds the GIL until its next
/// poll, so a thread it wakes is unparked only then (`LoopCore::unpark_on_release`).
#[derive(Clone, Copy)]
enum Waker {
    Loop,
    AppThread,
}

/// The part of the pool the idle watcher holds too: no Python objects, so that the watcher
/// never keeps the app alive.
pub(super) struct Shared {
    threads: usize,
    state: Mutex<PoolState>,
    /// Signalled when a thread ends (for `stop`).
    ended: Condvar,
    /// Signalled for the idle watcher when a request waits that no thread was woken for
    /// (or the pool stops).
    pub(super) queued: Condvar,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, PoolState> {
        lock_unpoisoned(&self.state)
    }
}

#[derive(Default)]
pub(super) struct PoolState {
    /// Requests submitted, oldest first.
    jobs: VecDeque<Arc<Exchange>>,
    /// Threads waiting for work, not woken, the last to go idle on top.
    idle: Vec<Thread>,
    /// Threads serving a request.
    serving: usize,
    /// Threads started and not ended.
    running: usize,
    /// How busy the process is.
    cpu: CpuShare,
    pub(super) stopping: bool,
    handles: Vec<JoinHandle<()>>,
    /// The idle watcher was started (or could not be).
    watcher_started: bool,
    /// The idle watcher waits on `queued`.
    pub(super) watcher_waiting: bool,
}

impl PoolState {
    /// Whether the process keeps a CPU busy (looked at when a request ends, or waits while
    /// a thread serves).
    pub(super) fn cpu_busy(&mut self) -> bool {
        self.cpu.used() >= BUSY
    }

    /// Requests are queued that no thread is on its way to take.
    pub(super) fn uncovered(&self) -> bool {
        // Threads woken, between two requests or just started: each takes the next request
        // itself, and looks again at what is left behind it.
        let on_the_way = self.running.saturating_sub(self.idle.len() + self.serving);
        !self.jobs.is_empty() && on_the_way == 0
    }

    /// Wake the thread that went idle last; the lock back if no thread is idle.
    pub(super) fn wake_idle(
        mut st: MutexGuard<'_, Self>,
        unpark: impl FnOnce(Thread),
    ) -> Result<(), MutexGuard<'_, Self>> {
        match st.idle.pop() {
            Some(thread) => {
                drop(st);
                unpark(thread);
                Ok(())
            }
            None => Err(st),
        }
    }

    fn take(&mut self) -> Option<Arc<Exchange>> {
        let job = self.jobs.pop_front()?;
        self.serving += 1;
        Some(job)
    }

    fn is_idle(&self, me: &Thread) -> bool {
        self.idle.iter().any(|t| t.id() == me.id())
    }

    /// `me` is no longer waiting (it found work without being woken).
    fn leave_idle(&mut self, me: &Thread) {
        if let Some(i) = self.idle.iter().rposition(|t| t.id() == me.id()) {
            self.idle.remove(i);
        }
    }
}

impl Pool {
    pub fn new(ctx: AppContext, bridge: Py<WsgiBridge>, threads: usize) -> Pool {
        Pool {
            ctx,
            bridge,
            check_armed: AtomicBool::new(false),
            shared: Arc::new(Shared {
                threads: threads.max(1),
                state: Mutex::new(PoolState::default()),
                ended: Condvar::new(),
                queued: Condvar::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.shared.lock()
    }

    /// On the loop thread, when a request starts: collect the start of its body, then
    /// submit it. A client waiting for `100 Continue` gets the app at once (the app's first
    /// read answers it).
    pub fn prefetch(self: &Arc<Self>, py: Python<'_>, ex: &Arc<Exchange>) -> PyResult<()> {
        let carrier = ex.carrier()?;
        if let Some(body) = carrier.take_whole_body(py, ex.gen)? {
            ex.update(|s| s.push_buf(body, false));
        }
        let expecting = match carrier.h1() {
            Some(proto) => proto.get().lock(py)?.current(ex.gen).is_some_and(|r| r.expect == Expect::Waiting),
            None => false,
        };
        if !expecting {
            loop {
                {
                    let s = ex.lock();
                    if s.submitted || s.body_ended || s.buffered() >= PREFETCH {
                        break;
                    }
                }
                let waiter = || BodyWaiter::made(py, ex, Some(self.clone()));
                match carrier.read_body(py, ex.gen, waiter)? {
                    BodyRead::Now(msg) => deliver(ex, msg.bind(py))?,
                    // The waiter submits the request when it has enough.
                    BodyRead::Wait(_) => return Ok(()),
                }
            }
        }
        let (first, truncated) = {
            let mut s = ex.lock();
            (!std::mem::replace(&mut s.submitted, true), s.truncated)
        };
        if first && truncated {
            // The client left before the body's start came: no app to run.
            return finished(py, ex, None);
        }
        if first {
            self.submit(py, ex.clone())?;
        }
        Ok(())
    }

    fn submit(self: &Arc<Self>, py: Python<'_>, ex: Arc<Exchange>) -> PyResult<()> {
        let mut st = self.lock();
        if st.stopping {
            return Ok(());
        }
        st.jobs.push_back(ex);
        if !std::mem::replace(&mut st.watcher_started, true) {
            idle_watch::start(self.shared.clone());
        }
        self.more_hands(st, Waker::Loop);
        // If the serving threads are blocked, or the thread woken was already on its way to
        // another request, nobody else would look at the queue until the next request.
        if !self.check_armed.swap(true, Ordering::Relaxed) {
            let check = Py::new(py, StallCheck { pool: self.clone() })?;
            self.bridge.get().lp.call_method1(py, intern!(py, "call_later"), (STALL.as_secs_f64(), check))?;
        }
        Ok(())
    }

    /// Wake an idle thread, or start one, for a queued request that needs one.
    fn more_hands(self: &Arc<Self>, mut st: MutexGuard<'_, PoolState>, waker: Waker) {
        if !st.uncovered() {
            return;
        }
        if st.serving > 0 && st.cpu_busy() {
            // The threads serving may be blocked all the same: the watcher wakes one if the
            // CPU goes idle.
            if std::mem::take(&mut st.watcher_waiting) {
                self.shared.queued.notify_one();
            }
            return;
        }
        self.hire(st, waker);
    }

    /// Wake the thread that went idle last, or else start one if there is room; false if
    /// neither.
    fn hire(self: &Arc<Self>, st: MutexGuard<'_, PoolState>, waker: Waker) -> bool {
        let unpark = |thread: Thread| match (&self.bridge.get().core, waker) {
            (Some(core), Waker::Loop) => core.get().unpark_on_release(thread),
            _ => thread.unpark(),
        };
        let mut st = match PoolState::wake_idle(st, unpark) {
            Ok(()) => return true,
            Err(st) => st,
        };
        if st.running >= self.shared.threads {
            return false;
        }
        st.running += 1;
        drop(st);
        let pool = self.clone();
        match std::thread::Builder::new().name("swordfish-wsgi".into()).spawn(move || pool.work()) {
            Ok(h) => self.lock().handles.push(h),
            Err(_) => self.lock().running -= 1,
        }
        true
    }

    /// An app thread: serve requests until the pool stops.
    fn work(self: Arc<Self>) {
        let mut class = idle_watch::Class::normal();
        idle_watch::exact_timers();
        Python::attach(|py| {
            let mut served = false;
            let mut turn = Turn::start();
            loop {
                let (queued, shared, loaded) = {
                    let mut st = self.lock();
                    if std::mem::take(&mut served) {
                        st.serving -= 1;
                    }
                    let next = st.take();
                    let shared = st.serving > 1;
                    let loaded = st.cpu.loaded();
                    // Requests left waiting behind this one may need another thread.
                    if next.is_some() {
                        self.more_hands(st, Waker::AppThread);
                    }
                    (next, shared, loaded)
                };
                class.follow(loaded);
                let next = match queued {
                    Some(ex) => {
                        if shared && turn.over() {
                            py.detach(std::thread::yield_now);
                            turn = Turn::start();
                        }
                        Some(ex)
                    }
                    None => {
                        let job = py.detach(|| self.wait_job());
                        turn = Turn::start();
                        job
                    }
                };
                let Some(ex) = next else { break };
                response::serve(py, &self.ctx, ex);
                turn.served += 1;
                served = true;
            }
        });
        let mut st = self.lock();
        st.running -= 1;
        drop(st);
        self.shared.ended.notify_all();
    }

    /// Wait, idle, until there is a request to take (None: the pool stops). A thread woken
    /// (taken off `idle`) for a request another thread took goes back on top of `idle`;
    /// a spurious wake finds itself still there.
    fn wait_job(self: &Arc<Self>) -> Option<Arc<Exchange>> {
        let me = std::thread::current();
        let mut st = self.lock();
        loop {
            if let Some(job) = st.take() {
                st.leave_idle(&me);
                // The loop counted this thread as on its way while it submitted more
                // requests (the thread was unparked only after the loop's callbacks ran):
                // those may need another thread.
                self.more_hands(st, Waker::AppThread);
                return Some(job);
            }
            if st.stopping {
                st.leave_idle(&me);
                return None;
            }
            if !st.is_idle(&me) {
                st.idle.push(me.clone());
            }
            drop(st);
            // An unpark that came before this park is not lost: park returns at once.
            std::thread::park();
            st = self.lock();
        }
    }

    /// Stop the threads: queued requests are dropped, running ones finish. Waits up to
    /// `timeout` seconds (with the GIL released) for the threads to end; returns how many
    /// are still running (stuck in the app).
    pub fn stop(&self, py: Python<'_>, timeout: f64) -> usize {
        let handles = {
            let mut st = self.lock();
            st.stopping = true;
            st.jobs.clear();
            self.shared.queued.notify_all();
            for thread in std::mem::take(&mut st.idle) {
                thread.unpark();
            }
            std::mem::take(&mut st.handles)
        };
        // Threads the loop woke in this iteration wait for its next poll, which does not come
        // while this call waits for them.
        if let Some(core) = &self.bridge.get().core {
            core.get().release_handoffs();
        }
        let deadline = Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
        py.detach(|| {
            let mut st = self.lock();
            while st.running > 0 {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                st = wait_timeout_unpoisoned(&self.shared.ended, st, left);
            }
        });
        let running = self.lock().running;
        if running == 0 {
            for h in handles {
                let _ = py.detach(|| h.join());
            }
        }
        running
    }

    pub fn threads(&self) -> usize {
        self.shared.threads
    }
}

/// An app thread's run of requests served without letting the GIL go between them.
struct Turn {
    since: Instant,
    served: u32,
}

impl Turn {
    fn start() -> Turn {
        Turn { since: Instant::now(), served: 0 }
    }

    /// The run has lasted `TURN`, in requests of `SHORT` or more on average.
    fn over(&self) -> bool {
        let held = self.since.elapsed();
        held >= TURN && held >= SHORT * self.served
    }
}

/// A look at the queue on the loop, `STALL` after a request was submitted and again every
/// `STALL` while requests wait: another thread is woken if one is needed.
#[pyclass(module = "swordfish._native", frozen)]
pub struct StallCheck {
    pool: Arc<Pool>,
}

#[pymethods]
impl StallCheck {
    fn __call__(slf: &Bound<'_, Self>) -> PyResult<()> {
        let pool = &slf.get().pool;
        let st = pool.lock();
        let more = !st.jobs.is_empty() && !st.stopping;
        pool.more_hands(st, Waker::Loop);
        if more {
            // Still queued: look again (each look wakes at most one thread).
            let lp = &pool.bridge.get().lp;
            lp.call_method1(slf.py(), intern!(slf.py(), "call_later"), (STALL.as_secs_f64(), slf))?;
        } else {
            pool.check_armed.store(false, Ordering::Relaxed);
        }
        Ok(())
    }
}
