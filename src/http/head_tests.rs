//! Tests of the response head's rules.

use super::*;

const NO_DEFAULTS: HeadRules<'static> = HeadRules { date: false, server: None, defaults: &[] };

fn head(status: u16, rules: &HeadRules<'_>, fields: &[(&[u8], &[u8])]) -> Result<ResponseHead, HeadError> {
    let mut b = HeadBuilder::new(status)?;
    for (n, v) in fields {
        b.field(rules, n, v)?;
    }
    b.finish(rules)
}

#[test]
fn status_must_be_final() {
    assert_eq!(HeadBuilder::new(99).err(), Some(HeadError::Status(99)));
    assert_eq!(HeadBuilder::new(1000).err(), Some(HeadError::Status(1000)));
    assert_eq!(HeadBuilder::new(101).err(), Some(HeadError::Informational(101)));
    assert!(HeadBuilder::new(999).is_ok());
}

#[test]
fn fields_that_would_split_the_head_are_refused() {
    let err = head(200, &NO_DEFAULTS, &[(b"x", b"a\r\nInjected: 1")]).unwrap_err();
    assert_eq!(err.to_string(), "invalid header \"x\": \"a\\r\\nInjected: 1\"");
    assert!(head(200, &NO_DEFAULTS, &[(b"bad name", b"1")]).is_err());
    assert!(head(200, &NO_DEFAULTS, &[(b"x", b"nul\0")]).is_err());
}

#[test]
fn framing_and_connection_fields_stay_the_servers() {
    let h =
        head(200, &NO_DEFAULTS, &[(b"Transfer-Encoding", b"chunked"), (b"Connection", b"keep-alive, close")]).unwrap();
    assert_eq!(h.bytes, b"HTTP/1.1 200 OK\r\n");
    assert!(h.close);
    assert_eq!(head(200, &NO_DEFAULTS, &[(b"transfer-encoding", b"gzip")]).unwrap_err(), HeadError::Coding);
    let h = head(200, &NO_DEFAULTS, &[(b"content-length", b"5"), (b"Content-Length", b"5")]).unwrap();
    assert_eq!(h.length, Some(5));
    for bad in [&b"5, 6"[..], b"-1", b"", b"99999999999999999999"] {
        assert_eq!(head(200, &NO_DEFAULTS, &[(b"content-length", bad)]).unwrap_err(), HeadError::Length, "{bad:?}");
    }
    assert_eq!(
        head(200, &NO_DEFAULTS, &[(b"content-length", b"5"), (b"content-length", b"6")]).unwrap_err(),
        HeadError::Length
    );
    // RFC 9110 §8.6: a 204 has no framing fields, whatever the application says.
    let h = head(204, &NO_DEFAULTS, &[(b"content-length", b"5")]).unwrap();
    assert_eq!((h.bytes.as_slice(), h.length), (&b"HTTP/1.1 204 No Content\r\n"[..], None));
}

#[test]
fn defaults_unless_replaced() {
    let defaults = vec![(b"x-a".to_vec(), b"x-a: 1\r\n".to_vec()), (b"x-b".to_vec(), b"x-b: 2\r\n".to_vec())];
    let rules = HeadRules { date: true, server: Some(b"swordfish"), defaults: &defaults };
    let h = head(200, &rules, &[(b"X-B", b"mine")]).unwrap();
    let text = String::from_utf8(h.bytes).unwrap();
    assert!(text.contains("date: ") && text.contains("server: swordfish\r\n"), "{text}");
    assert!(text.contains("x-a: 1\r\n") && text.contains("X-B: mine\r\n") && !text.contains("x-b: 2"), "{text}");
    let h = head(200, &rules, &[(b"Server", b"app"), (b"Date", b"then")]).unwrap();
    let text = String::from_utf8(h.bytes).unwrap();
    assert_eq!(text.matches("erver: ").count(), 1, "{text}");
    assert_eq!(text.matches("ate: ").count(), 1, "{text}");
}

#[test]
fn trailers_leave_out_forbidden_fields() {
    let mut out = Vec::new();
    trailer_field(&mut out, b"x-checksum", b"1").unwrap();
    trailer_field(&mut out, b"Content-Length", b"5").unwrap();
    assert_eq!(out, b"x-checksum: 1\r\n");
    assert!(trailer_field(&mut out, b"x", b"\n").is_err());
}

fn framed(f: Framing, whole: Option<u64>, keep_alive: bool) -> (String, Encoder, bool) {
    let mut out = Vec::new();
    let mut keep = keep_alive;
    let enc = frame_head(&mut out, &f, whole, &mut keep);
    (String::from_utf8(out).unwrap(), enc, keep)
}

#[test]
fn framing_follows_what_is_known() {
    let get11 = Framing { status: 200, head_method: false, minor: 1, length: None };
    assert_eq!(framed(get11, Some(3), true), ("content-length: 3\r\n\r\n".into(), Encoder::Length(3), true));
    assert_eq!(framed(get11, None, true), ("transfer-encoding: chunked\r\n\r\n".into(), Encoder::Chunked, true));
    assert_eq!(framed(Framing { length: Some(9), ..get11 }, None, true), ("\r\n".into(), Encoder::Length(9), true));
    assert_eq!(
        framed(get11, Some(3), false),
        ("content-length: 3\r\nconnection: close\r\n\r\n".into(), Encoder::Length(3), false)
    );
    let get10 = Framing { minor: 0, ..get11 };
    assert_eq!(framed(get10, None, true), ("connection: close\r\n\r\n".into(), Encoder::CloseDelimited, false));
    assert_eq!(
        framed(get10, Some(0), true),
        ("content-length: 0\r\nconnection: keep-alive\r\n\r\n".into(), Encoder::Length(0), true)
    );
    let head = Framing { head_method: true, ..get11 };
    assert_eq!(framed(head, None, true), ("\r\n".into(), Encoder::Bodiless, true));
    assert_eq!(framed(Framing { status: 304, ..get11 }, Some(5), true).1, Encoder::Bodiless);
}

#[test]
fn own_reason_phrase() {
    let rules = HeadRules { date: false, server: None, defaults: &[] };
    let head = HeadBuilder::with_reason(200, b"Fine Thanks").unwrap().finish(&rules).unwrap();
    assert!(head.bytes.starts_with(b"HTTP/1.1 200 Fine Thanks\r\n"), "{:?}", head.bytes);
    assert_eq!(HeadBuilder::with_reason(200, b"x\r\ny: z").err(), Some(HeadError::Reason(b"x\r\ny: z".to_vec())));
    assert_eq!(HeadBuilder::with_reason(99, b"x").err(), Some(HeadError::Status(99)));
}
