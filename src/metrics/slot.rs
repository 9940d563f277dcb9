//! `MetricsSlot`: one worker's `Counters`, mapped from a slot of a shared memory file (a
//! memfd the supervisor made and every worker inherits). The worker records into its slot;
//! the supervisor maps each worker's slot to read it, and clears a slot once its worker
//! has exited and been counted.

use super::counters::{Counters, Snapshot};
use memmap2::{MmapOptions, MmapRaw};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

#[pyclass(module = "swordfish._native", frozen)]
pub struct MetricsSlot {
    map: Arc<CountersMap>,
}

/// The mapped slot, shared by whatever records into it.
pub struct CountersMap {
    map: MmapRaw,
}

/// Bytes between two slots: a whole number of pages, so that each maps on its own (a
/// mapping's offset must be a multiple of the page size).
fn stride() -> usize {
    // SAFETY: sysconf reads a constant of the system and has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = usize::try_from(page).unwrap_or(4096).max(1);
    std::mem::size_of::<Counters>().div_ceil(page) * page
}

#[pymethods]
impl MetricsSlot {
    /// Map slot `index` of the shared memory file open as `fd` (the descriptor stays the
    /// caller's). The file must already be long enough to hold it.
    #[new]
    fn new(fd: i32, index: usize) -> PyResult<Self> {
        // SAFETY: dup has no memory preconditions; a bad descriptor is an error it returns.
        let own = unsafe { libc::dup(fd) };
        if own < 0 {
            return Err(PyOSError::new_err(std::io::Error::last_os_error().to_string()));
        }
        // SAFETY: `own` is a descriptor dup just made, owned by nothing else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(own) });
        let offset = index.checked_mul(stride()).ok_or_else(|| PyValueError::new_err("slot index too large"))?;
        let len = file.metadata().map_err(|e| PyOSError::new_err(e.to_string()))?.len();
        if (offset + std::mem::size_of::<Counters>()) as u64 > len {
            return Err(PyValueError::new_err(format!("the metrics file has no slot {index}")));
        }
        let map = MmapOptions::new()
            .offset(offset as u64)
            .len(std::mem::size_of::<Counters>())
            .map_raw(&file)
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        Ok(MetricsSlot { map: Arc::new(CountersMap { map }) })
    }

    /// Bytes the file needs per slot.
    #[staticmethod]
    fn stride() -> usize {
        stride()
    }

    /// The counters as a dict: lists by status class and by duration bucket, numbers otherwise.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let Snapshot {
            responses,
            duration,
            duration_sum,
            bytes_received,
            bytes_sent,
            connections_total,
            connections_open,
            upgraded_total,
            upgraded_open,
        } = self.counters().snapshot();
        let d = PyDict::new(py);
        d.set_item("responses", responses.to_vec())?;
        d.set_item("duration", duration.to_vec())?;
        d.set_item("duration_sum", duration_sum)?;
        d.set_item("bytes_received", bytes_received)?;
        d.set_item("bytes_sent", bytes_sent)?;
        d.set_item("connections_total", connections_total)?;
        d.set_item("connections_open", connections_open)?;
        d.set_item("upgraded_total", upgraded_total)?;
        d.set_item("upgraded_open", upgraded_open)?;
        Ok(d)
    }

    fn clear(&self) {
        self.counters().clear();
    }
}

impl MetricsSlot {
    pub fn counters(&self) -> &Counters {
        self.map.counters()
    }

    /// The slot, for recording without the Python object.
    pub fn shared(&self) -> Arc<CountersMap> {
        self.map.clone()
    }
}

impl CountersMap {
    pub fn counters(&self) -> &Counters {
        // SAFETY: the mapping is `size_of::<Counters>()` bytes at a page-aligned address
        // (so aligned for atomics), shared and writable, and lives as long as `self`. The
        // file started zero-filled, and zero is a valid value of every field; other
        // processes touch it only through the same atomics.
        unsafe { &*self.map.as_ptr().cast::<Counters>() }
    }
}
