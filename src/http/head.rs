//! The response head's rules, whoever gives the fields (ASGI today): the status line,
//! the application's fields checked (no byte that could split a field), the server's
//! defaults (`date`, `server`, configured headers an application field replaces), and the
//! fields that stay the server's: framing (`content-length` is checked and kept,
//! `transfer-encoding` is the server's to set) and `connection`. Pure: tested by
//! `cargo test`.

use super::encode::Encoder;
use super::parse::forbidden_trailer;
use super::response::{bodiless, http_date, push_decimal, push_header, push_status_line};
use std::fmt;

/// The server's own part of every head.
pub struct HeadRules<'a> {
    pub date: bool,
    pub server: Option<&'a [u8]>,
    /// (lower-case name, serialized `name: value\r\n` line); at most 64.
    pub defaults: &'a [(Vec<u8>, Vec<u8>)],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadError {
    Status(u16),
    Informational(u16),
    Reason(Vec<u8>),
    Field(Vec<u8>, Vec<u8>),
    Length,
    Coding,
}

impl fmt::Display for HeadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeadError::Status(s) => write!(f, "invalid status {s}"),
            // RFC 9110 §15.2: an informational status is never the final response, and a
            // client would wait on for one.
            HeadError::Informational(s) => write!(f, "status {s} is informational, not a response"),
            HeadError::Reason(r) => write!(f, "invalid reason phrase {:?}", String::from_utf8_lossy(r)),
            HeadError::Field(n, v) => {
                write!(f, "invalid header {:?}: {:?}", String::from_utf8_lossy(n), String::from_utf8_lossy(v))
            }
            HeadError::Length => f.write_str("invalid content-length response header"),
            HeadError::Coding => f.write_str(
                "unsupported transfer-encoding response header: the server frames the body, and applies no other coding",
            ),
        }
    }
}

/// A head being built from the application's fields.
pub struct HeadBuilder {
    out: Vec<u8>,
    status: u16,
    length: Option<u64>,
    close: bool,
    date: bool,
    server: bool,
    /// Bit i: the application gave a field named as default header i.
    replaced: u64,
    bad_length: bool,
    bad_coding: bool,
}

/// A head ready for its framing fields (`frame_head`).
#[derive(Debug)]
pub struct ResponseHead {
    pub status: u16,
    /// The status line and fields, without framing, `connection` and the empty line.
    pub bytes: Vec<u8>,
    /// The application's `content-length`.
    pub length: Option<u64>,
    /// The application asked for `connection: close`.
    pub close: bool,
}

impl HeadBuilder {
    pub fn new(status: u16) -> Result<Self, HeadError> {
        if !(100..=999).contains(&status) {
            return Err(HeadError::Status(status));
        }
        if status < 200 {
            return Err(HeadError::Informational(status));
        }
        let mut out = Vec::with_capacity(256);
        push_status_line(&mut out, status);
        Ok(HeadBuilder {
            out,
            status,
            length: None,
            close: false,
            date: false,
            server: false,
            replaced: 0,
            bad_length: false,
            bad_coding: false,
        })
    }

    /// A head whose status line carries the application's own reason phrase (WSGI's
    /// status is "200 Fine"): refused if it has a byte RFC 9112 §4 does not allow there.
    pub fn with_reason(status: u16, reason: &[u8]) -> Result<Self, HeadError> {
        let mut builder = HeadBuilder::new(status)?;
        let allowed = |b: &u8| *b == b'\t' || *b == b' ' || (0x21..=0x7e).contains(b) || *b >= 0x80;
        if !reason.iter().all(allowed) {
            return Err(HeadError::Reason(reason.to_vec()));
        }
        builder.out.clear();
        builder.out.extend_from_slice(b"HTTP/1.1 ");
        push_decimal(&mut builder.out, u64::from(status));
        builder.out.push(b' ');
        builder.out.extend_from_slice(reason);
        builder.out.extend_from_slice(b"\r\n");
        Ok(builder)
    }

    /// One of the application's fields.
    pub fn field(&mut self, rules: &HeadRules<'_>, name: &[u8], value: &[u8]) -> Result<(), HeadError> {
        let before = self.out.len();
        if !push_header(&mut self.out, name, value) {
            return Err(HeadError::Field(name.to_vec(), value.to_vec()));
        }
        if !self.keep(rules, name, value) {
            self.out.truncate(before);
        }
        Ok(())
    }

    /// Whether a valid field is sent as it is.
    fn keep(&mut self, rules: &HeadRules<'_>, name: &[u8], value: &[u8]) -> bool {
        for (i, (default, _)) in rules.defaults.iter().enumerate() {
            if name.eq_ignore_ascii_case(default) {
                self.replaced |= 1 << i;
            }
        }
        let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
        // RFC 9110 §8.6, RFC 9112 §6.1: no framing fields on a 204 response.
        if self.status == 204 && (is(b"content-length") || is(b"transfer-encoding")) {
            return false;
        }
        if is(b"content-length") {
            let digits = !value.is_empty() && value.iter().all(u8::is_ascii_digit);
            let n = std::str::from_utf8(value).ok().filter(|_| digits).and_then(|s| s.parse::<u64>().ok());
            match n {
                Some(l) if self.length.is_none() || self.length == Some(l) => self.length = Some(l),
                _ => self.bad_length = true,
            }
        } else if is(b"transfer-encoding") {
            // The framing is the server's (RFC 9112 §6.1): it chunks a body of unknown length
            // itself, never towards HTTP/1.0 and never beside a Content-Length. `chunked` is
            // therefore left out; a coding the server does not apply could not be framed as
            // the field says.
            self.bad_coding |= !value.trim_ascii().eq_ignore_ascii_case(b"chunked");
            return false;
        } else if is(b"connection") {
            // An application's `close` is honoured; the one Connection field is the server's.
            self.close |= value.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
            return false;
        } else if is(b"date") {
            self.date = true;
        } else if is(b"server") {
            self.server = true;
        }
        true
    }

    /// The head with the server's defaults the application did not replace.
    pub fn finish(mut self, rules: &HeadRules<'_>) -> Result<ResponseHead, HeadError> {
        if self.bad_length {
            return Err(HeadError::Length);
        }
        if self.bad_coding {
            return Err(HeadError::Coding);
        }
        if rules.date && !self.date {
            self.out.extend_from_slice(b"date: ");
            self.out.extend_from_slice(&http_date());
            self.out.extend_from_slice(b"\r\n");
        }
        if let (Some(s), false) = (rules.server, self.server) {
            push_header(&mut self.out, b"server", s);
        }
        for (i, (_, line)) in rules.defaults.iter().enumerate() {
            if self.replaced & (1 << i) == 0 {
                self.out.extend_from_slice(line);
            }
        }
        Ok(ResponseHead { status: self.status, bytes: self.out, length: self.length, close: self.close })
    }
}

/// A trailer field: checked as a head field; one that has no place in trailers (framing,
/// routing, …) is left out.
pub fn trailer_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) -> Result<(), HeadError> {
    let before = out.len();
    if !push_header(out, name, value) {
        return Err(HeadError::Field(name.to_vec(), value.to_vec()));
    }
    if forbidden_trailer(name) {
        out.truncate(before);
    }
    Ok(())
}

/// What the framing of a response depends on.
#[derive(Debug, Clone, Copy)]
pub struct Framing {
    pub status: u16,
    pub head_method: bool,
    /// The request's HTTP minor version.
    pub minor: u8,
    /// The application's `content-length`.
    pub length: Option<u64>,
}

/// Close the head `out`: its framing field, its `connection` field and the empty line.
/// `whole`: the whole body's length when it is known as the head goes out (the first body
/// message is the last, with no trailers). `keep_alive` is cleared when the body can only
/// end with the connection.
pub fn frame_head(out: &mut Vec<u8>, f: &Framing, whole: Option<u64>, keep_alive: &mut bool) -> Encoder {
    let encoder = if bodiless(f.status, f.head_method) {
        Encoder::Bodiless
    } else if let Some(n) = f.length {
        Encoder::Length(n)
    } else if let Some(n) = whole {
        out.extend_from_slice(b"content-length: ");
        push_decimal(out, n);
        out.extend_from_slice(b"\r\n");
        Encoder::Length(n)
    } else if f.minor == 1 {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        Encoder::Chunked
    } else {
        // HTTP/1.0: the end of the body is the end of the connection.
        *keep_alive = false;
        Encoder::CloseDelimited
    };
    if !*keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    } else if f.minor == 0 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    encoder
}

#[cfg(test)]
#[path = "head_tests.rs"]
mod tests;
