//! Serving one request on an app thread: the environ, the app's call, its iterable sent
//! part by part (a list at once, with its length when small), `close()` on every path, and
//! the app's end posted to the connection, which logs an error and answers 500 if nothing was
//! sent.

use super::bridge::Post;
use super::environ;
use super::exchange::Exchange;
use super::file_wrapper::FileWrapper;
use super::input::WsgiInput;
use super::pool::AppContext;
use super::start_response::{Sent, StartResponse};
use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use std::sync::Arc;

/// A list body up to this size is joined and sent with its length in one part.
const JOIN_LIMIT: usize = 64 * 1024;

pub fn serve(py: Python<'_>, ctx: &AppContext, ex: Arc<Exchange>) {
    let exc = run(py, ctx, &ex).err().map(|e| e.into_value(py).into_any());
    if let Err(e) = ex.clone().post(py, Post::Finished(ex, exc)) {
        e.write_unraisable(py, None);
    }
}

fn run(py: Python<'_>, ctx: &AppContext, ex: &Arc<Exchange>) -> PyResult<()> {
    let input = Bound::new(py, WsgiInput::new(ex.clone()))?;
    let environ = environ::build(py, ctx, ex.request.get(), input.into_any())?;
    let responder = Bound::new(py, StartResponse::new(ex.clone()))?;
    let result = ctx.app.bind(py).call1((environ, &responder))?;
    let sendfile = ex.sends_files();
    let sent = send_result(py, responder.get(), &result, sendfile);
    // PEP 3333: close() is called whatever happened, after the iteration.
    let closed = match result.getattr_opt(intern!(py, "close")) {
        Ok(Some(close)) => close.call0().map(drop),
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    };
    sent.and(closed)
}

fn chunk<'py>(item: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    item.cast_into::<PyBytes>().map_err(|e| {
        let name = e.into_inner().get_type().name().map_or_else(|_| "?".to_owned(), |n| n.to_string());
        PyTypeError::new_err(format!("a WSGI application must give bytes, not {name}"))
    })
}

/// (offset, bytes to the end) of a `wsgi.file_wrapper` whose file the loop can send with
/// `sendfile`: a regular file with a descriptor; None for any other file-like (iterated).
fn sendable(py: Python<'_>, filelike: &Bound<'_, PyAny>) -> Option<(u64, u64)> {
    let fd: i32 = filelike.call_method0(intern!(py, "fileno")).ok()?.extract().ok()?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `stat` into the buffer given, or fails.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so it filled the buffer.
    let st = unsafe { st.assume_init() };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    let offset: u64 = filelike.call_method0(intern!(py, "tell")).ok()?.extract().ok()?;
    let len = u64::try_from(st.st_size).ok()?;
    Some((offset, len.saturating_sub(offset)))
}

fn send_result(py: Python<'_>, responder: &StartResponse, result: &Bound<'_, PyAny>, sendfile: bool) -> PyResult<()> {
    if let Some(wrapper) = result.cast::<FileWrapper>().ok().filter(|_| sendfile) {
        let filelike = wrapper.get().filelike(py);
        if !responder.head_sent() {
            if let Some((offset, remaining)) = sendable(py, filelike.bind(py)) {
                responder.send_file(py, filelike, offset, remaining)?;
                return Ok(());
            }
        }
    }
    if result.is_exact_instance_of::<PyList>() || result.is_exact_instance_of::<PyTuple>() {
        let items = result.try_iter()?.map(|i| chunk(i?)).collect::<PyResult<Vec<_>>>()?;
        let total: usize = items.iter().map(|b| b.as_bytes().len()).sum();
        if items.len() == 1 || (total <= JOIN_LIMIT && !responder.head_sent()) {
            let body = match items.len() {
                1 => items.into_iter().next(),
                _ => Some(PyBytes::new_with(py, total, |out| {
                    let mut at = 0;
                    for b in &items {
                        let data = b.as_bytes();
                        if let Some(slot) = out.get_mut(at..at + data.len()) {
                            slot.copy_from_slice(data);
                        }
                        at += data.len();
                    }
                    Ok(())
                })?),
            };
            responder.send(py, body, false)?;
            return Ok(());
        }
        return stream(py, responder, items.into_iter().map(Ok));
    }
    stream(py, responder, result.try_iter()?.map(|item| chunk(item?)))
}

/// Send the parts one by one, then the body's end; stop when the client is gone.
fn stream<'py>(
    py: Python<'py>,
    responder: &StartResponse,
    parts: impl Iterator<Item = PyResult<Bound<'py, PyBytes>>>,
) -> PyResult<()> {
    for part in parts {
        let part = part?;
        // An empty part sends nothing: the head waits for real bytes (or the end).
        if !part.as_bytes().is_empty() && responder.send(py, Some(part), true)? == Sent::Gone {
            return Ok(());
        }
    }
    responder.send(py, None, false)?;
    Ok(())
}
