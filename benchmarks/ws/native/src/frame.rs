//! RFC 6455 framing from the client's side: masked frames out, unmasked
//! frames in (§5.2, §5.3).

pub const OP_CONTINUATION: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

/// The fixed part of a received frame.
#[derive(Debug, PartialEq, Eq)]
pub struct Header {
    pub fin: bool,
    /// permessage-deflate's "compressed" bit (only on a message's first frame).
    pub rsv1: bool,
    pub opcode: u8,
    /// Payload length.
    pub len: usize,
    /// Bytes before the payload.
    pub header_len: usize,
}

/// The header of the server frame at the start of `buf`; `Ok(None)` while
/// more bytes are needed.
pub fn parse_header(buf: &[u8]) -> Result<Option<Header>, String> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let (b0, b1) = (buf[0], buf[1]);
    if b0 & 0x30 != 0 {
        return Err("frame with RSV2/RSV3 set".into());
    }
    if b1 & 0x80 != 0 {
        return Err("masked frame from the server".into());
    }
    let (len, header_len) = match b1 & 0x7F {
        126 if buf.len() < 4 => return Ok(None),
        126 => (usize::from(u16::from_be_bytes([buf[2], buf[3]])), 4),
        127 if buf.len() < 10 => return Ok(None),
        127 => {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(&buf[2..10]);
            let len = usize::try_from(u64::from_be_bytes(raw)).map_err(|_| "frame longer than memory".to_string())?;
            (len, 10)
        }
        short => (usize::from(short), 2),
    };
    let header = Header { fin: b0 & 0x80 != 0, rsv1: b0 & 0x40 != 0, opcode: b0 & 0x0F, len, header_len };
    if header.opcode >= 0x8 && (!header.fin || header.len > 125) {
        return Err("fragmented or oversized control frame".into());
    }
    if !matches!(header.opcode, OP_CONTINUATION | OP_TEXT | OP_BINARY | OP_CLOSE | OP_PING | OP_PONG) {
        return Err(format!("unknown opcode {:#x}", header.opcode));
    }
    Ok(Some(header))
}

/// Append one final, masked frame carrying `payload` to `out`.
pub fn encode(out: &mut Vec<u8>, opcode: u8, rsv1: bool, payload: &[u8], mask: [u8; 4]) {
    out.push(0x80 | if rsv1 { 0x40 } else { 0 } | opcode);
    let len = payload.len();
    if len < 126 {
        out.push(0x80 | len as u8);
    } else if let Ok(short) = u16::try_from(len) {
        out.push(0x80 | 126);
        out.extend_from_slice(&short.to_be_bytes());
    } else {
        out.push(0x80 | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    out.extend_from_slice(&mask);
    let start = out.len();
    out.extend_from_slice(payload);
    apply_mask(&mut out[start..], mask);
}

/// XOR `data` (a whole payload, starting at its first byte) with the
/// repeating 4-byte `mask`, eight bytes at a time: the client masks every
/// byte it sends and must stay cheap next to the server it measures.
pub fn apply_mask(data: &mut [u8], mask: [u8; 4]) {
    let wide = u64::from_ne_bytes([mask[0], mask[1], mask[2], mask[3], mask[0], mask[1], mask[2], mask[3]]);
    let mut chunks = data.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u64::from_ne_bytes(word) ^ wide).to_ne_bytes());
    }
    // Chunks are 8 bytes, a multiple of the mask's 4: the tail starts at
    // mask index 0.
    for (i, byte) in chunks.into_remainder().iter_mut().enumerate() {
        *byte ^= mask[i % 4];
    }
}

/// Mask keys from xorshift64: unpredictability does not matter between a
/// benchmark client and a local server, a fresh key per frame does (§5.3).
pub struct MaskKeys(u64);

impl MaskKeys {
    pub fn new(seed: u64) -> MaskKeys {
        MaskKeys(seed | 1)
    }

    pub fn next_key(&mut self) -> [u8; 4] {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x as u32).to_le_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unmasked_len(frame: &[u8]) -> (usize, usize) {
        match frame[1] & 0x7F {
            126 => (usize::from(u16::from_be_bytes([frame[2], frame[3]])), 4),
            127 => (u64::from_be_bytes(frame[2..10].try_into().unwrap()) as usize, 10),
            n => (usize::from(n), 2),
        }
    }

    #[test]
    fn encode_lengths_and_mask() {
        for len in [0, 1, 125, 126, 65535, 65536, 70000] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut out = Vec::new();
            encode(&mut out, OP_BINARY, true, &payload, [1, 2, 3, 4]);
            assert_eq!(out[0], 0x80 | 0x40 | OP_BINARY);
            assert_eq!(out[1] & 0x80, 0x80);
            let (n, at) = unmasked_len(&out);
            assert_eq!(n, len);
            let mask: [u8; 4] = out[at..at + 4].try_into().unwrap();
            let mut body = out[at + 4..].to_vec();
            apply_mask(&mut body, mask);
            assert_eq!(body, payload);
        }
    }

    #[test]
    fn mask_matches_bytewise() {
        let data: Vec<u8> = (0..37).collect();
        let mask = [0xA1, 0x02, 0x73, 0xFF];
        let mut fast = data.clone();
        apply_mask(&mut fast, mask);
        let slow: Vec<u8> = data.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]).collect();
        assert_eq!(fast, slow);
    }

    #[test]
    fn parse_server_headers() {
        assert_eq!(parse_header(&[0x81]).unwrap(), None);
        let h = parse_header(&[0x81, 5, b'h']).unwrap().unwrap();
        assert_eq!((h.fin, h.rsv1, h.opcode, h.len, h.header_len), (true, false, OP_TEXT, 5, 2));
        assert_eq!(parse_header(&[0xC2, 126, 1]).unwrap(), None);
        let h = parse_header(&[0xC2, 126, 1, 0]).unwrap().unwrap();
        assert_eq!((h.rsv1, h.len, h.header_len), (true, 256, 4));
        let h = parse_header(&[0x02, 127, 0, 0, 0, 0, 0, 1, 0, 0]).unwrap().unwrap();
        assert_eq!((h.fin, h.len, h.header_len), (false, 65536, 10));
        assert!(parse_header(&[0x81, 0x85]).is_err());
        assert!(parse_header(&[0x09, 0]).is_err());
        assert!(parse_header(&[0x89, 126, 0, 200]).is_err());
        assert!(parse_header(&[0x83, 0]).is_err());
    }
}
