//! Starting an application's task for an `http` scope: `app(scope, receive, send)`, through
//! the server's `AppTasks` (eager where it can, pipelines chained).

use super::app::AsgiApp;
use super::http::{app_finished, task_finished, Receive, Send};
use crate::http::protocol::HttpProtocol;
use pyo3::prelude::*;

pub fn start(app: &Bound<'_, AsgiApp>, proto: &Bound<'_, HttpProtocol>, scope: Py<PyAny>, gen: u64) -> PyResult<()> {
    app.get().tasks.start(proto, scope, gen, |proto, scope, gen, eager| start_one(app.get(), proto, scope, gen, eager))
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
    state.tasks.launch(
        proto,
        gen,
        (scope, &receive, &send),
        eager,
        || Ok(receive.clone().into_any()),
        |task| task_finished(proto, gen, task),
        |exc| app_finished(proto, gen, Some(exc)),
    )
}
