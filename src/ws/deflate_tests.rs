//! Tests of permessage-deflate: negotiation against real and malformed offers, round trips
//! through `Deflater` and `Inflater`, interop with plain raw DEFLATE, and the inflate limit.

use super::*;

/// A server that asks for a 12-bit window (as the `websockets` library's does), so that the
/// responses show the parameter; the default's own test is `the_default_takes_the_full_window`.
fn default_config() -> ServerConfig {
    ServerConfig { server_max_window_bits: 12, ..ServerConfig::default() }
}

#[test]
fn the_default_takes_the_full_window() {
    let config = ServerConfig::default();
    assert_eq!(response_with("permessage-deflate", &config).as_deref(), Some("permessage-deflate"));
    let (n, response) = negotiate(["permessage-deflate; client_max_window_bits"], &config).expect("accepted");
    assert_eq!(response, "permessage-deflate");
    assert_eq!((n.server_max_window_bits, n.client_max_window_bits), (15, 15));
}

fn negotiated(server_bits: u8, client_bits: u8, no_takeover: bool) -> Negotiated {
    Negotiated {
        server_no_context_takeover: no_takeover,
        client_no_context_takeover: no_takeover,
        server_max_window_bits: server_bits,
        client_max_window_bits: client_bits,
    }
}

/// Negotiates one header field value with `config`, returning the response header.
fn response_with(offer: &str, config: &ServerConfig) -> Option<String> {
    negotiate([offer], config).map(|(_, response)| response)
}

fn response(offer: &str) -> Option<String> {
    response_with(offer, &default_config())
}

fn accepted(offer: &str) -> Negotiated {
    negotiate([offer], &default_config()).expect("offer accepted").0
}

/// JSON-like text: compressible, but not trivially.
fn json_message(len: usize, seed: u32) -> Vec<u8> {
    let mut text = String::new();
    let mut state = seed;
    while text.len() < len {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        text.push_str(&format!(
            "{{\"id\":{},\"user\":\"user{}\",\"score\":{},\"tags\":[\"t{}\"]}},",
            state % 10_000,
            state % 977,
            state % 101,
            state % 13
        ));
    }
    text.truncate(len);
    text.into_bytes()
}

fn inflate_whole(inflater: &mut Inflater, payload: &[u8], limit: usize) -> Result<Vec<u8>, InflateError> {
    let mut out = Vec::new();
    inflater.inflate(payload, true, limit, &mut out).map(|()| out)
}

fn compressed(deflater: &mut Deflater, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    deflater.compress(data, &mut out);
    out
}

/// Compresses with flate2 directly, the way any raw-DEFLATE peer does: sync flush, tail
/// stripped (`bits` = 15: a peer that never heard of window negotiation).
fn plain_raw_deflate(data: &[u8], bits: u8) -> Vec<u8> {
    let mut compressor = Compress::new_with_window_bits(Compression::new(6), false, bits);
    let mut out = Vec::with_capacity(data.len() + 1024);
    compressor.compress_vec(data, &mut out, FlushCompress::Sync).unwrap();
    assert_eq!(compressor.total_in(), data.len() as u64);
    assert!(out.ends_with(&FLUSH_TAIL));
    out.truncate(out.len() - FLUSH_TAIL.len());
    out
}

/// A message of `size` zero bytes, compressed at about 1000:1.
fn bomb(size: usize) -> Vec<u8> {
    let zeros = vec![0u8; 1 << 20];
    let mut compressor = Compress::new_with_window_bits(Compression::new(6), false, 15);
    let mut out = Vec::with_capacity(size / 512);
    let mut remaining = size;
    while remaining > 0 {
        let chunk = &zeros[..remaining.min(zeros.len())];
        remaining -= chunk.len();
        let flush = if remaining == 0 { FlushCompress::Sync } else { FlushCompress::None };
        let start = compressor.total_in();
        loop {
            let done = (compressor.total_in() - start) as usize;
            compressor.compress_vec(&chunk[done..], &mut out, flush).unwrap();
            if compressor.total_in() - start == chunk.len() as u64 && out.len() < out.capacity() {
                break;
            }
            out.reserve(1 << 16);
        }
    }
    out.truncate(out.len() - FLUSH_TAIL.len());
    out
}

// --- Negotiation ---

#[test]
fn plain_offer_gets_the_smaller_server_window() {
    let (agreed, response) = negotiate(["permessage-deflate"], &default_config()).unwrap();
    assert_eq!(response, "permessage-deflate; server_max_window_bits=12");
    assert_eq!(agreed, negotiated(12, 15, false));
}

#[test]
fn chromium_offer() {
    let offer = "permessage-deflate; client_max_window_bits";
    assert_eq!(response(offer).unwrap(), "permessage-deflate; server_max_window_bits=12");
    assert_eq!(accepted(offer), negotiated(12, 15, false));
}

#[test]
fn chromium_offer_with_a_client_window_configured() {
    let config = ServerConfig { client_max_window_bits: 12, ..default_config() };
    let (agreed, response) = negotiate(["permessage-deflate; client_max_window_bits"], &config).unwrap();
    assert_eq!(response, "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12");
    assert_eq!(agreed, negotiated(12, 12, false));
}

#[test]
fn python_websockets_client_offers() {
    // Its default offer, then one from a client configured with server_no_context_takeover and
    // server_max_window_bits=10.
    assert_eq!(
        response("permessage-deflate; client_max_window_bits").unwrap(),
        "permessage-deflate; server_max_window_bits=12"
    );
    let offer = "permessage-deflate; server_no_context_takeover; server_max_window_bits=10; client_max_window_bits";
    let (agreed, response) = negotiate([offer], &default_config()).unwrap();
    assert_eq!(response, "permessage-deflate; server_no_context_takeover; server_max_window_bits=10");
    assert_eq!(
        agreed,
        Negotiated {
            server_no_context_takeover: true,
            client_no_context_takeover: false,
            server_max_window_bits: 10,
            client_max_window_bits: 15,
        }
    );
}

#[test]
fn context_takeover_parameters_are_echoed() {
    let (agreed, response) = negotiate(["permessage-deflate; server_no_context_takeover"], &default_config()).unwrap();
    assert_eq!(response, "permessage-deflate; server_no_context_takeover; server_max_window_bits=12");
    assert!(agreed.server_no_context_takeover && !agreed.client_no_context_takeover);

    let (agreed, response) = negotiate(["permessage-deflate; client_no_context_takeover"], &default_config()).unwrap();
    assert_eq!(response, "permessage-deflate; client_no_context_takeover; server_max_window_bits=12");
    assert!(!agreed.server_no_context_takeover && agreed.client_no_context_takeover);
}

#[test]
fn configured_no_context_takeover_is_announced_unasked() {
    let config =
        ServerConfig { server_no_context_takeover: true, client_no_context_takeover: true, ..default_config() };
    let (agreed, response) = negotiate(["permessage-deflate"], &config).unwrap();
    assert_eq!(
        response,
        "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=12"
    );
    assert_eq!(agreed, negotiated(12, 15, true));
}

#[test]
fn server_window_is_the_smaller_of_offer_and_config() {
    assert_eq!(accepted("permessage-deflate; server_max_window_bits=10").server_max_window_bits, 10);
    assert_eq!(
        response("permessage-deflate; server_max_window_bits=10").unwrap(),
        "permessage-deflate; server_max_window_bits=10"
    );
    assert_eq!(accepted("permessage-deflate; server_max_window_bits=9").server_max_window_bits, 9);
    // Offered 15: echoed (required when offered) with the server's smaller value.
    assert_eq!(
        response("permessage-deflate; server_max_window_bits=15").unwrap(),
        "permessage-deflate; server_max_window_bits=12"
    );
}

#[test]
fn server_window_15_is_sent_only_when_offered() {
    let config = ServerConfig { server_max_window_bits: 15, ..default_config() };
    assert_eq!(response_with("permessage-deflate", &config).unwrap(), "permessage-deflate");
    assert_eq!(
        response_with("permessage-deflate; server_max_window_bits=15", &config).unwrap(),
        "permessage-deflate; server_max_window_bits=15"
    );
}

#[test]
fn server_window_8_is_declined_and_the_next_offer_taken() {
    assert_eq!(response("permessage-deflate; server_max_window_bits=8"), None);
    let offers = "permessage-deflate; server_max_window_bits=8, permessage-deflate; server_max_window_bits=9";
    assert_eq!(response(offers).unwrap(), "permessage-deflate; server_max_window_bits=9");
}

#[test]
fn client_window_with_a_value_is_bounded_and_echoed() {
    let (agreed, response) = negotiate(["permessage-deflate; client_max_window_bits=10"], &default_config()).unwrap();
    assert_eq!(response, "permessage-deflate; server_max_window_bits=12; client_max_window_bits=10");
    assert_eq!(agreed.client_max_window_bits, 10);

    let config12 = ServerConfig { client_max_window_bits: 12, ..default_config() };
    let (agreed, response) = negotiate(["permessage-deflate; client_max_window_bits=14"], &config12).unwrap();
    assert_eq!(response, "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12");
    assert_eq!(agreed.client_max_window_bits, 12);

    // 8 is a valid client window: the client deflates with 8 and we inflate with 9.
    assert_eq!(accepted("permessage-deflate; client_max_window_bits=8").client_max_window_bits, 8);
}

#[test]
fn client_window_is_never_sent_unless_offered() {
    let config = ServerConfig { client_max_window_bits: 10, ..default_config() };
    let (agreed, response) = negotiate(["permessage-deflate"], &config).unwrap();
    assert_eq!(response, "permessage-deflate; server_max_window_bits=12");
    assert_eq!(agreed.client_max_window_bits, 15);
}

#[test]
fn invalid_values_decline_the_offer() {
    for offer in [
        "permessage-deflate; server_max_window_bits=7",
        "permessage-deflate; server_max_window_bits=16",
        "permessage-deflate; server_max_window_bits=08",
        "permessage-deflate; server_max_window_bits=+9",
        "permessage-deflate; server_max_window_bits=12a",
        "permessage-deflate; server_max_window_bits=",
        "permessage-deflate; server_max_window_bits",
        "permessage-deflate; client_max_window_bits=0",
        "permessage-deflate; client_max_window_bits=150",
        "permessage-deflate; client_max_window_bits=\"\"",
        "permessage-deflate; server_no_context_takeover=1",
        "permessage-deflate; client_no_context_takeover=\"x\"",
    ] {
        assert_eq!(response(offer), None, "{offer}");
    }
}

#[test]
fn duplicate_parameters_decline_the_offer() {
    for offer in [
        "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
        "permessage-deflate; client_no_context_takeover; client_no_context_takeover",
        "permessage-deflate; server_max_window_bits=10; server_max_window_bits=10",
        "permessage-deflate; client_max_window_bits; client_max_window_bits=10",
        "permessage-deflate; client_max_window_bits=9; client_max_window_bits",
        "permessage-deflate; server_max_window_bits=10; SERVER_MAX_WINDOW_BITS=11",
    ] {
        assert_eq!(response(offer), None, "{offer}");
    }
}

#[test]
fn unknown_parameters_decline_the_offer() {
    assert_eq!(response("permessage-deflate; mem_level=5"), None);
    assert_eq!(response("permessage-deflate; client_max_window_bits; x"), None);
    assert_eq!(
        response("permessage-deflate; x=1, permessage-deflate; client_no_context_takeover").unwrap(),
        "permessage-deflate; client_no_context_takeover; server_max_window_bits=12"
    );
}

#[test]
fn other_extensions_are_skipped() {
    assert_eq!(response("x-webkit-deflate-frame"), None);
    assert_eq!(response("deflate-frame; no_context_takeover; max_window_bits=10"), None);
    assert_eq!(
        response("x-webkit-deflate-frame; max_window_bits=8, permessage-deflate").unwrap(),
        "permessage-deflate; server_max_window_bits=12"
    );
    // permessage-deflate's rules do not apply to another extension's parameters.
    assert_eq!(
        response("foo; server_max_window_bits=3; bar, permessage-deflate; server_max_window_bits=11").unwrap(),
        "permessage-deflate; server_max_window_bits=11"
    );
}

#[test]
fn quoted_values() {
    assert_eq!(accepted("permessage-deflate; server_max_window_bits=\"10\"").server_max_window_bits, 10);
    assert_eq!(accepted("permessage-deflate; server_max_window_bits=\"1\\0\"").server_max_window_bits, 10);
    assert_eq!(accepted("permessage-deflate; client_max_window_bits=\"9\"").client_max_window_bits, 9);
    // Unescaped, a quoted value must still be a token, and then a valid value.
    assert_eq!(response("permessage-deflate; server_max_window_bits=\"1 0\""), None);
    assert_eq!(response("permessage-deflate; server_max_window_bits=\"16\""), None);
    assert_eq!(response("permessage-deflate; server_max_window_bits=\"10"), None);
}

#[test]
fn quoted_commas_and_semicolons_do_not_split_offers() {
    let header = "foo; bar=\"a,permessage-deflate;x\", permessage-deflate; server_max_window_bits=9";
    assert_eq!(response(header).unwrap(), "permessage-deflate; server_max_window_bits=9");
    // The same inside a declined offer, with an escaped quote.
    let header = "permessage-deflate; x=\"\\\",permessage-deflate\", permessage-deflate; server_max_window_bits=10";
    assert_eq!(response(header).unwrap(), "permessage-deflate; server_max_window_bits=10");
}

#[test]
fn fallback_across_offers_and_header_fields() {
    let fields: [&[u8]; 3] = [
        b"permessage-deflate; server_max_window_bits=8",
        b"permessage-deflate; bogus",
        b"x-custom, permessage-deflate; client_no_context_takeover, permessage-deflate",
    ];
    let (agreed, response) = negotiate(fields, &default_config()).unwrap();
    assert_eq!(response, "permessage-deflate; client_no_context_takeover; server_max_window_bits=12");
    assert!(agreed.client_no_context_takeover);
    assert_eq!(negotiate(Vec::<Vec<u8>>::new(), &default_config()), None);
    assert_eq!(negotiate([""], &default_config()), None);
}

#[test]
fn disabled_config_declines_everything() {
    let config = ServerConfig { enabled: false, ..default_config() };
    assert_eq!(response_with("permessage-deflate", &config), None);
}

#[test]
fn names_are_case_insensitive_and_whitespace_is_optional() {
    assert_eq!(accepted("PerMessage-Deflate; Server_Max_Window_Bits=10").server_max_window_bits, 10);
    assert_eq!(accepted("permessage-deflate;server_max_window_bits=10").server_max_window_bits, 10);
    assert_eq!(accepted("  permessage-deflate \t; server_max_window_bits = 10 , ").server_max_window_bits, 10);
    assert_eq!(accepted(" , ,permessage-deflate; server_max_window_bits=11").server_max_window_bits, 11);
}

#[test]
fn malformed_headers_are_declined_without_panicking() {
    let declined: [&[u8]; 14] = [
        b"permessage-deflate;",
        b"permessage-deflate;;",
        b"permessage-deflate; =10",
        b"permessage-deflate x",
        b"permessage-deflate; server_max_window_bits=1 0",
        b"permessage-deflate; server_max_window_bits==10",
        b"permessage-deflate; \"server_max_window_bits\"",
        b"\"permessage-deflate\"",
        b"permessage-deflate; x=\"unterminated, permessage-deflate",
        b"permessage-deflate; x=\"ends in a backslash\\",
        b"permessage-deflate\xff",
        b"permessage-deflate; server_max_window_bits=\xff",
        b";;;,,,===\"\"\"",
        b"\x00\x01\x02",
    ];
    for header in declined {
        assert_eq!(negotiate([header], &default_config()), None, "{}", String::from_utf8_lossy(header));
    }
    // A malformed element does not hide the next one.
    assert_eq!(
        response("permessage-deflate x, permessage-deflate; server_max_window_bits=10").unwrap(),
        "permessage-deflate; server_max_window_bits=10"
    );
}

#[test]
fn out_of_range_config_is_clamped() {
    let config = ServerConfig { server_max_window_bits: 3, client_max_window_bits: 3, ..default_config() };
    let (agreed, response) = negotiate(["permessage-deflate; client_max_window_bits"], &config).unwrap();
    assert_eq!(response, "permessage-deflate; server_max_window_bits=9; client_max_window_bits=9");
    assert_eq!(agreed, negotiated(9, 9, false));
    let config = ServerConfig { server_max_window_bits: 200, client_max_window_bits: 200, ..default_config() };
    assert_eq!(response_with("permessage-deflate; client_max_window_bits", &config).unwrap(), "permessage-deflate");
}

// --- Compression and inflation ---

#[test]
fn round_trip_with_context_takeover() {
    let agreed = negotiated(12, 12, false);
    let (mut deflater, mut inflater) = (Deflater::new(&agreed), Inflater::new(&agreed));
    let messages: Vec<Vec<u8>> = (0..6).map(|i| json_message(300 + 500 * i as usize, i)).collect();
    let mut payloads = Vec::new();
    for message in &messages {
        let payload = compressed(&mut deflater, message);
        assert_eq!(inflate_whole(&mut inflater, &payload, usize::MAX).unwrap(), *message);
        payloads.push(payload);
    }
    // A message repeated within the window costs almost nothing when the context is kept.
    let repeat = compressed(&mut deflater, &messages[5]);
    assert!(repeat.len() * 10 < payloads[5].len(), "{} vs {}", repeat.len(), payloads[5].len());
    assert_eq!(inflate_whole(&mut inflater, &repeat, usize::MAX).unwrap(), messages[5]);
    assert!(deflater.compressor.is_some() && inflater.decompressor.is_some());
}

#[test]
fn a_released_compressor_starts_afresh_within_the_clients_context() {
    let agreed = negotiated(15, 15, false);
    let (mut deflater, mut inflater) = (Deflater::new(&agreed), Inflater::new(&agreed));
    let message = json_message(4000, 1);
    let first = compressed(&mut deflater, &message);
    assert_eq!(inflate_whole(&mut inflater, &first, usize::MAX).unwrap(), message);
    deflater.release();
    assert!(deflater.compressor.is_none());
    // The client's inflater keeps its window; the fresh stream refers to none of it.
    let again = compressed(&mut deflater, &message);
    assert!(again.len() * 2 > first.len(), "no reference to what the released compressor sent");
    assert_eq!(inflate_whole(&mut inflater, &again, usize::MAX).unwrap(), message);
    let repeat = compressed(&mut deflater, &message);
    assert!(repeat.len() * 10 < first.len(), "the new compressor's own history is used");
    assert_eq!(inflate_whole(&mut inflater, &repeat, usize::MAX).unwrap(), message);
}

#[test]
fn round_trip_without_context_takeover_frees_the_state() {
    let agreed = negotiated(12, 12, true);
    let (mut deflater, mut inflater) = (Deflater::new(&agreed), Inflater::new(&agreed));
    let message = json_message(5000, 3);
    let first = compressed(&mut deflater, &message);
    let second = compressed(&mut deflater, &message);
    assert_eq!(first, second, "no context: the same message compresses the same");
    assert!(deflater.compressor.is_none());
    for payload in [&first, &second] {
        assert_eq!(inflate_whole(&mut inflater, payload, usize::MAX).unwrap(), message);
        assert!(inflater.decompressor.is_none());
    }
}

#[test]
fn inflater_with_wrong_context_setting_fails() {
    // The flag is what makes the inflater forget: a peer that keeps its context cannot be
    // inflated by one that drops it.
    let mut deflater = Deflater::new(&negotiated(12, 12, false));
    let mut inflater = Inflater::new(&negotiated(12, 12, true));
    let message = json_message(2000, 5);
    let first = compressed(&mut deflater, &message);
    let second = compressed(&mut deflater, &message);
    assert_eq!(inflate_whole(&mut inflater, &first, usize::MAX).unwrap(), message);
    assert_ne!(inflate_whole(&mut inflater, &second, usize::MAX), Ok(message));
}

#[test]
fn state_is_allocated_lazily() {
    let agreed = negotiated(12, 12, false);
    let (mut deflater, mut inflater) = (Deflater::new(&agreed), Inflater::new(&agreed));
    assert!(deflater.compressor.is_none() && inflater.decompressor.is_none());
    let payload = compressed(&mut deflater, b"hello");
    assert!(deflater.compressor.is_some());
    inflate_whole(&mut inflater, &payload, 100).unwrap();
    assert!(inflater.decompressor.is_some());
}

#[test]
fn empty_message_is_one_zero_byte() {
    for no_takeover in [false, true] {
        let agreed = negotiated(12, 12, no_takeover);
        let (mut deflater, mut inflater) = (Deflater::new(&agreed), Inflater::new(&agreed));
        for message in [&b""[..], b"abc", b""] {
            let payload = compressed(&mut deflater, message);
            if message.is_empty() {
                assert_eq!(payload, [0x00]);
            }
            assert_eq!(inflate_whole(&mut inflater, &payload, 10).unwrap(), message);
        }
    }
}

#[test]
fn every_window_size_round_trips() {
    // Longer than every window, with repeats at distances near each window size.
    let base = json_message(40_000, 11);
    let mut message = base.clone();
    message.extend_from_slice(&base[..20_000]);
    for bits in 9..=15 {
        let agreed = negotiated(bits, bits, false);
        let (mut deflater, mut inflater) = (Deflater::new(&agreed), Inflater::new(&agreed));
        for _ in 0..2 {
            let payload = compressed(&mut deflater, &message);
            assert!(payload.len() < message.len() / 2);
            assert_eq!(inflate_whole(&mut inflater, &payload, usize::MAX).unwrap(), message, "window {bits}");
        }
    }
}

#[test]
fn out_of_range_window_bits_do_not_panic() {
    let message = json_message(1000, 1);
    for bits in [0, 8, 16, 255] {
        let agreed = negotiated(bits, bits, false);
        let (mut deflater, mut inflater) = (Deflater::new(&agreed), Inflater::new(&agreed));
        let payload = compressed(&mut deflater, &message);
        assert_eq!(inflate_whole(&mut inflater, &payload, usize::MAX).unwrap(), message);
    }
}

#[test]
fn inflates_plain_raw_deflate() {
    // A peer compressing with a 2^15 window, as every client does when not asked otherwise.
    let mut inflater = Inflater::new(&negotiated(12, 15, true));
    for seed in 0..3 {
        let message = json_message(50_000, seed);
        let payload = plain_raw_deflate(&message, 15);
        assert_eq!(inflate_whole(&mut inflater, &payload, usize::MAX).unwrap(), message);
    }
}

#[test]
fn deflater_output_is_plain_raw_deflate() {
    let mut deflater = Deflater::new(&negotiated(12, 15, false));
    let mut decompressor = Decompress::new_with_window_bits(false, 15);
    for seed in 0..3 {
        let message = json_message(30_000, seed);
        let mut payload = compressed(&mut deflater, &message);
        payload.extend_from_slice(&FLUSH_TAIL);
        let mut out = Vec::with_capacity(message.len() + 1);
        decompressor.decompress_vec(&payload, &mut out, FlushDecompress::None).unwrap();
        assert_eq!(out, message);
    }
}

#[test]
fn input_split_at_any_point() {
    let agreed = negotiated(12, 12, false);
    let mut deflater = Deflater::new(&agreed);
    let first = json_message(3000, 21);
    let second = json_message(4000, 22);
    let first_payload = compressed(&mut deflater, &first);
    let second_payload = compressed(&mut deflater, &second);
    for split in 0..=second_payload.len() {
        let mut inflater = Inflater::new(&agreed);
        assert_eq!(inflate_whole(&mut inflater, &first_payload, usize::MAX).unwrap(), first);
        let mut out = Vec::new();
        let (head, tail) = second_payload.split_at(split);
        inflater.inflate(head, false, second.len(), &mut out).unwrap();
        inflater.inflate(tail, true, second.len(), &mut out).unwrap();
        assert_eq!(out, second, "split at {split}");
    }
    // One byte per frame, with empty frames in between, then an empty final frame.
    let mut inflater = Inflater::new(&agreed);
    let mut out = Vec::new();
    for &byte in &first_payload {
        inflater.inflate(&[byte], false, first.len(), &mut out).unwrap();
        inflater.inflate(&[], false, first.len(), &mut out).unwrap();
    }
    inflater.inflate(&[], true, first.len(), &mut out).unwrap();
    assert_eq!(out, first);
}

#[test]
fn bomb_stops_at_the_limit() {
    const LIMIT: usize = 1 << 20;
    let payload = bomb(100 << 20);
    assert!(payload.len() < 200_000, "{}", payload.len());
    let mut inflater = Inflater::new(&negotiated(15, 15, false));
    let mut out = Vec::new();
    assert_eq!(inflater.inflate(&payload, true, LIMIT, &mut out), Err(InflateError::TooBig));
    assert!(out.len() <= LIMIT);
    assert!(out.capacity() <= LIMIT, "capacity {}", out.capacity());
    assert!(inflater.decompressor.is_none(), "state dropped after an error");
}

#[test]
fn bomb_in_frames_stops_within_a_few_frames() {
    const LIMIT: usize = 1 << 20;
    let payload = bomb(100 << 20);
    let mut inflater = Inflater::new(&negotiated(15, 15, false));
    let mut out = Vec::new();
    let frames: Vec<&[u8]> = payload.chunks(1024).collect();
    let stopped_at = frames
        .iter()
        .enumerate()
        .find_map(|(index, frame)| {
            let fin = index + 1 == frames.len();
            inflater.inflate(frame, fin, LIMIT, &mut out).err().map(|error| (index, error))
        })
        .expect("the bomb is stopped");
    // 1 KiB of this input inflates to about 1 MiB: the limit is hit within the first frames.
    assert_eq!(stopped_at.1, InflateError::TooBig);
    assert!(stopped_at.0 < 4, "stopped at frame {} of {}", stopped_at.0, frames.len());
    assert!(out.len() <= LIMIT && out.capacity() <= LIMIT);
}

#[test]
fn limit_is_exact() {
    let message = json_message(100_000, 9);
    let payload = plain_raw_deflate(&message, 15);
    let agreed = negotiated(15, 15, true);
    assert_eq!(inflate_whole(&mut Inflater::new(&agreed), &payload, message.len()).unwrap(), message);
    let mut out = Vec::new();
    let result = Inflater::new(&agreed).inflate(&payload, true, message.len() - 1, &mut out);
    assert_eq!(result, Err(InflateError::TooBig));
    assert!(out.len() < message.len());
}

#[test]
fn limit_counts_earlier_frames_and_caller_capacity_is_not_trusted() {
    let message = json_message(100_000, 4);
    let payload = plain_raw_deflate(&message, 15);
    let (head, tail) = payload.split_at(payload.len() / 2);
    let agreed = negotiated(15, 15, true);

    let mut inflater = Inflater::new(&agreed);
    let mut out = Vec::new();
    inflater.inflate(head, false, 80_000, &mut out).unwrap();
    assert!(out.len() > 10_000);
    assert_eq!(inflater.inflate(tail, true, 80_000, &mut out), Err(InflateError::TooBig));
    assert!(out.len() <= 80_000);

    // Spare capacity beyond the limit is the caller's memory, but the limit still holds.
    let mut out = Vec::with_capacity(10 << 20);
    assert_eq!(Inflater::new(&agreed).inflate(&payload, true, 50_000, &mut out), Err(InflateError::TooBig));
    assert!(out.len() <= 50_000);

    // Already past the limit: refused before any work.
    let mut out = vec![0; 11];
    assert_eq!(Inflater::new(&agreed).inflate(&payload, true, 10, &mut out), Err(InflateError::TooBig));
}

#[test]
fn corrupt_data_is_reported_and_the_state_reset() {
    let agreed = negotiated(15, 15, false);
    let corrupt: [&[u8]; 4] = [
        &[0x07, 0x00],                   // BTYPE 11: reserved
        &[0x00, 0x05, 0x00, 0x00, 0x00], // stored block whose NLEN is not ~LEN
        &[0xff; 32],
        &[0x00, 0x00, 0x00, 0xff, 0xff, 0x07], // a valid empty block, then a reserved one
    ];
    for payload in corrupt {
        let mut inflater = Inflater::new(&agreed);
        assert_eq!(inflate_whole(&mut inflater, payload, 1 << 20), Err(InflateError::Corrupt), "{payload:?}");
        assert!(inflater.decompressor.is_none());
        // A fresh stream inflates afterwards.
        let message = json_message(500, 2);
        let good = plain_raw_deflate(&message, 15);
        assert_eq!(inflate_whole(&mut inflater, &good, 1 << 20).unwrap(), message);
    }
}

#[test]
fn final_block_ends_the_message_and_the_stream() {
    // RFC 7692 §7.2.3.3: a peer may end a message with a BFINAL block instead of a sync flush.
    let agreed = negotiated(15, 15, false);
    let mut inflater = Inflater::new(&agreed);
    for seed in 0..3 {
        let message = json_message(2000, seed);
        let mut compressor = Compress::new_with_window_bits(Compression::new(6), false, 15);
        let mut payload = Vec::with_capacity(4096);
        compressor.compress_vec(&message, &mut payload, FlushCompress::Finish).unwrap();
        let (head, tail) = payload.split_at(payload.len() / 2);
        let mut out = Vec::new();
        inflater.inflate(head, false, usize::MAX, &mut out).unwrap();
        inflater.inflate(tail, false, usize::MAX, &mut out).unwrap();
        inflater.inflate(b"ignored after the final block", true, usize::MAX, &mut out).unwrap();
        assert_eq!(out, message);
    }
}

#[test]
fn stored_fallback_is_valid_in_the_stream() {
    // What `compress` sends if zlib-rs ever fails: stored blocks, then a fresh compressor.
    let agreed = negotiated(12, 12, false);
    let mut inflater = Inflater::new(&agreed);
    let first = json_message(1000, 1);
    let stored = json_message(70_000, 2);
    let after = json_message(1000, 3);

    let payload = compressed(&mut Deflater::new(&agreed), &first);
    assert_eq!(inflate_whole(&mut inflater, &payload, usize::MAX).unwrap(), first);
    for message in [&stored[..], b""] {
        let mut payload = Vec::new();
        write_stored(message, &mut payload);
        assert_eq!(payload.len(), message.len() + 5 * message.len().div_ceil(65_535) + 1);
        assert_eq!(inflate_whole(&mut inflater, &payload, usize::MAX).unwrap(), message);
    }
    let payload = compressed(&mut Deflater::new(&agreed), &after);
    assert_eq!(inflate_whole(&mut inflater, &payload, usize::MAX).unwrap(), after);
}

#[test]
fn worth_compressing_thresholds() {
    let keeps = Deflater::new(&negotiated(12, 15, false));
    let drops = Deflater::new(&negotiated(12, 15, true));
    assert!(!keeps.worth_compressing(7) && keeps.worth_compressing(8));
    assert!(!drops.worth_compressing(63) && drops.worth_compressing(64));
}
