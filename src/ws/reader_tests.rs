//! Message assembly checks: fragmentation, control frames between fragments, fail-fast UTF-8,
//! size limits, close frames, compressed messages through a fake inflater, and fuzz-style
//! runs showing that how the bytes are chunked never changes the outcome.

use super::*;
use crate::testing::Rng;
use std::sync::{Arc, Mutex};

/// The reader with its payloads in `Vec`s (the server's assembles binary ones in `bytes`).
type Reader = MessageReader;

/// A masked client frame; `lax`: encode the length in 8 bytes whatever it is.
fn frame_with(first: u8, payload: &[u8], key: [u8; 4], lax: bool) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![first];
    if lax || len > 0xFFFF {
        out.push(0x80 | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    } else if len > 125 {
        out.push(0x80 | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0x80 | len as u8);
    }
    out.extend_from_slice(&key);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    out
}

fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
    frame_with(first, payload, [0xA5, 0x3C, 0x0F, 0x81], false)
}

/// Each inflate call's (input length, fin).
type CallLog = Arc<Mutex<Vec<(usize, bool)>>>;

/// "Decompression" that copies, honouring the limit; logs its calls.
struct Identity(CallLog);

impl Inflate for Identity {
    fn inflate(&mut self, input: &[u8], fin: bool, limit: usize, out: &mut Vec<u8>) -> Result<(), InflateError> {
        self.0.lock().unwrap().push((input.len(), fin));
        if out.len() + input.len() > limit {
            return Err(InflateError::TooBig);
        }
        out.extend_from_slice(input);
        Ok(())
    }
}

/// An inflater that finds every input corrupt.
struct Corrupt;

impl Inflate for Corrupt {
    fn inflate(&mut self, _: &[u8], _: bool, _: usize, _: &mut Vec<u8>) -> Result<(), InflateError> {
        Err(InflateError::Corrupt)
    }
}

fn compressing(max_size: usize) -> (MessageReader, CallLog) {
    let log = Arc::new(Mutex::new(Vec::new()));
    (Reader::new(max_size, Some(Box::new(Identity(log.clone())))), log)
}

/// Feed `input` in chunks of the sizes `chunk` gives, collecting messages until an error.
fn run(reader: &mut MessageReader, input: &[u8], chunk: &mut dyn FnMut() -> usize) -> (Vec<Message>, Option<u16>) {
    let mut messages = Vec::new();
    let mut at = 0;
    while at < input.len() {
        let end = (at + chunk().max(1)).min(input.len());
        let mut piece = &input[at..end];
        loop {
            match reader.feed(piece) {
                Ok((used, Some(message))) => {
                    messages.push(message);
                    piece = &piece[used..];
                }
                Ok((used, None)) => {
                    assert_eq!(used, piece.len(), "None must mean all consumed");
                    break;
                }
                Err(err) => {
                    assert_eq!(reader.feed(b"more"), Err(err), "the error repeats");
                    return (messages, Some(err.code));
                }
            }
        }
        at = end;
    }
    (messages, None)
}

fn run_whole(reader: &mut MessageReader, input: &[u8]) -> (Vec<Message>, Option<u16>) {
    run(reader, input, &mut || usize::MAX / 2)
}

fn text(s: &str) -> Message {
    Message::Text(s.to_owned())
}

#[test]
fn single_frame_messages() {
    let big = vec![7u8; 70_000];
    let input = [frame(0x81, "héllo".as_bytes()), frame(0x82, &big), frame(0x82, b""), frame(0x81, b"")].concat();
    let (messages, err) = run_whole(&mut Reader::new(100_000, None), &input);
    assert_eq!(err, None);
    assert_eq!(messages, [text("héllo"), Message::Binary(big), Message::Binary(vec![]), text("")]);
}

#[test]
fn fragments_with_control_frames_between() {
    let input =
        [frame(0x01, b"ab"), frame(0x89, b"ping"), frame(0x00, b""), frame(0x8A, b"pong"), frame(0x80, b"cd")].concat();
    let (messages, err) = run_whole(&mut Reader::new(100, None), &input);
    assert_eq!(err, None);
    assert_eq!(messages, [Message::Ping(b"ping".to_vec()), Message::Pong(b"pong".to_vec()), text("abcd")]);
}

#[test]
fn characters_split_across_frames() {
    let smile = "😀".as_bytes();
    let input = [frame(0x01, &smile[..1]), frame(0x00, &smile[1..3]), frame(0x80, &smile[3..])].concat();
    let (messages, err) = run_whole(&mut Reader::new(100, None), &input);
    assert_eq!((messages, err), (vec![text("😀")], None));
}

#[test]
fn utf8_fails_fast_across_frames() {
    let mut reader = Reader::new(1000, None);
    let first = frame(0x01, "κόσμε".as_bytes());
    assert_eq!(reader.feed(&first), Ok((first.len(), None)));
    // "μ" then an overlong encoding's first bytes, in a non-final frame: refused at once.
    let bad = frame(0x00, b"\xce\xbc\xe0\x80");
    assert_eq!(reader.feed(&bad).unwrap_err().code, 1007);
}

#[test]
fn utf8_fails_fast_within_a_frame() {
    let mut payload = b"valid text ".to_vec();
    payload.extend_from_slice(b"\xed\xa0\x80"); // a surrogate
    payload.extend_from_slice(&[b'z'; 50]);
    let whole = frame(0x81, &payload);
    let mut reader = Reader::new(1000, None);
    assert_eq!(reader.feed(&whole[..6 + 12]), Ok((18, None)));
    // The bad byte arrives; the frame is far from complete, yet the reader fails now.
    assert_eq!(reader.feed(&whole[18..20]).unwrap_err().code, 1007);
}

#[test]
fn incomplete_character_at_message_end_is_invalid() {
    let (_, err) = run_whole(&mut Reader::new(100, None), &frame(0x81, b"ok\xe2\x82"));
    assert_eq!(err, Some(1007));
    let split = [frame(0x01, b"ok\xe2\x82"), frame(0x80, b"")].concat();
    assert_eq!(run_whole(&mut Reader::new(100, None), &split).1, Some(1007));
    let binary = frame(0x82, b"\xe2\x82");
    assert_eq!(run_whole(&mut Reader::new(100, None), &binary).1, None);
}

#[test]
fn fragmentation_protocol_errors() {
    let cases: [&[Vec<u8>]; 4] = [
        &[frame(0x80, b"x")],
        &[frame(0x00, b"x")],
        &[frame(0x01, b"a"), frame(0x81, b"b")],
        &[frame(0x02, b"a"), frame(0x89, b""), frame(0x02, b"b")],
    ];
    for case in cases {
        let (_, err) = run_whole(&mut Reader::new(100, None), &case.concat());
        assert_eq!(err, Some(1002));
    }
    for bad_control in [frame(0x09, b""), frame(0x89, &[0; 126]), frame(0x88, b"\x03")] {
        assert_eq!(run_whole(&mut Reader::new(100, None), &bad_control).1, Some(1002));
    }
}

#[test]
fn too_big_is_refused_from_the_header() {
    let mut reader = Reader::new(100, None);
    let header = &frame(0x82, &[0; 101])[..8];
    assert_eq!(reader.feed(header).unwrap_err().code, 1009);
    let exact = frame(0x82, &[0; 100]);
    assert_eq!(run_whole(&mut Reader::new(100, None), &exact).0.len(), 1);
    let mut reader = Reader::new(100, None);
    assert!(reader.feed(&frame(0x02, &[0; 60])).is_ok());
    assert_eq!(reader.feed(&frame(0x80, &[0; 41])[..6]).unwrap_err().code, 1009);
}

#[test]
fn huge_declared_length_reserves_little() {
    let mut reader = Reader::new(1 << 30, None);
    let header = &frame_with(0x82, &[], [1, 2, 3, 4], true)[..];
    let mut huge = header.to_vec();
    huge[2..10].copy_from_slice(&(1u64 << 29).to_be_bytes());
    assert_eq!(reader.feed(&huge), Ok((14, None)));
    assert!(reader.buffered_bytes() <= RESERVE_AHEAD, "{}", reader.buffered_bytes());
}

#[test]
fn memory_stays_under_max_size_plus_a_header() {
    let max_size = 5000;
    let input = [frame(0x01, &[b'a'; 1000]), frame(0x89, b"p"), frame(0x80, &[b'b'; 4000])].concat();
    let mut reader = Reader::new(max_size, None);
    let mut most = 0;
    for chunk in input.chunks(7) {
        let mut piece = chunk;
        while let (used, Some(_)) = reader.feed(piece).unwrap() {
            piece = &piece[used..];
        }
        most = most.max(reader.buffered_bytes());
    }
    assert!(most >= max_size && most <= max_size + MAX_HEADER_LEN + 125, "{most}");
    assert_eq!(reader.buffered_bytes(), 0, "a delivered message leaves nothing held");
}

#[test]
fn close_frames() {
    let (messages, err) = run_whole(&mut Reader::new(100, None), &frame(0x88, b"\x03\xe9bye"));
    assert_eq!((messages, err), (vec![Message::Close { code: Some(1001), reason: "bye".into() }], None));
    let mut reader = Reader::new(100, None);
    let (messages, _) = run_whole(&mut reader, &[frame(0x88, b""), frame(0x81, b"after"), vec![0xFF; 9]].concat());
    assert_eq!(messages, [Message::Close { code: None, reason: String::new() }]);
    assert!(reader.is_closed());
    for (payload, code) in [(&b"\x03\xed"[..], 1002), (b"\x00\x00", 1002), (b"\x03\xe8\xff", 1007)] {
        assert_eq!(run_whole(&mut Reader::new(100, None), &frame(0x88, payload)).1, Some(code));
    }
}

#[test]
fn compressed_messages_go_through_the_inflater() {
    let (mut reader, log) = compressing(100_000);
    let big: Vec<u8> = (0..20_000).map(|i| (i % 251) as u8).collect();
    let input = [frame(0x41, b"ab"), frame(0x00, "ç".as_bytes()), frame(0x80, b""), frame(0xC2, &big)].concat();
    let (messages, err) = run_whole(&mut reader, &input);
    assert_eq!(err, None);
    assert_eq!(messages, [text("abç"), Message::Binary(big)]);
    let calls = log.lock().unwrap().clone();
    assert_eq!(calls[..3], [(2, false), (2, false), (0, true)]);
    // The 20 000-byte frame went in pieces, the message's end with the last one.
    assert_eq!(calls[3..], [(8192, false), (8192, false), (3616, true)]);
}

#[test]
fn rsv1_needs_negotiation_and_a_first_frame() {
    assert_eq!(run_whole(&mut Reader::new(100, None), &frame(0xC1, b"x")).1, Some(1002));
    let continuation = [frame(0x01, b"a"), frame(0xC0, b"b")].concat();
    assert_eq!(run_whole(&mut compressing(100).0, &continuation).1, Some(1002));
    // An uncompressed message is fine on a connection that negotiated compression.
    assert_eq!(run_whole(&mut compressing(100).0, &frame(0x81, b"plain")).0, [text("plain")]);
}

#[test]
fn inflater_errors_map_to_close_codes() {
    assert_eq!(run_whole(&mut compressing(10).0, &frame(0xC2, &[1; 11])).1, Some(1009));
    let mut corrupt = Reader::new(100, Some(Box::new(Corrupt)));
    assert_eq!(run_whole(&mut corrupt, &frame(0xC2, b"ab")).1, Some(1007));
    assert_eq!(run_whole(&mut compressing(100).0, &frame(0xC1, b"\xff")).1, Some(1007));
}

/// A valid stream of random messages (fragmented, control frames between fragments, lax
/// length encodings, compressed when `compress`) and the messages it carries.
fn random_stream(rng: &mut Rng, compress: bool) -> (Vec<u8>, Vec<Message>) {
    const PIECES: [&str; 6] = ["a", "é", "€", "😀", "\0", "zz"];
    let (mut input, mut expected) = (Vec::new(), Vec::new());
    for _ in 0..1 + rng.below(6) {
        let is_text = rng.below(2) == 0;
        let payload: Vec<u8> = if is_text {
            (0..rng.below(300)).flat_map(|_| PIECES[rng.below(6)].bytes()).collect()
        } else {
            (0..rng.below(300)).map(|_| rng.next() as u8).collect()
        };
        let mut cuts: Vec<usize> = (0..rng.below(4)).map(|_| rng.below(payload.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.push(payload.len());
        let mut start = 0;
        for (i, &cut) in cuts.iter().enumerate() {
            let mut first = if i == 0 { 1 + u8::from(!is_text) } else { 0 };
            if i == 0 && compress {
                first |= 0x40;
            }
            if i + 1 == cuts.len() {
                first |= 0x80;
            }
            let key = (rng.next() as u32).to_le_bytes();
            input.extend(frame_with(first, &payload[start..cut], key, rng.below(4) == 0));
            start = cut;
            if i + 1 == cuts.len() {
                expected.push(match is_text {
                    true => Message::Text(String::from_utf8(payload.clone()).unwrap()),
                    false => Message::Binary(payload.clone()),
                });
            }
            if rng.below(3) == 0 {
                let ping: Vec<u8> = (0..rng.below(126)).map(|_| rng.next() as u8).collect();
                input.extend(frame_with(0x89, &ping, key, false));
                expected.push(Message::Ping(ping));
            }
        }
    }
    (input, expected)
}

#[test]
fn chunking_never_changes_the_outcome() {
    let mut rng = Rng(0x5EED);
    for round in 0..300 {
        let compress = round % 2 == 1;
        let new_reader = || {
            if compress {
                compressing(2000).0
            } else {
                Reader::new(2000, None)
            }
        };
        let (mut input, expected) = random_stream(&mut rng, compress);
        let (whole, err) = run_whole(&mut new_reader(), &input);
        assert_eq!((&whole, err), (&expected, None), "round {round}");
        let bytewise = run(&mut new_reader(), &input, &mut || 1);
        assert_eq!(bytewise, (expected.clone(), None), "round {round}");
        // Corrupt a few bytes: the stream may now fail, but the same way however it is cut.
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(input.len());
            input[at] ^= 1 << rng.below(8);
        }
        let whole = run_whole(&mut new_reader(), &input);
        let mut chunk_rng = Rng(round + 1);
        let chunked = run(&mut new_reader(), &input, &mut || chunk_rng.below(40));
        assert_eq!(whole.0, chunked.0, "round {round}");
        if whole.1 != chunked.1 {
            // One inflate call can both overflow the limit and produce invalid UTF-8; which
            // is seen first depends on how much input the call got. Uncompressed messages
            // are refused for size from the header, before any of their payload.
            assert!(compress, "round {round}");
            let mut codes = [whole.1, chunked.1];
            codes.sort();
            assert_eq!(codes, [Some(1007), Some(1009)], "round {round}");
        }
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(7);
    for round in 0..2000 {
        let len = rng.below(400);
        let mut input: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        // Mostly plausible first bytes and the mask bit, so parsing gets past the header.
        for at in (0..len).step_by(1 + rng.below(60)) {
            if rng.below(2) == 0 {
                input[at] = [0x81, 0x82, 0x01, 0x00, 0x80, 0x89, 0x88, 0xC1][rng.below(8)];
                if let Some(second) = input.get_mut(at + 1) {
                    *second |= 0x80;
                }
            }
        }
        let mut reader = if round % 2 == 0 { Reader::new(300, None) } else { compressing(300).0 };
        let mut chunk_rng = Rng(round + 1);
        let _ = run(&mut reader, &input, &mut || chunk_rng.below(20));
    }
}
