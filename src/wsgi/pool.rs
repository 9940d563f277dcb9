//! The app threads. A request is submitted once its body is complete or its first
//! `PREFETCH` bytes have arrived (the loop collects them), so a client that sends its
//! body slowly holds a connection but no thread. Threads start when there is work and no
//! idle thread, up to the configured number, and take the next request without releasing
//! the GIL when one is queued, so that a busy server hands requests over in batches.

use super::bridge::{deliver, BodyWaiter, WsgiBridge};
use super::exchange::Exchange;
use super::response;
use crate::http::body::BodyRead;
use crate::http::conn::Expect;
use crate::http::protocol::HttpProtocol;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Body bytes collected on the loop before the app gets a request whose body is not
/// complete: at most this much (plus one read) is buffered per request while a client sends.
pub const PREFETCH: usize = 256 * 1024;

/// What every app thread needs to serve a request.
pub struct AppContext {
    pub app: Py<PyAny>,
    pub environ: Py<PyDict>,
    pub bridge: Py<WsgiBridge>,
    /// `SCRIPT_NAME`, as bytes, for stripping from the path.
    pub root_path: Vec<u8>,
}

pub struct Pool {
    pub ctx: AppContext,
    threads: usize,
    state: Mutex<PoolState>,
    work: Condvar,
}

#[derive(Default)]
struct PoolState {
    jobs: VecDeque<Arc<Exchange>>,
    idle: usize,
    running: usize,
    stopping: bool,
    handles: Vec<JoinHandle<()>>,
}

impl Pool {
    pub fn new(ctx: AppContext, threads: usize) -> Pool {
        Pool { ctx, threads: threads.max(1), state: Mutex::new(PoolState::default()), work: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// On the loop thread, when a request starts: collect the start of its body, then
    /// submit it. A client waiting for `100 Continue` gets the app at once (the app's first
    /// read answers it).
    pub fn prefetch(self: &Arc<Self>, py: Python<'_>, ex: &Arc<Exchange>) -> PyResult<()> {
        let proto = ex.proto.bind(py);
        let expecting = proto.get().lock(py)?.current(ex.gen).is_some_and(|r| r.expect == Expect::Waiting);
        if !expecting {
            loop {
                {
                    let s = ex.lock();
                    if s.submitted || s.body_ended || s.buffered() >= PREFETCH {
                        break;
                    }
                }
                let waiter = || {
                    let w = BodyWaiter { ex: ex.clone(), pool: Some(self.clone()), done: Mutex::new(false) };
                    Ok(Py::new(py, w)?.into_any())
                };
                match HttpProtocol::read_body(proto, ex.gen, waiter)? {
                    BodyRead::Now(msg) => deliver(py, ex, msg.bind(py))?,
                    // The waiter submits the request when it has enough.
                    BodyRead::Wait(_) => return Ok(()),
                }
            }
        }
        let first = {
            let mut s = ex.lock();
            !std::mem::replace(&mut s.submitted, true)
        };
        if first {
            self.submit(ex.clone());
        }
        Ok(())
    }

    fn submit(self: &Arc<Self>, ex: Arc<Exchange>) {
        let spawn = {
            let mut st = self.lock();
            if st.stopping {
                return;
            }
            st.jobs.push_back(ex);
            let spawn = st.idle == 0 && st.running < self.threads;
            if spawn {
                st.running += 1;
            }
            spawn
        };
        if spawn {
            let pool = self.clone();
            let handle = std::thread::Builder::new().name("swordfish-wsgi".into()).spawn(move || pool.work());
            match handle {
                Ok(h) => self.lock().handles.push(h),
                Err(_) => self.lock().running -= 1,
            }
        } else {
            self.work.notify_one();
        }
    }

    /// An app thread: serve requests until the pool stops.
    fn work(self: Arc<Self>) {
        Python::attach(|py| loop {
            // A request already queued is taken without releasing the GIL.
            let queued = self.lock().jobs.pop_front();
            let job = match queued {
                Some(job) => Some(job),
                None => py.detach(|| self.wait_job()),
            };
            let Some(ex) = job else { break };
            response::serve(py, &self.ctx, ex);
        });
        let mut st = self.lock();
        st.running -= 1;
        drop(st);
        self.work.notify_all();
    }

    fn wait_job(&self) -> Option<Arc<Exchange>> {
        let mut st = self.lock();
        st.idle += 1;
        let job = loop {
            if let Some(job) = st.jobs.pop_front() {
                break Some(job);
            }
            if st.stopping {
                break None;
            }
            st = match self.work.wait(st) {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
        };
        st.idle -= 1;
        job
    }

    /// Stop the threads: queued requests are dropped, running ones finish. Waits up to
    /// `timeout` seconds (with the GIL released) for the threads to end; returns how many
    /// are still running (stuck in the app).
    pub fn stop(&self, py: Python<'_>, timeout: f64) -> usize {
        let handles = {
            let mut st = self.lock();
            st.stopping = true;
            st.jobs.clear();
            std::mem::take(&mut st.handles)
        };
        self.work.notify_all();
        let deadline = Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
        py.detach(|| {
            let mut st = self.lock();
            while st.running > 0 {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                st = match self.work.wait_timeout(st, left) {
                    Ok((g, _)) => g,
                    Err(poisoned) => poisoned.into_inner().0,
                };
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
        self.threads
    }
}
