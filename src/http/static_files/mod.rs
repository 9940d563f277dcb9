//! Static files (`--static-path-dir`): a request whose path is under the static route is
//! answered by the connection itself, before any interface sees it. This module decides the
//! answer: the file (`path`), its validators, preconditions and range (`validators`), its
//! content type, and the head; `serve` gives it to the connection, whose response path
//! sends the body (a large file with `sendfile`).

pub(crate) mod path;
pub(crate) mod serve;
pub(crate) mod validators;

use super::head::{HeadBuilder, HeadRules, ResponseHead};
use super::response::{format_date, push_status_line, reason};
use super::target::split_target;
use pyo3::prelude::*;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
pub use validators::Conditions;
use validators::{evaluate, Outcome, Validators};

/// Up to this size a body is read and written with the head, in the same write: cheaper
/// than handing a file to the loop's `sendfile`, which takes a task and the transport.
pub const READ_LIMIT: u64 = 64 * 1024;

/// The settings of the static files.
pub struct StaticFiles {
    /// The route, without a trailing `/` (empty for `/`: every path is a file's).
    route: Vec<u8>,
    /// The directory, canonical (every file served has its real path inside).
    root: PathBuf,
    /// `Cache-Control` (`max-age` from `--static-path-expires`), if any.
    cache_control: Option<Vec<u8>>,
    /// `send(protocol, transport, file, offset, size, gen, None)`: the coroutine that sends
    /// a file as the body (see the server's `_file_body`).
    pub sender: Py<PyAny>,
}

/// A response's body.
pub enum Body {
    /// None (a HEAD, a 304).
    Empty,
    /// Bytes read already (a server's text, a small file).
    Bytes(Vec<u8>),
    /// `len` bytes of `file` from `offset`.
    File { file: File, offset: u64, len: u64 },
}

/// The response to a request for a static file.
pub struct Answer {
    pub head: ResponseHead,
    pub body: Body,
}

impl StaticFiles {
    /// `route` must begin with `/`; `dir` must be a directory.
    pub fn new(route: &str, dir: &Path, expires: Option<u64>, sender: Py<PyAny>) -> Result<StaticFiles, String> {
        if !route.starts_with('/') {
            return Err(format!("the static route must begin with '/', not {route:?}"));
        }
        let root = dir.canonicalize().map_err(|e| format!("static directory {}: {e}", dir.display()))?;
        if !root.is_dir() {
            return Err(format!("static directory {}: not a directory", dir.display()));
        }
        Ok(StaticFiles {
            route: route.trim_end_matches('/').as_bytes().to_vec(),
            root,
            cache_control: expires.map(|s| format!("max-age={s}").into_bytes()),
            sender,
        })
    }

    /// The rest of a request's path after the route (see `under_route`), if `target` (the
    /// request target as the client sent it) is under it.
    pub fn route_of<'a>(&self, target: &'a [u8], method: &[u8]) -> Option<&'a [u8]> {
        let (path, _query) = split_target(target, method).ok()?;
        self.under_route(path)
    }

    /// The rest of `path` (the request path as the client sent it, without the query)
    /// after the route, if the path is under it: the route itself, or the route and `/`.
    pub fn under_route<'a>(&self, path: &'a [u8]) -> Option<&'a [u8]> {
        let rest = path.strip_prefix(&self.route[..])?;
        (rest.is_empty() || rest.starts_with(b"/")).then_some(rest)
    }

    /// The response to `method` for `rest` (see `under_route`), with the request's
    /// conditions.
    pub fn answer(&self, rules: &HeadRules<'_>, method: &[u8], rest: &[u8], conditions: &Conditions<'_>) -> Answer {
        let get = method == b"GET";
        if !get && method != b"HEAD" {
            return text(rules, 405, &[(b"allow", b"GET, HEAD")]);
        }
        let Some((name, file, meta)) = path::resolve(&self.root, rest) else {
            return text(rules, 404, &[]);
        };
        let size = meta.len();
        let v = Validators::new(meta.mtime(), meta.mtime_nsec(), size);
        let modified = format_date(v.modified);
        // §15.4.5: a 304 has the validators and Cache-Control a 200 would have.
        let mut validators: Vec<(&[u8], &[u8])> = vec![(b"last-modified", &modified), (b"etag", v.etag.as_bytes())];
        if let Some(cc) = &self.cache_control {
            validators.push((b"cache-control", cc));
        }
        let (status, start, len) = match evaluate(conditions, &v, size, get) {
            Outcome::Full => (200, 0, size),
            Outcome::Partial { start, end } => (206, start, end - start + 1),
            Outcome::NotModified => return Answer { head: head(rules, 304, &validators), body: Body::Empty },
            Outcome::PreconditionFailed => return text(rules, 412, &[]),
            Outcome::Unsatisfiable => {
                let range = format!("bytes */{size}");
                return text(rules, 416, &[(b"content-range", range.as_bytes()), (b"accept-ranges", b"bytes")]);
            }
        };
        let content_type = content_type(&name);
        let length = len.to_string();
        let range = format!("bytes {start}-{}/{size}", (start + len).saturating_sub(1));
        let mut fields: Vec<(&[u8], &[u8])> = vec![
            (b"content-type", content_type.as_bytes()),
            (b"content-length", length.as_bytes()),
            (b"accept-ranges", b"bytes"),
        ];
        if status == 206 {
            fields.push((b"content-range", range.as_bytes()));
        }
        fields.extend_from_slice(&validators);
        let body = if !get || len == 0 {
            Body::Empty
        } else if len <= READ_LIMIT {
            let mut data = vec![0; len as usize];
            if file.read_exact_at(&mut data, start).is_err() {
                // Shorter than its size said a moment ago: being rewritten.
                return text(rules, 500, &[]);
            }
            Body::Bytes(data)
        } else {
            Body::File { file, offset: start, len }
        };
        Answer { head: head(rules, status, &fields), body }
    }
}

/// A reply of the server's own: its reason phrase as plain text.
fn text(rules: &HeadRules<'_>, status: u16, extra: &[(&[u8], &[u8])]) -> Answer {
    let body = reason(status).as_bytes();
    let length = body.len().to_string();
    let mut fields =
        vec![(&b"content-type"[..], &b"text/plain; charset=utf-8"[..]), (b"content-length", length.as_bytes())];
    fields.extend_from_slice(extra);
    Answer { head: head(rules, status, &fields), body: Body::Bytes(body.to_vec()) }
}

/// The head with the server's defaults (a default header of the same name gives way).
fn head(rules: &HeadRules<'_>, status: u16, fields: &[(&[u8], &[u8])]) -> ResponseHead {
    let built = HeadBuilder::new(status).and_then(|mut b| {
        for (name, value) in fields {
            b.field(rules, name, value)?;
        }
        b.finish(rules)
    });
    // Only a field of ours could fail the builder, and none does; should one, the client
    // still gets the status, and the connection closes after it.
    built.unwrap_or_else(|_| {
        let mut bytes = Vec::new();
        push_status_line(&mut bytes, status);
        ResponseHead { status, bytes, length: Some(0), close: true }
    })
}

/// The content type of a file by its name's extension; text is taken to be UTF-8.
fn content_type(name: &Path) -> String {
    match mime_guess::from_path(name).first_raw() {
        // RFC 9239: JavaScript's type is text/javascript.
        Some("application/javascript") => "text/javascript; charset=utf-8".to_owned(),
        Some(t) if t.starts_with("text/") => format!("{t}; charset=utf-8"),
        Some(t) => t.to_owned(),
        None => "application/octet-stream".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        assert_eq!(content_type(Path::new("a/b.html")), "text/html; charset=utf-8");
        assert_eq!(content_type(Path::new("x.CSS")), "text/css; charset=utf-8");
        assert_eq!(content_type(Path::new("app.js")), "text/javascript; charset=utf-8");
        assert_eq!(content_type(Path::new("i.png")), "image/png");
        assert_eq!(content_type(Path::new("d.json")), "application/json");
        assert_eq!(content_type(Path::new("noext")), "application/octet-stream");
        assert_eq!(content_type(Path::new("x.unknownext")), "application/octet-stream");
    }
}
