//! The connection's reading and writing sides driven with no Python at all (a `World` of
//! plain Rust types), as a driver without the GIL drives them: requests out of the read
//! buffer, responses onto the wire, keep-alive, pipelining, refusals and unfinished
//! responses.

use super::conn::{Act, Conn, TimerKind, World};
use super::head::{HeadBuilder, HeadRules};
use super::parse::Limits;
use super::reading::{take_body, take_body_buf, Next};
use super::settings::Settings;
use super::writing::{Part, RespondError, Taken, Unfinished};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

struct Plain;

impl World for Plain {
    type Bytes = Vec<u8>;
    const BY_REFERENCE: bool = true;
    type Log = &'static str;
    type Objects = ();
    type RequestObjects = ();
    type Act = ();
}

fn settings() -> Settings {
    Settings {
        limits: Limits { request_line: 1000, header_size: 4000, field_size: 1000, header_count: 20, body_size: 100 },
        timeout_header: 5.0,
        timeout_keep_alive: 5.0,
        limit_concurrency: usize::MAX,
        date_header: false,
        server_header: None,
        default_headers: Vec::new(),
        access_log: true,
        metrics: None,
        active_requests: AtomicUsize::new(0),
        total_requests: AtomicU64::new(0),
        connections_made: AtomicU64::new(0),
        shutting_down: AtomicBool::new(false),
        draining: AtomicBool::new(false),
    }
}

/// The bytes the acts write, and whether they close the connection.
fn wire(acts: &[Act<Plain>]) -> (String, bool) {
    let mut out = Vec::new();
    let mut close = false;
    for a in acts {
        match a {
            Act::Write(v) | Act::WriteLater(v, _) | Act::WriteObj(v, _) => out.extend_from_slice(v),
            Act::Close | Act::Abort => close = true,
            _ => {}
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), close)
}

fn head(status: u16, fields: &[(&str, &str)]) -> super::head::ResponseHead {
    let rules = HeadRules { date: false, server: None, defaults: &[] };
    let mut b = HeadBuilder::new(status).expect("status");
    for (n, v) in fields {
        b.field(&rules, n.as_bytes(), v.as_bytes()).expect("field");
    }
    b.finish(&rules).expect("head")
}

/// Begin the next request in the buffer; its generation.
fn begin(c: &mut Conn<Plain>, st: &Settings, acts: &mut Vec<Act<Plain>>) -> u64 {
    match c.next(st, acts) {
        Next::Head(h) => {
            let head_method = c.is_head_method(&h);
            c.begin_request(st, &h, head_method, false, Some("GET /"))
        }
        _ => panic!("no head"),
    }
}

fn respond(c: &mut Conn<Plain>, st: &Settings, gen: u64, body: &[u8], acts: &mut Vec<Act<Plain>>) -> bool {
    let object = || body.to_vec();
    c.take_part(st, gen, Part::Head { head: head(200, &[]), trailers: false }, acts).expect("head");
    let (taken, read_on) =
        c.take_part(st, gen, Part::Body { data: body, object: &object, more: false }, acts).expect("body");
    assert!(matches!(taken, Taken::Done));
    read_on
}

#[test]
fn a_request_is_answered_and_the_connection_kept() {
    let st = settings();
    let mut c = Conn::<Plain>::new(());
    let mut acts = Vec::new();
    c.rbuf.extend_from_slice(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let gen = begin(&mut c, &st, &mut acts);
    assert_eq!(st.active_requests.load(Ordering::Relaxed), 1);
    assert!(c.rbuf.is_empty());
    assert!(respond(&mut c, &st, gen, b"hello", &mut acts));
    let (out, close) = wire(&acts);
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.contains("content-length: 5\r\n") && out.ends_with("\r\n\r\nhello"), "{out}");
    assert!(!close);
    assert!(c.req.is_none());
    assert_eq!(c.timer_kind, TimerKind::KeepAlive);
    assert!(acts.iter().any(|a| matches!(a, Act::AccessLog(Some("GET /"), 200, 5, _, false))));
}

#[test]
fn a_body_part_that_would_not_be_held_goes_by_reference_and_a_small_one_with_its_head() {
    use crate::transport::stream::HOLD_SMALL;
    let st = settings();
    for (size, by_reference) in [(HOLD_SMALL, false), (HOLD_SMALL + 1, true)] {
        let mut c = Conn::<Plain>::new(());
        let mut acts = Vec::new();
        c.rbuf.extend_from_slice(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        let gen = begin(&mut c, &st, &mut acts);
        let body = vec![b'x'; size];
        respond(&mut c, &st, gen, &body, &mut acts);
        let objects: Vec<usize> =
            acts.iter().filter_map(|a| if let Act::WriteObj(v, _) = a { Some(v.len()) } else { None }).collect();
        assert_eq!(objects, if by_reference { vec![size] } else { vec![] }, "{size} bytes");
        let (out, _) = wire(&acts);
        assert!(out.ends_with(&format!("content-length: {size}\r\n\r\n{}", "x".repeat(size))), "{size} bytes");
    }
}

#[test]
fn pipelined_requests_wait_for_the_response_before_them() {
    let st = settings();
    let mut c = Conn::<Plain>::new(());
    let mut acts = Vec::new();
    c.rbuf.extend_from_slice(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
    let first = begin(&mut c, &st, &mut acts);
    // The second head waits in the buffer while the first is served.
    assert!(matches!(c.next(&st, &mut acts), Next::Body));
    assert!(!c.body_read(&st, &mut acts));
    assert!(respond(&mut c, &st, first, b"a", &mut acts));
    let second = begin(&mut c, &st, &mut acts);
    assert_eq!(second, first + 1);
    assert_eq!(
        c.take_part(&st, first, Part::Trailers { fields: Vec::new(), more: false }, &mut acts).err(),
        Some(RespondError::Finished)
    );
}

#[test]
fn a_bad_head_is_refused_and_the_connection_closed() {
    let st = settings();
    let mut c = Conn::<Plain>::new(());
    let mut acts = Vec::new();
    c.rbuf.extend_from_slice(b"GET / HTTP/1.1\r\nBad Field: x\r\n\r\n");
    assert!(matches!(c.next(&st, &mut acts), Next::Wait));
    let (out, close) = wire(&acts);
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
    assert!(close && c.closing());
    assert!(acts.iter().any(|a| matches!(a, Act::AccessLog(None, 400, _, _, true))));
}

#[test]
fn a_chunked_body_is_decoded_for_the_reader() {
    let st = settings();
    let mut c = Conn::<Plain>::new(());
    let mut acts = Vec::new();
    c.rbuf.extend_from_slice(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n");
    let gen = begin(&mut c, &st, &mut acts);
    assert!(matches!(c.next(&st, &mut acts), Next::Body));
    let req = c.current(gen).expect("request");
    assert_eq!(take_body(req, |data, more| (data.to_vec(), more)), (b"abc".to_vec(), true));
    c.rbuf.extend_from_slice(b"2\r\nde\r\n0\r\n\r\n");
    assert!(matches!(c.next(&st, &mut acts), Next::Body));
    let req = c.current(gen).expect("request");
    assert_eq!(take_body(req, |data, more| (data.to_vec(), more)), (b"de".to_vec(), false));
}

#[test]
fn a_request_that_arrives_whole_gives_its_body_in_its_own_buffer() {
    let st = settings();
    let mut c = Conn::<Plain>::new(());
    let mut acts = Vec::new();
    let body = b"0123456789".repeat(6);
    let request = |body: &[u8]| {
        [format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes(), body].concat()
    };
    // Head and body alone in the read buffer: the buffer is the body's, its head skipped.
    c.rbuf.extend_from_slice(&request(&body));
    let gen = begin(&mut c, &st, &mut acts);
    assert!(c.rbuf.is_empty());
    let req = c.current(gen).expect("request");
    let (buf, more) = take_body_buf(req);
    assert_eq!((buf.bytes(), more), (&body[..], false));
    let (whole, start) = buf.into_parts();
    assert_eq!(&whole[start..], &body[..]);
    assert!(respond(&mut c, &st, gen, b"ok", &mut acts));
    // With the next request behind it (pipelined), or a body shorter than its head, the
    // body is read out of the read buffer as before: the same bytes either way.
    let pipelined = [request(&body), request(b"x")].concat();
    for (bytes, expected) in [(&pipelined[..], &body[..]), (&[][..], b"x"), (&request(b"short")[..], b"short")] {
        c.rbuf.extend_from_slice(bytes);
        let gen = begin(&mut c, &st, &mut acts);
        assert!(matches!(c.next(&st, &mut acts), Next::Body));
        let req = c.current(gen).expect("request");
        assert_eq!(take_body(req, |data, more| (data.to_vec(), more)), (expected.to_vec(), false));
        assert!(respond(&mut c, &st, gen, b"ok", &mut acts));
    }
    assert!(c.rbuf.is_empty());
}

#[test]
fn a_bad_chunk_refuses_the_request_and_lets_its_readers_go() {
    let st = settings();
    let mut c = Conn::<Plain>::new(());
    let mut acts = Vec::new();
    c.rbuf.extend_from_slice(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
    let _ = begin(&mut c, &st, &mut acts);
    assert!(matches!(c.next(&st, &mut acts), Next::BodyRefused));
    let (out, close) = wire(&acts);
    assert!(out.starts_with("HTTP/1.1 400 "), "{out}");
    assert!(close);
    assert!(acts.iter().any(|a| matches!(a, Act::Unwait((), false))));
}

#[test]
fn a_head_request_gets_no_body_and_an_unread_body_is_dropped() {
    let st = settings();
    let mut c = Conn::<Plain>::new(());
    let mut acts = Vec::new();
    c.rbuf.extend_from_slice(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n");
    let gen = begin(&mut c, &st, &mut acts);
    assert!(respond(&mut c, &st, gen, b"hello", &mut acts));
    let (out, _) = wire(&acts);
    assert!(out.ends_with("\r\n\r\n") && !out.contains("hello"), "{out}");

    // A body the app did not read is read and dropped after the response, on the
    // keep-alive deadline.
    let mut acts = Vec::new();
    c.rbuf.extend_from_slice(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab");
    let gen = begin(&mut c, &st, &mut acts);
    assert!(respond(&mut c, &st, gen, b"ok", &mut acts));
    assert!(c.req.is_some());
    assert_eq!(c.timer_kind, TimerKind::KeepAlive);
    assert!(matches!(c.next(&st, &mut acts), Next::Body));
    c.rbuf.extend_from_slice(b"cd");
    assert!(matches!(c.next(&st, &mut acts), Next::Body));
    assert!(c.body_read(&st, &mut acts));
    assert!(c.req.is_none() && !c.closing());
}

#[test]
fn an_app_that_ends_without_a_response_gets_a_500_and_the_connection_closes() {
    let st = settings();
    let mut c = Conn::<Plain>::new(());
    let mut acts = Vec::new();
    c.rbuf.extend_from_slice(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let gen = begin(&mut c, &st, &mut acts);
    assert_eq!(c.app_unfinished(&st, gen, false, &mut acts), Some(Unfinished::ReturnedBeforeStart));
    let (out, close) = wire(&acts);
    assert!(out.starts_with("HTTP/1.1 500 Internal Server Error\r\n"), "{out}");
    assert!(close && c.closing());
    // A complete response is not the app's failure.
    let mut c = Conn::<Plain>::new(());
    let mut acts = Vec::new();
    c.rbuf.extend_from_slice(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let gen = begin(&mut c, &st, &mut acts);
    respond(&mut c, &st, gen, b"", &mut acts);
    assert_eq!(c.app_unfinished(&st, gen, true, &mut acts), None);
}

#[test]
fn a_body_longer_than_its_length_fails_the_response() {
    let st = settings();
    let mut c = Conn::<Plain>::new(());
    let mut acts = Vec::new();
    c.rbuf.extend_from_slice(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let gen = begin(&mut c, &st, &mut acts);
    let object = || Vec::new();
    c.take_part(&st, gen, Part::Head { head: head(200, &[("content-length", "2")]), trailers: false }, &mut acts)
        .expect("head");
    let r = c.take_part(&st, gen, Part::Body { data: b"abc", object: &object, more: false }, &mut acts);
    assert_eq!(r.err(), Some(RespondError::TooLong));
    let (out, close) = wire(&acts);
    assert!(out.starts_with("HTTP/1.1 500 "), "{out}");
    assert!(close);
}

#[test]
fn the_timer_closes_an_idle_connection_at_its_deadline() {
    let mut c = Conn::<Plain>::new(());
    let mut acts = Vec::new();
    c.set_timer(TimerKind::Header, 0.0, &mut acts);
    assert!(matches!(acts.as_slice(), [Act::ArmTimer(_)]));
    // A later deadline keeps the armed timer: it fires early and re-arms.
    let mut acts = Vec::new();
    c.set_timer(TimerKind::KeepAlive, 10.0, &mut acts);
    assert!(acts.is_empty(), "a later deadline keeps the timer armed");
    c.deadline = 0.0;
    c.timer_fired(&mut acts);
    let (_, close) = wire(&acts);
    assert!(close && c.closing());
}

#[test]
fn a_body_that_reaches_its_length_is_known_complete_before_its_end() {
    let st = settings();
    let mut c: Conn<Plain> = Conn::new(());
    c.rbuf.extend_from_slice(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut acts = Vec::new();
    let gen = begin(&mut c, &st, &mut acts);
    let object = || b"hello".to_vec();
    c.take_part(&st, gen, Part::Head { head: head(200, &[("content-length", "10")]), trailers: false }, &mut acts)
        .expect("head");
    // A streamed part (more may come): the length is not reached yet, then it is.
    c.take_part(&st, gen, Part::Body { data: b"hello", object: &object, more: true }, &mut acts).expect("part");
    assert!(!c.length_reached(gen));
    c.take_part(&st, gen, Part::Body { data: b"hello", object: &object, more: true }, &mut acts).expect("part");
    assert!(c.length_reached(gen));
    // Without a length, a streamed body is never known complete.
    let mut c: Conn<Plain> = Conn::new(());
    c.rbuf.extend_from_slice(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let gen = begin(&mut c, &st, &mut acts);
    c.take_part(&st, gen, Part::Head { head: head(200, &[]), trailers: false }, &mut acts).expect("head");
    c.take_part(&st, gen, Part::Body { data: b"hello", object: &object, more: true }, &mut acts).expect("part");
    assert!(!c.length_reached(gen));
}

/// Shut down (`drain`: retiring) while idle between requests and while a response is
/// under way: the acts at the shutdown, then the wire and the close of the next request.
fn shut_down_between(drain: bool, head_first: bool) -> (bool, String, bool) {
    let st = settings();
    let mut c = Conn::<Plain>::new(());
    let mut acts = Vec::new();
    c.rbuf.extend_from_slice(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let gen = begin(&mut c, &st, &mut acts);
    if head_first {
        c.take_part(&st, gen, Part::Head { head: head(200, &[]), trailers: false }, &mut acts).expect("head");
        let object = || b"a".to_vec();
        c.take_part(&st, gen, Part::Body { data: b"a", object: &object, more: true }, &mut acts).expect("part");
    } else {
        assert!(respond(&mut c, &st, gen, b"a", &mut acts));
    }
    acts.clear();
    st.draining.store(drain, Ordering::Relaxed);
    st.shutting_down.store(true, Ordering::Relaxed);
    c.shut_down(drain, 1.0, &mut acts);
    if head_first {
        let object = Vec::new;
        c.take_part(&st, gen, Part::Body { data: b"", object: &object, more: false }, &mut acts).expect("end");
    }
    let closed_at_once = wire(&acts).1;
    if closed_at_once {
        return (true, String::new(), true);
    }
    acts.clear();
    c.rbuf.extend_from_slice(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n");
    let next = begin(&mut c, &st, &mut acts);
    respond(&mut c, &st, next, b"b", &mut acts);
    let (out, close) = wire(&acts);
    (false, out, close)
}

#[test]
fn shutting_down_closes_an_idle_connection_and_one_whose_response_ends() {
    assert!(shut_down_between(false, false).0);
    assert!(shut_down_between(false, true).0);
}

#[test]
fn draining_answers_the_next_request_with_connection_close_then_closes() {
    for head_first in [false, true] {
        let (closed_at_once, out, close) = shut_down_between(true, head_first);
        assert!(!closed_at_once, "head first: {head_first}");
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n") && out.contains("connection: close\r\n"), "{out}");
        assert!(close);
    }
}
