//! The client's opening handshake (RFC 6455 §4.1): the target URL, the
//! upgrade request, and the checks of the server's answer, which also tell
//! whether it agreed to permessage-deflate.

use tungstenite::handshake::derive_accept_key;

/// What the client offers: permessage-deflate as browsers do, letting the
/// server pick the client's window size.
pub const DEFLATE_OFFER: &str = "permessage-deflate; client_max_window_bits";

/// `ws://host:port/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub path: String,
}

pub fn parse_url(url: &str) -> Result<Target, String> {
    let rest = url.strip_prefix("ws://").ok_or_else(|| format!("not a ws:// URL: {url}"))?;
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, port.parse().map_err(|_| format!("bad port in {url}"))?),
        None => (authority, 80),
    };
    if host.is_empty() {
        return Err(format!("no host in {url}"));
    }
    Ok(Target { host: host.to_string(), port, path: path.to_string() })
}

/// The upgrade request for `target` with the client's `key`.
pub fn request(target: &Target, key: &str, offer_deflate: bool) -> Vec<u8> {
    let mut head = format!(
        "GET {} HTTP/1.1\r\nHost: {}:{}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n",
        target.path, target.host, target.port
    );
    if offer_deflate {
        head.push_str("Sec-WebSocket-Extensions: ");
        head.push_str(DEFLATE_OFFER);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// The accepted upgrade: the length of the response head and the
/// `Sec-WebSocket-Extensions` the server answered with (empty: none).
#[derive(Debug, PartialEq, Eq)]
pub struct Accepted {
    pub head_len: usize,
    pub extensions: String,
}

/// Check the response at the start of `buf` against the request's `key`;
/// `Ok(None)` while the head is incomplete. An error names what was wrong,
/// starting with "refused the upgrade" when the server answered but not 101.
pub fn parse_response(buf: &[u8], key: &str) -> Result<Option<Accepted>, String> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() > 16384 {
            return Err("response head over 16 KiB".into());
        }
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("101") {
        return Err(format!("refused the upgrade: {}", status.trim()));
    }
    let (mut upgrade, mut connection, mut accept) = (false, false, None);
    let mut extensions = Vec::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "upgrade" => upgrade |= value.eq_ignore_ascii_case("websocket"),
            "connection" => connection |= value.split(',').any(|token| token.trim().eq_ignore_ascii_case("upgrade")),
            "sec-websocket-accept" => accept = Some(value.to_string()),
            "sec-websocket-extensions" => extensions.push(value.to_string()),
            _ => {}
        }
    }
    if !upgrade || !connection {
        return Err("101 without Upgrade: websocket / Connection: Upgrade".into());
    }
    if accept.as_deref() != Some(derive_accept_key(key.as_bytes()).as_str()) {
        return Err("101 with a wrong Sec-WebSocket-Accept".into());
    }
    Ok(Some(Accepted { head_len: end + 4, extensions: extensions.join(", ") }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = parse_url("ws://127.0.0.1:8000/broadcast").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.path.as_str()), ("127.0.0.1", 8000, "/broadcast"));
        let t = parse_url("ws://localhost:9").unwrap();
        assert_eq!(t.path, "/");
        assert!(parse_url("http://x:1/").is_err());
        assert!(parse_url("ws://:1/").is_err());
    }

    #[test]
    fn responses() {
        // The example key and accept value of RFC 6455 §1.3.
        let key = "dGhlIHNhbXBsZSBub25jZQ==";
        let ok = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                   Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\
                   Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits=12\r\n\r\n\x81";
        let accepted = parse_response(ok, key).unwrap().unwrap();
        assert_eq!(accepted.head_len, ok.len() - 1);
        assert_eq!(accepted.extensions, "permessage-deflate; client_max_window_bits=12");
        assert_eq!(parse_response(&ok[..40], key).unwrap(), None);
        let refused = parse_response(b"HTTP/1.1 404 Not Found\r\n\r\n", key).unwrap_err();
        assert_eq!(refused, "refused the upgrade: HTTP/1.1 404 Not Found");
        let wrong = b"HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\
                      Sec-WebSocket-Accept: x\r\n\r\n";
        assert!(parse_response(wrong, key).is_err());
    }

    #[test]
    fn request_offers_deflate_only_when_asked() {
        let t = parse_url("ws://127.0.0.1:1/").unwrap();
        let plain = String::from_utf8(request(&t, "k", false)).unwrap();
        assert!(!plain.contains("Extensions"));
        let offered = String::from_utf8(request(&t, "k", true)).unwrap();
        assert!(offered.contains("Sec-WebSocket-Extensions: permessage-deflate"));
        assert!(offered.ends_with("\r\n\r\n"));
    }
}
