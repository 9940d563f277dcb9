//! Shared by the HTTP/2 targets: the server's settings (its defaults, 100 streams), and the
//! frames of what the server writes, read back.

use _native::fuzzing::H2Settings;

pub fn settings() -> H2Settings {
    H2Settings { max_concurrent_streams: 100, ..H2Settings::defaults() }
}

/// A frame's header: (length, type, flags, stream id).
pub type Header = (usize, u8, u8, u32);

/// The whole frames at the start of `buf`, taken off it (a cut frame stays for more).
pub fn frames(buf: &mut Vec<u8>) -> Vec<(Header, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while buf.len() - at >= 9 {
        let b = &buf[at..];
        let len = u32::from_be_bytes([0, b[0], b[1], b[2]]) as usize;
        if b.len() < 9 + len {
            break;
        }
        let id = u32::from_be_bytes([b[5], b[6], b[7], b[8]]);
        assert_eq!(id >> 31, 0, "the reserved bit of a stream id is set");
        out.push(((len, b[3], b[4], id), b[9..9 + len].to_vec()));
        at += 9 + len;
    }
    buf.drain(..at);
    out
}
