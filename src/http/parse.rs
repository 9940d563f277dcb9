//! HTTP/1.1 request parsing (RFC 9112): the head with `httparse` plus the checks httparse
//! leaves to the server (line endings, framing headers, Host), and a strict chunked body
//! decoder written here. Pure Rust, no Python: tested by `cargo test`.

use std::mem::MaybeUninit;
use std::ops::Range;

/// Why a request is refused; the response status follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    BadRequest(&'static str),
    UriTooLong,
    HeadersTooLarge,
    PayloadTooLarge,
    NotImplemented(&'static str),
    /// Over `--limit-concurrency`.
    Unavailable,
    /// An upgrade refused with `status`; `field` (a whole field line) names what the server
    /// speaks instead (RFC 9110 §15.5.22).
    Upgrade {
        status: u16,
        field: &'static [u8],
    },
}

impl Reject {
    pub fn status(&self) -> u16 {
        match self {
            Reject::BadRequest(_) => 400,
            Reject::UriTooLong => 414,
            Reject::HeadersTooLarge => 431,
            Reject::PayloadTooLarge => 413,
            Reject::NotImplemented(_) => 501,
            Reject::Unavailable => 503,
            Reject::Upgrade { status, .. } => *status,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest request line (method, target, version), without the CRLF.
    pub request_line: usize,
    /// Largest header section (all field lines), in bytes.
    pub header_size: usize,
    /// Longest field line (name, colon, value), without the CRLF.
    pub field_size: usize,
    /// Most header fields.
    pub header_count: usize,
    /// Largest body (declared or decoded), in bytes.
    pub body_size: u64,
}

/// How the request body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length(u64),
    Chunked,
}

/// A parsed request head; ranges index the buffer it was parsed from.
#[derive(Debug)]
pub struct Head {
    /// Bytes of the buffer the head took (including the empty line).
    pub len: usize,
    pub method: Range<usize>,
    pub target: Range<usize>,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    pub headers: Vec<(Range<usize>, Range<usize>)>,
    pub framing: Framing,
    pub keep_alive: bool,
    pub expect_continue: bool,
    /// The request has an `Upgrade` field: it may ask to switch protocols (RFC 9110 §7.8),
    /// which the interface decides.
    pub upgrade: bool,
}

const MAX_HEADERS: usize = 512;
/// Longest chunk-size line (size and extensions) accepted.
const MAX_CHUNK_LINE: usize = 4096;
/// Largest trailer section accepted.
const MAX_TRAILERS: usize = 16 * 1024;

fn bad(why: &'static str) -> Reject {
    Reject::BadRequest(why)
}

/// Where the head ends, if it is complete in `buf`, after checking every line ending seen:
/// RFC 9112 §2.2 allows a server to accept a bare LF, but a proxy in front may read the
/// message differently (request smuggling), so only CRLF is accepted. Limits are checked on
/// what has arrived so far (the request line's length, the fields' size and their count),
/// so a head sent in many small pieces is refused as early as a big one.
pub fn find_head_end(buf: &[u8], limits: &Limits) -> Result<Option<usize>, Reject> {
    let mut line_start = 0;
    let mut headers_start = 0;
    let mut first_line = true;
    let mut fields = 0;
    let mut i = 0;
    while i < buf.len() {
        match buf[i] {
            b'\r' => {
                if i + 1 == buf.len() {
                    break; // the LF may come with the next read
                }
                if buf[i + 1] != b'\n' {
                    return Err(bad("bare CR"));
                }
                if first_line && i > limits.request_line {
                    return Err(Reject::UriTooLong);
                }
                if i == line_start && !first_line {
                    if i + 2 - headers_start > limits.header_size + 2 {
                        return Err(Reject::HeadersTooLarge);
                    }
                    return Ok(Some(i + 2));
                }
                if first_line {
                    headers_start = i + 2;
                } else {
                    if i - line_start > limits.field_size {
                        return Err(Reject::HeadersTooLarge);
                    }
                    fields += 1;
                    if fields > limits.header_count {
                        return Err(Reject::HeadersTooLarge);
                    }
                }
                first_line = false;
                i += 2;
                line_start = i;
                continue;
            }
            b'\n' => return Err(bad("bare LF")),
            _ => {}
        }
        i += 1;
    }
    if first_line {
        if buf.len() > limits.request_line + 1 {
            return Err(Reject::UriTooLong);
        }
    } else {
        // The line so far, less a CR whose LF is still to come.
        let field = buf.len() - line_start - usize::from(buf.last() == Some(&b'\r'));
        if buf.len() - headers_start > limits.header_size + 2 || field > limits.field_size {
            return Err(Reject::HeadersTooLarge);
        }
    }
    Ok(None)
}

pub fn is_tchar(b: u8) -> bool {
    TCHAR[b as usize]
}

/// RFC 9110 §5.6.2's tchar, as a table: every byte of every header name is checked.
static TCHAR: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        table[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
            );
        i += 1;
    }
    table
};

/// field-value bytes: HTAB, SP, VCHAR and obs-text; no other control byte (NUL, BEL, DEL…).
pub fn is_value_byte(b: u8) -> bool {
    b == b'\t' || (0x20..0x7f).contains(&b) || b >= 0x80
}

fn trim_ows(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|&b| b != b' ' && b != b'\t').unwrap_or(v.len());
    let end = v.iter().rposition(|&b| b != b' ' && b != b'\t').map_or(start, |e| e + 1);
    &v[start..end]
}

/// Content-Length = 1*DIGIT: no sign, no separators, no list.
fn parse_length(v: &[u8]) -> Result<u64, Reject> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return Err(bad("invalid Content-Length"));
    }
    // 1*DIGIT: leading zeros are allowed, a value past u64 is not.
    v.iter()
        .try_fold(0u64, |n, d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
        .ok_or(bad("invalid Content-Length"))
}

/// RFC 3986 §2.3 and §2.2: an unreserved character or a sub-delim.
pub fn is_unreserved_or_sub_delim(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b)
}

/// A byte of a reg-name: unreserved, sub-delims, or the `%` of pct-encoded.
fn is_host_char(b: u8) -> bool {
    is_unreserved_or_sub_delim(b) || b == b'%'
}

/// `Host = uri-host [ ":" port ]` (RFC 9112 §3.2, RFC 3986 §3.2.2): a reg-name or IPv4
/// address, or an IP literal in brackets, then an optional port of digits. Empty is valid.
fn valid_host(v: &[u8]) -> bool {
    host_and_port(v).is_some()
}

/// A valid `Host` value (see `valid_host`) split into its host (an IP literal with its
/// brackets) and its port's digits (empty when it has none).
pub fn host_and_port(v: &[u8]) -> Option<(&[u8], &[u8])> {
    let (host, port) = if v.first() == Some(&b'[') {
        let close = v.iter().position(|&b| b == b']')?;
        let inner = &v[1..close];
        if inner.is_empty() || !inner.iter().all(|&b| is_host_char(b) || b == b':') {
            return None;
        }
        (&v[..=close], &v[close + 1..])
    } else {
        let (host, port) = match v.iter().position(|&b| b == b':') {
            Some(i) => (&v[..i], &v[i..]),
            None => (v, &v[v.len()..]),
        };
        if !host.iter().all(|&b| is_host_char(b)) {
            return None;
        }
        (host, port)
    };
    match port.split_first() {
        None => Some((host, port)),
        Some((b':', digits)) if digits.iter().all(u8::is_ascii_digit) => Some((host, digits)),
        Some(_) => None,
    }
}

/// (authority, path and query) of an absolute-form target
/// (`http://authority/path?query`, RFC 9112 §3.2.2), or None for the other forms.
pub fn absolute_form(target: &[u8]) -> Option<(&[u8], &[u8])> {
    let scheme = |s: &[u8]| target.get(..s.len()).is_some_and(|t| t.eq_ignore_ascii_case(s));
    let rest = if scheme(b"http://") {
        target.get(7..)?
    } else if scheme(b"https://") {
        target.get(8..)?
    } else {
        return None;
    };
    let end = rest.iter().position(|&b| b == b'/' || b == b'?').unwrap_or(rest.len());
    Some(rest.split_at(end))
}

fn offset(buf: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    start..start + part.len()
}

/// Comma-separated list members with surrounding whitespace trimmed.
pub fn list_items(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&b| b == b',').map(trim_ows)
}

/// Parse the head `buf[..end]` (as found by `find_head_end`) and apply RFC 9112's rules.
pub fn parse_head(buf: &[u8], end: usize, limits: &Limits) -> Result<Head, Reject> {
    let head = &buf[..end];
    let mut storage = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
    let cap = (limits.header_count + 1).min(MAX_HEADERS);
    let mut req = httparse::Request::new(&mut []);
    let status = req.parse_with_uninit_headers(head, &mut storage[..cap]);
    match status {
        Ok(httparse::Status::Complete(n)) if n == end => {}
        Ok(_) => return Err(bad("malformed head")),
        Err(httparse::Error::TooManyHeaders) => return Err(Reject::HeadersTooLarge),
        Err(httparse::Error::Version) => return Err(bad("invalid HTTP version")),
        Err(httparse::Error::Token) => return Err(bad("invalid method")),
        Err(_) => return Err(bad("malformed head")),
    }
    if req.headers.len() > limits.header_count {
        return Err(Reject::HeadersTooLarge);
    }
    let method = req.method.ok_or(bad("no method"))?;
    let path = req.path.ok_or(bad("no target"))?;
    let minor = req.version.ok_or(bad("no version"))?;
    // Visible ASCII, and no fragment: `#` has no place in a request target (RFC 9112 §3.2).
    if !path.bytes().all(|b| (0x21..0x7f).contains(&b) && b != b'#') {
        return Err(bad("invalid target"));
    }
    if minor > 1 {
        return Err(bad("invalid HTTP version"));
    }
    let mut headers = Vec::with_capacity(req.headers.len());
    let mut length: Option<u64> = None;
    let mut te_seen = false;
    let mut chunked = false;
    let mut te_last_chunked = false;
    let mut other_coding = false;
    let mut hosts = 0;
    let mut host_field = None;
    let mut content_type = false;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    let mut upgrade = false;
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err(bad("invalid header name"));
        }
        if !h.value.iter().all(|&b| is_value_byte(b)) {
            return Err(bad("invalid header value"));
        }
        let value = trim_ows(h.value);
        headers.push((offset(buf, name), offset(buf, value)));
        if name.eq_ignore_ascii_case(b"content-length") {
            if length.is_some() {
                return Err(bad("duplicate Content-Length"));
            }
            length = Some(parse_length(value)?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            te_seen = true;
            for coding in list_items(value) {
                if coding.is_empty() {
                    return Err(bad("empty transfer coding"));
                }
                if chunked {
                    // chunked must be the final coding, applied once (RFC 9112 §6.1)
                    return Err(bad("chunked is not the last transfer coding"));
                }
                if coding.eq_ignore_ascii_case(b"chunked") {
                    chunked = true;
                    te_last_chunked = true;
                } else if !coding.iter().all(|&b| is_tchar(b) || b == b';' || b == b'=' || b == b' ') {
                    return Err(bad("invalid transfer coding"));
                } else {
                    te_last_chunked = false;
                    other_coding = true;
                }
            }
        } else if name.eq_ignore_ascii_case(b"host") {
            hosts += 1;
            if hosts > 1 {
                return Err(bad("duplicate Host"));
            }
            host_field = Some(headers.len() - 1);
            if !valid_host(value) {
                return Err(bad("invalid Host"));
            }
        } else if name.eq_ignore_ascii_case(b"content-type") {
            // Two media types for one body: the app and a proxy in front may each take a
            // different one (gunicorn and nginx refuse it too).
            if std::mem::replace(&mut content_type, true) {
                return Err(bad("duplicate Content-Type"));
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in list_items(value) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive_token = true;
                }
            }
        } else if name.eq_ignore_ascii_case(b"expect") {
            expect_continue = value.eq_ignore_ascii_case(b"100-continue");
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            upgrade = true;
        }
    }
    if minor == 1 && hosts == 0 {
        return Err(bad("missing Host"));
    }
    if let Some((authority, _)) = absolute_form(path.as_bytes()) {
        // An http(s) URI has a host, and no userinfo (RFC 9110 §4.2.1, §4.2.4).
        if authority.is_empty() || !valid_host(authority) {
            return Err(bad("invalid target"));
        }
        // The origin server takes the host from the target and ignores the Host field
        // (RFC 9112 §3.2.2): every interface then sees the target's host as the field's
        // value. An HTTP/1.0 request without the field gets none (its name is nowhere in
        // the buffer); its app falls back on the server's address, as for any 1.0 request.
        if let Some(i) = host_field {
            if let Some(field) = headers.get_mut(i) {
                field.1 = offset(buf, authority);
            }
        }
    }
    let framing = if te_seen {
        if length.is_some() {
            return Err(bad("Content-Length with Transfer-Encoding"));
        }
        if minor == 0 {
            return Err(bad("Transfer-Encoding on HTTP/1.0"));
        }
        if !te_last_chunked {
            // Another coding alone could only be delimited by closing, which a request cannot do.
            if chunked {
                return Err(bad("chunked is not the last transfer coding"));
            }
            return Err(Reject::NotImplemented("unsupported transfer coding"));
        }
        if other_coding {
            // The server does not decode gzip & co: the app would get coded bytes.
            return Err(Reject::NotImplemented("unsupported transfer coding"));
        }
        Framing::Chunked
    } else {
        let n = length.unwrap_or(0);
        if n > limits.body_size {
            return Err(Reject::PayloadTooLarge);
        }
        Framing::Length(n)
    };
    let keep_alive = if minor == 1 { !close } else { keep_alive_token && !close };
    Ok(Head {
        len: end,
        method: offset(buf, method.as_bytes()),
        target: offset(buf, path.as_bytes()),
        minor,
        headers,
        framing,
        keep_alive,
        expect_continue: expect_continue && minor == 1,
        upgrade,
    })
}

/// Trailer fields a sender must not put in trailers (RFC 9110 §6.5.1): framing, routing,
/// request modifiers, authentication and content metadata. A server that merged them into
/// the request headers would let the trailer override what was checked in the head.
const FORBIDDEN_TRAILERS: &[&[u8]] = &[
    b"host",
    b"content-length",
    b"transfer-encoding",
    b"trailer",
    b"te",
    b"connection",
    b"keep-alive",
    b"upgrade",
    b"proxy-connection",
    b"expect",
    b"max-forwards",
    b"range",
    b"if-match",
    b"if-none-match",
    b"if-modified-since",
    b"if-unmodified-since",
    b"if-range",
    b"cache-control",
    b"pragma",
    b"authorization",
    b"proxy-authorization",
    b"cookie",
    b"set-cookie",
    b"content-type",
    b"content-encoding",
    b"content-range",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    Size,
    Data,
    DataEnd,
    Trailers,
    Done,
}

/// Decodes a chunked body incrementally; `feed` takes what it can from the input.
#[derive(Debug)]
pub struct ChunkedDecoder {
    state: ChunkState,
    remaining: u64,
    total: u64,
    trailer_bytes: usize,
    limit: u64,
}

impl ChunkedDecoder {
    pub fn new(limit: u64) -> Self {
        ChunkedDecoder { state: ChunkState::Size, remaining: 0, total: 0, trailer_bytes: 0, limit }
    }

    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decode from `input`, appending body bytes to `out`; returns how many input bytes were
    /// consumed (the rest is an incomplete line, or belongs to the next request once done).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, Reject> {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            match self.state {
                ChunkState::Done => return Ok(pos),
                ChunkState::Size => {
                    let Some(line) = take_line(rest, MAX_CHUNK_LINE)? else { return Ok(pos) };
                    let size = parse_chunk_size(&rest[..line])?;
                    pos += line + 2;
                    self.total = self.total.checked_add(size).ok_or(Reject::PayloadTooLarge)?;
                    if self.total > self.limit {
                        return Err(Reject::PayloadTooLarge);
                    }
                    self.remaining = size;
                    self.state = if size == 0 { ChunkState::Trailers } else { ChunkState::Data };
                }
                ChunkState::Data => {
                    if rest.is_empty() {
                        return Ok(pos);
                    }
                    let n = rest.len().min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                    out.extend_from_slice(&rest[..n]);
                    pos += n;
                    self.remaining -= n as u64;
                    if self.remaining == 0 {
                        self.state = ChunkState::DataEnd;
                    }
                }
                ChunkState::DataEnd => {
                    if rest.len() < 2 {
                        if rest.first().is_some_and(|&b| b != b'\r') {
                            return Err(bad("chunk data not followed by CRLF"));
                        }
                        return Ok(pos);
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(bad("chunk data not followed by CRLF"));
                    }
                    pos += 2;
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    let Some(line) = take_line(rest, MAX_TRAILERS)? else { return Ok(pos) };
                    self.trailer_bytes += line + 2;
                    if self.trailer_bytes > MAX_TRAILERS {
                        return Err(bad("trailer section too large"));
                    }
                    check_trailer(&rest[..line])?;
                    pos += line + 2;
                    if line == 0 {
                        self.state = ChunkState::Done;
                    }
                }
            }
        }
    }
}

/// The length of the CRLF-terminated line at the start of `input`, or None if incomplete.
fn take_line(input: &[u8], max: usize) -> Result<Option<usize>, Reject> {
    for (i, &b) in input.iter().enumerate() {
        match b {
            b'\r' => {
                return match input.get(i + 1) {
                    None => Ok(None),
                    Some(b'\n') => Ok(Some(i)),
                    Some(_) => Err(bad("bare CR in chunked body")),
                };
            }
            b'\n' => return Err(bad("bare LF in chunked body")),
            _ if i >= max => return Err(bad("chunk line too long")),
            _ => {}
        }
    }
    if input.len() > max {
        return Err(bad("chunk line too long"));
    }
    Ok(None)
}

/// chunk-size [ chunk-ext ]: 1*HEXDIG, then only `BWS ";" ...` extensions (ignored).
fn parse_chunk_size(line: &[u8]) -> Result<u64, Reject> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(bad("invalid chunk size"));
    }
    let hex = &line[..digits];
    let significant = hex.iter().skip_while(|&&b| b == b'0').count();
    if significant > 16 {
        return Err(Reject::PayloadTooLarge);
    }
    let mut size = 0u64;
    for &d in hex {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            _ => d - b'A' + 10,
        };
        size = (size << 4) | u64::from(v);
    }
    let ext = &line[digits..];
    if !ext.is_empty() {
        let after_ws = ext.iter().position(|&b| b != b' ' && b != b'\t').map(|i| &ext[i..]);
        match after_ws {
            Some(e) if e[0] == b';' => {
                if !e.iter().all(|&b| is_value_byte(b)) {
                    return Err(bad("invalid chunk extension"));
                }
            }
            _ => return Err(bad("invalid chunk size")),
        }
    }
    Ok(size)
}

/// A field a trailer section must not carry (RFC 9110 §6.5.1), in a request or a response.
pub fn forbidden_trailer(name: &[u8]) -> bool {
    FORBIDDEN_TRAILERS.iter().any(|f| name.eq_ignore_ascii_case(f))
}

fn check_trailer(line: &[u8]) -> Result<(), Reject> {
    if line.is_empty() {
        return Ok(());
    }
    let colon = line.iter().position(|&b| b == b':').ok_or(bad("invalid trailer field"))?;
    let name = &line[..colon];
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(bad("invalid trailer field name"));
    }
    if !line[colon + 1..].iter().all(|&b| is_value_byte(b)) {
        return Err(bad("invalid trailer field value"));
    }
    if forbidden_trailer(name) {
        return Err(bad("forbidden trailer field"));
    }
    Ok(())
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
