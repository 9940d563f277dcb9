//! permessage-deflate (RFC 7692) from the client's side: what the server
//! agreed to in its `Sec-WebSocket-Extensions`, and the per-connection
//! compressor and decompressor that honour it.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The empty stored block a sync flush ends with; RFC 7692 §7.2.1 drops it
/// from the wire and the receiver puts it back.
const TAIL: [u8; 4] = [0x00, 0x00, 0xFF, 0xFF];
/// Refuse to inflate a message past this (a broken stream, not a workload).
const MAX_MESSAGE: usize = 64 << 20;

/// The agreed extension parameters (§7.1).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Params {
    pub server_no_context_takeover: bool,
    pub client_no_context_takeover: bool,
    pub server_max_window_bits: Option<u8>,
    pub client_max_window_bits: Option<u8>,
}

/// The permessage-deflate the server agreed to in `extensions` (its
/// `Sec-WebSocket-Extensions`, possibly empty): `None` when it declined. An
/// error for an extension the client did not offer or cannot honour.
pub fn negotiated(extensions: &str, offered: bool) -> Result<Option<Params>, String> {
    let mut agreed = None;
    for extension in extensions.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let mut parts = extension.split(';').map(str::trim);
        let name = parts.next().unwrap_or_default();
        if name != "permessage-deflate" || !offered || agreed.is_some() {
            return Err(format!("server chose an extension that was not offered: {extension}"));
        }
        let mut params = Params::default();
        for param in parts.filter(|p| !p.is_empty()) {
            let (key, value) = match param.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim().trim_matches('"'))),
                None => (param, None),
            };
            match (key, value) {
                ("server_no_context_takeover", None) => params.server_no_context_takeover = true,
                ("client_no_context_takeover", None) => params.client_no_context_takeover = true,
                ("server_max_window_bits", Some(v)) => params.server_max_window_bits = Some(bits(v)?),
                ("client_max_window_bits", Some(v)) => params.client_max_window_bits = Some(bits(v)?),
                _ => return Err(format!("bad permessage-deflate parameter: {param}")),
            }
        }
        agreed = Some(params);
    }
    Ok(agreed)
}

fn bits(value: &str) -> Result<u8, String> {
    match value.parse::<u8>() {
        // zlib makes raw streams with at least a 9-bit window: 8 cannot be honoured.
        Ok(n @ 9..=15) => Ok(n),
        _ => Err(format!("unsupported window bits {value:?}")),
    }
}

/// Compresses the client's messages.
pub struct Deflater {
    stream: Compress,
    reset_each_message: bool,
}

impl Deflater {
    pub fn new(params: &Params, level: u32) -> Deflater {
        let window = params.client_max_window_bits.unwrap_or(15);
        Deflater {
            stream: Compress::new_with_window_bits(Compression::new(level), false, window),
            reset_each_message: params.client_no_context_takeover,
        }
    }

    /// `input` compressed as one message's payload into `out` (replaced).
    pub fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        out.reserve(input.len() / 2 + 64);
        let start = self.stream.total_in();
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(out.capacity().max(64));
            }
            let consumed = (self.stream.total_in() - start) as usize;
            self.stream
                .compress_vec(&input[consumed..], out, FlushCompress::Sync)
                .map_err(|e| format!("deflate: {e}"))?;
            // A sync flush is complete once it stops short of the space it had.
            if (self.stream.total_in() - start) as usize == input.len() && out.len() < out.capacity() {
                break;
            }
        }
        if out.is_empty() {
            // Nothing was pending and nothing came in, so the flush wrote
            // nothing: send the one-byte empty block of §7.2.3.6 instead.
            out.push(0x00);
        } else if !out.ends_with(&TAIL) {
            return Err("deflate: sync flush without its empty block".into());
        } else {
            out.truncate(out.len() - TAIL.len());
        }
        if self.reset_each_message {
            self.stream.reset();
        }
        Ok(())
    }
}

/// Inflates the server's compressed messages. The server's window is at
/// most 15 bits, which a 15-bit inflater reads whatever the server chose.
pub struct Inflater {
    stream: Decompress,
}

impl Default for Inflater {
    fn default() -> Self {
        Inflater { stream: Decompress::new(false) }
    }
}

impl Inflater {
    /// One message's compressed payload (as on the wire) inflated into `out`
    /// (replaced).
    pub fn decompress(&mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        self.feed(payload, out)?;
        self.feed(&TAIL, out)
    }

    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        let start = self.stream.total_in();
        loop {
            if out.capacity() - out.len() < 1024 {
                out.reserve(out.capacity().max(4096));
            }
            let before = (self.stream.total_in(), out.len());
            let status = self
                .stream
                .decompress_vec(&input[(self.stream.total_in() - start) as usize..], out, FlushDecompress::Sync)
                .map_err(|e| format!("inflate: {e}"))?;
            let consumed = (self.stream.total_in() - start) as usize;
            if consumed == input.len() && out.len() < out.capacity() {
                return Ok(());
            }
            if status == Status::StreamEnd {
                return Err("inflate: final block inside a message".into());
            }
            if before == (self.stream.total_in(), out.len()) {
                return Err("inflate: no progress".into());
            }
            if out.len() > MAX_MESSAGE {
                return Err("inflate: message over 64 MiB".into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_agreements() {
        assert_eq!(negotiated("", true).unwrap(), None);
        assert_eq!(negotiated("", false).unwrap(), None);
        let p = negotiated("permessage-deflate; server_max_window_bits=12; client_max_window_bits=\"12\"", true)
            .unwrap()
            .unwrap();
        assert_eq!(p.server_max_window_bits, Some(12));
        assert_eq!(p.client_max_window_bits, Some(12));
        let p = negotiated("permessage-deflate; client_no_context_takeover", true).unwrap().unwrap();
        assert!(p.client_no_context_takeover && !p.server_no_context_takeover);
        assert!(negotiated("permessage-deflate", false).is_err());
        assert!(negotiated("x-webkit-deflate-frame", true).is_err());
        assert!(negotiated("permessage-deflate; client_max_window_bits=8", true).is_err());
        assert!(negotiated("permessage-deflate, permessage-deflate", true).is_err());
    }

    #[test]
    fn round_trip_with_and_without_context_takeover() {
        let doc: Vec<u8> = (0..4096).map(|i| b"{\"key\": [1, 2, 3]}, "[i % 20]).collect();
        for no_takeover in [false, true] {
            let params = Params {
                client_no_context_takeover: no_takeover,
                client_max_window_bits: Some(12),
                ..Params::default()
            };
            let mut deflater = Deflater::new(&params, 6);
            let mut inflater = Inflater::default();
            let (mut wire, mut back) = (Vec::new(), Vec::new());
            for _ in 0..3 {
                deflater.compress(&doc, &mut wire).unwrap();
                assert!(wire.len() < doc.len() / 4);
                inflater.decompress(&wire, &mut back).unwrap();
                assert_eq!(back, doc);
            }
            deflater.compress(b"", &mut wire).unwrap();
            inflater.decompress(&wire, &mut back).unwrap();
            assert!(back.is_empty());
        }
    }
}
