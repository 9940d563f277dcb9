//! Response serialization: status line, header fields, chunked framing, the `Date` value
//! (formatted once per second), and the small complete responses the server sends itself.

use super::parse::{is_tchar, is_value_byte};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        102 => "Processing",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        207 => "Multi-Status",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        418 => "I'm a teapot",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// Whether a response with this status (to this method) carries no body (RFC 9110 §6.4.1).
pub fn bodiless(status: u16, head_request: bool) -> bool {
    head_request || status < 200 || status == 204 || status == 304
}

pub fn push_status_line(out: &mut Vec<u8>, status: u16) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Append `name: value\r\n`; false (nothing appended) if either would break the framing.
pub fn push_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) -> bool {
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) || !value.iter().all(|&b| is_value_byte(b)) {
        return false;
    }
    out.reserve(name.len() + value.len() + 4);
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    true
}

/// The chunk-size line for a chunk of `len` bytes.
pub fn push_chunk_size(out: &mut Vec<u8>, len: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    let mut n = len;
    loop {
        i -= 1;
        digits[i] = HEX[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}

pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

struct DateCache {
    second: u64,
    value: [u8; 29],
}

static DATE: Mutex<DateCache> = Mutex::new(DateCache { second: u64::MAX, value: [b' '; 29] });

/// The current time as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), formatted at most
/// once per second.
pub fn http_date() -> [u8; 29] {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut cache = crate::sync::lock_unpoisoned(&DATE);
    if cache.second != now {
        cache.second = now;
        cache.value = format_date(now);
    }
    cache.value
}

pub(crate) fn format_date(secs: u64) -> [u8; 29] {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let days = secs / 86400;
    let rem = secs % 86400;
    let (y, m, d) = civil_from_days(days as i64);
    let text = format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        d,
        MONTHS[(m - 1) as usize],
        y,
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
    let mut out = [b' '; 29];
    let n = text.len().min(29);
    out[..n].copy_from_slice(&text.as_bytes()[..n]);
    out
}

/// Gregorian (year, month, day) of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A complete response the server makes itself (errors, rejections): a short text body and,
/// always, `Connection: close`.
/// A plain-text reply the server writes itself (a refusal, or a 500); the reply to a HEAD
/// keeps the length of the text and leaves the text out (RFC 9110 §9.3.2). `extra`: whole
/// field lines to add.
pub fn simple_response(status: u16, head_method: bool, date: bool, server: Option<&[u8]>, extra: &[u8]) -> Vec<u8> {
    let body = reason(status);
    let mut out = Vec::with_capacity(160);
    push_status_line(&mut out, status);
    if date {
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(&http_date());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(s) = server {
        push_header(&mut out, b"server", s);
    }
    out.extend_from_slice(extra);
    out.extend_from_slice(b"content-type: text/plain; charset=utf-8\r\nconnection: close\r\ncontent-length: ");
    push_decimal(&mut out, body.len() as u64);
    out.extend_from_slice(b"\r\n\r\n");
    if !head_method {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(&format_date(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&format_date(951_782_400), b"Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(http_date().len(), 29);
    }

    #[test]
    fn framing() {
        let mut out = Vec::new();
        push_status_line(&mut out, 200);
        push_chunk_size(&mut out, 0x1a2);
        push_decimal(&mut out, 0);
        assert_eq!(out, b"HTTP/1.1 200 OK\r\n1a2\r\n0");
        assert!(!push_header(&mut out, b"x", b"a\r\nInjected: 1"));
        assert!(!push_header(&mut out, b"bad name", b"1"));
        assert!(simple_response(400, false, false, None, b"").ends_with(b"\r\n\r\nBad Request"));
        assert!(simple_response(400, true, false, None, b"").ends_with(b"content-length: 11\r\n\r\n"));
    }
}
