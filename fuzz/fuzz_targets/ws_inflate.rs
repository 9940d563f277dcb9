//! permessage-deflate inflation with its size limit (the server's `Inflater`, zlib-rs).
//! Properties: it never produces more than the limit, whatever the input (a bomb stops at
//! the limit); what it inflates equals what another implementation (miniz_oxide) inflates
//! from the same bytes; data deflated by that other implementation inflates to itself, or
//! fails as too big exactly when it is over the limit.
#![no_main]

use _native::fuzzing::{Inflate, InflateError, Inflater, Negotiated};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use miniz_oxide::inflate::decompress_to_vec_with_limit;

#[derive(Arbitrary, Debug)]
struct Input {
    raw: Vec<u8>,
    limit: u16,
    window_bits: u8,
    data: Vec<u8>,
    repeat: u8,
    level: u8,
}

/// The tail RFC 7692 §7.2.2 strips from each message, which the inflater puts back.
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

fn inflater(window_bits: u8) -> Inflater {
    Inflater::new(&Negotiated {
        server_no_context_takeover: true,
        client_no_context_takeover: true,
        server_max_window_bits: 15,
        client_max_window_bits: 8 + window_bits % 8,
    })
}

fuzz_target!(|input: Input| {
    let limit = usize::from(input.limit);
    let mut out = Vec::new();
    let result = inflater(input.window_bits).inflate(&input.raw, true, limit, &mut out);
    assert!(out.len() <= limit, "{} bytes inflated past the limit of {limit}", out.len());
    // The reference reads the same stream: the message, then the tail.
    let mut stream = input.raw.clone();
    stream.extend_from_slice(&TAIL);
    if let Ok(()) = result {
        if let Ok(reference) = decompress_to_vec_with_limit(&stream, limit) {
            assert_eq!(out, reference, "the inflaters disagree");
        }
    }

    // A message deflated by the other implementation (highly repetitive, so it may be a
    // small bomb against the limit).
    let mut data = Vec::new();
    for _ in 0..=input.repeat {
        data.extend_from_slice(&input.data);
    }
    let compressed = miniz_oxide::deflate::compress_to_vec(&data, input.level % 10);
    let mut out = Vec::new();
    match inflater(7).inflate(&compressed, true, limit, &mut out) {
        Ok(()) => assert_eq!(out, data),
        Err(InflateError::TooBig) => assert!(data.len() > limit, "{} bytes refused under {limit}", data.len()),
        Err(e) => panic!("valid DEFLATE refused: {e:?}"),
    }
});
