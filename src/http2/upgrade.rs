//! h2c by `Upgrade` (RFC 7540 §3.2): an HTTP/1.1 request with `Upgrade: h2c` and
//! `HTTP2-Settings` is answered `101`, then served as stream 1 of the HTTP/2 connection
//! that follows. `h2` has no upgrade API, so the request is given to it as the HEADERS
//! frame a client would have sent on stream 1, after the client's own preface and SETTINGS
//! (which the client sends once it reads the `101`): the response then follows the
//! settings the client actually sent. Only a request without a body is upgraded; one with
//! a body is served as HTTP/1.1, as RFC 7540 §3.2 allows.

use crate::http::parse::{list_items, Framing, Head};

/// The answer to an upgrade request.
pub const SWITCHING: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: h2c\r\n\r\n";

fn has_token(value: &[u8], token: &[u8]) -> bool {
    list_items(value).any(|t| t.eq_ignore_ascii_case(token))
}

/// Fields of an HTTP/1.1 request that an HTTP/2 request does not carry (RFC 9113 §8.2.2),
/// or that become pseudo-fields (`host`).
fn dropped(name: &[u8]) -> bool {
    [
        &b"connection"[..],
        b"upgrade",
        b"http2-settings",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"host",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

/// An HPACK integer with an `n`-bit prefix (RFC 7541 §5.1).
fn integer(out: &mut Vec<u8>, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A literal field without indexing, with a literal name (RFC 7541 §6.2.2): nothing goes
/// into the decoder's dynamic table.
fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0x00);
    integer(out, 0, 7, name.len());
    out.extend(name.iter().map(u8::to_ascii_lowercase));
    integer(out, 0, 7, value.len());
    out.extend_from_slice(value);
}

/// The frames of stream 1 for the upgrade request in `buf` (its `head`), if it asks for h2c
/// and has no body: HEADERS with END_STREAM, and CONTINUATION frames if the header block is
/// longer than `max_frame` bytes. A request whose header list is over `max_headers` (as RFC
/// 9113 §6.5.2 counts it) is not upgraded: HTTP/1.1's limits judge it, where HTTP/2's would
/// refuse it, and `h2` takes that many CONTINUATION frames for a flood.
pub fn stream_one(buf: &[u8], head: &Head, max_frame: usize, max_headers: usize) -> Option<Vec<u8>> {
    let field = |r: &std::ops::Range<usize>| buf.get(r.clone()).unwrap_or_default();
    let fields = || head.headers.iter().map(|(n, v)| (field(n), field(v)));
    fn values<'a>(
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        name: &'static [u8],
    ) -> impl Iterator<Item = &'a [u8]> {
        fields.filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }
    let named = |name: &'static [u8]| values(fields(), name);
    let upgrade = named(b"upgrade").any(|v| has_token(v, b"h2c"));
    let settings = named(b"http2-settings").count() == 1;
    let connection = named(b"connection").any(|v| has_token(v, b"http2-settings"));
    if !(upgrade && settings && connection && head.minor == 1 && matches!(head.framing, Framing::Length(0))) {
        return None;
    }
    let target = field(&head.target);
    if target.first() != Some(&b'/') && target != b"*" {
        return None;
    }
    let mut block = Vec::with_capacity(head.len);
    let mut list = 0;
    let mut add = |name: &[u8], value: &[u8]| {
        list += name.len() + value.len() + 32;
        literal(&mut block, name, value);
    };
    add(b":method", field(&head.method));
    add(b":scheme", b"http");
    add(b":path", target);
    if let Some(host) = named(b"host").next() {
        add(b":authority", host);
    }
    for (n, v) in fields() {
        if dropped(n) || (n.eq_ignore_ascii_case(b"te") && !v.trim_ascii().eq_ignore_ascii_case(b"trailers")) {
            continue;
        }
        add(n, v);
    }
    if list > max_headers {
        return None;
    }
    let mut out = Vec::with_capacity(block.len() + 18);
    let max_frame = max_frame.max(1);
    for (i, piece) in block.chunks(max_frame).enumerate() {
        let last = (i + 1) * max_frame >= block.len();
        let (kind, mut flags) = if i == 0 { (0x1, 0x1) } else { (0x9, 0x0) }; // HEADERS + END_STREAM, CONTINUATION
        if last {
            flags |= 0x4; // END_HEADERS
        }
        let len = piece.len() as u32;
        out.extend_from_slice(&len.to_be_bytes()[1..]);
        out.extend_from_slice(&[kind, flags, 0, 0, 0, 1]);
        out.extend_from_slice(piece);
    }
    Some(out)
}

/// Stream 1's frames if `head` (at the start of `buf`) is an h2c upgrade the server with
/// HTTP/2 `settings` takes (`stream_one`); None if it is served as HTTP/1.1.
pub fn taken(buf: &[u8], head: &Head, settings: &super::Settings) -> Option<Vec<u8>> {
    if !head.upgrade {
        return None;
    }
    stream_one(buf, head, settings.max_frame_size as usize, settings.max_headers_size as usize)
}

/// How many bytes of `buf` the client's preface and its first frame (its SETTINGS) take,
/// once they have all arrived; `Err` if `buf` does not start with the preface.
pub fn preface_and_settings(buf: &[u8]) -> Result<Option<usize>, ()> {
    match super::preface(buf) {
        super::Preface::No => return Err(()),
        super::Preface::Partial => return Ok(None),
        super::Preface::Whole => {}
    }
    let frame = &buf[super::PREFACE.len()..];
    if frame.len() < 9 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([0, frame[0], frame[1], frame[2]]) as usize;
    let end = super::PREFACE.len() + 9 + len;
    Ok((buf.len() >= end).then_some(end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse::{find_head_end, parse_head, Limits};

    fn head(raw: &[u8]) -> Head {
        let limits =
            Limits { request_line: 8190, header_size: 65536, field_size: 8190, header_count: 100, body_size: 1 << 30 };
        let end = find_head_end(raw, &limits).expect("valid").expect("complete");
        parse_head(raw, end, &limits).expect("valid")
    }

    #[test]
    fn integers_follow_rfc_7541_c1() {
        let mut out = Vec::new();
        integer(&mut out, 0, 5, 10);
        integer(&mut out, 0, 5, 1337);
        integer(&mut out, 0, 8, 42);
        assert_eq!(out, [10, 31, 154, 10, 42]);
    }

    #[test]
    fn only_a_bodiless_h2c_upgrade_is_taken() {
        let ok = b"GET /x?y=1 HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\nX-A: 1\r\n\r\n";
        let frames = stream_one(ok, &head(ok), 16384, 32768).expect("upgraded");
        assert_eq!(&frames[3..9], &[0x1, 0x5, 0, 0, 0, 1]);
        let no_settings = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
        assert!(stream_one(no_settings, &head(no_settings), 16384, 32768).is_none());
        let body = b"POST / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: \r\nContent-Length: 3\r\n\r\nabc";
        assert!(stream_one(body, &head(body), 16384, 32768).is_none());
        let websocket = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: websocket\r\nHTTP2-Settings: \r\n\r\n";
        assert!(stream_one(websocket, &head(websocket), 16384, 32768).is_none());
    }

    #[test]
    fn a_long_header_block_continues() {
        let long = "v".repeat(300);
        let raw = format!("GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: \r\nX-Long: {long}\r\n\r\n");
        let frames = stream_one(raw.as_bytes(), &head(raw.as_bytes()), 100, 32768).expect("upgraded");
        // Over the header list's limit: not upgraded.
        assert!(stream_one(raw.as_bytes(), &head(raw.as_bytes()), 100, 400).is_none());
        let mut kinds = Vec::new();
        let mut at = 0;
        while at < frames.len() {
            let len = u32::from_be_bytes([0, frames[at], frames[at + 1], frames[at + 2]]) as usize;
            kinds.push((frames[at + 3], frames[at + 4]));
            at += 9 + len;
        }
        assert_eq!(at, frames.len());
        assert_eq!(kinds.first(), Some(&(0x1, 0x1)));
        assert_eq!(kinds.last(), Some(&(0x9, 0x4)));
    }

    #[test]
    fn the_clients_preface_and_settings_are_waited_for() {
        let settings = [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100];
        let whole = [super::super::PREFACE, &settings[..], b"more"].concat();
        assert_eq!(preface_and_settings(&whole[..30]), Ok(None));
        assert_eq!(preface_and_settings(&whole), Ok(Some(24 + 15)));
        assert_eq!(preface_and_settings(b"GET / HTTP/1.1\r\n"), Err(()));
    }
}
