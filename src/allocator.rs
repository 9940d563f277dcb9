//! The server process's malloc settings. glibc gives memory back from the top of its heap
//! whenever 128 KiB there is free, so a server that allocates and frees messages of tens of
//! KiB (WebSocket frames, request bodies) shrinks and regrows its heap every few messages:
//! a `brk` call and freshly zeroed pages each time. Measured on the 64 KiB WebSocket echo
//! at 64 connections: one `brk` per seven messages, and 15% more messages/s without them
//! (docs/design.md). The loop alone does not do this: it is the server's process, not a
//! library's, to tune.

use pyo3::prelude::*;

/// Larger allocations are mapped on their own and returned to the system when freed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 1 << 20;
/// Free memory kept at the heap's top before it is given back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: libc::c_int = 8 << 20;

/// Keep freed memory at the heap's top for reuse (see the module's comment), unless the
/// user chose glibc's settings with its `MALLOC_TRIM_THRESHOLD_`/`MALLOC_MMAP_THRESHOLD_`
/// variables. Returns whether the settings were changed.
#[pyfunction]
pub fn tune_allocator() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let chosen = ["MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"].iter().any(|v| std::env::var_os(v).is_some());
        if chosen {
            return false;
        }
        // SAFETY: mallopt only changes the allocator's thresholds; it takes its own lock.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}
