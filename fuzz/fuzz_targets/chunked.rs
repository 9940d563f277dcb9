//! The chunked body decoder. Properties: fed the same bytes in pieces (as they arrive, the
//! unconsumed rest kept and fed again with what follows) it decodes what it decodes from
//! them whole; when it completes a body, an independent decoder written from RFC 9112 §7.1
//! reads the same body from the same bytes; and a body chunked with sizes, extensions and
//! trailers chosen by the input decodes to itself.
#![no_main]

use _native::fuzzing::ChunkedDecoder;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

mod pieces;

const LIMIT: u64 = 1 << 20;

#[derive(Arbitrary, Debug)]
struct Input {
    raw: Vec<u8>,
    /// Where `raw` is cut into the pieces that arrive.
    cuts: Vec<u16>,
    /// A body to chunk: pieces of it, each with an extension or not, and trailer fields.
    body: Vec<(Vec<u8>, bool)>,
    trailers: Vec<(u8, u8)>,
}

/// (body, consumed, done) or an error, feeding `pieces` one after the other.
fn decode(pieces: &[&[u8]]) -> Result<(Vec<u8>, usize, bool), ()> {
    let mut decoder = ChunkedDecoder::new(LIMIT);
    let (mut out, mut pending, mut consumed) = (Vec::new(), Vec::new(), 0);
    for piece in pieces {
        pending.extend_from_slice(piece);
        let used = decoder.feed(&pending, &mut out).map_err(|_| ())?;
        consumed += used;
        pending.drain(..used);
        if decoder.is_done() {
            break;
        }
    }
    Ok((out, consumed, decoder.is_done()))
}

/// RFC 9112 §7.1, as plainly as it reads: chunk-size [chunk-ext] CRLF chunk-data CRLF ...
/// last-chunk trailer-section CRLF. The body and the bytes it took, if complete.
fn reference(input: &[u8]) -> Option<(Vec<u8>, usize)> {
    let line = |at: usize| -> Option<(&[u8], usize)> {
        let rel = input.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        Some((&input[at..at + rel], at + rel + 2))
    };
    let (mut body, mut at) = (Vec::new(), 0);
    loop {
        let (size_line, next) = line(at)?;
        let digits: Vec<u8> = size_line.iter().copied().take_while(u8::is_ascii_hexdigit).collect();
        let size = u64::from_str_radix(std::str::from_utf8(&digits).ok()?, 16).ok()?;
        at = next;
        if size == 0 {
            // The trailer section: field lines up to the empty line.
            loop {
                let (field, next) = line(at)?;
                at = next;
                if field.is_empty() {
                    return Some((body, at));
                }
            }
        }
        let end = at.checked_add(usize::try_from(size).ok()?)?;
        body.extend_from_slice(input.get(at..end)?);
        if input.get(end..end + 2)? != b"\r\n" {
            return None;
        }
        at = end + 2;
    }
}

fuzz_target!(|input: Input| {
    let whole = decode(&[&input.raw]);
    let split = decode(&pieces::split(&input.raw, &input.cuts));
    assert_eq!(whole, split, "fed in pieces, the decoder decoded otherwise");
    if let Ok((body, consumed, true)) = &whole {
        let (expected, used) = reference(&input.raw).expect("the reference decoder refuses a completed body");
        assert_eq!((body, *consumed), (&expected, used));
    }

    // A body chunked here decodes to itself.
    let mut encoded = Vec::new();
    let mut expected = Vec::new();
    for (piece, ext) in &input.body {
        if piece.is_empty() {
            continue;
        }
        encoded.extend_from_slice(format!("{:X}", piece.len()).as_bytes());
        if *ext {
            encoded.extend_from_slice(b" ;name=\"value\"");
        }
        encoded.extend_from_slice(b"\r\n");
        encoded.extend_from_slice(piece);
        encoded.extend_from_slice(b"\r\n");
        expected.extend_from_slice(piece);
    }
    encoded.extend_from_slice(b"0\r\n");
    // Within the server's trailer limit (16 KiB): 64 fields of at most 14 bytes.
    for (name, value) in input.trailers.iter().take(64) {
        encoded.extend_from_slice(format!("x-t{}: v{}\r\n", name, value).as_bytes());
    }
    encoded.extend_from_slice(b"\r\n");
    if expected.len() as u64 <= LIMIT {
        let (body, consumed, done) = decode(&[&encoded]).expect("a well-chunked body is refused");
        assert!(done);
        assert_eq!((body, consumed), (expected, encoded.len()));
    }
});
