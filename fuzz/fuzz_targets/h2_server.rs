//! The HTTP/2 server connection (`H2Core` over `h2`) fed any client bytes, in any pieces,
//! with a driver that answers its streams as the fuzzer says (a head, body parts, trailers,
//! a reset, the body read or left). The input: `CONTROL` bytes (the preface or not, the
//! cuts, the replies), then the client's bytes, so that a seed is a captured client. Properties: nothing panics; what the server writes is a
//! sequence of well-formed frames that opens with its SETTINGS, holds no PUSH_PROMISE (no
//! server push) and no frame on a stream the client never opened, and never exceeds the
//! pipe's cap in one take; each request head reads, for the interfaces, as the fields
//! `h2` decoded (cookies joined, `:authority` as a leading `host`); a body taken is what
//! the client's DATA frames carried, within the window the server gave.
#![no_main]

use _native::fuzzing::bytes::Bytes;
use _native::fuzzing::{http, BodyTake, Event, H2Core, H2Request, H2_PREFACE};
use libfuzzer_sys::fuzz_target;
use std::collections::{BTreeSet, HashMap};

mod h2frames;
mod pieces;

const CAP: usize = 64 * 1024;

#[derive(Debug)]
enum Reply {
    /// A head (status 200 + n), the response complete or not.
    Head(u16, bool),
    /// Body bytes, more to come or not.
    Data(usize, bool),
    Trailers,
    Reset,
    /// Read what came of the body.
    Take,
}

impl Reply {
    fn from_byte(b: u8) -> Reply {
        let p = b / 5;
        match b % 5 {
            0 => Reply::Head(u16::from(p) * 8, p & 1 == 1),
            1 => Reply::Data(usize::from(p) * 1400, p & 1 == 0),
            2 => Reply::Trailers,
            3 => Reply::Reset,
            _ => Reply::Take,
        }
    }
}

/// Control bytes before the client's: whether the preface is prepended, where the client's
/// bytes are cut into what arrives, and the replies given in turn to the open streams.
const CONTROL: usize = 16;

fn check_request(parts: &http::request::Parts, end_stream: bool) {
    let r = H2Request::new(parts, end_stream);
    let f = |range: &std::ops::Range<usize>| &r.buf[range.clone()];
    let connect = r.protocol.is_some();
    assert_eq!(f(&r.head.method), if connect { b"GET" } else { parts.method.as_str().as_bytes() });
    let mut expected: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    if let (Some(a), false) = (parts.uri.authority(), parts.headers.contains_key(http::header::HOST)) {
        expected.push((b"host".to_vec(), a.as_str().as_bytes().to_vec()));
    }
    let mut cookie: Option<Vec<u8>> = None;
    for (n, v) in &parts.headers {
        if n == http::header::COOKIE {
            match &mut cookie {
                Some(joined) => {
                    joined.extend_from_slice(b"; ");
                    joined.extend_from_slice(v.as_bytes());
                }
                None => cookie = Some(v.as_bytes().to_vec()),
            }
        } else {
            expected.push((n.as_str().as_bytes().to_vec(), v.as_bytes().to_vec()));
        }
    }
    if let Some(c) = cookie {
        expected.push((b"cookie".to_vec(), c));
    }
    let got: Vec<(Vec<u8>, Vec<u8>)> = r.head.headers.iter().map(|(n, v)| (f(n).to_vec(), f(v).to_vec())).collect();
    assert_eq!(got, expected);
}

struct Driver {
    core: H2Core,
    /// Streams the client opened, and those still served (with whether a head went out).
    opened: BTreeSet<u32>,
    serving: HashMap<u32, bool>,
    taken: HashMap<u32, usize>,
    out: Vec<u8>,
    first: bool,
}

impl Driver {
    fn events(&mut self, events: Vec<Event>) {
        for e in events {
            match e {
                Event::Request(id) => {
                    assert!(id % 2 == 1 && self.opened.insert(id), "stream {id} opened twice or by the server");
                    let ended = self.core.body_ended(id);
                    // A stream reset in the same drive is gone already (`Event::Reset` follows).
                    if let Some(parts) = self.core.request_taken(id) {
                        check_request(&parts, ended);
                        self.serving.insert(id, false);
                    }
                }
                Event::Reset(id) => {
                    self.serving.remove(&id);
                }
                Event::Body(_) | Event::Writable(_) | Event::Ended(_) | Event::Closed => {}
            }
        }
    }

    fn reply(&mut self, id: u32, reply: &Reply) {
        let started = self.serving.get(&id).copied().unwrap_or(false);
        match reply {
            Reply::Head(n, end) if !started => {
                let status = http::StatusCode::from_u16(200 + *n).unwrap_or(http::StatusCode::OK);
                let head = http::Response::builder().status(status).body(()).unwrap_or_default();
                if self.core.send_head(id, head, *end).is_ok() {
                    self.serving.insert(id, true);
                }
                if *end {
                    self.serving.remove(&id);
                }
            }
            Reply::Data(n, more) if started => {
                let data = Bytes::from(vec![b'x'; *n]);
                if self.core.send_data(id, data, !more).is_err() || !more {
                    self.serving.remove(&id);
                }
            }
            Reply::Trailers if started => {
                let mut fields = http::HeaderMap::new();
                fields.insert("x-t", http::HeaderValue::from_static("1"));
                let _ = self.core.send_trailers(id, fields);
                self.serving.remove(&id);
            }
            Reply::Reset => {
                self.core.reset(id, h2::Reason::CANCEL);
                self.serving.remove(&id);
            }
            Reply::Take => match self.core.take_body(id) {
                BodyTake::Data(chunks, _) => {
                    let t = self.taken.entry(id).or_default();
                    *t += chunks.len();
                    // A stream's window (1 MiB) bounds what it may have sent; taking it
                    // gives the window back, so all taken is bounded only by the input.
                    assert!(chunks.len() <= 1 << 20);
                }
                BodyTake::Wait | BodyTake::Gone => {}
            },
            _ => {}
        }
    }

    fn output(&mut self) {
        let taken = self.core.take_output();
        assert!(taken.len() <= CAP, "{} bytes out at once, over the pipe's cap", taken.len());
        self.out.extend_from_slice(&taken);
        for ((_, kind, flags, id), _) in h2frames::frames(&mut self.out) {
            if self.first {
                assert_eq!((kind, id), (0x4, 0), "the server's first frame is not its SETTINGS");
                assert_eq!(flags & 0x1, 0, "the server's first SETTINGS is an ACK");
                self.first = false;
            }
            assert_ne!(kind, 0x5, "a PUSH_PROMISE");
            assert!(kind <= 0x9, "an unknown frame type {kind}");
            assert!(id == 0 || self.opened.contains(&id) || kind == 0x3, "a {kind} frame on stream {id}, never opened");
        }
    }
}

use _native::fuzzing::h2;

fuzz_target!(|data: &[u8]| {
    if data.len() < CONTROL {
        return;
    }
    let (control, client) = data.split_at(CONTROL);
    let cuts: Vec<u16> = control[1..9].chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
    let replies: Vec<Reply> = control[9..].iter().map(|&b| Reply::from_byte(b)).collect();
    let mut d = Driver {
        core: H2Core::new(&h2frames::settings(), CAP),
        opened: BTreeSet::new(),
        serving: HashMap::new(),
        taken: HashMap::new(),
        out: Vec::new(),
        first: true,
    };
    let mut replies = replies.iter().cycle();
    let client = if control[0] & 1 == 1 { [H2_PREFACE, client].concat() } else { client.to_vec() };
    for piece in pieces::split(&client, &cuts) {
        let mut events = Vec::new();
        d.core.drive_on(piece, &mut events);
        d.events(events);
        let ids: Vec<u32> = d.serving.keys().copied().collect();
        for id in ids {
            if let Some(r) = replies.next() {
                d.reply(id, r);
            }
        }
        let mut events = Vec::new();
        d.core.drive(&mut events);
        d.events(events);
        d.output();
        if d.core.closed() {
            break;
        }
    }
    d.core.push_eof();
    let mut events = Vec::new();
    d.core.drive(&mut events);
    d.events(events);
    d.output();
});
