//! Starting an application's task for a request: an eager task where the loop allows it
//! (its first step runs at once), chained rather than nested when a running eager step
//! made the next pipelined request ready.

use super::app::AsgiApp;
use super::http::{app_finished, task_finished, Receive, Send};
use crate::http::protocol::HttpProtocol;
use crate::pyutil::is_exit;
use pyo3::intern;
use pyo3::prelude::*;
use std::sync::atomic::Ordering;

/// Eager starts one pipeline may chain in one go; past it, the next request gets a plain
/// task, so that one connection's pipeline does not hold the loop.
const CHAIN_MAX: usize = 16;

/// Start the app of a request. A request that a running eager step made ready (the step
/// completed the response before it, and it was pipelined behind) waits until that step
/// returns and is then started eagerly too, one after another rather than nested: a
/// pipeline is served in one go, and its small responses leave in one write.
pub fn start(app: &Bound<'_, AsgiApp>, proto: &Bound<'_, HttpProtocol>, scope: Py<PyAny>, gen: u64) -> PyResult<()> {
    let py = proto.py();
    let state = app.get();
    if state.in_eager.load(Ordering::Relaxed) {
        state.chained.lock(py)?.push_back((proto.clone().unbind(), scope, gen));
        return Ok(());
    }
    let mut result = start_one(state, proto, scope, gen, true);
    let mut started = 1;
    loop {
        let next = state.chained.lock(py)?.pop_front();
        let Some((proto, scope, gen)) = next else { break };
        // After KeyboardInterrupt or SystemExit, the rest only get plain tasks.
        let eager = result.is_ok() && started < CHAIN_MAX;
        let r = start_one(state, proto.bind(py), scope, gen, eager);
        started += 1;
        if result.is_ok() {
            result = r;
        }
    }
    result
}

/// `create_task(app(scope, receive, send))` (an eager task when `eager` allows it), with
/// the receive callable as done callback.
fn start_one(
    state: &AsgiApp,
    proto: &Bound<'_, HttpProtocol>,
    scope: Py<PyAny>,
    gen: u64,
    eager: bool,
) -> PyResult<()> {
    let py = proto.py();
    let receive = Bound::new(py, Receive { proto: proto.clone().unbind(), gen })?;
    let send = Bound::new(py, Send { proto: proto.clone().unbind(), gen })?;
    let started = spawn(state, py, (scope, &receive, &send), eager);
    match started {
        // An eagerly started task may be done already (a response that never waited):
        // then no done callback has to go through the ready queue.
        Ok(task) if task.call_method0(intern!(py, "done"))?.is_truthy()? => task_finished(proto, gen, &task),
        Ok(task) => {
            task.call_method1(intern!(py, "add_done_callback"), (receive,))?;
            if let Some(app) = proto.get().lock(py)?.apps.iter_mut().find(|(g, _)| *g == gen) {
                app.1 = Some(task.unbind());
            }
            Ok(())
        }
        Err(e) => {
            let finished = app_finished(proto, gen, Some(e.clone_ref(py).into_value(py).into_any()));
            // As from any task's step, KeyboardInterrupt and SystemExit go on out of the loop.
            if is_exit(py, &e) {
                return Err(e);
            }
            finished
        }
    }
}

/// The task of `app(*args)`: eager when allowed and the loop has nothing else waiting.
pub fn spawn<'py>(
    state: &AsgiApp,
    py: Python<'py>,
    args: impl pyo3::call::PyCallArgs<'py>,
    eager: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let coro = state.app.bind(py).call1(args)?;
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
}
