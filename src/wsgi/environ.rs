//! The environ of a request (PEP 3333), built on the app thread from the head the loop
//! copied (`WsgiRequest`): a copy of the server's template (the `wsgi.*` keys, `SCRIPT_NAME`,
//! `SERVER_PROTOCOL`) with the request's keys set. Text is the bytes decoded as latin-1
//! ("bytes as str", as PEP 3333 has it); `PATH_INFO` is percent-decoded first.

use super::pool::AppContext;
use super::request::WsgiRequest;
use crate::http::target::{method_str, percent_decode};
use crate::sync::lock_unpoisoned;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use std::collections::HashMap;
use std::sync::Mutex;

/// Bytes as a str of the same code points (latin-1).
pub fn latin1<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyString>> {
    if bytes.is_ascii() {
        // SAFETY: ASCII is valid UTF-8.
        return Ok(PyString::new(py, unsafe { std::str::from_utf8_unchecked(bytes) }));
    }
    let len =
        ffi::Py_ssize_t::try_from(bytes.len()).map_err(|_| pyo3::exceptions::PyOverflowError::new_err("too long"))?;
    // SAFETY: `bytes` is valid for `len` bytes; the call returns a new reference or NULL
    // with an exception set.
    let obj = unsafe { ffi::PyUnicode_DecodeLatin1(bytes.as_ptr().cast(), len, std::ptr::null()) };
    // SAFETY: a new reference (or NULL, turned into the error) to a str.
    unsafe { Ok(Bound::from_owned_ptr_or_err(py, obj)?.cast_into_unchecked()) }
}

/// `HTTP_` and the field name upper-cased with `-` as `_`; None for a name with `_`, which
/// would pass for another field's (`X_Forwarded_For` for `X-Forwarded-For`): such fields
/// are dropped, as gunicorn does.
fn cgi_key(name: &[u8]) -> Option<Vec<u8>> {
    if name.contains(&b'_') {
        return None;
    }
    let mut key = Vec::with_capacity(name.len() + 5);
    key.extend_from_slice(b"HTTP_");
    key.extend(name.iter().map(|&b| if b == b'-' { b'_' } else { b.to_ascii_uppercase() }));
    Some(key)
}

/// The environ keys of the header names seen, made once each (most requests repeat the
/// same dozen names), up to `KEY_CACHE` names.
#[derive(Default)]
pub struct KeyCache(Mutex<HashMap<Vec<u8>, Py<PyString>>>);

const KEY_CACHE: usize = 256;

impl KeyCache {
    /// The key of the field `name`, or None for a field that is dropped (see `cgi_key`).
    fn key<'py>(&self, py: Python<'py>, name: &[u8]) -> PyResult<Option<Bound<'py, PyString>>> {
        let mut cache = lock_unpoisoned(&self.0);
        // By the name as sent: clients spell each name the same way every time.
        if let Some(key) = cache.get(name) {
            return Ok(Some(key.bind(py).clone()));
        }
        let Some(key) = cgi_key(name) else { return Ok(None) };
        let key = PyString::intern(py, &String::from_utf8_lossy(&key));
        if cache.len() < KEY_CACHE {
            cache.insert(name.to_vec(), key.clone().unbind());
        }
        Ok(Some(key))
    }
}

/// The path an app routes on: the request's path, percent-decoded, without `root`
/// (`SCRIPT_NAME`) when it starts with it.
fn path_info<'a>(path: &'a [u8], root: &[u8]) -> &'a [u8] {
    if !root.is_empty() && path.starts_with(root) {
        let rest = path.get(root.len()..).unwrap_or_default();
        if rest.is_empty() || rest.first() == Some(&b'/') {
            return rest;
        }
    }
    path
}

/// (host, port) of an address tuple, as str.
fn host_port<'py>(py: Python<'py>, addr: Option<&Py<PyAny>>) -> Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let addr = addr?.bind(py).cast::<PyTuple>().ok()?;
    if addr.len() < 2 {
        return None;
    }
    let host = addr.get_item(0).ok()?;
    let port = addr.get_item(1).ok()?.str().ok()?.into_any();
    Some((host, port))
}

pub fn build<'py>(
    py: Python<'py>,
    ctx: &AppContext,
    req: &WsgiRequest,
    input: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    // SAFETY: the template is a dict; PyDict_Copy returns a new reference or NULL.
    let env = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyDict_Copy(ctx.environ.as_ptr()))? };
    let env = env.cast_into::<PyDict>()?;
    let (path, query) = req.split().map_err(|_| pyo3::exceptions::PyValueError::new_err("invalid request target"))?;
    env.set_item(intern!(py, "REQUEST_METHOD"), method_str(py, req.method()))?;
    env.set_item(intern!(py, "PATH_INFO"), latin1(py, path_info(&percent_decode(path), &ctx.root_path))?)?;
    if !query.is_empty() {
        env.set_item(intern!(py, "QUERY_STRING"), latin1(py, query)?)?;
    }
    if req.h2 {
        env.set_item(intern!(py, "SERVER_PROTOCOL"), intern!(py, "HTTP/2"))?;
    } else if req.minor == 0 {
        env.set_item(intern!(py, "SERVER_PROTOCOL"), intern!(py, "HTTP/1.0"))?;
    }
    if req.https {
        env.set_item(intern!(py, "wsgi.url_scheme"), intern!(py, "https"))?;
    }
    if let Some((host, port)) = host_port(py, req.client.as_ref()) {
        env.set_item(intern!(py, "REMOTE_ADDR"), host)?;
        env.set_item(intern!(py, "REMOTE_PORT"), port)?;
    }
    let mut host_field = None;
    for (name, value) in req.fields() {
        let key = if name.eq_ignore_ascii_case(b"content-type") {
            intern!(py, "CONTENT_TYPE").clone()
        } else if name.eq_ignore_ascii_case(b"content-length") {
            intern!(py, "CONTENT_LENGTH").clone()
        } else {
            if name.eq_ignore_ascii_case(b"host") {
                host_field = Some(value);
            }
            match ctx.keys.key(py, name)? {
                Some(key) => key,
                None => continue,
            }
        };
        let value = latin1(py, value)?;
        // Repeated fields are joined as one list (RFC 9110 §5.3); cookies with "; ", the
        // one separator a cookie header knows (RFC 6265 §4.2.1, RFC 9113 §8.2.3).
        let joined = match env.get_item(&key)? {
            Some(before) => {
                let sep = if name.eq_ignore_ascii_case(b"cookie") { "; " } else { ", " };
                PyString::new(py, &format!("{}{sep}{}", before.str()?.to_cow()?, value.to_cow()?))
            }
            None => value,
        };
        env.set_item(key, joined)?;
    }
    match host_port(py, req.server.as_ref()) {
        Some((host, port)) => {
            env.set_item(intern!(py, "SERVER_NAME"), host)?;
            env.set_item(intern!(py, "SERVER_PORT"), port)?;
        }
        None => {
            // A Unix socket: the name the client asked for, as PEP 3333's URL
            // reconstruction does without a server address.
            let host = host_field.unwrap_or(b"localhost");
            let name = match host.iter().rposition(|&b| b == b':') {
                Some(i) if !host.ends_with(b"]") => host.get(..i).unwrap_or(host),
                _ => host,
            };
            env.set_item(intern!(py, "SERVER_NAME"), latin1(py, name)?)?;
            let port = if req.https { "443" } else { "80" };
            env.set_item(intern!(py, "SERVER_PORT"), port)?;
        }
    }
    env.set_item(intern!(py, "wsgi.input"), input)?;
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgi_keys() {
        assert_eq!(cgi_key(b"User-Agent").as_deref(), Some(&b"HTTP_USER_AGENT"[..]));
        assert_eq!(cgi_key(b"x-a"), Some(b"HTTP_X_A".to_vec()));
        assert_eq!(cgi_key(b"X_Forwarded_For"), None);
    }

    #[test]
    fn path_info_strips_the_root_at_a_segment() {
        assert_eq!(path_info(b"/app/x", b"/app"), b"/x");
        assert_eq!(path_info(b"/app", b"/app"), b"");
        assert_eq!(path_info(b"/application", b"/app"), b"/application");
        assert_eq!(path_info(b"/x", b""), b"/x");
    }
}
