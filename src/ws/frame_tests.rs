//! Frame codec checks: header parsing (every refusal, incremental arrival, length forms),
//! unmasking against a byte-at-a-time reference, encoding, and close payloads.

use super::*;
use crate::testing::Rng;

/// How a test frame encodes its payload length; `Minimal` as a sender must, the others as a
/// lax sender may.
#[derive(Clone, Copy)]
enum LenForm {
    Minimal,
    Forced16,
    Forced64,
}

/// A client frame: first byte as given, masked with `key`.
fn client_frame(first: u8, payload: &[u8], key: [u8; 4], form: LenForm) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![first];
    match form {
        LenForm::Minimal if len < 126 => out.push(0x80 | len as u8),
        LenForm::Minimal if len <= 0xFFFF => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        LenForm::Forced16 => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        LenForm::Minimal | LenForm::Forced64 => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&key);
    let start = out.len();
    out.extend_from_slice(payload);
    for (i, b) in out[start..].iter_mut().enumerate() {
        *b ^= key[i % 4];
    }
    out
}

const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

fn parse(buf: &[u8]) -> Result<Option<FrameHeader>, ProtocolError> {
    parse_header(buf, u64::MAX, false)
}

fn error_code(buf: &[u8]) -> u16 {
    parse(buf).expect_err("header must be refused").code
}

#[test]
fn parses_each_length_form() {
    for (len, form, header_len) in [
        (0, LenForm::Minimal, 6),
        (125, LenForm::Minimal, 6),
        (126, LenForm::Minimal, 8),
        (65535, LenForm::Minimal, 8),
        (65536, LenForm::Minimal, 14),
        (5, LenForm::Forced16, 8),
        (5, LenForm::Forced64, 14),
    ] {
        let frame = client_frame(0x82, &vec![7; len], KEY, form);
        let h = parse(&frame).unwrap().unwrap();
        assert_eq!((h.fin, h.rsv1, h.opcode, h.mask), (true, false, OpCode::Binary, Some(KEY)));
        assert_eq!((h.payload_len, h.header_len), (len as u64, header_len));
    }
}

#[test]
fn incomplete_header_asks_for_more_at_every_prefix() {
    for form in [LenForm::Minimal, LenForm::Forced16, LenForm::Forced64] {
        let frame = client_frame(0x01, b"hello", KEY, form);
        let header_len = parse(&frame).unwrap().unwrap().header_len;
        for cut in 0..header_len {
            assert_eq!(parse(&frame[..cut]), Ok(None), "cut at {cut}");
        }
        let h = parse(&frame[..header_len]).unwrap().unwrap();
        assert_eq!((h.fin, h.opcode, h.payload_len), (false, OpCode::Text, 5));
    }
}

#[test]
fn refuses_unmasked_reserved_bits_and_opcodes() {
    let mut unmasked = client_frame(0x81, b"hi", KEY, LenForm::Minimal);
    unmasked[1] &= 0x7F;
    assert_eq!(error_code(&unmasked), 1002);
    for first in [0xA1, 0x91, 0xC1] {
        // RSV2, RSV3, and RSV1 without a negotiated extension.
        assert_eq!(error_code(&client_frame(first, b"hi", KEY, LenForm::Minimal)), 1002);
    }
    for op in [3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF] {
        let frame = client_frame(0x80 | op, b"", KEY, LenForm::Minimal);
        // Refused from the first two bytes, before the rest of the header arrives.
        assert_eq!(parse(&frame[..2]).unwrap_err().code, 1002, "opcode {op}");
    }
}

#[test]
fn rsv1_only_on_a_data_message_first_frame_when_negotiated() {
    let first = client_frame(0xC1, b"x", KEY, LenForm::Minimal);
    assert!(parse_header(&first, u64::MAX, true).unwrap().unwrap().rsv1);
    assert_eq!(parse_header(&first, u64::MAX, false).unwrap_err().code, 1002);
    for first_byte in [0xC0, 0xC8, 0xC9, 0xCA] {
        let frame = client_frame(first_byte, b"", KEY, LenForm::Minimal);
        assert_eq!(parse_header(&frame, u64::MAX, true).unwrap_err().code, 1002);
    }
}

#[test]
fn control_frames_must_be_final_and_short() {
    for op in [0x8, 0x9, 0xA] {
        assert!(parse(&client_frame(0x80 | op, &[0; 125], KEY, LenForm::Minimal)).unwrap().is_some());
        assert_eq!(error_code(&client_frame(op, b"", KEY, LenForm::Minimal)), 1002);
        assert_eq!(error_code(&client_frame(0x80 | op, &[0; 126], KEY, LenForm::Minimal)), 1002);
        // A lax length encoding of a short payload is fine; of a long one, not.
        assert!(parse(&client_frame(0x80 | op, &[0; 4], KEY, LenForm::Forced64)).unwrap().is_some());
        assert_eq!(error_code(&client_frame(0x80 | op, &[0; 200], KEY, LenForm::Forced16)), 1002);
    }
}

#[test]
fn refuses_64_bit_length_with_top_bit_as_soon_as_seen() {
    let header = [0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4];
    assert_eq!(parse(&header[..3]).unwrap_err().code, 1002);
    assert_eq!(parse(&header).unwrap_err().code, 1002);
    let mut largest = header;
    largest[2..10].copy_from_slice(&(i64::MAX as u64).to_be_bytes());
    assert_eq!(parse(&largest).unwrap().unwrap().payload_len, i64::MAX as u64);
}

#[test]
fn data_frame_over_max_payload_is_too_big() {
    let frame = client_frame(0x82, &[1; 300], KEY, LenForm::Minimal);
    assert_eq!(parse_header(&frame, 300, false).unwrap().unwrap().payload_len, 300);
    let err = parse_header(&frame, 299, false).unwrap_err();
    assert_eq!(err.code, 1009);
    // Control frames are bounded by the RFC's 125 bytes only.
    let ping = client_frame(0x89, &[1; 100], KEY, LenForm::Minimal);
    assert!(parse_header(&ping, 10, false).unwrap().is_some());
}

fn naive_unmask(data: &mut [u8], key: [u8; 4], offset: usize) {
    for (i, b) in data.iter_mut().enumerate() {
        *b ^= key[(offset + i) % 4];
    }
}

#[test]
fn unmask_matches_bytewise_reference() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..2000 {
        let len = rng.below(80);
        let offset = rng.below(1000);
        let key = (rng.next() as u32).to_le_bytes();
        let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let (mut fast, mut slow) = (data.clone(), data.clone());
        unmask(&mut fast, key, offset);
        naive_unmask(&mut slow, key, offset);
        assert_eq!(fast, slow, "len {len} offset {offset}");
        // The copying form, appended after bytes already there.
        let mut appended = vec![7u8; rng.below(5)];
        let before = appended.clone();
        extend_unmasked(&mut appended, &data, key, offset);
        assert_eq!(&appended[..before.len()], &before[..]);
        assert_eq!(&appended[before.len()..], &slow[..], "len {len} offset {offset}");
    }
}

#[test]
fn unmask_in_pieces_equals_unmask_whole() {
    let mut rng = Rng(42);
    let data: Vec<u8> = (0..1000).map(|_| rng.next() as u8).collect();
    let mut whole = data.clone();
    unmask(&mut whole, KEY, 0);
    let mut pieces = data.clone();
    let mut at = 0;
    while at < pieces.len() {
        let end = (at + 1 + rng.below(37)).min(pieces.len());
        unmask(&mut pieces[at..end], KEY, at);
        at = end;
    }
    assert_eq!(pieces, whole);
    assert_ne!(whole, data);
}

/// Decode a server frame written by `write_header`/`write_frame`: (first byte, payload).
fn decode_server_frame(frame: &[u8]) -> (u8, &[u8]) {
    assert_eq!(frame[1] & 0x80, 0, "server frames are unmasked");
    let (len, at) = match frame[1] {
        126 => (u16::from_be_bytes([frame[2], frame[3]]) as usize, 4),
        127 => (u64::from_be_bytes(frame[2..10].try_into().unwrap()) as usize, 10),
        n => (n as usize, 2),
    };
    assert_eq!(frame.len(), at + len);
    (frame[0], &frame[at..])
}

#[test]
fn write_header_uses_minimal_length_forms() {
    for (len, header_len) in [(0, 2), (125, 2), (126, 4), (65535, 4), (65536, 10), (70000, 10)] {
        let mut out = Vec::new();
        write_header(&mut out, true, false, OpCode::Binary, len);
        assert_eq!(out.len(), header_len, "len {len}");
        out.resize(header_len + len, 0);
        assert_eq!(decode_server_frame(&out).1.len(), len);
    }
}

#[test]
fn write_frame_sets_flags_and_payload() {
    let mut out = vec![9];
    write_frame(&mut out, OpCode::Text, true, b"abc");
    assert_eq!(decode_server_frame(&out[1..]), (0xC1, &b"abc"[..]));
    let mut fragment = Vec::new();
    write_header(&mut fragment, false, false, OpCode::Continuation, 3);
    assert_eq!(fragment, [0x00, 3]);
}

#[test]
fn close_codes_allowed_on_the_wire() {
    for code in [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999] {
        assert!(valid_close_code(code), "{code}");
    }
    for code in [0, 999, 1004, 1005, 1006, 1015, 1016, 2000, 2999, 5000, 65535] {
        assert!(!valid_close_code(code), "{code}");
    }
}

#[test]
fn close_reason_truncated_at_a_char_boundary() {
    for filler in ["a", "é", "€", "😀"] {
        let reason = filler.repeat(200);
        let mut out = Vec::new();
        write_close_frame(&mut out, Some(1001), &reason);
        let (first, payload) = decode_server_frame(&out);
        assert_eq!(first, 0x88);
        assert!(payload.len() <= 125);
        assert_eq!(&payload[..2], &1001u16.to_be_bytes());
        let kept = std::str::from_utf8(&payload[2..]).unwrap();
        assert!(reason.starts_with(kept));
        assert!(kept.len() > MAX_CLOSE_REASON - filler.len(), "{filler}: kept {}", kept.len());
    }
    assert_eq!(truncate_reason("short"), "short");
    let mut empty = Vec::new();
    write_close_frame(&mut empty, None, "ignored");
    assert_eq!(empty, [0x88, 0]);
}

#[test]
fn close_payload_parsing() {
    assert_eq!(parse_close_payload(b""), Ok((None, "")));
    assert_eq!(parse_close_payload(b"\x03\xe8bye"), Ok((Some(1000), "bye")));
    assert_eq!(parse_close_payload(b"\x0f\xa0"), Ok((Some(4000), "")));
    assert_eq!(parse_close_payload(b"\x03").unwrap_err().code, 1002);
    assert_eq!(parse_close_payload(b"\x03\xed").unwrap_err().code, 1002); // 1005
    assert_eq!(parse_close_payload(b"\x03\xe8\xff").unwrap_err().code, 1007);
    assert_eq!(parse_close_payload(b"\x03\xe8\xce").unwrap_err().code, 1007);
}
