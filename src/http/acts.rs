//! Running the work the protocol collected under its lock (`Act`): writes, closing, flow
//! control, waking the app, timers, the access log, and starting the app's task.

use super::conn::Act;
use super::protocol::HttpProtocol;
use crate::clock::coarse_monotonic;
use crate::pyutil::is_exit;
use crate::transport::stream::{Held, Hold, StreamCore};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::intern;
use std::sync::atomic::Ordering;

impl HttpProtocol {
    /// Run the collected work. Errors of one step are reported, not propagated, so that a
    /// failed write still lets the close that follows happen. Starting the app comes last:
    /// an eager task runs app code at once, and that code must find every earlier step
    /// (a pause of reading, say) already done.
    pub fn run_acts(slf: &Bound<'_, Self>, mut acts: Vec<Act>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let state = this.state.get();
        if let Some(i) = acts.iter().position(|a| matches!(a, Act::StartApp(..))) {
            let start = acts.remove(i);
            acts.push(start);
        }
        for act in acts {
            let r: PyResult<()> = (|| {
                match act {
                    Act::Write(data) => this.write_out(py, Held::Owned(data), None)?,
                    Act::WriteLater(data, hold) => this.write_out(py, Held::Owned(data), Some(hold))?,
                    Act::WriteObj(obj, hold) => this.write_out(py, Held::Shared(obj.into_bound(py)), hold)?,
                    Act::Close | Act::Abort => {
                        let t = this.lock(py)?.transport.as_ref().map(|t| t.clone_ref(py));
                        if let Some(t) = t {
                            let name = if matches!(act, Act::Close) { intern!(py, "close") } else { intern!(py, "abort") };
                            t.call_method0(py, name)?;
                        }
                    }
                    Act::PauseReading | Act::ResumeReading => {
                        let t = this.lock(py)?.transport.as_ref().map(|t| t.clone_ref(py));
                        if let Some(t) = t {
                            let name = if matches!(act, Act::PauseReading) {
                                intern!(py, "pause_reading")
                            } else {
                                intern!(py, "resume_reading")
                            };
                            t.call_method0(py, name)?;
                        }
                    }
                    Act::StartApp(scope, gen) => start_app(slf, scope, gen)?,
                    Act::Resolve(fut, value) => {
                        let fut = fut.bind(py);
                        if !crate::tasks::is_done(fut)? {
                            crate::tasks::set_result(fut, value.bind(py))?;
                        }
                    }
                    Act::ArmTimer(delay) => {
                        let cb = this.lock(py)?.on_timer.as_ref().map(|c| c.clone_ref(py));
                        if let Some(cb) = cb {
                            let h = state.lp.call_method1(py, intern!(py, "call_later"), (delay, cb))?;
                            let mut c = this.lock(py)?;
                            if c.lost {
                                drop(c);
                                h.call_method0(py, intern!(py, "cancel"))?;
                            } else {
                                c.timer = Some(h);
                                c.timer_at = coarse_monotonic() + delay;
                            }
                        }
                    }
                    Act::CancelTimer(h) => {
                        h.call_method0(py, intern!(py, "cancel"))?;
                    }
                    Act::Forget => {
                        state.connections.bind(py).discard(slf)?;
                    }
                    Act::LogError(msg, exc) => {
                        let kwargs = pyo3::types::PyDict::new(py);
                        if let Some(e) = exc {
                            kwargs.set_item("exc_info", e)?;
                        }
                        state.logger.call_method(py, intern!(py, "error"), (msg,), Some(&kwargs))?;
                    }
                    Act::AccessLog(scope, client, status, size, secs) => {
                        if let Some(log) = &state.access_log {
                            log.call1(py, (scope, status, size, secs, client))?;
                        }
                    }
                }
                Ok(())
            })();
            if let Err(e) = r {
                if is_exit(py, &e) {
                    return Err(e);
                }
                e.write_unraisable(py, Some(slf.as_any()));
            }
        }
        Ok(())
    }

    /// Write response bytes: to swordfish's socket transport without a Python call (`hold`:
    /// held until the end of the loop iteration, so what follows in the same iteration goes
    /// out in the same write), or through the transport's `write` on another loop.
    pub(super) fn write_out(&self, py: Python<'_>, data: Held<'_>, hold: Option<Hold>) -> PyResult<()> {
        let (core, w) = {
            let c = self.lock(py)?;
            (c.core.as_ref().map(|t| t.clone_ref(py)), c.write.as_ref().map(|w| w.clone_ref(py)))
        };
        if let Some(core) = core {
            if let Some(hold) = hold {
                return StreamCore::write_deferred(core.bind(py), data, hold);
            }
            return match &data {
                Held::Owned(v) => core.get().write_now(py, v, None),
                Held::Shared(b) => core.get().write_now(py, b.as_bytes(), Some(b)),
            };
        }
        if let Some(w) = w {
            match data {
                Held::Owned(v) => w.call1(py, (PyBytes::new(py, &v),))?,
                Held::Shared(b) => w.call1(py, (b,))?,
            };
        }
        Ok(())
    }
}

/// Eager starts one pipeline may chain in one go (see `start_app`); past it, the next
/// request gets a plain task, so that one connection's pipeline does not hold the loop.
const CHAIN_MAX: usize = 16;

/// Start the app of a request. A request that a running eager step made ready (the step
/// completed the response before it, and it was pipelined behind) waits until that step
/// returns and is then started eagerly too, one after another rather than nested: a pipeline
/// is served in one go, and its small responses leave in one write.
fn start_app(slf: &Bound<'_, HttpProtocol>, scope: Py<PyAny>, gen: u64) -> PyResult<()> {
    let py = slf.py();
    let state = slf.get().state.get();
    if state.in_eager.load(Ordering::Relaxed) {
        state.chained.lock(py)?.push_back((slf.clone().unbind(), scope, gen));
        return Ok(());
    }
    let mut result = start_one(slf, scope, gen, true);
    let mut started = 1;
    loop {
        let next = state.chained.lock(py)?.pop_front();
        let Some((proto, scope, gen)) = next else { break };
        // After KeyboardInterrupt or SystemExit, the rest only get plain tasks.
        let eager = result.is_ok() && started < CHAIN_MAX;
        let r = start_one(proto.bind(py), scope, gen, eager);
        started += 1;
        if result.is_ok() {
            result = r;
        }
    }
    result
}

/// `create_task(app(scope, receive, send))` (an eager task when `eager` allows it), with
/// the receive callable as done callback.
fn start_one(slf: &Bound<'_, HttpProtocol>, scope: Py<PyAny>, gen: u64, eager: bool) -> PyResult<()> {
    let py = slf.py();
    let state = slf.get().state.get();
    let receive = Bound::new(py, super::asgi::Receive { proto: slf.clone().unbind(), gen })?;
    let send = Bound::new(py, super::asgi::Send { proto: slf.clone().unbind(), gen })?;
    let started = (|| -> PyResult<Bound<'_, PyAny>> {
        let coro = state.app.bind(py).call1((scope, &receive, &send))?;
        // An eager start runs the app ahead of everything already waiting in the ready queue.
        // With callbacks waiting (say, the wake-up of a request whose database reply came in
        // the same poll) a CPU-heavy request would hold them all up: queue it behind them.
        let queue_busy = || state.core.as_ref().is_some_and(|c| c.get().callbacks_waiting(py));
        match &state.eager_task {
            Some(task_type) if eager && !queue_busy() && !state.in_eager.swap(true, Ordering::Relaxed) => {
                let task = task_type.bind(py).call((&coro,), Some(state.kw_eager.bind(py)));
                state.in_eager.store(false, Ordering::Relaxed);
                task
            }
            _ => state.create_task.bind(py).call1((coro,)),
        }
    })();
    match started {
        // An eagerly started task may be done already (a response that never waited):
        // then no done callback has to go through the ready queue.
        Ok(task) if task.call_method0(intern!(py, "done"))?.is_truthy()? => {
            super::asgi::task_finished(slf, gen, &task)
        }
        Ok(task) => {
            task.call_method1(intern!(py, "add_done_callback"), (receive,))?;
            if let Some(app) = slf.get().lock(py)?.apps.iter_mut().find(|(g, _)| *g == gen) {
                app.1 = Some(task.unbind());
            }
            Ok(())
        }
        Err(e) => {
            let finished = super::asgi::app_finished(slf, gen, Some(e.clone_ref(py).into_value(py).into_any()));
            // As from any task's step, KeyboardInterrupt and SystemExit go on out of the loop.
            if is_exit(py, &e) {
                return Err(e);
            }
            finished
        }
    }
}
