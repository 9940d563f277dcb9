//! h2c by `Upgrade`: an HTTP/1.1 request head, parsed as the server parses it, made into the
//! HEADERS (and CONTINUATION) frames of stream 1 by `stream_one`, for a server whose header
//! list limit the input chooses. Properties: the frames are
//! well formed (lengths, types, flags, no piece over the frame size asked for); `h2`, given
//! them after a client's preface and SETTINGS as the server gives them, never answers with
//! a connection error (our header block is always valid HPACK), and either reads the
//! request the head said — method, target, authority from `Host`, every field HTTP/2
//! carries — or refuses that one stream as malformed (a field HTTP/1.1 allows and HTTP/2
//! does not); and `preface_and_settings` finds the client's SETTINGS however its bytes are
//! cut.
#![no_main]

use _native::fuzzing::{
    find_head_end, parse_head, preface_and_settings, stream_one, Event, H2Core, H2Request, H2_PREFACE, Limits,
};
use libfuzzer_sys::fuzz_target;

mod h2frames;

const LIMITS: Limits =
    Limits { request_line: 8190, header_size: 32768, field_size: 8190, header_count: 100, body_size: u64::MAX };

/// Fields of the HTTP/1.1 head that stream 1 does not carry (RFC 9113 §8.2.2), or carries as
/// `:authority` (`host`).
fn dropped(name: &[u8], value: &[u8]) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(
        &n[..],
        b"connection" | b"upgrade" | b"http2-settings" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"host"
    ) || (n == b"te" && !value.trim_ascii().eq_ignore_ascii_case(b"trailers"))
}

// The input: two bytes for the server's `--http2-max-headers-size`, then the HTTP/1.1 head.
fuzz_target!(|input: &[u8]| {
    let Some((size, data)) = input.split_first_chunk::<2>() else { return };
    let Ok(Some(end)) = find_head_end(data, &LIMITS) else { return };
    let Ok(head) = parse_head(data, end, &LIMITS) else { return };
    let mut settings = h2frames::settings();
    settings.max_headers_size = 64 + u32::from(u16::from_be_bytes(*size));
    let max_frame = settings.max_frame_size as usize;
    let Some(block) = stream_one(data, &head, max_frame, settings.max_headers_size as usize) else { return };

    // Well formed: HEADERS with END_STREAM on stream 1, CONTINUATIONs, END_HEADERS on the last.
    let mut rest = block.clone();
    let frames = h2frames::frames(&mut rest);
    assert!(rest.is_empty() && !frames.is_empty(), "stream 1's frames are cut");
    for (i, ((len, kind, flags, id), _)) in frames.iter().enumerate() {
        assert!(*len <= max_frame && *id == 1);
        let last = i + 1 == frames.len();
        let expected = if i == 0 { (0x1, 0x1) } else { (0x9, 0x0) };
        assert_eq!((*kind, *flags), (expected.0, expected.1 | if last { 0x4 } else { 0 }));
    }

    // The client's preface and (empty) SETTINGS, as the server waits for them, then stream 1.
    let client = [H2_PREFACE, &[0, 0, 0, 4, 0, 0, 0, 0, 0]].concat();
    for cut in 0..client.len() {
        assert_eq!(preface_and_settings(&client[..cut]), Ok(None));
    }
    assert_eq!(preface_and_settings(&[&client[..], b"more"].concat()), Ok(Some(client.len())));

    let mut core = H2Core::new(&settings, 1 << 20);
    core.push(&client);
    core.push(&block);
    let mut events = Vec::new();
    core.drive(&mut events);
    let mut output = core.take_output();
    let written = h2frames::frames(&mut output);
    for ((_, kind, _, _), payload) in &written {
        assert_ne!(*kind, 0x7, "a connection error for stream 1's frames: {payload:?}");
    }
    let refused = written.iter().any(|((_, kind, _, id), _)| *kind == 0x3 && *id == 1);
    if !events.contains(&Event::Request(1)) {
        assert!(refused, "stream 1 neither read nor refused: {events:?}");
        return;
    }
    let parts = core.request_taken(1).expect("the request's head");
    let field = |r: &std::ops::Range<usize>| &data[r.clone()];
    assert_eq!(parts.method.as_str().as_bytes(), field(&head.method));
    let path = parts.uri.path_and_query().map_or("", |p| p.as_str());
    assert!(path.as_bytes() == field(&head.target) || (field(&head.target) == b"*" && path.is_empty()));
    let host = head.headers.iter().find(|(n, _)| field(n).eq_ignore_ascii_case(b"host")).map(|(_, v)| field(v));
    assert_eq!(parts.uri.authority().map(|a| a.as_str().as_bytes()), host);
    let mut sent: Vec<(Vec<u8>, Vec<u8>)> = head
        .headers
        .iter()
        .map(|(n, v)| (field(n), field(v)))
        .filter(|(n, v)| !dropped(n, v))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_vec()))
        .collect();
    let mut read: Vec<(Vec<u8>, Vec<u8>)> =
        parts.headers.iter().map(|(n, v)| (n.as_str().as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
    sent.sort();
    read.sort();
    assert_eq!(sent, read, "stream 1 carries other fields than the head");

    // The interfaces read it back as the head it was (with `host` first).
    let request = H2Request::new(&parts, true);
    let back = |r: &std::ops::Range<usize>| &request.buf[r.clone()];
    assert_eq!(back(&request.head.target), if path.is_empty() { &b"*"[..] } else { path.as_bytes() });
    if let Some(host) = host {
        assert_eq!(request.head.headers.first().map(|(n, v)| (back(n), back(v))), Some((&b"host"[..], host)));
    }
});
