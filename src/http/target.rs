//! The request target and method as interfaces present them: the target split into path
//! and query (origin, absolute and asterisk forms, RFC 9112 §3.2), the path
//! percent-decoded, and the common methods as interned strings.

use super::parse::{absolute_form, Reject};
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
        let Some((_, rest)) = absolute_form(target) else {
            return Err(Reject::BadRequest("invalid request target"));
        };
        match rest.first() {
            Some(b'/') => rest,
            Some(_) => return Ok((b"/", rest.get(1..).unwrap_or_default())),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_split_into_path_and_query() {
        let split = |t: &'static [u8], m: &[u8]| split_target(t, m).ok();
        let ok = |p: &'static [u8], q: &'static [u8]| Some((p, q));
        assert_eq!(split(b"/a/b?c=d", b"GET"), ok(b"/a/b", b"c=d"));
        assert_eq!(split(b"/", b"GET"), ok(b"/", b""));
        assert_eq!(split(b"http://h.example:8/x/y?q", b"GET"), ok(b"/x/y", b"q"));
        assert_eq!(split(b"HTTPS://h/x", b"GET"), ok(b"/x", b""));
        assert_eq!(split(b"http://h?q=1", b"GET"), ok(b"/", b"q=1"));
        assert_eq!(split(b"http://h", b"GET"), ok(b"/", b""));
        assert_eq!(split(b"*", b"OPTIONS"), ok(b"*", b""));
        for bad in [&b"*"[..], b"a/b", b"ftp://h/x", b"http:/h"] {
            assert!(split_target(bad, b"GET").is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
