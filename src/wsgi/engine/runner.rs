//! Running requests. Ready requests queue on the `Baton`. A runner takes the GIL once and
//! serves every queued request under it (the environ, the app, its iterable), then lets the
//! GIL go to write the answers and read on. At most one more thread waits for the GIL
//! meanwhile: it gets it when the runner's app blocks (a database call, a sleep) or at the
//! interpreter's switch interval, and serves what is queued then. So a CPU-bound app runs
//! on one thread at a time, without hand-offs, and a blocking one gets as many threads as
//! it blocks, up to the pool's size. A runner that has to wait a whole switch interval to
//! get the GIL back stops serving (when other runners serve on): the GIL has enough
//! takers, and each more thread waiting for it wakes at every interval to ask for it.
//! While the process keeps half a CPU busy, runners are in the batch scheduling class
//! (`idle_watch::Class`): a thread back from a database call does not preempt the one
//! that most likely holds the GIL it would wait for.

use super::sink::Direct;
use super::slot::Slot;
use super::Engine;
use crate::http::parse::Reject;
use crate::sync::lock_unpoisoned;
use crate::wsgi::cpu_share::CpuShare;
use crate::wsgi::exchange::{Exchange, Route};
use crate::wsgi::idle_watch::Class;
use crate::wsgi::request::WsgiRequest;
use crate::wsgi::response;
use pyo3::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct Baton {
    /// Connections with a request ready, owned by the engine until a runner serves them.
    queue: VecDeque<Arc<Slot>>,
    /// Threads serving the queue.
    runners: usize,
    /// A thread waits for the GIL to serve the queue.
    waiter: bool,
    /// Connections whose request was served, their answer still to write (by whichever
    /// runner lets the GIL go next).
    finished: Vec<Arc<Slot>>,
    /// How busy the process is (for the runners' scheduling class).
    cpu: CpuShare,
}

impl Engine {
    /// Queue `jobs`; Some if the poller should leave to run them (nobody runs) or to wait
    /// for the GIL to (nobody waits), with whether a follower should be woken to lead at
    /// once: this thread will run, or apps are blocked (two threads inside one), so nobody
    /// may come back to the poller for a while (see `lead`).
    pub fn queue(&self, jobs: Vec<Arc<Slot>>) -> Option<bool> {
        let mut b = lock_unpoisoned(&self.baton);
        b.queue.extend(jobs);
        if b.queue.is_empty() || (b.runners > 0 && b.waiter) {
            return None;
        }
        Some(b.runners == 0 || self.in_app.load(Ordering::Relaxed) >= 2)
    }

    /// Queue requests found by a thread that has left the lead (at the end of a TLS
    /// handshake); it runs them, or waits for the GIL to, in `run_queue` next, unless
    /// others already do.
    pub fn queue_taken(&self, jobs: Vec<Arc<Slot>>) {
        lock_unpoisoned(&self.baton).queue.extend(jobs);
    }

    /// Queue a request found outside the poller (by a shutdown): the poller is woken to
    /// see that it has a runner.
    pub fn queue_job(&self, job: Arc<Slot>) {
        lock_unpoisoned(&self.baton).queue.push_back(job);
        let _ = self.waker.wake();
    }

    /// Having left the poller: run the queue, or wait for the GIL as the one waiter.
    pub(super) fn run_queue(self: &Arc<Self>, class: &mut Class) {
        let mut b = lock_unpoisoned(&self.baton);
        if b.queue.is_empty() {
            return;
        }
        class.follow(b.cpu.loaded());
        if b.runners == 0 {
            b.runners += 1;
            if b.queue.len() > 1 {
                let _ = self.waker.wake();
            }
            drop(b);
            return Python::attach(|py| self.run_batches(py));
        }
        if b.waiter {
            return;
        }
        b.waiter = true;
        drop(b);
        Python::attach(|py| {
            {
                let mut b = lock_unpoisoned(&self.baton);
                b.waiter = false;
                self.take_up_if_blocked();
                if b.queue.is_empty() {
                    return;
                }
                b.runners += 1;
                if b.queue.len() > 1 {
                    // The rest of the queue wants a waiter of its own: the poller makes one.
                    let _ = self.waker.wake();
                }
            }
            self.run_batches(py)
        })
    }

    /// As a runner: serve every queued request with the GIL, then write the answers and
    /// read on without it; until the queue is empty. Answers are written before the last
    /// queued request too, after a request that held the thread a switch interval or more
    /// (it blocked, and others had the GIL meanwhile), and by a runner that has just got the
    /// GIL: that one got it because another's app blocked, and the answers that app's
    /// thread left must not wait for it. A write after which the GIL took a whole switch
    /// interval to come back ends the runner's turn, if another runner serves on.
    fn run_batches(self: &Arc<Self>, py: Python<'_>) {
        let interval = self.switch_interval;
        if self.write_finished(py) >= interval && self.retire() {
            return;
        }
        loop {
            loop {
                let (job, last, answers) = {
                    let mut b = lock_unpoisoned(&self.baton);
                    let job = b.queue.pop_front();
                    (job, b.queue.is_empty(), !b.finished.is_empty())
                };
                let Some(slot) = job else { break };
                if last && answers {
                    self.write_finished(py);
                }
                let began = Instant::now();
                self.serve(py, &slot);
                lock_unpoisoned(&self.baton).finished.push(slot);
                if began.elapsed() >= interval && self.write_finished(py) >= interval && self.retire() {
                    return;
                }
            }
            if self.write_finished(py) >= interval && self.retire() {
                return;
            }
            let mut b = lock_unpoisoned(&self.baton);
            if b.queue.is_empty() || self.stop.load(Ordering::Relaxed) {
                b.runners -= 1;
                return;
            }
        }
    }

    /// Got the GIL while another thread is inside an app: that app let it go because it
    /// blocks, and nobody comes back to the poller until it returns, so a follower takes
    /// up a lead that was left (see `lead`).
    fn take_up_if_blocked(&self) {
        if self.in_app.load(Ordering::Relaxed) > 0 {
            self.lead.take_up();
        }
    }

    /// End this runner's turn if another runner serves on; if requests wait and nobody
    /// waits for the GIL to take them, the poller is woken to find a thread that will.
    fn retire(&self) -> bool {
        let mut b = lock_unpoisoned(&self.baton);
        if b.runners < 2 {
            return false;
        }
        b.runners -= 1;
        if !b.queue.is_empty() && !b.waiter {
            let _ = self.waker.wake();
        }
        true
    }

    /// Without the GIL: write the served requests' answers and read on; requests that are
    /// ready next join the queue. How long the GIL took to come back after.
    fn write_finished(self: &Arc<Self>, py: Python<'_>) -> Duration {
        let finished = std::mem::take(&mut lock_unpoisoned(&self.baton).finished);
        if finished.is_empty() {
            return Duration::ZERO;
        }
        let mut written = None;
        let more: Vec<Arc<Slot>> = py.detach(|| {
            let more = finished.into_iter().filter_map(|s| self.settle(s, false)).collect();
            written = Some(Instant::now());
            more
        });
        lock_unpoisoned(&self.baton).queue.extend(more);
        self.take_up_if_blocked();
        written.map_or(Duration::ZERO, |at| at.elapsed())
    }

    /// With the GIL: begin the ready request of `slot` and run its app to the end.
    fn serve(self: &Arc<Self>, py: Python<'_>, slot: &Arc<Slot>) {
        let st = self.settings();
        let mut acts = Vec::new();
        let (exchange, logs) = {
            let mut c = slot.lock();
            let Some(head) = c.objects.head.take() else { return };
            let head_method = c.is_head_method(&head);
            let (client, server) = c.objects.address_objects(py);
            let request = WsgiRequest::from_head(&c.rbuf, &head, client, server, c.https)
                .and_then(|r| Py::new(py, r).map_err(|_| Reject::BadRequest("request")));
            let exchange = match request {
                Err(why) => {
                    c.reject(st, why, None, head_method, &mut acts);
                    None
                }
                Ok(request) if st.active_requests.load(Ordering::Relaxed) >= st.limit_concurrency => {
                    c.reject(st, Reject::Unavailable, Some(request.into_any()), head_method, &mut acts);
                    None
                }
                Ok(request) => {
                    let log = self.state.get().access_log.as_ref().map(|_| request.clone_ref(py).into_any());
                    let gen = c.begin_request(st, &head, head_method, false, log);
                    let route = Route::Direct(Arc::new(Direct::new(self.clone(), slot.clone())));
                    let ex = Arc::new(Exchange::new(route, gen, request));
                    Direct::body_arrived(st, &mut c, &ex, &mut acts);
                    Some(ex)
                }
            };
            self.stage(slot, &mut c, &mut acts);
            (exchange, std::mem::take(&mut c.objects.logs))
        };
        self.log_with(py, logs);
        if let Some(ex) = exchange {
            self.in_app.fetch_add(1, Ordering::Relaxed);
            response::serve(py, &self.ctx, ex);
            self.in_app.fetch_sub(1, Ordering::Relaxed);
            let logs = std::mem::take(&mut slot.lock().objects.logs);
            self.log_with(py, logs);
        }
    }
}
