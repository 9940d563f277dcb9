//! Starting an application's task for a request, for the asyncio interfaces (ASGI, RSGI):
//! an eager task where the loop allows it (its first step runs at once), chained rather
//! than nested when a running eager step made the next pipelined request ready. Also the
//! application's readiness awaitable (`Ready`) and the end of a task as the connection
//! hears it.

use crate::carrier::Carrier;
use crate::event_loop::LoopCore;
use crate::pyutil::is_exit;
use crate::sync::GilCell;
use pyo3::exceptions::PyStopIteration;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;
use pyo3::{PyTraverseError, PyVisit};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

/// Eager starts one pipeline may chain in one go; past it, the next request gets a plain
/// task, so that one connection's pipeline does not hold the loop.
const CHAIN_MAX: usize = 16;

/// Requests waiting for an eager step to return: (connection, request, request number).
pub type Chained = VecDeque<(Carrier, Py<PyAny>, u64)>;

/// How an interface starts its application's tasks.
pub struct AppTasks {
    /// The application callable.
    pub app: Py<PyAny>,
    pub lp: Py<PyAny>,
    create_task: Py<PyAny>,
    /// The Task class, called `Task(coro, loop=loop, eager_start=True)`: a task that runs
    /// its first step at once (Python 3.12+), so a response that never waits is sent
    /// without a trip through the ready queue. (The loop must be given: an eager start
    /// asks it whether it runs.)
    eager_task: Option<Py<PyAny>>,
    /// `{"loop": loop, "eager_start": True}`: the keywords of that call, built once (the
    /// Task type has no vectorcall, so keywords given by name would become a new dict per
    /// request).
    kw_eager: Py<PyDict>,
    /// An eager task is running its first step: a request it completes and that starts the
    /// next pipelined one waits in `chained` until the step returns (no nesting, however
    /// long the pipeline).
    in_eager: AtomicBool,
    chained: GilCell<Chained>,
    /// The loop's native core when it is swordfish's own loop: an eager start is skipped
    /// while callbacks are already waiting there (see `spawn`).
    core: Option<Py<LoopCore>>,
}

impl AppTasks {
    pub fn new(py: Python<'_>, app: Py<PyAny>, lp: Py<PyAny>, eager_task: Option<Py<PyAny>>) -> PyResult<Self> {
        let create_task = lp.bind(py).getattr("create_task")?.unbind();
        let kw_eager = PyDict::new(py);
        kw_eager.set_item(pyo3::types::PyString::intern(py, "loop"), &lp)?;
        kw_eager.set_item(pyo3::types::PyString::intern(py, "eager_start"), true)?;
        let core = lp.bind(py).cast::<LoopCore>().ok().map(|c| c.clone().unbind());
        Ok(AppTasks {
            app,
            lp,
            create_task,
            eager_task,
            kw_eager: kw_eager.unbind(),
            in_eager: AtomicBool::new(false),
            chained: GilCell::new(VecDeque::new()),
            core,
        })
    }

    pub fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.app)?;
        visit.call(&self.lp)?;
        visit.call(&self.create_task)?;
        visit.call(&self.eager_task)?;
        visit.call(&self.core)?;
        visit.call(&self.kw_eager)?;
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        if let Some(chained) = self.chained.try_lock(py) {
            for (carrier, request, _) in chained.iter() {
                carrier.traverse(visit)?;
                visit.call(request)?;
            }
        }
        Ok(())
    }

    /// Start the app of a request with `start_one(proto, request, gen, eager)`. A request
    /// that a running eager step made ready (the step completed the response before it,
    /// and it was pipelined behind) waits until that step returns and is then started
    /// eagerly too, one after another rather than nested: a pipeline is served in one go,
    /// and its small responses leave in one write.
    pub fn start(
        &self,
        py: Python<'_>,
        carrier: &Carrier,
        request: Py<PyAny>,
        gen: u64,
        start_one: impl Fn(&Carrier, Py<PyAny>, u64, bool) -> PyResult<()>,
    ) -> PyResult<()> {
        if self.in_eager.load(Ordering::Relaxed) {
            self.chained.lock(py)?.push_back((carrier.clone_ref(py), request, gen));
            return Ok(());
        }
        let mut result = start_one(carrier, request, gen, true);
        let mut started = 1;
        loop {
            let next = self.chained.lock(py)?.pop_front();
            let Some((carrier, request, gen)) = next else { break };
            // After KeyboardInterrupt or SystemExit, the rest only get plain tasks.
            let eager = result.is_ok() && started < CHAIN_MAX;
            let r = start_one(&carrier, request, gen, eager);
            started += 1;
            if result.is_ok() {
                result = r;
            }
        }
        result
    }

    /// The task of `app(*args)`: eager when allowed and the loop has nothing else waiting.
    pub fn spawn<'py>(
        &self,
        py: Python<'py>,
        args: impl pyo3::call::PyCallArgs<'py>,
        eager: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let coro = self.app.bind(py).call1(args)?;
        // An eager start runs the app ahead of everything already waiting in the ready
        // queue. With callbacks waiting (say, the wake-up of a request whose database reply
        // came in the same poll) a CPU-heavy request would hold them all up: queue it
        // behind them.
        let queue_busy = || self.core.as_ref().is_some_and(|c| c.get().callbacks_waiting(py));
        match &self.eager_task {
            Some(task_type) if eager && !queue_busy() && !self.in_eager.swap(true, Ordering::Relaxed) => {
                let task = task_type.bind(py).call((&coro,), Some(self.kw_eager.bind(py)));
                self.in_eager.store(false, Ordering::Relaxed);
                task
            }
            _ => self.create_task.bind(py).call1((coro,)),
        }
    }

    /// `spawn`, then: a task already done gets `finished(task)` at once; one still running
    /// gets `on_done` as its done callback and is recorded as request `gen`'s (graceful
    /// shutdown cancels it); an app that raised at the call gets `failed(exc)`.
    #[allow(clippy::too_many_arguments)] // the three outcomes are the interface's, each a closure
    pub fn launch<'py>(
        &self,
        py: Python<'py>,
        carrier: &Carrier,
        gen: u64,
        args: impl pyo3::call::PyCallArgs<'py>,
        eager: bool,
        on_done: impl FnOnce() -> PyResult<Bound<'py, PyAny>>,
        finished: impl FnOnce(&Bound<'py, PyAny>) -> PyResult<()>,
        failed: impl FnOnce(Py<PyAny>) -> PyResult<()>,
    ) -> PyResult<()> {
        match self.spawn(py, args, eager) {
            // An eagerly started task may be done already (a response that never waited):
            // then no done callback has to go through the ready queue.
            Ok(task) if eager && task.call_method0(intern!(py, "done"))?.is_truthy()? => finished(&task),
            Ok(task) => {
                task.call_method1(intern!(py, "add_done_callback"), (on_done()?,))?;
                carrier.record_task(py, gen, task.unbind())
            }
            Err(e) => {
                let r = failed(e.clone_ref(py).into_value(py).into_any());
                // As from any task's step, KeyboardInterrupt and SystemExit go on out of
                // the loop.
                if is_exit(py, &e) {
                    return Err(e);
                }
                r
            }
        }
    }
}

/// A task's outcome: its exception, or None (returned or cancelled). Taking it also marks
/// an exception as retrieved.
pub fn task_exception(task: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
    let py = task.py();
    // `exception()` of a cancelled task raises CancelledError: one call either way.
    match task.call_method0(intern!(py, "exception")) {
        Ok(e) => Ok((!e.is_none()).then(|| e.unbind())),
        Err(e) if e.is_instance_of::<pyo3::exceptions::asyncio::CancelledError>(py) => Ok(None),
        Err(e) => Err(e),
    }
}

/// An awaitable that is already complete: `await` gets `value` without suspending.
#[pyclass(module = "swordfish._native", frozen)]
pub struct Ready {
    value: Option<Py<PyAny>>,
}

#[pymethods]
impl Ready {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        match &self.value {
            None => Ok(None),
            Some(v) => Err(PyStopIteration::new_err((v.clone_ref(py),))),
        }
    }

    fn send(&self, py: Python<'_>, _value: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
        self.__next__(py)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.value)
    }
}

static READY_NONE: PyOnceLock<Py<Ready>> = PyOnceLock::new();

pub fn ready_none(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let r = READY_NONE.get_or_try_init(py, || Py::new(py, Ready { value: None }))?;
    Ok(r.clone_ref(py).into_any())
}

pub fn ready(py: Python<'_>, value: Py<PyAny>) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, Ready { value: Some(value) })?.into_any())
}
