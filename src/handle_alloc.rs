//! Handles allocated without counting towards the cyclic GC's next collection.
//!
//! CPython starts a young collection once the GC-tracked objects allocated since the last
//! one (less those freed) pass a threshold (700 before 3.13, 2000 on 3.13). A burst of
//! `call_soon`s, a handle each, counts like any other allocation, although the loop hides
//! its handles from the GC while they wait and reuses them afterwards (the spare pool): an
//! event that wakes 131,072 tasks at once brings about 187 young collections on 3.12, and
//! with them a full one, in which every live task is traversed.
//!
//! So `Handle` and `TimerHandle` get an allocator of their own: the same memory layout and
//! tracking as `PyType_GenericAlloc` gives a GC object (the GC header before the object,
//! zeroed, then tracked), but without the count; and a matching free that does not lower it
//! either. The handles stay GC objects, traversed and collectable in cycles like before.
//!
//! The layout of the GC header is CPython's own business, so the allocator is installed only
//! when the running interpreter shows the expected one: a list's `sys.getsizeof` exceeds its
//! `__sizeof__` by exactly a two-word header (not so on free-threaded builds), the handle
//! types carry no pre-header of their own (managed dict or weak references), and their
//! `tp_alloc`/`tp_free` are the generic ones this replaces. Otherwise nothing changes.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::os::raw::c_void;

/// `sizeof(PyGC_Head)` on the interpreters this is installed on.
const GC_HEAD: usize = 2 * std::mem::size_of::<usize>();
/// `Py_TPFLAGS_MANAGED_WEAKREF | Py_TPFLAGS_MANAGED_DICT` (3.11+): types with a pre-header.
const PREHEADER_FLAGS: std::os::raw::c_ulong = (1 << 3) | (1 << 4);

unsafe extern "C" fn alloc_uncounted(tp: *mut ffi::PyTypeObject, nitems: ffi::Py_ssize_t) -> *mut ffi::PyObject {
    unsafe {
        if nitems != 0 {
            return ffi::PyType_GenericAlloc(tp, nitems); // not a handle: they have a fixed size
        }
        let size = GC_HEAD + (*tp).tp_basicsize as usize;
        let mem = ffi::PyObject_Malloc(size).cast::<u8>();
        if mem.is_null() {
            return ffi::PyErr_NoMemory();
        }
        std::ptr::write_bytes(mem, 0, size); // a zeroed GC header is an untracked one
        let op = mem.add(GC_HEAD).cast::<ffi::PyObject>();
        ffi::PyObject_Init(op, tp); // type (a heap type: referenced), reference count 1
        ffi::PyObject_GC_Track(op.cast());
        op
    }
}

unsafe extern "C" fn free_uncounted(op: *mut c_void) {
    unsafe {
        if ffi::PyObject_GC_IsTracked(op.cast()) != 0 {
            ffi::PyObject_GC_UnTrack(op);
        }
        ffi::PyObject_Free(op.cast::<u8>().sub(GC_HEAD).cast());
    }
}

/// Whether this interpreter lays GC objects out as `alloc_uncounted` does.
fn layout_is_known(py: Python<'_>) -> PyResult<bool> {
    let list = PyList::empty(py);
    let total: usize = py.import("sys")?.call_method1("getsizeof", (&list,))?.extract()?;
    let own: usize = list.call_method0("__sizeof__")?.extract()?;
    Ok(total.checked_sub(own) == Some(GC_HEAD))
}

/// Install the allocator on the handle types (see the module's comment); whether it was.
pub fn install(py: Python<'_>, types: &[*mut ffi::PyTypeObject]) -> PyResult<bool> {
    if !layout_is_known(py)? {
        return Ok(false);
    }
    let generic_alloc: ffi::allocfunc = ffi::PyType_GenericAlloc;
    let generic_free: ffi::freefunc = ffi::PyObject_GC_Del;
    let suitable = types.iter().all(|&tp| unsafe {
        let t = &*tp;
        t.tp_flags & ffi::Py_TPFLAGS_HAVE_GC != 0
            && t.tp_flags & PREHEADER_FLAGS == 0
            && t.tp_itemsize == 0
            && t.tp_alloc.is_some_and(|f| std::ptr::fn_addr_eq(f, generic_alloc))
            && t.tp_free.is_some_and(|f| std::ptr::fn_addr_eq(f, generic_free))
    });
    if !suitable {
        return Ok(false);
    }
    for &tp in types {
        unsafe {
            (*tp).tp_alloc = Some(alloc_uncounted);
            (*tp).tp_free = Some(free_uncounted);
        }
    }
    Ok(true)
}
