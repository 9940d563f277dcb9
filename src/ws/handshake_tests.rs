//! Opening-handshake checks: which requests are upgrades, which are refused and how, the
//! accept key, and the response heads.

use super::*;

const KEY: &[u8] = b"dGhlIHNhbXBsZSBub25jZQ==";

/// The RFC 6455 §1.3 example request's fields less those named in `drop`, plus `extra`.
fn without<'a>(drop: &[&str], extra: &[(&'a str, &'a str)]) -> Vec<(&'a [u8], &'a [u8])> {
    let mut all: Vec<(&[u8], &[u8])> = vec![
        (b"Host", b"server.example.com"),
        (b"Upgrade", b"websocket"),
        (b"Connection", b"Upgrade"),
        (b"Sec-WebSocket-Key", KEY),
        (b"Sec-WebSocket-Version", b"13"),
    ];
    all.retain(|(n, _)| !drop.iter().any(|d| n.eq_ignore_ascii_case(d.as_bytes())));
    all.extend(extra.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
    all
}

/// The example request's fields plus `extra`.
fn fields<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a [u8], &'a [u8])> {
    without(&[], extra)
}

fn check<'a>(headers: Vec<(&'a [u8], &'a [u8])>) -> Upgrade<'a> {
    check_upgrade(b"GET", 1, headers)
}

fn status(upgrade: Upgrade<'_>) -> u16 {
    match upgrade {
        Upgrade::Refused(refusal) => refusal.status,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn rfc_example_key() {
    assert_eq!(accept_key(KEY), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

#[test]
fn accepts_the_rfc_example() {
    let Upgrade::Valid(request) = check(fields(&[])) else { panic!("not valid") };
    assert_eq!(request.key, KEY);
    assert!(request.subprotocols.is_empty());
    assert!(request.extensions.is_empty());
}

#[test]
fn names_and_tokens_ignore_case_and_lists_are_split() {
    let headers = without(
        &["upgrade", "connection"],
        &[("UPGRADE", "h2c, WebSocket"), ("connection", "keep-alive,  upgrade "), ("sec-websocket-key", " x ")],
    );
    // The extra key makes two: refused, which shows the lower-case name was seen as the key field.
    assert_eq!(status(check(headers.clone())), 400);
    let headers: Vec<_> = headers.into_iter().filter(|(n, _)| *n != b"sec-websocket-key").collect();
    assert!(matches!(check(headers), Upgrade::Valid(_)));
}

#[test]
fn collects_subprotocols_and_extensions() {
    let headers = fields(&[
        ("Sec-WebSocket-Protocol", "chat, superchat"),
        ("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits"),
        ("sec-websocket-protocol", " v2.json ,, "),
        ("Sec-WebSocket-Extensions", "x-other"),
    ]);
    let Upgrade::Valid(request) = check(headers) else { panic!("not valid") };
    assert_eq!(request.subprotocols, ["chat", "superchat", "v2.json"]);
    assert_eq!(request.extensions, [&b"permessage-deflate; client_max_window_bits"[..], b"x-other"]);
}

#[test]
fn plain_requests_are_not_websocket() {
    assert_eq!(check(without(&["upgrade"], &[])), Upgrade::NotWebSocket);
    assert_eq!(check(without(&["upgrade"], &[("Upgrade", "h2c")])), Upgrade::NotWebSocket);
    assert_eq!(check(without(&["upgrade"], &[("Upgrade", "websocketx")])), Upgrade::NotWebSocket);
    assert_eq!(check_upgrade(b"POST", 0, without(&["upgrade"], &[])), Upgrade::NotWebSocket);
}

#[test]
fn malformed_upgrades_get_400() {
    assert_eq!(status(check_upgrade(b"POST", 1, fields(&[]))), 400);
    assert_eq!(status(check_upgrade(b"get", 1, fields(&[]))), 400);
    assert_eq!(status(check_upgrade(b"GET", 0, fields(&[]))), 400);
    assert_eq!(status(check(without(&["connection"], &[]))), 400);
    assert_eq!(status(check(without(&["connection"], &[("Connection", "keep-alive")]))), 400);
    assert_eq!(status(check(without(&["sec-websocket-key"], &[]))), 400);
    assert_eq!(status(check(fields(&[("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")]))), 400);
    for bad_key in [
        "",
        "dGhlIHNhbXBsZSBub25jZQ",     // unpadded
        "dGhlIHNhbXBsZSBub25jZQ=",    // badly padded
        "dGhlIHNhbXBsZSBub25jZQ==AA", // too long
        "dGhlIHNhbXBsZSBub25jZR==",   // non-canonical trailing bits
        "dGhlIHNhbXBsZSBub25j*Q==",   // not base64
        "dGhlIHNhbXBsZSBub25jZS4u",   // base64 of 18 bytes
    ] {
        let headers = without(&["sec-websocket-key"], &[("Sec-WebSocket-Key", bad_key)]);
        assert_eq!(status(check(headers)), 400, "key {bad_key:?}");
    }
    let bad_protocol = fields(&[("Sec-WebSocket-Protocol", "chat, sup er")]);
    assert_eq!(status(check(bad_protocol)), 400);
}

#[test]
fn other_versions_get_426() {
    assert_eq!(status(check(without(&["sec-websocket-version"], &[]))), 426);
    for version in ["8", "12", "13, 8", "", "013"] {
        let headers = without(&["sec-websocket-version"], &[("Sec-WebSocket-Version", version)]);
        assert_eq!(status(check(headers)), 426, "version {version:?}");
    }
    let twice = fields(&[("Sec-WebSocket-Version", "13")]);
    assert_eq!(status(check(twice)), 426);
    let spaced = without(&["sec-websocket-version"], &[("Sec-WebSocket-Version", " 13 ")]);
    assert!(matches!(check(spaced), Upgrade::Valid(_)));
}

fn accept_head(
    subprotocol: Option<&str>,
    extensions: Option<&str>,
    app: &[(&[u8], &[u8])],
) -> Result<String, HeaderError> {
    let mut out = b"before|".to_vec();
    let result = write_accept(&mut out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", subprotocol, extensions, app);
    if result.is_err() {
        assert_eq!(out, b"before|", "nothing appended on error");
    }
    result.map(|()| String::from_utf8(out).unwrap())
}

#[test]
fn writes_the_101_head() {
    let head = accept_head(Some("chat"), Some("permessage-deflate"), &[(b"x-app", b"1"), (b"set-cookie", b"a=b")]);
    assert_eq!(
        head.unwrap(),
        "before|HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-WebSocket-Protocol: chat\r\n\
         Sec-WebSocket-Extensions: permessage-deflate\r\nx-app: 1\r\nset-cookie: a=b\r\n\r\n"
    );
    let bare = accept_head(None, None, &[]).unwrap();
    assert!(bare.ends_with("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"));
}

#[test]
fn app_subprotocol_header_at_most_once() {
    let app_only = accept_head(None, None, &[(b"sec-websocket-protocol", b"chat")]).unwrap();
    assert_eq!(app_only.matches("ec-websocket-protocol").count(), 1);
    let both = accept_head(Some("chat"), None, &[(b"Sec-WebSocket-Protocol", b"chat")]);
    assert_eq!(both.unwrap_err().reason, "more than one subprotocol chosen");
    let twice = accept_head(None, None, &[(b"sec-websocket-protocol", b"a"), (b"sec-websocket-protocol", b"b")]);
    assert!(twice.is_err());
    assert!(accept_head(None, None, &[(b"sec-websocket-protocol", b"a b")]).is_err());
    assert!(accept_head(Some("a,b"), None, &[]).is_err());
}

#[test]
fn refuses_bad_or_server_owned_app_headers() {
    for name in ["upgrade", "Connection", "sec-websocket-accept", "sec-websocket-extensions", "content-length"] {
        let err = accept_head(None, None, &[(name.as_bytes(), b"x")]).unwrap_err();
        assert_eq!(err.name, name.as_bytes());
    }
    for (name, value) in
        [(&b"bad name"[..], &b"v"[..]), (b"", b"v"), (b"x-a", b"1\r\nx: y"), (b"x-a", b"a\nb"), (b"x-a", b"\0")]
    {
        assert!(accept_head(None, None, &[(name, value)]).is_err(), "{name:?}: {value:?}");
    }
    assert!(accept_head(None, Some("permessage-deflate\r\nx: y"), &[]).is_err());
}

#[test]
fn refusal_fields_name_the_version() {
    let fields = refusal_fields(&Refusal { status: 426, reason: "unsupported" });
    assert_eq!(fields, b"sec-websocket-version: 13\r\nupgrade: websocket\r\n");
    assert!(refusal_fields(&Refusal { status: 400, reason: "bad" }).is_empty());
}

#[test]
fn extended_connect_needs_the_websocket_protocol_and_version_13() {
    let h2 = |extra: &[(&'static str, &'static str)]| -> Vec<(&'static [u8], &'static [u8])> {
        let mut v: Vec<(&[u8], &[u8])> = vec![(b"sec-websocket-version", b"13")];
        v.extend(extra.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
        v
    };
    let Upgrade::Valid(request) = check_connect(b"websocket", h2(&[("sec-websocket-protocol", "chat, v2")])) else {
        panic!("not valid")
    };
    assert_eq!((request.key, &request.subprotocols[..]), (&b""[..], &["chat".to_owned(), "v2".to_owned()][..]));
    assert!(matches!(check_connect(b"WebSocket", h2(&[])), Upgrade::Valid(_)));
    assert_eq!(check_connect(b"connect-udp", h2(&[])), Upgrade::NotWebSocket);
    let version_8: Vec<(&[u8], &[u8])> = vec![(b"sec-websocket-version", b"8")];
    assert_eq!(status(check_connect(b"websocket", version_8)), 426);
    assert_eq!(status(check_connect(b"websocket", vec![])), 426);
    assert_eq!(status(check_connect(b"websocket", h2(&[("sec-websocket-protocol", "a b")]))), 400);
}
