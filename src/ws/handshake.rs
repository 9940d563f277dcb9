//! The opening handshake's pure part (RFC 6455 §4.2): deciding from a request head whether it
//! asks for a WebSocket and whether it asks correctly, and writing the response head — the
//! `101 Switching Protocols` that accepts, or the 400/426 that refuses.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha1::{Digest, Sha1};
use std::fmt;

/// RFC 6455 §1.3: appended to the client's key before hashing it.
const ACCEPT_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// What a request head asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upgrade<'a> {
    /// No `Upgrade: websocket`: an ordinary HTTP request.
    NotWebSocket,
    /// A well-formed WebSocket opening handshake.
    Valid(UpgradeRequest<'a>),
    /// A WebSocket handshake that must be refused with this status.
    Refused(Refusal),
}

/// The parts of a valid opening handshake the server answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeRequest<'a> {
    /// `Sec-WebSocket-Key`, whitespace trimmed (base64 of 16 bytes), for `accept_key`.
    pub key: &'a [u8],
    /// The offered subprotocols in order, from every `Sec-WebSocket-Protocol` field.
    pub subprotocols: Vec<String>,
    /// The raw `Sec-WebSocket-Extensions` values, one per field line, for the extension
    /// negotiation to parse.
    pub extensions: Vec<&'a [u8]>,
}

/// Why a WebSocket handshake is refused: 400 for a malformed one, 426 for a version other
/// than 13 (answered with `Sec-WebSocket-Version: 13`, RFC 6455 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub reason: &'static str,
}

const fn bad_request(reason: &'static str) -> Upgrade<'static> {
    Upgrade::Refused(Refusal { status: 400, reason })
}

/// OWS (RFC 9110 §5.6.3) trimmed off both ends.
fn trim(value: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !is_ows(b)).unwrap_or(value.len());
    let end = value.iter().rposition(|b| !is_ows(b)).map_or(start, |i| i + 1);
    value.get(start..end).unwrap_or_default()
}

/// The elements of a comma-separated list field value, trimmed; empty elements are skipped
/// as RFC 9110 §5.6.1 asks of recipients.
fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(trim).filter(|e| !e.is_empty())
}

/// RFC 9110 §5.6.2 `token`.
fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether `key` is base64 of exactly 16 bytes (RFC 6455 §4.2.1 item 5).
fn valid_key(key: &[u8]) -> bool {
    key.len() == 24 && STANDARD.decode(key).is_ok_and(|nonce| nonce.len() == 16)
}

/// The handshake's fields of a request head, gathered.
#[derive(Default)]
struct Fields<'a> {
    wants_websocket: bool,
    connection_upgrade: bool,
    keys: Vec<&'a [u8]>,
    versions: Vec<&'a [u8]>,
    protocols: Vec<&'a [u8]>,
    extensions: Vec<&'a [u8]>,
}

impl<'a> Fields<'a> {
    fn of<I>(headers: I) -> Fields<'a>
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
    {
        let mut f = Fields::default();
        for (name, value) in headers {
            if name.eq_ignore_ascii_case(b"upgrade") {
                f.wants_websocket |= list_elements(value).any(|t| t.eq_ignore_ascii_case(b"websocket"));
            } else if name.eq_ignore_ascii_case(b"connection") {
                f.connection_upgrade |= list_elements(value).any(|t| t.eq_ignore_ascii_case(b"upgrade"));
            } else if name.eq_ignore_ascii_case(b"sec-websocket-key") {
                f.keys.push(trim(value));
            } else if name.eq_ignore_ascii_case(b"sec-websocket-version") {
                f.versions.extend(list_elements(value));
            } else if name.eq_ignore_ascii_case(b"sec-websocket-protocol") {
                f.protocols.extend(list_elements(value));
            } else if name.eq_ignore_ascii_case(b"sec-websocket-extensions") {
                f.extensions.push(value);
            }
        }
        f
    }

    /// The checks both forms of the handshake share: version 13, token subprotocols.
    fn request(self, key: &'a [u8]) -> Upgrade<'a> {
        if !matches!(self.versions[..], [version] if version == b"13") {
            return Upgrade::Refused(Refusal { status: 426, reason: "unsupported WebSocket version (13 is)" });
        }
        if !self.protocols.iter().all(|p| is_token(p)) {
            return bad_request("invalid Sec-WebSocket-Protocol");
        }
        let subprotocols = self.protocols.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect();
        Upgrade::Valid(UpgradeRequest { key, subprotocols, extensions: self.extensions })
    }
}

/// Decide what a request head asks for. `method` and `http_minor` (0 for HTTP/1.0) come from
/// the request line; `headers` are its (name, value) field lines in order. Only a request
/// with `websocket` among its `Upgrade` tokens is a WebSocket handshake; it is then refused
/// with 400 unless it is a GET over HTTP/1.1 or later with `upgrade` among its `Connection`
/// tokens and exactly one valid `Sec-WebSocket-Key`, and with 426 unless its
/// `Sec-WebSocket-Version` is 13. Field names, and the `Upgrade` and `Connection` tokens,
/// are compared ignoring case.
pub fn check_upgrade<'a, I>(method: &[u8], http_minor: u8, headers: I) -> Upgrade<'a>
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    let f = Fields::of(headers);
    if !f.wants_websocket {
        return Upgrade::NotWebSocket;
    }
    if method != b"GET" {
        return bad_request("a WebSocket handshake must be a GET request");
    }
    if http_minor < 1 {
        return bad_request("a WebSocket handshake needs HTTP/1.1");
    }
    if !f.connection_upgrade {
        return bad_request("the Connection header lacks the upgrade token");
    }
    if !matches!(f.versions[..], [version] if version == b"13") {
        return Upgrade::Refused(Refusal { status: 426, reason: "unsupported WebSocket version (13 is)" });
    }
    let key = match f.keys[..] {
        [key] if valid_key(key) => key,
        [] => return bad_request("missing Sec-WebSocket-Key"),
        _ => return bad_request("invalid Sec-WebSocket-Key"),
    };
    f.request(key)
}

/// The same decision for an HTTP/2 extended CONNECT (RFC 8441 §4-5), given its
/// `:protocol`: a WebSocket handshake if that is `websocket`, with no key (nor `Upgrade`
/// and `Connection` fields, which HTTP/2 does not have); the version and subprotocols
/// are checked as in HTTP/1.1. The `key` of a valid one is empty.
pub fn check_connect<'a, I>(protocol: &[u8], headers: I) -> Upgrade<'a>
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    if !protocol.eq_ignore_ascii_case(b"websocket") {
        return Upgrade::NotWebSocket;
    }
    Fields::of(headers).request(b"")
}

/// `check_upgrade` for an HTTP/1.x request, `check_connect` for an HTTP/2 extended
/// CONNECT (`connect_protocol`: its `:protocol`).
pub fn check_handshake<'a, I>(method: &[u8], http_minor: u8, connect_protocol: Option<&str>, headers: I) -> Upgrade<'a>
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    match connect_protocol {
        Some(protocol) => check_connect(protocol.as_bytes(), headers),
        None => check_upgrade(method, http_minor, headers),
    }
}

/// `Sec-WebSocket-Accept` for a client's key: base64 of the SHA-1 of the key and the GUID.
pub fn accept_key(key: &[u8]) -> String {
    let mut sha1 = Sha1::new();
    sha1.update(key);
    sha1.update(ACCEPT_GUID);
    STANDARD.encode(sha1.finalize())
}

/// A response header the accepting server cannot send as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderError {
    /// The offending field's name (for a bad subprotocol: `sec-websocket-protocol`).
    pub name: Vec<u8>,
    pub reason: &'static str,
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "header {:?}: {}", String::from_utf8_lossy(&self.name), self.reason)
    }
}

impl std::error::Error for HeaderError {}

/// Fields the server writes itself or that a 101 must not carry (RFC 9110 §8.6, RFC 9112
/// §6.1: no Content-Length or Transfer-Encoding on a 1xx); an app header naming one is an error.
const SERVER_OWNED_HEADERS: [&[u8]; 6] = [
    b"upgrade",
    b"connection",
    b"sec-websocket-accept",
    b"sec-websocket-extensions",
    b"content-length",
    b"transfer-encoding",
];

fn header_error(name: &[u8], reason: &'static str) -> HeaderError {
    HeaderError { name: name.to_vec(), reason }
}

/// A field value may not break the head: no CR, LF or NUL.
fn valid_value(value: &[u8]) -> bool {
    !value.iter().any(|&b| matches!(b, b'\r' | b'\n' | 0))
}

fn write_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Append the `101 Switching Protocols` head accepting a handshake. `accept`: from
/// `accept_key`; `subprotocol`: the one chosen (a token); `extensions`: the negotiated
/// `Sec-WebSocket-Extensions` response value; `app_headers`: the app's extra fields, in
/// order. App fields must be valid tokens with values free of CR, LF and NUL, and must not
/// be one the server owns (`upgrade`, `connection`, `sec-websocket-accept`,
/// `sec-websocket-extensions`, `content-length`, `transfer-encoding`). An app's own
/// `sec-websocket-protocol` field (the ASGI spec says to use `subprotocol` instead, but
/// apps do send it) is accepted only when `subprotocol` is `None`, only once, and only as a
/// token. On error nothing is appended.
pub fn write_accept(
    out: &mut Vec<u8>,
    accept: &str,
    subprotocol: Option<&str>,
    extensions: Option<&str>,
    app_headers: &[(&[u8], &[u8])],
) -> Result<(), HeaderError> {
    check_accept(subprotocol, extensions, app_headers)?;
    out.extend_from_slice(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n");
    write_field(out, b"Sec-WebSocket-Accept", accept.as_bytes());
    if let Some(protocol) = subprotocol {
        write_field(out, b"Sec-WebSocket-Protocol", protocol.as_bytes());
    }
    if let Some(extensions) = extensions {
        write_field(out, b"Sec-WebSocket-Extensions", extensions.as_bytes());
    }
    for &(name, value) in app_headers {
        write_field(out, name, value);
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// The checks `write_accept` makes of what the application gives, for a handshake
/// accepted in any version of HTTP (over HTTP/2 the answer is a `200`, RFC 8441 §5).
pub fn check_accept(
    subprotocol: Option<&str>,
    extensions: Option<&str>,
    app_headers: &[(&[u8], &[u8])],
) -> Result<(), HeaderError> {
    if subprotocol.is_some_and(|p| !is_token(p.as_bytes())) {
        return Err(header_error(b"sec-websocket-protocol", "the subprotocol is not a token"));
    }
    if extensions.is_some_and(|e| !valid_value(e.as_bytes())) {
        return Err(header_error(b"sec-websocket-extensions", "invalid character in the value"));
    }
    let mut protocol_fields = usize::from(subprotocol.is_some());
    for &(name, value) in app_headers {
        if !is_token(name) {
            return Err(header_error(name, "the name is not a token"));
        }
        if !valid_value(value) {
            return Err(header_error(name, "CR, LF or NUL in the value"));
        }
        if SERVER_OWNED_HEADERS.iter().any(|owned| name.eq_ignore_ascii_case(owned)) {
            return Err(header_error(name, "the server sets this header itself"));
        }
        if name.eq_ignore_ascii_case(b"sec-websocket-protocol") {
            protocol_fields += 1;
            if protocol_fields > 1 {
                return Err(header_error(name, "more than one subprotocol chosen"));
            }
            if !is_token(trim(value)) {
                return Err(header_error(name, "the subprotocol is not a token"));
            }
        }
    }
    Ok(())
}

/// The fields a refusal adds to the server's plain-text error response: a 426 names the
/// version spoken (RFC 6455 §4.4) and, as RFC 9110 §15.5.22 requires, the protocol to
/// upgrade to.
pub fn refusal_fields(refusal: &Refusal) -> &'static [u8] {
    match refusal.status {
        426 => b"sec-websocket-version: 13\r\nupgrade: websocket\r\n",
        _ => b"",
    }
}

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;
