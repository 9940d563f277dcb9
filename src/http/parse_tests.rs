//! Parser checks that need no Python; the raw-request corpus runs end to end in
//! tests/test_http_corpus.py.

use super::*;
use crate::testing::Rng;

const LIMITS: Limits =
    Limits { request_line: 100, header_size: 200, field_size: 200, header_count: 5, body_size: 1000 };

fn head(raw: &[u8]) -> Result<Head, Reject> {
    let end = find_head_end(raw, &LIMITS)?.expect("complete head");
    parse_head(raw, end, &LIMITS)
}

#[test]
fn simple_get() {
    let raw = b"GET /a?b HTTP/1.1\r\nHost: x\r\nX-A:  1 \r\n\r\nrest";
    let h = head(raw).unwrap();
    assert_eq!(&raw[h.method.clone()], b"GET");
    assert_eq!(&raw[h.target.clone()], b"/a?b");
    assert_eq!(h.minor, 1);
    assert_eq!(h.len, raw.len() - 4);
    assert_eq!(h.framing, Framing::Length(0));
    assert!(h.keep_alive);
    let (n, v) = h.headers[1].clone();
    assert_eq!((&raw[n], &raw[v]), (&b"X-A"[..], &b"1"[..]));
}

#[test]
fn field_size_limit() {
    let limits = Limits { field_size: 20, ..LIMITS };
    // "X-A: " and 15 bytes: 20, the most.
    let fits = b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 123456789012345\r\n\r\n";
    let end = find_head_end(fits, &limits).unwrap().expect("complete head");
    assert!(parse_head(fits, end, &limits).is_ok());
    let over = b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1234567890123456\r\n\r\n";
    assert_eq!(find_head_end(over, &limits), Err(Reject::HeadersTooLarge));
    // Refused before the line ends: 21 bytes with no CR yet, and not for a CR still to come.
    assert_eq!(find_head_end(&over[..over.len() - 4], &limits), Err(Reject::HeadersTooLarge));
    assert_eq!(find_head_end(&fits[..fits.len() - 3], &limits), Ok(None));
    // The request line has its own limit.
    let line = b"GET /0123456789012345678901234567890 HTTP/1.1\r\nHost: x\r\n\r\n";
    assert!(find_head_end(line, &limits).unwrap().is_some());
}

#[test]
fn duplicate_content_type() {
    let two = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\ncontent-type: text/html\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(head(two).unwrap_err(), Reject::BadRequest("duplicate Content-Type"));
    let one = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n\r\n";
    assert!(head(one).is_ok());
}

#[test]
fn incomplete_and_limits() {
    assert_eq!(find_head_end(b"GET / HTTP/1.1\r\nHost: x\r\n", &LIMITS), Ok(None));
    assert_eq!(find_head_end(b"GET / HTTP/1.1\r", &LIMITS), Ok(None));
    let long = [b'a'; 150];
    assert_eq!(find_head_end(&long, &LIMITS), Err(Reject::UriTooLong));
    let mut big = b"GET / HTTP/1.1\r\n".to_vec();
    big.extend_from_slice(&[b'x'; 300]);
    assert_eq!(find_head_end(&big, &LIMITS), Err(Reject::HeadersTooLarge));
    let many = b"GET / HTTP/1.1\r\nHost: x\r\na: 1\r\nb: 1\r\nc: 1\r\nd: 1\r\ne: 1\r\n\r\n";
    assert_eq!(head(many).unwrap_err(), Reject::HeadersTooLarge);
    // The count is checked before the head is complete: the sixth field is one too many.
    assert_eq!(find_head_end(&many[..many.len() - 8], &LIMITS), Ok(None)); // five fields so far
    assert_eq!(find_head_end(&many[..many.len() - 2], &LIMITS), Err(Reject::HeadersTooLarge));
    let five = b"GET / HTTP/1.1\r\nHost: x\r\na: 1\r\nb: 1\r\nc: 1\r\nd: 1\r\n\r\n";
    assert_eq!(find_head_end(five, &LIMITS), Ok(Some(five.len())));
}

#[test]
fn bad_line_endings() {
    assert_eq!(find_head_end(b"GET / HTTP/1.1\nHost: x\r\n\r\n", &LIMITS), Err(Reject::BadRequest("bare LF")));
    assert_eq!(find_head_end(b"GET / HTTP/1.1\r\nHost: x\rY: 1\r\n\r\n", &LIMITS), Err(Reject::BadRequest("bare CR")));
}

fn status(raw: &[u8]) -> u16 {
    match head(raw) {
        Ok(_) => 200,
        Err(e) => e.status(),
    }
}

#[test]
fn framing_rules() {
    assert_eq!(status(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"), 200);
    for cl in [&b"-1"[..], b"+1", b"1_0", b"5, 5", b"", b"0x5", b"5 5", b"99999999999999999999"] {
        let mut raw = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: ".to_vec();
        raw.extend_from_slice(cl);
        raw.extend_from_slice(b"\r\n\r\n");
        assert_eq!(status(&raw), 400, "{:?}", String::from_utf8_lossy(cl));
    }
    assert_eq!(status(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n"), 400);
    assert_eq!(status(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n"), 413);
    assert_eq!(status(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n"), 400);
    assert_eq!(status(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"), 400);
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"),
        400
    );
    assert_eq!(status(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n"), 501);
    assert_eq!(status(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
    let h = head(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n");
    assert!(h.is_err(), "gzip is not decoded by the server: {h:?}");
    assert_eq!(
        head(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap().framing,
        Framing::Chunked
    );
}

#[test]
fn host_version_method_fields() {
    assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/1.0\r\n\r\n"), 200);
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
    for ok in [&b"a"[..], b"", b"a.b:80", b"[::1]", b"[::1]:8", b"a:", b"x-y_z~%20!$&'()*+,;="] {
        assert!(valid_host(ok), "{:?}", String::from_utf8_lossy(ok));
    }
    for bad in [&b"a b"[..], b"u@a", b"a/b", b"a:8x", b"[::1", b"[]", b"a:1:2", b"[::1]x", b"a?b", b"a#b"] {
        assert!(!valid_host(bad), "{:?}", String::from_utf8_lossy(bad));
    }
    assert_eq!(status(b"GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
    assert_eq!(status(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0000000000000000000000005\r\n\r\n"), 200);
    assert_eq!(status(b"GET / HTTP/2.0\r\nHost: a\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/1.1 \r\nHost: a\r\n\r\n"), 400);
    assert_eq!(status(b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
    assert_eq!(status(b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x07b\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nX : 1\r\n\r\n"), 400);
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n folded\r\n\r\n"), 400);
    assert_eq!(status(b"GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
    let h = head(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap();
    assert!(h.keep_alive);
    let h = head(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nExpect: 100-continue\r\n\r\n").unwrap();
    assert!(!h.keep_alive && h.expect_continue);
}

fn decode(chunks: &[&[u8]]) -> Result<(Vec<u8>, usize), Reject> {
    let mut d = ChunkedDecoder::new(1000);
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for c in chunks {
        buf.extend_from_slice(c);
        let n = d.feed(&buf, &mut out)?;
        buf.drain(..n);
    }
    assert!(d.is_done(), "not done");
    Ok((out, buf.len()))
}

#[test]
fn chunked_valid() {
    let (out, left) = decode(&[b"5\r\nhello\r\n6;a=b\r\n world\r\n0\r\nX-T: 1\r\n\r\nGET"]).unwrap();
    assert_eq!(out, b"hello world");
    assert_eq!(left, 3);
    // byte by byte
    let raw = b"a\r\n0123456789\r\nA ; x\r\n0123456789\r\n0\r\n\r\n";
    let pieces: Vec<&[u8]> = raw.chunks(1).collect();
    assert_eq!(decode(&pieces).unwrap().0.len(), 20);
}

#[test]
fn chunked_invalid() {
    for raw in [
        &b"5\r\nhello0\r\n\r\n"[..],
        b"5\nhello\r\n0\r\n\r\n",
        b"5\r\nhello\n0\r\n\r\n",
        b"0 \r\n\r\n",
        b" 5\r\nhello\r\n0\r\n\r\n",
        b"-5\r\nhello\r\n0\r\n\r\n",
        b"0x5\r\nhello\r\n0\r\n\r\n",
        b"\r\n\r\n",
        b"5\rhello\r\n0\r\n\r\n",
        b"0\r\nHost: evil\r\n\r\n",
        b"0\r\nContent-Length: 5\r\n\r\n",
        b"0\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"0\r\nbad trailer\r\n\r\n",
        b"0\r\nX: 1\n\r\n",
    ] {
        assert!(decode(&[raw]).is_err(), "{:?}", String::from_utf8_lossy(raw));
    }
    assert_eq!(decode(&[b"fffffffffffffffffff\r\n"]).unwrap_err(), Reject::PayloadTooLarge);
    assert_eq!(decode(&[b"3e9\r\n"]).unwrap_err(), Reject::PayloadTooLarge);
}

/// The verdict on a head that arrives in pieces ending at `cuts`, as the protocol reaches it:
/// `find_head_end` on all that has arrived after each piece, `parse_head` once it is
/// complete. Ok(head length), Err(status), or Ok(0) while still incomplete.
fn head_verdict(raw: &[u8], cuts: impl IntoIterator<Item = usize>) -> Result<usize, u16> {
    for cut in cuts.into_iter().chain([raw.len()]) {
        match find_head_end(&raw[..cut], &LIMITS) {
            Err(e) => return Err(e.status()),
            Ok(Some(end)) => return parse_head(&raw[..cut], end, &LIMITS).map(|h| h.len).map_err(|e| e.status()),
            Ok(None) => {}
        }
    }
    Ok(0)
}

/// Heads valid and invalid, with and without what follows them.
const HEADS: &[&[u8]] = &[
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /a?b HTTP/1.1\r\nHost: x\r\nX-A:  1 \r\n\r\nrest",
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
    b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"GET / HTTP/1.0\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\na: 1\r\nb: 1\r\nc: 1\r\nd: 1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\na: 1\r\nb: 1\r\nc: 1\r\nd: 1\r\ne: 1\r\n\r\n",
    b"GET / HTTP/1.1\nHost: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\rY: 1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\n\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n folded\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX : 1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x07b\r\n\r\n",
    b"GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n",
    b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
];

#[test]
fn head_verdict_does_not_depend_on_how_it_arrives() {
    let mut long_line = b"GET /".to_vec();
    long_line.extend_from_slice(&[b'a'; 150]);
    long_line.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut big_field = b"GET / HTTP/1.1\r\nHost: x\r\nX: ".to_vec();
    big_field.extend_from_slice(&[b'v'; 300]);
    big_field.extend_from_slice(b"\r\n\r\n");
    let extra = [long_line, big_field];
    for raw in HEADS.iter().copied().chain(extra.iter().map(Vec::as_slice)) {
        let whole = head_verdict(raw, []);
        let name = String::from_utf8_lossy(raw);
        assert_ne!(whole, Ok(0), "{name:?} is complete");
        assert_eq!(head_verdict(raw, 1..raw.len()), whole, "byte by byte: {name:?}");
        for cut in 1..raw.len() {
            assert_eq!(head_verdict(raw, [cut]), whole, "cut at {cut}: {name:?}");
        }
    }
}

/// A chunked body fed to a decoder (limit 1000) in pieces ending at `cuts`, as the protocol
/// does: Ok(body, bytes left after its end) with usize::MAX while not done, or Err(status).
fn decode_in_pieces(raw: &[u8], cuts: &[usize]) -> Result<(Vec<u8>, usize), u16> {
    let mut d = ChunkedDecoder::new(1000);
    let (mut out, mut pending, mut from) = (Vec::new(), Vec::new(), 0);
    for &cut in cuts.iter().chain([raw.len()].iter()) {
        pending.extend_from_slice(&raw[from..cut]);
        from = cut;
        let n = d.feed(&pending, &mut out).map_err(|e| e.status())?;
        assert!(n <= pending.len());
        pending.drain(..n);
        assert!(out.len() as u64 <= 1000);
        if d.is_done() {
            pending.extend_from_slice(&raw[from..]);
            return Ok((out, pending.len()));
        }
    }
    Ok((out, usize::MAX)) // not done
}

#[test]
fn chunked_body_does_not_depend_on_how_it_arrives() {
    let bodies: &[&[u8]] = &[
        b"5\r\nhello\r\n6;a=b\r\n world\r\n0\r\nX-T: 1\r\n\r\nGET",
        b"a\r\n0123456789\r\nA ; x\r\n0123456789\r\n0\r\n\r\n",
        b"1\r\nx\r\n0\r\n\r\n",
        b"0\r\n\r\n",
        b"5\r\nhello0\r\n\r\n",
        b"5\r\nhello\n0\r\n\r\n",
        b"0\r\nHost: evil\r\n\r\n",
        b"3e9\r\n",
        b"5\rhello\r\n0\r\n\r\n",
    ];
    for raw in bodies {
        let whole = decode_in_pieces(raw, &[]);
        let name = String::from_utf8_lossy(raw);
        let bytes: Vec<usize> = (1..raw.len()).collect();
        assert_eq!(decode_in_pieces(raw, &bytes), whole, "byte by byte: {name:?}");
        for cut in 1..raw.len() {
            assert_eq!(decode_in_pieces(raw, &[cut]), whole, "cut at {cut}: {name:?}");
        }
    }
}

/// Bytes that matter to the grammar, most often chosen when a byte is replaced or inserted.
const SPECIAL: &[u8] = b"\r\n :;,\t0aAfF-+_/?#%\x00\x7f\xff";

/// `raw` with one to four edits: a byte replaced, inserted or removed, or a span repeated.
fn mutate(raw: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut v = raw.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        let byte = if rng.below(3) == 0 { rng.next() as u8 } else { SPECIAL[rng.below(SPECIAL.len())] };
        match rng.below(4) {
            0 if at < v.len() => v[at] = byte,
            1 => v.insert(at, byte),
            2 if at < v.len() => {
                v.remove(at);
            }
            _ => {
                let len = rng.below(12).min(v.len() - at.min(v.len()));
                let span = v[at.min(v.len())..at.min(v.len()) + len].to_vec();
                v.splice(at..at, span);
            }
        }
    }
    v
}

/// Random cut points, in order, inside `len`.
fn cuts(len: usize, rng: &mut Rng) -> Vec<usize> {
    let mut c: Vec<usize> = (0..rng.below(4)).map(|_| 1 + rng.below(len.max(2) - 1)).collect();
    c.sort_unstable();
    c
}

#[test]
fn mutated_heads_get_one_verdict_however_they_arrive() {
    let mut rng = Rng(0x005e_ed0f_5e4d_f15b);
    let mut accepted = 0;
    for round in 0..20_000 {
        let raw = mutate(HEADS[round % HEADS.len()], &mut rng);
        let whole = head_verdict(&raw, []);
        let name = String::from_utf8_lossy(&raw);
        assert_eq!(head_verdict(&raw, cuts(raw.len(), &mut rng)), whole, "{name:?}");
        if let Ok(len) = whole {
            assert!(len <= raw.len(), "{name:?}");
            if len == 0 {
                continue;
            }
            accepted += 1;
            let h = parse_head(&raw, len, &LIMITS).unwrap();
            assert!(raw[h.method.clone()].iter().all(|&b| is_tchar(b)), "{name:?}");
            assert!(raw[h.target.clone()].iter().all(|&b| (0x21..0x7f).contains(&b)), "{name:?}");
            for (n, v) in &h.headers {
                assert!(!raw[n.clone()].is_empty() && raw[n.clone()].iter().all(|&b| is_tchar(b)), "{name:?}");
                assert!(raw[v.clone()].iter().all(|&b| is_value_byte(b) && b != b'\r' && b != b'\n'), "{name:?}");
            }
            if let Framing::Length(n) = h.framing {
                assert!(n <= LIMITS.body_size, "{name:?}");
            }
        }
    }
    // The mutations are small enough that many heads stay valid: both sides are exercised.
    assert!(accepted > 500, "only {accepted} mutated heads were accepted");
}

#[test]
fn mutated_chunked_bodies_decode_alike_however_they_arrive() {
    let bodies: &[&[u8]] = &[
        b"5\r\nhello\r\n6;a=b\r\n world\r\n0\r\nX-T: 1\r\n\r\nGET",
        b"a\r\n0123456789\r\nA ; x\r\n0123456789\r\n0\r\n\r\n",
        b"1\r\nx\r\n0\r\n\r\n",
    ];
    let mut rng = Rng(0xc4a2_7b0d_1e5f_0a17);
    let mut decoded = 0;
    for round in 0..20_000 {
        let raw = mutate(bodies[round % bodies.len()], &mut rng);
        let whole = decode_in_pieces(&raw, &[]);
        assert_eq!(decode_in_pieces(&raw, &cuts(raw.len(), &mut rng)), whole, "{:?}", String::from_utf8_lossy(&raw));
        if matches!(whole, Ok((_, rest)) if rest != usize::MAX) {
            decoded += 1;
        }
    }
    assert!(decoded > 500, "only {decoded} mutated bodies decoded");
}

#[test]
fn an_upgrade_field_is_noted() {
    let limits = LIMITS;
    let with = b"GET /chat HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
    let head = parse_head(with, with.len(), &limits).unwrap();
    assert!(head.upgrade);
    let without = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n";
    assert!(!parse_head(without, without.len(), &limits).unwrap().upgrade);
}

#[test]
fn an_absolute_target_names_the_host() {
    let host = |raw: &[u8]| -> Vec<u8> {
        let h = head(raw).unwrap();
        let (_, v) = h.headers.iter().find(|(n, _)| raw[n.clone()].eq_ignore_ascii_case(b"host")).unwrap().clone();
        raw[v].to_vec()
    };
    assert_eq!(host(b"GET http://a.example:8080/x?y HTTP/1.1\r\nHost: b.example\r\n\r\n"), b"a.example:8080");
    assert_eq!(host(b"GET HTTPS://a.example?q HTTP/1.1\r\nHost: b\r\n\r\n"), b"a.example");
    assert_eq!(host(b"GET http://[::1]:9 HTTP/1.1\r\nHost: b\r\n\r\n"), b"[::1]:9");
    assert_eq!(host(b"GET /x HTTP/1.1\r\nHost: b\r\n\r\n"), b"b");
    let h = head(b"GET http://a/x HTTP/1.0\r\n\r\n").unwrap();
    assert!(h.headers.is_empty());
    for bad in [&b"http:///x"[..], b"http://u@a/x", b"http://a[b/", b"http://a:8x/", b"https://"] {
        let raw = [b"GET ", bad, b" HTTP/1.1\r\nHost: a\r\n\r\n"].concat();
        assert_eq!(status(&raw), 400, "{:?}", String::from_utf8_lossy(bad));
    }
}
