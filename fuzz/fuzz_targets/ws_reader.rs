//! The WebSocket message reader (frames, fragmentation, UTF-8 validation of text, the size
//! limit, permessage-deflate when negotiated). Properties: fed in pieces it reads the same
//! messages and the same error as fed whole; messages written here as masked frames, split
//! into fragments, read back as themselves, except that a text message that is not UTF-8
//! fails with 1007 and one over the limit with 1009.
#![no_main]

use _native::fuzzing::{Inflate, Inflater, Message, MessageReader, Negotiated, ProtocolError};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

mod pieces;

#[derive(Arbitrary, Debug)]
struct Input {
    raw: Vec<u8>,
    cuts: Vec<u16>,
    deflate: bool,
    max_size: u16,
    messages: Vec<Script>,
}

#[derive(Arbitrary, Debug)]
struct Script {
    text: bool,
    payload: Vec<u8>,
    /// Into how many frames (1 + fragments % 4) the message is cut.
    fragments: u8,
    key: [u8; 4],
}

type Outcome = (Vec<Message>, Option<ProtocolError>);

fn reader(max_size: usize, deflate: bool) -> MessageReader {
    let inflater = deflate.then(|| {
        let negotiated = Negotiated {
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            server_max_window_bits: 15,
            client_max_window_bits: 15,
        };
        Box::new(Inflater::new(&negotiated)) as Box<dyn Inflate + Send>
    });
    MessageReader::new(max_size, inflater)
}

/// Every message and the error (if any), the input arriving in `pieces`.
fn read(pieces: &[&[u8]], max_size: usize, deflate: bool) -> Outcome {
    let mut r = reader(max_size, deflate);
    let (mut messages, mut pending) = (Vec::new(), Vec::new());
    for piece in pieces {
        pending.extend_from_slice(piece);
        let mut at = 0;
        loop {
            match r.feed(&pending[at..]) {
                Ok((used, message)) => {
                    at += used;
                    match message {
                        Some(m) => messages.push(m),
                        None => break,
                    }
                    if at == pending.len() {
                        break;
                    }
                }
                Err(e) => return (messages, Some(e)),
            }
        }
        pending.drain(..at);
    }
    (messages, None)
}

fn frame(out: &mut Vec<u8>, fin: bool, opcode: u8, payload: &[u8], key: [u8; 4]) {
    out.push(u8::from(fin) << 7 | opcode);
    match payload.len() {
        n @ 0..=125 => out.push(0x80 | n as u8),
        n @ 126..=65535 => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&key);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
}

fuzz_target!(|input: Input| {
    let max_size = usize::from(input.max_size) + 1;
    let whole = read(&[&input.raw], max_size, input.deflate);
    let arriving = read(&pieces::split(&input.raw, &input.cuts), max_size, input.deflate);
    // The same messages, and the same failure after them. A message that is wrong in two
    // ways (too big, not UTF-8, corrupt DEFLATE) fails on whichever shows first in what
    // has arrived: then the codes may differ, but only between 1007 and 1009.
    assert_eq!(whole.0, arriving.0, "fed in pieces, the reader read other messages");
    match (whole.1, arriving.1) {
        (None, None) => {}
        (Some(a), Some(b)) if a.code == b.code => {}
        (Some(a), Some(b)) if [a.code, b.code].iter().all(|c| [1007, 1009].contains(c)) => {}
        (a, b) => panic!("fed whole: {a:?}; fed in pieces: {b:?}"),
    }

    let mut wire = Vec::new();
    let mut expected = Vec::new();
    let mut error = None;
    for m in &input.messages {
        let n = 1 + usize::from(m.fragments % 4);
        let size = m.payload.len().div_ceil(n).max(1);
        let parts: Vec<&[u8]> = if m.payload.is_empty() { vec![&[]] } else { m.payload.chunks(size).collect() };
        for (i, part) in parts.iter().enumerate() {
            let opcode = if i > 0 {
                0
            } else if m.text {
                1
            } else {
                2
            };
            frame(&mut wire, i + 1 == parts.len(), opcode, part, m.key);
        }
        if error.is_none() {
            let text = m.text.then(|| String::from_utf8(m.payload.clone()));
            // Too big and not UTF-8: whichever the reader meets first.
            error = match (m.payload.len() > max_size, &text) {
                (true, Some(Err(_))) => Some(&[1007, 1009][..]),
                (true, _) => Some(&[1009][..]),
                (false, Some(Err(_))) => Some(&[1007][..]),
                (false, Some(Ok(s))) => {
                    expected.push(Message::Text(s.clone()));
                    None
                }
                (false, None) => {
                    expected.push(Message::Binary(m.payload.clone()));
                    None
                }
            };
        }
    }
    let (messages, failed) = read(&pieces::split(&wire, &input.cuts), max_size, false);
    assert_eq!(messages, expected);
    match (failed, error) {
        (None, None) => {}
        (Some(e), Some(codes)) => assert!(codes.contains(&e.code), "{e:?}, expected one of {codes:?}"),
        (failed, error) => panic!("failed with {failed:?}, expected {error:?}"),
    }
});
