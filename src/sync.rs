//! Small locking helpers.
//!
//! Every structure of the loop that Python code can reach sits behind a `Mutex`. On an
//! interpreter with a GIL the lock is never contended by another thread while it is held
//! (callers hold the GIL), so a failed `try_lock` means the same thread re-entered — for
//! instance a finalizer run by the cyclic GC in the middle of a state change. We turn that
//! into a Python `RuntimeError` instead of deadlocking.

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;
use std::sync::{Mutex, MutexGuard, TryLockError};

pub fn lock<T>(m: &Mutex<T>) -> PyResult<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Ok(g),
        Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
        Err(TryLockError::WouldBlock) => Err(PyRuntimeError::new_err(
            "swordfish: loop state re-entered while it was being changed",
        )),
    }
}

/// Lock for use inside the GC's traverse: never blocks, skips when busy.
pub fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}
