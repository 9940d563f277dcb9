//! The response of an HTTP/2 stream as an interface gives it, free of Python objects: the
//! head held until the first body part (so that a response complete in one message leaves
//! as HEADERS with END_STREAM, or HEADERS and one DATA frame), `Content-Length` kept to,
//! trailers, and the head's fields as HTTP/2 has them (lower-case names, no
//! connection-specific fields: RFC 9113 §8.2). The same checks, and the same
//! `RespondError`s, as the HTTP/1.1 connection's writing side.

use super::core::H2Core;
use crate::http::head::ResponseHead;
use crate::http::response::bodiless;
use crate::http::settings::Settings;
use crate::http::writing::{RespondError, Unfinished};
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};

/// Where a stream's response stands.
#[derive(Debug)]
pub enum Writing {
    Init,
    /// The head, held until the first body part.
    Head {
        head: ResponseHead,
        trailers: bool,
    },
    /// Body parts go out; `left`: what `Content-Length` still announces.
    Body {
        left: Option<u64>,
        trailers: bool,
    },
    /// The body is complete; trailer fields gather until the last.
    Trailers(HeaderMap),
    Done,
}

/// A part of a response.
pub enum Part {
    Head {
        head: ResponseHead,
        trailers: bool,
    },
    Body {
        data: Bytes,
        more: bool,
    },
    /// Serialized trailer fields (`name: value\r\n` lines).
    Trailers {
        fields: Vec<u8>,
        more: bool,
    },
}

/// What a part did.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// The response goes on (or is complete).
    Ready,
    /// The stream's queue is full: the writer waits for `Event::Writable`.
    Wait,
}

/// Connection-specific fields, which an HTTP/2 message must not carry (RFC 9113 §8.2.2).
fn connection_specific(name: &[u8]) -> bool {
    [&b"connection"[..], b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
}

/// `name: value\r\n` lines as HTTP/2 fields; the lines were checked when they were made.
/// The values are slices of `lines`, which they share: one allocation for the head, not
/// one per field.
fn fields(lines: Bytes, map: &mut HeaderMap) {
    for line in lines.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if connection_specific(name) {
            continue;
        }
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_maybe_shared(lines.slice_ref(value))) {
            map.append(n, v);
        }
    }
}

/// The HTTP/2 head of `head` (its status line dropped).
pub fn response(head: ResponseHead, head_method: bool, whole: Option<u64>) -> Response<()> {
    let mut r = Response::new(());
    *r.status_mut() = StatusCode::from_u16(head.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let first = head.bytes.iter().position(|&b| b == b'\n').map_or(head.bytes.len(), |i| i + 1);
    fields(Bytes::from(head.bytes).slice(first..), r.headers_mut());
    if head.length.is_none() && !bodiless(head.status, head_method) {
        if let Some(n) = whole {
            r.headers_mut().insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
        }
    }
    r
}

impl H2Core {
    /// Give stream `id`'s response its next part (`head_method`: the request was HEAD, so
    /// the body is not sent).
    pub fn respond(&mut self, id: u32, head_method: bool, part: Part) -> Result<Taken, RespondError> {
        let Some(s) = self.streams.get_mut(&id) else { return Err(RespondError::Gone) };
        if s.reset {
            return Err(RespondError::Gone);
        }
        let gone = |_| RespondError::Gone;
        match part {
            Part::Head { head, trailers } => {
                if !matches!(s.writing, Writing::Init) {
                    return Err(RespondError::AlreadyStarted);
                }
                s.writing = Writing::Head { head, trailers };
                Ok(Taken::Ready)
            }
            Part::Body { data, more } => match std::mem::replace(&mut s.writing, Writing::Done) {
                Writing::Init => {
                    s.writing = Writing::Init;
                    Err(RespondError::NotStarted)
                }
                Writing::Head { head, trailers } => {
                    let n = data.len() as u64;
                    let bodiless = bodiless(head.status, head_method);
                    // A HEAD's `content-length` is GET's: the body it counts is not sent.
                    if !bodiless && head.length.is_some_and(|l| n > l || (!more && !trailers && n < l)) {
                        let e = if head.length.is_some_and(|l| n > l) {
                            RespondError::TooLong
                        } else {
                            RespondError::TooShort
                        };
                        self.reset(id, h2::Reason::INTERNAL_ERROR);
                        return Err(e);
                    }
                    let whole = (!more && !trailers).then_some(n);
                    let end = bodiless || (whole == Some(0));
                    let left = head.length.map(|l| l.saturating_sub(n));
                    self.send_head(id, response(head, head_method, whole), end).map_err(gone)?;
                    self.body_part(id, data, more, left, trailers, end)
                }
                Writing::Body { left, trailers } => {
                    let n = data.len() as u64;
                    if left.is_some_and(|l| n > l) {
                        self.reset(id, h2::Reason::INTERNAL_ERROR);
                        return Err(RespondError::TooLong);
                    }
                    if left.is_some_and(|l| !more && !trailers && n < l) {
                        self.reset(id, h2::Reason::INTERNAL_ERROR);
                        return Err(RespondError::TooShort);
                    }
                    self.body_part(id, data, more, left.map(|l| l - n), trailers, false)
                }
                other => {
                    if let Some(s) = self.streams.get_mut(&id) {
                        s.writing = other;
                    }
                    Err(RespondError::BodyComplete)
                }
            },
            Part::Trailers { fields: lines, more } => {
                let Writing::Trailers(map) = &mut s.writing else { return Err(RespondError::NoTrailers) };
                fields(Bytes::from(lines), map);
                if more {
                    return Ok(Taken::Ready);
                }
                let Writing::Trailers(map) = std::mem::replace(&mut s.writing, Writing::Done) else {
                    return Err(RespondError::NoTrailers);
                };
                self.send_trailers(id, map).map_err(gone)?;
                Ok(Taken::Ready)
            }
        }
    }

    /// A file of `size` bytes from `offset` as the body of stream `id`.
    pub fn respond_file(
        &mut self,
        id: u32,
        head_method: bool,
        mut file: std::fs::File,
        offset: u64,
        size: u64,
    ) -> Result<(), RespondError> {
        use std::io::Seek;
        let Some(s) = self.streams.get_mut(&id) else { return Err(RespondError::Gone) };
        let Writing::Head { head, .. } = std::mem::replace(&mut s.writing, Writing::Done) else {
            return Err(RespondError::FileNotAllowed);
        };
        if head.length.is_some_and(|n| n != size) {
            s.writing = Writing::Head { head, trailers: false };
            return Err(RespondError::FileLength);
        }
        let end = bodiless(head.status, head_method) || size == 0;
        // HEAD gets the length GET would (the file's size is known).
        self.send_head(id, response(head, false, Some(size)), end).map_err(|_| RespondError::Gone)?;
        if end {
            return Ok(());
        }
        if file.seek(std::io::SeekFrom::Start(offset)).is_err() {
            self.reset(id, h2::Reason::INTERNAL_ERROR);
            return Err(RespondError::Gone);
        }
        if let Some(s) = self.streams.get_mut(&id) {
            s.file = Some((file, size));
        }
        Ok(())
    }

    /// The application of stream `id` ended: how, if it left the response unfinished.
    /// Before the head the server answers 500 for it (the status and body size in the
    /// result); after it, the stream is reset, so that the client does not take a cut
    /// response for a whole one.
    pub fn app_unfinished(
        &mut self,
        st: &Settings,
        id: u32,
        head_method: bool,
        raised: bool,
    ) -> Option<(Unfinished, Option<(u16, u64)>)> {
        let s = self.streams.get(&id)?;
        let started = match s.writing {
            Writing::Done => return None,
            Writing::Init => false,
            _ => true,
        };
        let how = match (raised, started) {
            (true, _) => Unfinished::Raised,
            (false, false) => Unfinished::ReturnedBeforeStart,
            (false, true) => Unfinished::ReturnedBeforeEnd,
        };
        if started {
            self.reset(id, h2::Reason::INTERNAL_ERROR);
            return Some((how, None));
        }
        let (head, body) = simple(st, 500, head_method, b"");
        let sent = if head_method { 0 } else { body.len() as u64 };
        let _ = self.respond(id, head_method, Part::Head { head, trailers: false });
        let _ = self.respond(id, head_method, Part::Body { data: body, more: false });
        Some((how, Some((500, sent))))
    }

    fn body_part(
        &mut self,
        id: u32,
        data: Bytes,
        more: bool,
        left: Option<u64>,
        trailers: bool,
        head_ended: bool,
    ) -> Result<Taken, RespondError> {
        let next = match (more, trailers) {
            (true, _) => Writing::Body { left, trailers },
            (false, true) => Writing::Trailers(HeaderMap::new()),
            (false, false) => Writing::Done,
        };
        if let Some(s) = self.streams.get_mut(&id) {
            s.writing = next;
        }
        if head_ended {
            // The head went with END_STREAM (no body, or none to send): what the
            // application sends after it is dropped.
            return Ok(Taken::Ready);
        }
        let end = !more && !trailers;
        if data.is_empty() && !end {
            return Ok(Taken::Ready);
        }
        match self.send_data(id, data, end) {
            Ok(true) => Ok(Taken::Wait),
            Ok(false) => Ok(Taken::Ready),
            Err(()) => Err(RespondError::Gone),
        }
    }
}

/// A plain-text reply the server makes itself (a refusal, a 500), as a head and its body;
/// `extra`: field lines the refusal adds (a 426 names the WebSocket version spoken).
pub fn simple(st: &Settings, status: u16, head_method: bool, extra: &[u8]) -> (ResponseHead, Bytes) {
    let whole = st.simple_response(status, head_method, extra);
    let end = whole.windows(4).position(|w| w == b"\r\n\r\n").map_or(whole.len(), |i| i + 2);
    let body = Bytes::copy_from_slice(whole.get(end + 2..).unwrap_or_default());
    let length = Some(crate::http::response::reason(status).len() as u64);
    (ResponseHead { status, bytes: whole[..end].to_vec(), length, close: false }, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(status: u16, lines: &str, length: Option<u64>) -> ResponseHead {
        ResponseHead { status, bytes: format!("HTTP/1.1 {status} X\r\n{lines}").into_bytes(), length, close: false }
    }

    #[test]
    fn fields_are_the_lines_values_without_connection_specific_ones() {
        let lines = "content-type: text/plain\r\nconnection: keep-alive\r\nx-empty: \r\nx-a:  1 \r\nx-a: 2\r\n";
        let r = response(head(200, lines, None), false, Some(5));
        let h = r.headers();
        assert_eq!(h.get("content-type").map(|v| v.as_bytes()), Some(&b"text/plain"[..]));
        assert!(h.get("connection").is_none());
        assert_eq!(h.get("x-empty").map(|v| v.as_bytes()), Some(&b""[..]));
        let a: Vec<&[u8]> = h.get_all("x-a").iter().map(|v| v.as_bytes()).collect();
        assert_eq!(a, vec![&b"1"[..], &b"2"[..]]);
        assert_eq!(h.get("content-length").map(|v| v.as_bytes()), Some(&b"5"[..]));
        assert_eq!(r.status(), StatusCode::OK);
    }

    #[test]
    fn content_length_is_added_only_where_the_head_has_none_and_a_body_is_sent() {
        let given = response(head(200, "content-length: 3\r\n", Some(3)), false, Some(3));
        assert_eq!(given.headers().get_all("content-length").iter().count(), 1);
        assert!(response(head(204, "", None), false, Some(0)).headers().get("content-length").is_none());
        assert!(response(head(200, "", None), false, None).headers().get("content-length").is_none());
    }

    #[test]
    fn a_head_without_fields_has_none() {
        let r = response(
            ResponseHead { status: 200, bytes: b"HTTP/1.1 200 OK".to_vec(), length: None, close: false },
            false,
            None,
        );
        assert!(r.headers().is_empty());
    }
}
