//! The HTTP/1.1 request head: `find_head_end` and `parse_head` on any bytes. Properties:
//! a head that parses, written out again from what was parsed (method, target, version,
//! fields, without the optional whitespace), parses to the same request; no prefix of a
//! complete head is complete or refused, so a head that arrives in pieces is judged as a
//! whole one is.
#![no_main]

use _native::fuzzing::{find_head_end, parse_head, Head, Limits};
use libfuzzer_sys::fuzz_target;

const LIMITS: Limits =
    Limits { request_line: 8190, header_size: 32768, field_size: 8190, header_count: 100, body_size: u64::MAX };
/// The same with room for the spaces the re-serialised head may add (`name: value`).
const ROOMY: Limits =
    Limits { request_line: 8190, header_size: 65536, field_size: 16384, header_count: 100, body_size: u64::MAX };

fn serialise(buf: &[u8], head: &Head) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&buf[head.method.clone()]);
    out.push(b' ');
    out.extend_from_slice(&buf[head.target.clone()]);
    out.extend_from_slice(if head.minor == 0 { b" HTTP/1.0\r\n" } else { b" HTTP/1.1\r\n" });
    for (name, value) in &head.headers {
        out.extend_from_slice(&buf[name.clone()]);
        out.extend_from_slice(b": ");
        out.extend_from_slice(&buf[value.clone()]);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn fields<'a>(buf: &'a [u8], head: &Head) -> Vec<(&'a [u8], &'a [u8])> {
    head.headers.iter().map(|(n, v)| (&buf[n.clone()], &buf[v.clone()])).collect()
}

fuzz_target!(|data: &[u8]| {
    let end = match find_head_end(data, &LIMITS) {
        Ok(Some(end)) => end,
        _ => return,
    };
    assert!(end <= data.len());
    let step = (end / 32).max(1);
    for k in (0..end).step_by(step) {
        assert!(
            matches!(find_head_end(&data[..k], &LIMITS), Ok(None)),
            "a prefix of {k} bytes of a complete {end}-byte head was judged"
        );
    }
    let Ok(head) = parse_head(data, end, &LIMITS) else { return };
    assert_eq!(head.len, end);
    for r in [&head.method, &head.target].into_iter().chain(head.headers.iter().flat_map(|(n, v)| [n, v])) {
        assert!(r.start <= r.end && r.end <= end);
    }
    let again = serialise(data, &head);
    let end2 = match find_head_end(&again, &ROOMY) {
        Ok(Some(e)) => e,
        other => panic!("the re-serialised head is not complete: {other:?}\n{:?}", String::from_utf8_lossy(&again)),
    };
    assert_eq!(end2, again.len());
    let head2 = match parse_head(&again, end2, &ROOMY) {
        Ok(h) => h,
        Err(r) => panic!("the re-serialised head is refused: {r:?}\n{:?}", String::from_utf8_lossy(&again)),
    };
    assert_eq!(&data[head.method.clone()], &again[head2.method.clone()]);
    assert_eq!(&data[head.target.clone()], &again[head2.target.clone()]);
    assert_eq!(head.minor, head2.minor);
    assert_eq!(fields(data, &head), fields(&again, &head2));
    assert_eq!(head.framing, head2.framing);
    assert_eq!(
        (head.keep_alive, head.expect_continue, head.upgrade),
        (head2.keep_alive, head2.expect_continue, head2.upgrade)
    );
});
