//! An HTTP/2 request head as the interfaces read a request head: one buffer holding the
//! method, the target and the fields, with a `Head` of ranges into it, as the HTTP/1.1
//! parser makes it. So the interfaces build their scopes from HTTP/2 requests with the
//! code they use for HTTP/1.1. As RFC 9113 §8.3.1 has it for a request passed on to
//! HTTP/1.1: `:authority` becomes a leading `host` field when the request has none, and
//! the `cookie` fields are joined with "; " (§8.2.3). A `host` field that names another
//! host than `:authority` makes the request malformed (§8.3.1), as do two of them or one
//! that is not a host, as over HTTP/1.1 (RFC 9112 §3.2): one request, one host, whichever
//! field a proxy in front or the application reads.

use crate::http::parse::{host_and_port, Framing, Head, Limits, Reject};
use std::ops::Range;

/// The request's buffer and head.
pub struct Request {
    pub buf: Vec<u8>,
    pub head: Head,
    /// An extended CONNECT's `:protocol` (RFC 8441 §4). Such a request is the HTTP/2 form
    /// of HTTP/1.1's `GET` with `Upgrade`: its head says `GET`, and `upgrade`.
    pub protocol: Option<String>,
    /// Why the request is malformed, where `h2` lets it through.
    pub malformed: Option<&'static str>,
}

/// Why the request's `host` field and `:authority` do not name one host (none if they do).
/// They are compared as RFC 9113 §8.3.1 asks (RFC 3986 §6.2.3): the host without regard to
/// case, a port left out the same as the scheme's default.
fn host_fault(parts: &http::request::Parts) -> Option<&'static str> {
    let mut hosts = parts.headers.get_all(http::header::HOST).iter();
    let host = hosts.next().map(|h| host_and_port(h.as_bytes()));
    if hosts.next().is_some() {
        return Some("duplicate Host");
    }
    let authority = parts.uri.authority().map(|a| host_and_port(a.as_str().as_bytes()));
    let ((host, port), (a_host, a_port)) = match (host, authority) {
        (Some(None), _) => return Some("invalid Host"),
        (_, Some(None)) => return Some("invalid :authority"),
        (Some(Some(host)), Some(Some(authority))) => (host, authority),
        _ => return None,
    };
    let default: &[u8] = match parts.uri.scheme_str() {
        Some("http") => b"80",
        Some("https") => b"443",
        _ => b"",
    };
    let same =
        host.eq_ignore_ascii_case(a_host) && significant_port(port, default) == significant_port(a_port, default);
    (!same).then_some("Host differs from :authority")
}

/// A port's digits as compared: the scheme's `default` where none is given, without
/// leading zeros.
fn significant_port<'a>(port: &'a [u8], default: &'a [u8]) -> &'a [u8] {
    let port = if port.is_empty() { default } else { port };
    &port[port.iter().position(|&b| b != b'0').unwrap_or(port.len())..]
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
        let mut malformed = host_fault(parts);
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
            // RFC 9113 §8.2.1: where HTTP/1.1 would strip it, HTTP/2 has no whitespace
            // around a value; a field with some is malformed (`h2` checks the other rules).
            if matches!(value.as_bytes(), [b' ' | b'\t', ..] | [.., b' ' | b'\t']) {
                malformed = malformed.or(Some("whitespace around a field value"));
            }
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
        Request { buf, head, protocol, malformed }
    }

    /// The answer the server gives this request instead of serving it: 400 if it is
    /// malformed, else what the head limits make of it (`over_limits`).
    pub fn refusal(&self, limits: &Limits) -> Option<Reject> {
        self.malformed.map(Reject::BadRequest).or_else(|| self.over_limits(limits))
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
        let p = parts(http::Request::builder().uri("http://a.test/").header("host", "A.test:80").body(()).unwrap());
        let r = Request::new(&p, true);
        assert_eq!(r.head.headers.len(), 1);
        assert_eq!(r.field(&r.head.headers[0].1), b"A.test:80");
        assert!(matches!(r.head.framing, Framing::Length(0)));
        assert_eq!(r.malformed, None);
    }

    fn fault_of(b: http::request::Builder) -> Option<&'static str> {
        Request::new(&parts(b.body(()).unwrap()), true).malformed
    }

    #[test]
    fn a_host_field_must_name_the_authority_once() {
        let fault = |uri: &str, hosts: &[&str]| {
            let mut b = http::Request::builder().uri(uri);
            for h in hosts {
                b = b.header("host", *h);
            }
            fault_of(b)
        };
        let differs = Some("Host differs from :authority");
        assert_eq!(fault("http://a.test/", &["b.test"]), differs);
        assert_eq!(fault("http://a.test/", &["a.test:8080"]), differs);
        assert_eq!(fault("http://a.test/", &["a.test:443"]), differs);
        assert_eq!(fault("https://a.test/", &["a.test:443"]), None);
        assert_eq!(fault("https://a.test:0443/", &["A.TEST"]), None);
        assert_eq!(fault("http://[::1]:8000/", &["[::1]:8000"]), None);
        assert_eq!(fault("http://[::1]:8000/", &["[::2]:8000"]), differs);
        assert_eq!(fault("http://a.test/", &["a.test", "a.test"]), Some("duplicate Host"));
        assert_eq!(fault("http://a.test/", &["a test"]), Some("invalid Host"));
        assert_eq!(fault("/", &["a test"]), Some("invalid Host"));
        assert_eq!(fault("http://user@a.test/", &[]), Some("invalid :authority"));
        assert_eq!(fault("/", &["b.test"]), None);
        assert_eq!(fault("http://a.test/", &[]), None);
        let spaced = |v: &str| fault_of(http::Request::builder().uri("/").header("x-a", v));
        assert_eq!(spaced("a b"), None);
        assert_eq!(spaced(""), None);
        for v in [" a", "a ", "\ta", "a\t", " "] {
            assert_eq!(spaced(v), Some("whitespace around a field value"), "{v:?}");
        }
        let limits =
            Limits { request_line: 100, header_size: 1 << 20, field_size: 100, header_count: 10, body_size: 0 };
        let r = Request::new(
            &parts(http::Request::builder().uri("http://a.test/").header("host", "b").body(()).unwrap()),
            true,
        );
        assert_eq!(r.refusal(&limits), Some(Reject::BadRequest("Host differs from :authority")));
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
