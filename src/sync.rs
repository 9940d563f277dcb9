//! Interior mutability for the loop's structures.
//!
//! Every structure of the loop that Python code can reach is only ever touched by a thread
//! that holds the GIL (swordfish refuses to load on an interpreter running without one, see
//! `lib.rs`). The GIL therefore already serialises access, and a `Mutex` would only add two
//! atomic read-modify-writes per access — on the scheduling hot path that was a fifth of the
//! time per callback. `GilCell` is a `RefCell` whose borrow needs a `Python` token: the
//! token proves the GIL is held, and the borrow flag catches the one way to reach a cell
//! twice, re-entry on the same thread (for instance a finalizer run by the cyclic GC in the
//! middle of a state change, or another thread that got the GIL while Python code run under
//! a borrow released it). Re-entry becomes a Python `RuntimeError` instead of undefined
//! behaviour or a deadlock.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

pub struct GilCell<T> {
    busy: Cell<bool>,
    value: UnsafeCell<T>,
}

// SAFETY: the value and the flag are only reached through `lock`/`try_lock`, which take a
// `Python` token, so every access happens with the GIL held: accesses from different
// threads are ordered by the GIL's hand-over, and the flag excludes overlapping borrows.
unsafe impl<T: Send> Sync for GilCell<T> {}

impl<T> GilCell<T> {
    pub const fn new(value: T) -> Self {
        GilCell { busy: Cell::new(false), value: UnsafeCell::new(value) }
    }

    /// The value, out of a cell no one else can reach (it is owned).
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }

    /// Borrow the value; an error if it is borrowed already (re-entry).
    pub fn lock<'a>(&'a self, py: Python<'_>) -> PyResult<GilGuard<'a, T>> {
        self.try_lock(py).ok_or_else(reentered)
    }

    /// Borrow the value unless it is borrowed already (for the GC's traverse, which must not
    /// fail or block).
    pub fn try_lock<'a>(&'a self, _py: Python<'_>) -> Option<GilGuard<'a, T>> {
        if self.busy.replace(true) {
            return None;
        }
        Some(GilGuard { cell: self, _not_send: PhantomData })
    }
}

/// A borrow of a `GilCell`. Not `Send`: it cannot be carried into `Python::detach`, where
/// the GIL is released.
pub struct GilGuard<'a, T> {
    cell: &'a GilCell<T>,
    _not_send: PhantomData<*const ()>,
}

impl<T> Deref for GilGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard is the only borrow (the flag) and the GIL is held (the token).
        unsafe { &*self.cell.value.get() }
    }
}

impl<T> DerefMut for GilGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`.
        unsafe { &mut *self.cell.value.get() }
    }
}

impl<T> Drop for GilGuard<'_, T> {
    fn drop(&mut self) {
        self.cell.busy.set(false);
    }
}

/// Refuse to run on an interpreter without a GIL: `GilCell` relies on it.
pub fn require_gil(py: Python<'_>) -> PyResult<()> {
    let sys = py.import("sys")?;
    if let Ok(is_enabled) = sys.getattr("_is_gil_enabled") {
        if !is_enabled.call0()?.is_truthy()? {
            return Err(pyo3::exceptions::PyImportError::new_err(
                "swordfish needs the GIL: run this free-threaded interpreter with PYTHON_GIL=1",
            ));
        }
    }
    Ok(())
}

fn reentered() -> PyErr {
    PyRuntimeError::new_err("swordfish: loop state re-entered while it was being changed")
}

/// Lock `m` even if a thread panicked while holding it: what is kept so (queues, flags,
/// counters) is plain data that a panic cannot leave half-changed in a way that matters,
/// and a poisoned lock must not stop the server from finishing its requests.
pub fn lock_unpoisoned<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Wait on `cv` with `guard`'s lock, even if a thread panicked while holding it (as
/// `lock_unpoisoned`).
pub fn wait_unpoisoned<'a, T>(
    cv: &std::sync::Condvar,
    guard: std::sync::MutexGuard<'a, T>,
) -> std::sync::MutexGuard<'a, T> {
    cv.wait(guard).unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `wait_unpoisoned` for at most `timeout`.
pub fn wait_timeout_unpoisoned<'a, T>(
    cv: &std::sync::Condvar,
    guard: std::sync::MutexGuard<'a, T>,
    timeout: std::time::Duration,
) -> std::sync::MutexGuard<'a, T> {
    cv.wait_timeout(guard, timeout).unwrap_or_else(std::sync::PoisonError::into_inner).0
}

/// Lock the one structure that stays a `Mutex` because it is used with the GIL released (the
/// poller). Only the loop's own thread takes it, so a busy lock means re-entry, as above.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> PyResult<std::sync::MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Ok(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Ok(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => Err(reentered()),
    }
}
