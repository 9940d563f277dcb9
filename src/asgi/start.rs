//! Starting an application's task for an `http` scope: `app(scope, receive, send)`, through
//! the server's `AppTasks` (eager where it can, pipelines chained).

use super::app::AsgiApp;
use super::http::{app_finished, task_finished, Receive, Send};
use crate::carrier::Carrier;
use pyo3::prelude::*;

pub fn start(py: Python<'_>, app: &Bound<'_, AsgiApp>, carrier: &Carrier, scope: Py<PyAny>, gen: u64) -> PyResult<()> {
    app.get().tasks.start(py, carrier, scope, gen, |carrier, scope, gen, eager| {
        start_one(py, app.get(), carrier, scope, gen, eager)
    })
}

/// `create_task(app(scope, receive, send))` (an eager task when `eager` allows it), with
/// the receive callable as done callback.
fn start_one(
    py: Python<'_>,
    state: &AsgiApp,
    carrier: &Carrier,
    scope: Py<PyAny>,
    gen: u64,
    eager: bool,
) -> PyResult<()> {
    let receive = Bound::new(py, Receive { carrier: carrier.clone_ref(py), gen })?;
    let send = Bound::new(py, Send { carrier: carrier.clone_ref(py), gen })?;
    state.tasks.launch(
        py,
        carrier,
        gen,
        (scope, &receive, &send),
        eager,
        || Ok(receive.clone().into_any()),
        |task| task_finished(py, carrier, gen, task),
        |exc| app_finished(py, carrier, gen, Some(exc)),
    )
}
