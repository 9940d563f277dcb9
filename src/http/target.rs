//! The request target and method as interfaces present them: the target split into path
//! and query (origin, absolute and asterisk forms, RFC 9112 §3.2), the path
//! percent-decoded, and the common methods as interned strings.

use super::parse::Reject;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyString;
use std::borrow::Cow;

/// `raw` with every valid `%XX` replaced by its byte (an invalid one is kept as it is).
pub fn percent_decode(raw: &[u8]) -> Cow<'_, [u8]> {
    if !raw.contains(&b'%') {
        return Cow::Borrowed(raw);
    }
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' && i + 2 < raw.len() {
            if let (Some(h), Some(l)) = (hex(raw[i + 1]), hex(raw[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    Cow::Owned(out)
}

/// (raw_path, query) of a request target in origin, absolute or asterisk form.
pub fn split_target<'a>(target: &'a [u8], method: &[u8]) -> Result<(&'a [u8], &'a [u8]), Reject> {
    let path_and_query = if target.first() == Some(&b'/') {
        target
    } else if target == b"*" && method == b"OPTIONS" {
        return Ok((target, b""));
    } else {
        let lower: Vec<u8> = target.iter().take(8).map(u8::to_ascii_lowercase).collect();
        let rest = if lower.starts_with(b"http://") {
            &target[7..]
        } else if lower.starts_with(b"https://") {
            &target[8..]
        } else {
            return Err(Reject::BadRequest("invalid request target"));
        };
        match rest.iter().position(|&b| b == b'/' || b == b'?') {
            Some(i) if rest[i] == b'/' => &rest[i..],
            Some(i) => return Ok((b"/", &rest[i + 1..])),
            None => return Ok((b"/", b"")),
        }
    };
    match path_and_query.iter().position(|&b| b == b'?') {
        Some(i) => Ok((&path_and_query[..i], &path_and_query[i + 1..])),
        None => Ok((path_and_query, b"")),
    }
}

pub fn method_str<'py>(py: Python<'py>, m: &[u8]) -> Bound<'py, PyString> {
    match m {
        b"GET" => intern!(py, "GET").clone(),
        b"POST" => intern!(py, "POST").clone(),
        b"HEAD" => intern!(py, "HEAD").clone(),
        b"PUT" => intern!(py, "PUT").clone(),
        b"DELETE" => intern!(py, "DELETE").clone(),
        b"OPTIONS" => intern!(py, "OPTIONS").clone(),
        b"PATCH" => intern!(py, "PATCH").clone(),
        _ => PyString::new(py, &String::from_utf8_lossy(m)),
    }
}
