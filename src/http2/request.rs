//! An HTTP/2 request head as the interfaces read a request head: one buffer holding the
//! method, the target and the fields, with a `Head` of ranges into it, as the HTTP/1.1
//! parser makes it. So the interfaces build their scopes from HTTP/2 requests with the
//! code they use for HTTP/1.1. As RFC 9113 §8.3.1 has it for a request passed on to
//! HTTP/1.1: `:authority` becomes a leading `host` field when the request has none, and
//! the `cookie` fields are joined with "; " (§8.2.3).

use crate::http::parse::{Framing, Head, Limits, Reject};
use std::ops::Range;

/// The request's buffer and head.
pub struct Request {
    pub buf: Vec<u8>,
    pub head: Head,
    /// An extended CONNECT's `:protocol` (RFC 8441 §4). Such a request is the HTTP/2 form
    /// of HTTP/1.1's `GET` with `Upgrade`: its head says `GET`, and `upgrade`.
    pub protocol: Option<String>,
}

fn push(buf: &mut Vec<u8>, bytes: &[u8]) -> Range<usize> {
    let start = buf.len();
    buf.extend_from_slice(bytes);
    start..buf.len()
}

impl Request {
    pub fn new(parts: &http::request::Parts, end_stream: bool) -> Request {
        let size = parts.headers.iter().map(|(n, v)| n.as_str().len() + v.len()).sum::<usize>() + 64;
        let mut buf = Vec::with_capacity(size);
        let protocol = match parts.extensions.get::<h2::ext::Protocol>() {
            Some(p) if parts.method == http::Method::CONNECT => Some(p.as_str().to_owned()),
            _ => None,
        };
        let method = match protocol {
            Some(_) => push(&mut buf, b"GET"),
            None => push(&mut buf, parts.method.as_str().as_bytes()),
        };
        let target = match parts.uri.path_and_query() {
            Some(pq) if !pq.as_str().is_empty() => push(&mut buf, pq.as_str().as_bytes()),
            _ if parts.method == http::Method::OPTIONS => push(&mut buf, b"*"),
            _ => push(&mut buf, b"/"),
        };
        let mut headers = Vec::with_capacity(parts.headers.len() + 1);
        if let Some(a) = parts.uri.authority().map(|a| a.as_str()) {
            if !parts.headers.contains_key(http::header::HOST) {
                let n = push(&mut buf, b"host");
                let v = push(&mut buf, a.as_bytes());
                headers.push((n, v));
            }
        }
        let mut cookie: Option<(Range<usize>, Vec<u8>)> = None;
        let mut length = None;
        for (name, value) in &parts.headers {
            if name == http::header::COOKIE {
                match &mut cookie {
                    Some((_, joined)) => {
                        joined.extend_from_slice(b"; ");
                        joined.extend_from_slice(value.as_bytes());
                    }
                    None => cookie = Some((push(&mut buf, b"cookie"), value.as_bytes().to_vec())),
                }
                continue;
            }
            if name == http::header::CONTENT_LENGTH {
                length = value.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok());
            }
            let n = push(&mut buf, name.as_str().as_bytes());
            let v = push(&mut buf, value.as_bytes());
            headers.push((n, v));
        }
        if let Some((n, joined)) = cookie {
            let v = push(&mut buf, &joined);
            headers.push((n, v));
        }
        let framing = if end_stream { Framing::Length(0) } else { length.map_or(Framing::Chunked, Framing::Length) };
        let head = Head {
            len: buf.len(),
            method,
            target,
            minor: 1,
            headers,
            framing,
            keep_alive: true,
            expect_continue: false,
            upgrade: protocol.is_some(),
        };
        Request { buf, head, protocol }
    }

    /// The refusal the server's head limits make of this request, as they would of the
    /// same request in HTTP/1.1 (`--limit-request-line`, `--limit-header-count`,
    /// `--limit-request-field-size`): the request line is counted as `METHOD target
    /// HTTP/1.1`, a field as `name: value`. The whole header list is `h2`'s to bound
    /// (`--http2-max-headers-size`).
    pub fn over_limits(&self, limits: &Limits) -> Option<Reject> {
        let h = &self.head;
        if h.method.len() + h.target.len() + " HTTP/1.1".len() + 1 > limits.request_line {
            return Some(Reject::UriTooLong);
        }
        let field_too_long = h.headers.iter().any(|(n, v)| n.len() + 2 + v.len() > limits.field_size);
        (h.headers.len() > limits.header_count || field_too_long).then_some(Reject::HeadersTooLarge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Request {
        fn field(&self, r: &Range<usize>) -> &[u8] {
            self.buf.get(r.clone()).unwrap_or_default()
        }
    }

    fn parts(req: http::Request<()>) -> http::request::Parts {
        req.into_parts().0
    }

    #[test]
    fn authority_becomes_host_and_cookies_are_joined() {
        let p = parts(
            http::Request::builder()
                .method("POST")
                .uri("https://example.com:8443/a/b?x=1")
                .header("cookie", "a=1")
                .header("content-length", "5")
                .header("cookie", "b=2")
                .body(())
                .unwrap(),
        );
        let r = Request::new(&p, false);
        assert_eq!(r.field(&r.head.method), b"POST");
        assert_eq!(r.field(&r.head.target), b"/a/b?x=1");
        let fields: Vec<(&[u8], &[u8])> = r.head.headers.iter().map(|(n, v)| (r.field(n), r.field(v))).collect();
        assert_eq!(
            fields,
            vec![(&b"host"[..], &b"example.com:8443"[..]), (b"content-length", b"5"), (b"cookie", b"a=1; b=2"),]
        );
        assert!(matches!(r.head.framing, Framing::Length(5)));
    }

    #[test]
    fn the_http11_limits_apply() {
        let limits = Limits { request_line: 20, header_size: 1 << 20, field_size: 12, header_count: 2, body_size: 0 };
        let build = |uri: &str, fields: &[(&str, &str)]| {
            let mut b = http::Request::builder().uri(uri);
            for (n, v) in fields {
                b = b.header(*n, *v);
            }
            Request::new(&parts(b.body(()).unwrap()), true)
        };
        // "GET /abcdefg HTTP/1.1" is 21 bytes.
        assert!(matches!(build("/abcdefg", &[]).over_limits(&limits), Some(Reject::UriTooLong)));
        assert!(build("/abcdef", &[("a", "1"), ("b", "2")]).over_limits(&limits).is_none());
        let three = [("a", "1"), ("b", "2"), ("c", "3")];
        assert!(matches!(build("/", &three).over_limits(&limits), Some(Reject::HeadersTooLarge)));
        // "x-long: 12345" is 13 bytes.
        assert!(matches!(build("/", &[("x-long", "12345")]).over_limits(&limits), Some(Reject::HeadersTooLarge)));
    }

    #[test]
    fn a_host_field_is_kept_and_an_ended_stream_has_no_body() {
        let p = parts(http::Request::builder().uri("http://a.test/").header("host", "b.test").body(()).unwrap());
        let r = Request::new(&p, true);
        assert_eq!(r.head.headers.len(), 1);
        assert_eq!(r.field(&r.head.headers[0].1), b"b.test");
        assert!(matches!(r.head.framing, Framing::Length(0)));
    }

    #[test]
    fn an_extended_connect_reads_as_an_upgrade_get() {
        let mut p = parts(
            http::Request::builder()
                .method("CONNECT")
                .uri("https://a.test/chat?room=1")
                .header("sec-websocket-version", "13")
                .body(())
                .unwrap(),
        );
        p.extensions.insert(h2::ext::Protocol::from_static("websocket"));
        let r = Request::new(&p, false);
        assert_eq!((r.field(&r.head.method), r.field(&r.head.target)), (&b"GET"[..], &b"/chat?room=1"[..]));
        assert!(r.head.upgrade);
        assert_eq!(r.protocol.as_deref(), Some("websocket"));
        let plain = Request::new(&parts(http::Request::builder().uri("/").body(()).unwrap()), true);
        assert!(!plain.head.upgrade && plain.protocol.is_none());
    }
}
