//! `Handle` and `TimerHandle`: the callback objects that `call_soon`, `call_later`,
//! `call_at` and `add_reader`/`add_writer` return, with the stdlib's public behaviour.
//!
//! A handle holds no reference to its loop (so no reference cycle through the loop); what it
//! needs from the loop (the debug flag, the count of cancelled timers) is shared in
//! `LoopShared`.

use crate::call_args::CallArgs;
use crate::context::{self, Captured};
use crate::sync::GilCell;
use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyList, PyTuple};
use pyo3::{ffi, intern, PyTraverseError, PyVisit};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// What a loop shares with the handles it creates.
#[derive(Default)]
pub struct LoopShared {
    pub debug: AtomicBool,
    /// Timers cancelled while still in the queue; drives the queue clean-up.
    pub cancelled_timers: AtomicUsize,
}

impl LoopShared {
    /// A cancelled timer that was counted in `cancelled_timers` left the queue.
    pub fn cancelled_timer_removed(&self) {
        let _ = self.cancelled_timers.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

struct HandleData {
    func: Option<Py<PyAny>>,
    args: Option<CallArgs>,
    /// None: no context switch (`HandleContext::Unneeded`).
    context: Option<Captured>,
    source_traceback: Option<Py<PyAny>>,
    /// Representation frozen at cancel time in debug mode (the callback is gone after).
    repr: Option<String>,
}

#[pyclass(module = "swordfish._native", subclass, frozen, weakref)]
pub struct Handle {
    data: GilCell<HandleData>,
    cancelled: AtomicBool,
    /// Reader/writer handles run once per readiness event; the others run once.
    repeat: AtomicBool,
    shared: Arc<LoopShared>,
}

/// The context a new handle runs its callback in.
pub enum HandleContext {
    /// The given context (`context=` argument).
    Given(Py<PyAny>),
    /// A copy of the current context, taken now (the stdlib's default).
    CopyCurrent,
    /// A context captured earlier (a future's done callback).
    Captured(Captured),
    /// No context switch: only for stdlib callbacks that never touch context variables.
    Unneeded,
}

impl HandleContext {
    fn resolve(self, py: Python<'_>) -> PyResult<Option<Captured>> {
        Ok(match self {
            HandleContext::Given(c) => Some(Captured::Object(c)),
            HandleContext::CopyCurrent => Some(Captured::Object(context::copy_current(py)?)),
            HandleContext::Captured(c) => Some(c),
            HandleContext::Unneeded => None,
        })
    }
}

/// A callback that raised: what the loop needs to report it.
pub struct Failure {
    pub err: PyErr,
    pub func: Py<PyAny>,
    pub args: Py<PyTuple>,
}

impl Handle {
    /// `context` None means "a copy of the current context", as in the stdlib.
    pub fn new(
        py: Python<'_>,
        func: Py<PyAny>,
        args: CallArgs,
        context: HandleContext,
        shared: &Arc<LoopShared>,
    ) -> PyResult<Self> {
        let context = context.resolve(py)?;
        Ok(Handle {
            data: GilCell::new(HandleData {
                func: Some(func),
                args: Some(args),
                context,
                source_traceback: None,
                repr: None,
            }),
            cancelled: AtomicBool::new(false),
            repeat: AtomicBool::new(false),
            shared: shared.clone(),
        })
    }

    /// Give a recycled handle (see `recyclable`) a new callback.
    pub fn refill(&self, py: Python<'_>, func: Py<PyAny>, args: CallArgs, context: HandleContext) -> PyResult<()> {
        let context = context.resolve(py)?;
        let mut d = self.data.lock(py)?;
        d.func = Some(func);
        d.args = Some(args);
        d.context = context;
        drop(d);
        self.cancelled.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Whether a handle the loop is letting go of can be reused for a later callback instead
    /// of being freed: nothing but the loop refers to it (no other reference, no weak
    /// reference), so no one can tell. Reuse saves the allocation, and with it one step
    /// towards the cyclic GC's next collection, on every `call_soon` whose handle the caller
    /// drops, as the C `Task` and `Future` do.
    pub fn recyclable(handle: &Bound<'_, Handle>) -> bool {
        let ptr = handle.as_ptr();
        // SAFETY: `ptr` is a live object (the bound handle holds it) and the GIL is held.
        unsafe {
            if ffi::Py_REFCNT(ptr) != 1 {
                return false;
            }
            let offset = (*ffi::Py_TYPE(ptr)).tp_weaklistoffset;
            // The class declares `weakref`, so its instances carry a weak-reference list.
            offset > 0 && (*ptr.cast::<u8>().offset(offset).cast::<*mut ffi::PyObject>()).is_null()
        }
    }

    /// Release everything a recycled handle refers to, so that it can wait in the loop's
    /// spare list (still hidden from the GC, which has nothing to find in it).
    pub fn empty(&self, py: Python<'_>) -> PyResult<()> {
        let taken = {
            let mut d = self.data.lock(py)?;
            (d.func.take(), d.args.take(), d.context.take(), d.source_traceback.take(), d.repr.take())
        };
        drop(taken); // outside the lock: dropping may run Python code
        Ok(())
    }

    /// The callback (None once the handle was cancelled or emptied).
    pub fn callback<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.data.try_lock(py).and_then(|d| d.func.as_ref().map(|f| f.bind(py).clone()))
    }

    pub fn mark_repeating(&self) {
        self.repeat.store(true, Ordering::Relaxed);
    }

    pub fn repeats(&self) -> bool {
        self.repeat.load(Ordering::Relaxed)
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// A reader/writer watcher leaves the loop (replaced, removed, or the loop closed): it is
    /// cancelled, as in the stdlib, and handed back to the cyclic GC.
    pub fn retire(slf: &Bound<'_, Self>) -> PyResult<()> {
        hand_back(slf);
        Handle::cancel_impl(slf).map(|_| ())
    }

    pub fn set_source_traceback(&self, py: Python<'_>, tb: Option<Py<PyAny>>) -> PyResult<()> {
        self.data.lock(py)?.source_traceback = tb;
        Ok(())
    }

    /// Mark cancelled and release the callback. Returns false when it already was.
    fn cancel_impl(slf: &Bound<'_, Self>) -> PyResult<bool> {
        let this = slf.get();
        if this.cancelled.swap(true, Ordering::AcqRel) {
            return Ok(false);
        }
        let frozen_repr =
            if this.shared.debug.load(Ordering::Relaxed) { Some(handle_repr(slf.as_any(), this, None)?) } else { None };
        let (func, args) = {
            let mut d = this.data.lock(slf.py())?;
            if frozen_repr.is_some() {
                d.repr = frozen_repr;
            }
            (d.func.take(), d.args.take())
        };
        drop((func, args)); // outside the lock: dropping may run Python code
        Ok(true)
    }

    /// Run the callback in its context. `Ok(false)` when there was nothing to run.
    /// `consume`: the handle is being emptied for reuse (see `recyclable`), so the callback,
    /// arguments and context are moved out instead of copied.
    pub fn run(&self, py: Python<'_>, consume: bool) -> Result<bool, Failure> {
        if self.is_cancelled() {
            return Ok(false);
        }
        let taken = match self.data.lock(py) {
            Ok(mut d) if consume => match (d.func.take(), d.args.take()) {
                (Some(f), Some(a)) => Some((f, a, d.context.take())),
                _ => None,
            },
            Ok(mut d) => {
                let cb = match (&d.func, &d.args) {
                    (Some(f), Some(a)) => Some((f.clone_ref(py), a.clone_ref(py))),
                    _ => None,
                };
                // Someone else holds the handle and may ask for its context while the
                // callback runs: then it must be the one entered, so it is made now.
                let ctx = match (&cb, d.context.as_mut()) {
                    (Some(_), Some(c)) => match c.object(py) {
                        Ok(obj) => Some(Captured::Object(obj)),
                        Err(err) => return Err(Failure { err, func: py.None(), args: PyTuple::empty(py).unbind() }),
                    },
                    _ => None,
                };
                cb.map(|(f, a)| (f, a, ctx))
            }
            Err(err) => return Err(Failure { err, func: py.None(), args: PyTuple::empty(py).unbind() }),
        };
        let Some((func, args, context)) = taken else { return Ok(false) };
        let result = match &context {
            Some(ctx) => ctx.to_run_in(py).and_then(|ctx| context::in_context(py, &ctx, || args.call(py, &func))),
            None => match &args {
                // `asyncio.sleep()`'s timer on a native future, without the Python call.
                CallArgs::Two(fut, value) if crate::tasks::is_sleep_callback(func.bind(py)) => {
                    crate::tasks::set_result_unless_cancelled(fut.bind(py), value.bind(py), &func)
                }
                _ => args.call(py, &func),
            },
        };
        match result {
            Ok(()) => Ok(true),
            Err(err) => {
                if consume {
                    // The error report shows the handle: give it its callback back.
                    if let Ok(mut d) = self.data.lock(py) {
                        d.func = Some(func.clone_ref(py));
                        d.args = Some(args.clone_ref(py));
                        d.context = context;
                    }
                }
                let args = args.to_tuple(py).unwrap_or_else(|_| PyTuple::empty(py).unbind());
                Err(Failure { err, func, args })
            }
        }
    }
}

fn is_gc_tracked(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: a live object (borrowed), with the GIL held.
    unsafe { ffi::PyObject_GC_IsTracked(obj.as_ptr()) != 0 }
}

/// Hide a new handle from the cyclic GC while the loop holds it. Outside debug mode the
/// loop does this for every handle it creates: at large task counts full collections
/// dominate run time, and each tracked object waiting in the loop is traversed by every one
/// of them and brings the next one closer. While the loop holds the handle it is reachable
/// anyway, so nothing it references can be collected wrongly; `hand_back` returns it to the
/// GC when it leaves the loop (run, dropped as cancelled, removed, or the loop closed).
pub fn hide_from_gc(obj: &Bound<'_, PyAny>) {
    // SAFETY: a live GC object (handles are GC types), with the GIL held; untracking an
    // untracked object is a no-op.
    unsafe { ffi::PyObject_GC_UnTrack(obj.as_ptr().cast()) }
}

/// Give a handle that leaves the loop back to the cyclic GC (see `hide_from_gc`).
pub fn hand_back(handle: &Bound<'_, Handle>) {
    if !is_gc_tracked(handle.as_any()) {
        // SAFETY: a live GC object, untracked (just checked), with the GIL held.
        unsafe { ffi::PyObject_GC_Track(handle.as_ptr().cast()) }
    }
}

/// `<Handle cb(args) at file:line>`, the stdlib's format.
fn handle_repr(obj: &Bound<'_, PyAny>, this: &Handle, when: Option<f64>) -> PyResult<String> {
    let py = obj.py();
    let (func, args, tb, frozen) = {
        let d = this.data.lock(py)?;
        (
            d.func.as_ref().map(|f| f.clone_ref(py)),
            d.args.as_ref().map(|a| a.to_tuple(py)).transpose()?,
            d.source_traceback.as_ref().map(|t| t.clone_ref(py)),
            d.repr.clone(),
        )
    };
    if let Some(r) = frozen {
        return Ok(r);
    }
    let mut info = vec![obj.get_type().name()?.to_string()];
    if this.is_cancelled() {
        info.push("cancelled".to_owned());
    }
    if let Some(when) = when {
        info.push(format!("when={}", PyFloat::new(py, when).repr()?));
    }
    if let (Some(func), Some(args)) = (func, args) {
        let helpers = py.import(intern!(py, "asyncio.format_helpers"))?;
        let src = helpers.call_method1(intern!(py, "_format_callback_source"), (func, args))?;
        info.push(src.extract::<String>()?);
    }
    if let Some(tb) = tb {
        let tb = tb.bind(py);
        if let Ok(list) = tb.cast::<PyList>() {
            if !list.is_empty() {
                let frame = list.get_item(list.len() - 1)?;
                let file = frame.get_item(0)?;
                let line = frame.get_item(1)?;
                info.push(format!("created at {file}:{line}"));
            }
        }
    }
    Ok(format!("<{}>", info.join(" ")))
}

#[pymethods]
impl Handle {
    fn cancel(slf: &Bound<'_, Self>) -> PyResult<()> {
        Handle::cancel_impl(slf).map(|_| ())
    }

    fn cancelled(&self) -> bool {
        self.is_cancelled()
    }

    fn get_context(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut d = self.data.lock(py)?;
        Ok(match d.context.as_mut() {
            Some(c) => c.object(py)?,
            None => py.None(),
        })
    }

    #[getter]
    fn _cancelled(&self) -> bool {
        self.is_cancelled()
    }

    #[getter]
    fn _callback(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.data.lock(py)?.func.as_ref().map_or_else(|| py.None(), |f| f.clone_ref(py)))
    }

    #[getter]
    fn _args(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let d = self.data.lock(py)?;
        Ok(match &d.args {
            Some(a) => a.to_tuple(py)?.into_any(),
            None => py.None(),
        })
    }

    #[getter]
    fn _context(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.get_context(py)
    }

    #[getter(_source_traceback)]
    fn source_traceback(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.data.lock(py)?.source_traceback.as_ref().map_or_else(|| py.None(), |t| t.clone_ref(py)))
    }

    #[setter(_source_traceback)]
    fn set_source_traceback_attr(&self, py: Python<'_>, value: Option<Py<PyAny>>) -> PyResult<()> {
        self.set_source_traceback(py, value)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        handle_repr(slf.as_any(), slf.get(), None)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        if let Some(d) = self.data.try_lock(py) {
            visit.call(&d.func)?;
            if let Some(a) = &d.args {
                a.visit(&visit)?;
            }
            visit.call(d.context.as_ref().and_then(Captured::as_object))?;
            visit.call(&d.source_traceback)?;
        }
        Ok(())
    }

    fn __clear__(&self, py: Python<'_>) {
        if let Some(mut d) = self.data.try_lock(py) {
            let taken = (d.func.take(), d.args.take(), d.context.take(), d.source_traceback.take());
            drop(d);
            drop(taken);
        }
    }
}

#[pyclass(module = "swordfish._native", extends = Handle, frozen)]
pub struct TimerHandle {
    /// The deadline's bits (an atomic only so that a recycled timer can take a new one).
    when: AtomicU64,
    /// True while the timer sits in its loop's queue.
    scheduled: AtomicBool,
}

impl TimerHandle {
    pub fn new(when: f64) -> Self {
        TimerHandle { when: AtomicU64::new(when.to_bits()), scheduled: AtomicBool::new(true) }
    }

    pub fn deadline(&self) -> f64 {
        f64::from_bits(self.when.load(Ordering::Relaxed))
    }

    /// A recycled timer (see `Handle::recyclable`) scheduled anew at `when`.
    pub fn reschedule(&self, when: f64) {
        self.when.store(when.to_bits(), Ordering::Relaxed);
        self.scheduled.store(true, Ordering::Relaxed);
    }

    pub fn unschedule(&self) -> bool {
        self.scheduled.swap(false, Ordering::AcqRel)
    }
}

#[pymethods]
impl TimerHandle {
    fn when(&self) -> f64 {
        self.deadline()
    }

    #[getter]
    fn _when(&self) -> f64 {
        self.deadline()
    }

    #[getter]
    fn _scheduled(&self) -> bool {
        self.scheduled.load(Ordering::Relaxed)
    }

    fn cancel(slf: &Bound<'_, Self>) -> PyResult<()> {
        let base = slf.as_super();
        if !base.get().is_cancelled() && slf.get().scheduled.load(Ordering::Relaxed) {
            base.get().shared.cancelled_timers.fetch_add(1, Ordering::Relaxed);
        }
        Handle::cancel_impl(base).map(|_| ())
    }

    fn __hash__(&self) -> isize {
        // hash(float) semantics are not needed; a stable hash of the deadline is.
        let bits = self.when.load(Ordering::Relaxed);
        (bits ^ (bits >> 32)) as isize
    }

    fn __richcmp__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let Ok(other) = other.cast::<TimerHandle>() else {
            return Ok(py.NotImplemented());
        };
        let (a, b) = (slf.get().deadline(), other.get().deadline());
        let equal = || -> PyResult<bool> {
            if a != b {
                return Ok(false);
            }
            let (x, y) = (slf.as_super(), other.as_super());
            if x.get().is_cancelled() != y.get().is_cancelled() {
                return Ok(false);
            }
            let (xc, yc) = (Handle::_callback(x.get(), py)?, Handle::_callback(y.get(), py)?);
            let (xa, ya) = (Handle::_args(x.get(), py)?, Handle::_args(y.get(), py)?);
            Ok(xc.bind(py).eq(yc)? && xa.bind(py).eq(ya)?)
        };
        let result = match op {
            CompareOp::Lt => a < b,
            CompareOp::Gt => a > b,
            CompareOp::Le => a < b || equal()?,
            CompareOp::Ge => a > b || equal()?,
            CompareOp::Eq => equal()?,
            CompareOp::Ne => !equal()?,
        };
        Ok(pyo3::types::PyBool::new(py, result).to_owned().into_any().unbind())
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        handle_repr(slf.as_any(), slf.as_super().get(), Some(slf.get().deadline()))
    }
}
