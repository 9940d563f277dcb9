//! Heap types for swordfish's native `Future` and `Task`, with Rust data in the object,
//! and the glue their slots and methods need (panic-safe trampolines, the parsing of
//! fast-call arguments, visiting for the cyclic GC).
//!
//! The types are not subclasses of the C `asyncio.Future`/`asyncio.Task`: a subclass would
//! carry the C object's private fields (unused, but paid for by every collection and
//! reachable through the base class's methods called unbound, `asyncio.Task.cancel(t)`,
//! which would act on them and not on the task). Instead `__class__` reports the asyncio
//! class, so `isinstance(t, asyncio.Task)` holds (`isinstance` consults `__class__`), and
//! an unbound base-class method refuses the object with a `TypeError` rather than
//! silently doing nothing.

use pyo3::exceptions::{PySystemError, PyTypeError};
use pyo3::ffi;
use pyo3::panic::PanicException;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple, PyType};
use std::ffi::{c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

/// A created type and where each block of its Rust data lives in an instance.
pub(crate) struct NativeType {
    pub ty: Py<PyType>,
    pub offsets: Vec<isize>,
}

/// The instance layout: the object header, then each block of `(size, align)` bytes,
/// then the instance dictionary and the weak-reference list. Returns the instance size,
/// the blocks' offsets, and the dictionary's and weak-reference list's offsets.
pub(crate) fn layout(header: usize, blocks: &[(usize, usize)]) -> (usize, Vec<usize>, usize, usize) {
    let mut end = header;
    let offsets = blocks
        .iter()
        .map(|&(size, align)| {
            let at = end.div_ceil(align) * align;
            end = at + size;
            at
        })
        .collect();
    let word = std::mem::size_of::<usize>();
    let dict = end.div_ceil(word) * word;
    let weaklist = dict + word;
    (weaklist + word, offsets, dict, weaklist)
}

/// Create `name` (a dotted "module.Name"), a final type whose instances carry the Rust data
/// `blocks` (size, alignment), an instance dictionary and weak references. `slots` must
/// stay valid for the life of the process (the method and getset tables they point to
/// are leaked on purpose: types live forever).
pub(crate) fn create(
    py: Python<'_>,
    name: &'static CStr,
    blocks: &[(usize, usize)],
    mut slots: Vec<ffi::PyType_Slot>,
) -> PyResult<NativeType> {
    let header = std::mem::size_of::<ffi::PyObject>();
    let (size, offsets, dict, weaklist) = layout(header, blocks);
    let basicsize = c_int::try_from(size).map_err(|_| PySystemError::new_err("type too large"))?;
    let member = |name: &'static CStr, offset: usize| ffi::PyMemberDef {
        name: name.as_ptr(),
        type_code: ffi::Py_T_PYSSIZET,
        offset: offset as ffi::Py_ssize_t,
        flags: ffi::Py_READONLY,
        doc: ptr::null(),
    };
    let members = vec![
        member(c"__dictoffset__", dict),
        member(c"__weaklistoffset__", weaklist),
        ffi::PyMemberDef { name: ptr::null(), type_code: 0, offset: 0, flags: 0, doc: ptr::null() },
    ];
    slots.push(slot(ffi::Py_tp_members, Box::leak(members.into_boxed_slice()).as_mut_ptr().cast()));
    slots.push(ffi::PyType_Slot { slot: 0, pfunc: ptr::null_mut() });
    let slots: &'static mut [ffi::PyType_Slot] = Box::leak(slots.into_boxed_slice());
    let spec: &'static mut ffi::PyType_Spec = Box::leak(Box::new(ffi::PyType_Spec {
        name: name.as_ptr(),
        basicsize,
        itemsize: 0,
        flags: (ffi::Py_TPFLAGS_DEFAULT | ffi::Py_TPFLAGS_HAVE_GC | ffi::Py_TPFLAGS_DISALLOW_INSTANTIATION)
            as std::ffi::c_uint,
        slots: slots.as_mut_ptr(),
    }));
    // SAFETY: the spec and everything it points to are 'static; the GIL is held.
    let ty = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpec(spec))? };
    // `tp_iternext` is there for `await` (a future is its own await iterator) and keeps
    // working without `__next__` in the type's dict; without it, the type is not taken for
    // an iterator (`collections.abc.Iterator`), which an asyncio future is not.
    // SAFETY: the dict of a type just made; deleting a key does not touch the slots.
    unsafe {
        let dict = (*ty.as_ptr().cast::<ffi::PyTypeObject>()).tp_dict;
        if ffi::PyDict_DelItemString(dict, c"__next__".as_ptr()) < 0 {
            ffi::PyErr_Clear();
        }
        ffi::PyType_Modified(ty.as_ptr().cast());
    }
    let offsets = offsets.into_iter().map(|o| o as isize).collect();
    Ok(NativeType { ty: ty.cast_into::<PyType>()?.unbind(), offsets })
}

pub(crate) fn slot(slot: c_int, pfunc: *mut c_void) -> ffi::PyType_Slot {
    ffi::PyType_Slot { slot, pfunc }
}

/// The Rust data of an instance of one of our types.
///
/// # Safety
/// `obj` must be a live instance of the type whose data offset is `offset` and whose data
/// is a `T`; the reference must not outlive the object.
pub(crate) unsafe fn data<'a, T>(obj: *mut ffi::PyObject, offset: isize) -> &'a T {
    // SAFETY: by the caller's guarantee `obj` is a live instance and `offset` the place of
    // its `T` block: `layout` put the block inside the instance's `tp_basicsize` bytes, at
    // an offset rounded up to `T`'s alignment (the object itself is allocated with the
    // interpreter's alignment, at least 8 bytes, enough for our blocks); the memory holds
    // a valid `T` (zeroed by the allocator, which is a valid `T` for our blocks, or
    // written since); and the caller keeps the object alive for `'a`.
    unsafe { &*obj.cast::<u8>().offset(offset).cast::<T>() }
}

/// A null-terminated method table that lives for the rest of the process.
pub(crate) fn method_table(mut defs: Vec<ffi::PyMethodDef>) -> *mut c_void {
    defs.push(ffi::PyMethodDef::zeroed());
    Box::leak(defs.into_boxed_slice()).as_mut_ptr().cast()
}

/// A null-terminated getset table that lives for the rest of the process.
pub(crate) fn getset_table(mut defs: Vec<ffi::PyGetSetDef>) -> *mut c_void {
    defs.push(ffi::PyGetSetDef { name: ptr::null(), get: None, set: None, doc: ptr::null(), closure: ptr::null_mut() });
    Box::leak(defs.into_boxed_slice()).as_mut_ptr().cast()
}

pub(crate) fn method_noargs(name: &'static CStr, f: ffi::PyCFunction) -> ffi::PyMethodDef {
    ffi::PyMethodDef {
        ml_name: name.as_ptr(),
        ml_meth: ffi::PyMethodDefPointer { PyCFunction: f },
        ml_flags: ffi::METH_NOARGS,
        ml_doc: ptr::null(),
    }
}

pub(crate) fn method_o(name: &'static CStr, f: ffi::PyCFunction) -> ffi::PyMethodDef {
    ffi::PyMethodDef {
        ml_name: name.as_ptr(),
        ml_meth: ffi::PyMethodDefPointer { PyCFunction: f },
        ml_flags: ffi::METH_O,
        ml_doc: ptr::null(),
    }
}

pub(crate) fn method_kw(name: &'static CStr, f: ffi::PyCFunctionFastWithKeywords) -> ffi::PyMethodDef {
    ffi::PyMethodDef {
        ml_name: name.as_ptr(),
        ml_meth: ffi::PyMethodDefPointer { PyCFunctionFastWithKeywords: f },
        ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
        ml_doc: ptr::null(),
    }
}

pub(crate) fn getset(name: &'static CStr, get: ffi::getter, set: Option<ffi::setter>) -> ffi::PyGetSetDef {
    ffi::PyGetSetDef { name: name.as_ptr(), get: Some(get), set, doc: ptr::null(), closure: ptr::null_mut() }
}

/// Run `f` with PyO3 told that this thread is attached. A C slot can be called from
/// anywhere, including outside every PyO3 frame, and there PyO3 would not know that the
/// interpreter is attached: dropping a `Py` would then only queue the decrement for
/// later. While the interpreter is finalizing (PyO3 refuses to attach), `f` runs anyway
/// and such drops are left to PyO3's queue.
///
/// # Safety
/// The calling thread must be attached to the interpreter (every slot is called so).
pub(crate) unsafe fn attached<R>(f: impl FnOnce(Python<'_>) -> R) -> R {
    let mut slot = Some(f);
    if let Some(Some(r)) = Python::try_attach(|py| slot.take().map(|f| f(py))) {
        return r;
    }
    match slot.take() {
        // SAFETY: the caller guarantees the thread is attached.
        Some(f) => f(unsafe { Python::assume_attached() }),
        None => unreachable!("try_attach ran the closure and returned its value"),
    }
}

/// Run `f` for a C slot: a Rust panic becomes a `PanicException` and an error is left set for
/// the interpreter, which then sees `on_error`.
///
/// # Safety
/// The calling thread must be attached to the interpreter (every slot is called so).
pub(crate) unsafe fn catch<T>(on_error: T, f: impl FnOnce(Python<'_>) -> PyResult<T>) -> T {
    // SAFETY: the caller guarantees the thread is attached, all that `attached` requires.
    unsafe { attached(|py| catch_attached(py, on_error, f)) }
}

fn catch_attached<T>(py: Python<'_>, on_error: T, f: impl FnOnce(Python<'_>) -> PyResult<T>) -> T {
    match catch_unwind(AssertUnwindSafe(|| f(py))) {
        Ok(Ok(v)) => v,
        Ok(Err(err)) => {
            raise(py, err);
            on_error
        }
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("panic in swordfish's native task code");
            PanicException::new_err(msg.to_owned()).restore(py);
            on_error
        }
    }
}

/// Set `err` as the interpreter's current error the way C code raises one
/// (`PyErr_SetObject`): an exception not chained yet gets the exception being handled, if
/// any, as its `__context__`. (`PyErr::restore` would leave it unchained.)
fn raise(py: Python<'_>, err: PyErr) {
    let value = err.into_value(py);
    // SAFETY: a live exception instance; reading its context returns a new reference.
    unsafe {
        let context = ffi::PyException_GetContext(value.as_ptr());
        if context.is_null() {
            ffi::PyErr_SetObject(ffi::Py_TYPE(value.as_ptr()).cast(), value.as_ptr());
        } else {
            ffi::Py_DECREF(context);
            PyErr::from_value(value.into_bound(py).into_any()).restore(py);
        }
    }
}

/// `catch` for slots that return a new reference.
///
/// # Safety
/// As `catch`.
pub(crate) unsafe fn catch_obj(f: impl FnOnce(Python<'_>) -> PyResult<Py<PyAny>>) -> *mut ffi::PyObject {
    // SAFETY: the caller guarantees the thread is attached, as `catch` requires; the
    // success value's reference is handed to the interpreter by `into_ptr`.
    unsafe { catch(ptr::null_mut(), |py| f(py).map(Py::into_ptr)) }
}

/// Run `f` where no error can be returned (deallocation, finalization): an error is
/// reported as unraisable against `obj`, and the error that was set before is kept.
///
/// # Safety
/// As `catch`; `obj` must be live, with a reference count of at least one for the call (as
/// in `tp_finalize`, not at zero in `tp_dealloc`): reporting an error takes a reference to
/// it and gives it back, and at a count of zero that would free it a second time.
pub(crate) unsafe fn catch_unraisable(obj: *mut ffi::PyObject, f: impl FnOnce(Python<'_>) -> PyResult<()>) {
    // SAFETY: the caller guarantees the thread is attached (for `attached`) and that `obj` is
    // live with a count of at least one for the call (the only caller is `tp_finalize`; from
    // `tp_dealloc`, `PyObject_CallFinalizerFromDealloc` resurrects the object to a count of
    // one around it), so borrowing it for `write_unraisable` is valid.
    unsafe {
        attached(|py| {
            let saved = PyErr::take(py);
            let failed = catch_attached(py, true, |py| f(py).map(|_| false));
            if failed {
                let err = PyErr::fetch(py);
                // Borrowed: in deallocation the count is already zero.
                let obj = Borrowed::from_ptr(py, obj);
                err.write_unraisable(py, Some(&obj));
            }
            if let Some(e) = saved {
                e.restore(py);
            }
        })
    }
}

/// Borrow an argument the interpreter passed in.
///
/// # Safety
/// `ptr` must be a live object for `'a`.
pub(crate) unsafe fn arg<'a, 'py>(py: Python<'py>, ptr: *mut ffi::PyObject) -> Borrowed<'a, 'py, PyAny> {
    // SAFETY: the caller guarantees `ptr` is a live object for `'a`, which is what
    // `Borrowed::from_ptr` needs (a null pointer would panic, not be undefined behaviour).
    unsafe { Borrowed::from_ptr(py, ptr) }
}

/// The arguments of a `METH_FASTCALL | METH_KEYWORDS` method, matched against its
/// signature: `names[..positional]` may be given by position (the first `positional_only`
/// only so), the rest only by keyword. Missing arguments are None.
///
/// # Safety
/// `args`, `nargs` and `kwnames` must be what the interpreter passed to the method.
// The vectorcall convention's arguments, passed on as they came.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn parse<'a, 'py, const N: usize>(
    py: Python<'py>,
    fname: &str,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
    names: [&str; N],
    positional_only: usize,
    positional: usize,
) -> PyResult<[Option<Borrowed<'a, 'py, PyAny>>; N]> {
    // Argument Clinic's messages, as the C methods give them.
    // SAFETY (an unsafe call, allowed bare in this `unsafe fn` under edition 2021): it only
    // masks `PY_VECTORCALL_ARGUMENTS_OFFSET` out of the count the interpreter passed.
    let nargs = ffi::PyVectorcall_NARGS(nargs as usize) as usize;
    let mut out: [Option<Borrowed<'a, 'py, PyAny>>; N] = [None; N];
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    if positional_only > 0 && nargs != positional_only && positional == positional_only {
        return Err(PyTypeError::new_err(format!(
            "{fname}() takes exactly {positional_only} positional argument{} ({nargs} given)",
            plural(positional_only)
        )));
    }
    if nargs > positional {
        return Err(PyTypeError::new_err(if positional == 0 {
            format!("{fname}() takes no positional arguments")
        } else {
            format!("{fname}() takes at most {positional} argument{} ({nargs} given)", plural(positional))
        }));
    }
    for (i, slot) in out.iter_mut().enumerate().take(nargs) {
        // SAFETY: the interpreter passes `nargs` live positional arguments.
        *slot = Some(unsafe { arg(py, *args.add(i)) });
    }
    if !kwnames.is_null() {
        // SAFETY: `kwnames` is a tuple of strings; their values follow the positionals.
        let kw = unsafe { Bound::from_borrowed_ptr(py, kwnames) }.cast_into::<PyTuple>()?;
        for (k, key) in kw.iter().enumerate() {
            let key = key.cast_into::<PyString>()?;
            let key = key.to_str()?;
            let index = names.iter().position(|n| *n == key);
            match index {
                Some(i) if i >= positional_only => {
                    if out[i].is_some() {
                        return Err(PyTypeError::new_err(format!(
                            "argument for {fname}() given by name ('{key}') and position ({})",
                            i + 1
                        )));
                    }
                    // SAFETY: as above, keyword values follow the positionals.
                    out[i] = Some(unsafe { arg(py, *args.add(nargs + k)) });
                }
                _ if py.version_info() >= (3, 13) => {
                    return Err(PyTypeError::new_err(format!("{fname}() got an unexpected keyword argument '{key}'")))
                }
                _ => return Err(PyTypeError::new_err(format!("'{key}' is an invalid keyword argument for {fname}()"))),
            }
        }
    }
    Ok(out)
}

/// Visit one strong reference for the cyclic GC (`Py_VISIT`).
///
/// # Safety
/// `visit` and `arg` must be what the GC passed to `tp_traverse`, and `ptr` null or a
/// strong reference the traversed object owns (the GC subtracts one from the count of
/// every object visited: reporting a reference the object does not own could make a live
/// object look unreachable and have it freed).
#[inline]
pub(crate) unsafe fn visit_ptr(ptr: *mut ffi::PyObject, visit: ffi::visitproc, arg: *mut c_void) -> c_int {
    if ptr.is_null() {
        0
    } else {
        // SAFETY: `ptr` is non-null here, and by the caller's guarantee a strong reference
        // the traversed object owns, handed to the GC's own `visit` with its `arg`.
        unsafe { visit(ptr, arg) }
    }
}

/// The slot at `offset` of an object: its dictionary or weak-reference list.
///
/// # Safety
/// `obj` must be a live instance of one of our types, `offset` its type's
/// `tp_dictoffset` or `tp_weaklistoffset`.
unsafe fn slot_at(obj: *mut ffi::PyObject, offset: isize) -> *mut *mut ffi::PyObject {
    // SAFETY: by the caller's guarantee `offset` is the dictionary's or weak-reference
    // list's offset that `layout` gave the type: a word-aligned, word-sized slot within the
    // instance's `tp_basicsize` bytes, so the pointer stays inside `obj`'s allocation.
    unsafe { obj.cast::<u8>().offset(offset).cast::<*mut ffi::PyObject>() }
}

/// Visit the instance dictionary, if the object has one.
///
/// # Safety
/// `obj` must be a live instance of one of our types; `visit`/`arg` from the GC.
pub(crate) unsafe fn visit_dict(obj: *mut ffi::PyObject, visit: ffi::visitproc, arg: *mut c_void) -> c_int {
    // SAFETY: `obj` is a live instance of one of our types (the caller's guarantee), so its
    // type pointer is valid and its `tp_dictoffset` is the slot `layout` made (set from the
    // `__dictoffset__` member), which is null (zeroed at allocation) or the instance dict, a
    // strong reference the object owns; `visit`/`arg` are the GC's, as `visit_ptr` needs.
    unsafe { visit_ptr(*slot_at(obj, (*ffi::Py_TYPE(obj)).tp_dictoffset), visit, arg) }
}

/// Drop the instance dictionary.
///
/// # Safety
/// `obj` must be a live instance of one of our types (its memory valid; its count may be
/// zero, in `tp_dealloc`), and the thread attached (releasing the dict runs Python code).
pub(crate) unsafe fn clear_dict(obj: *mut ffi::PyObject) {
    // SAFETY: as in `visit_dict`, the slot is the instance's dict slot, holding null or a
    // strong reference the object owns; it is set to null before that reference is released
    // (on the attached thread, the caller's guarantee), so code the release runs never finds
    // a freed dict there, and the reference is released once.
    unsafe {
        let slot = slot_at(obj, (*ffi::Py_TYPE(obj)).tp_dictoffset);
        let d = std::mem::replace(&mut *slot, ptr::null_mut());
        if !d.is_null() {
            ffi::Py_DECREF(d);
        }
    }
}

/// Whether weak references to the object exist (they must be cleared on deallocation).
///
/// # Safety
/// `obj` must be a live instance of one of our types.
pub(crate) unsafe fn has_weakrefs(obj: *mut ffi::PyObject) -> bool {
    // SAFETY: as in `visit_dict`, for the weak-reference list slot at the type's
    // `tp_weaklistoffset` (from `__weaklistoffset__`): null or the list's head; only read.
    unsafe { !(*slot_at(obj, (*ffi::Py_TYPE(obj)).tp_weaklistoffset)).is_null() }
}
