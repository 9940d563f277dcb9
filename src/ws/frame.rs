//! The RFC 6455 §5 frame codec: parsing and checking the header of a frame a client sent,
//! unmasking its payload, and encoding the server's own (unmasked) frames and close payloads.

use std::fmt;
use std::mem::MaybeUninit;

/// Normal closure (RFC 6455 §7.4.1).
pub const CLOSE_NORMAL: u16 = 1000;
/// The peer broke the protocol.
pub const CLOSE_PROTOCOL_ERROR: u16 = 1002;
/// A message's data is inconsistent with its type (invalid UTF-8 in a text message).
pub const CLOSE_INVALID_DATA: u16 = 1007;
/// Policy violation (RFC 6455 §7.4.1).
pub const CLOSE_POLICY_VIOLATION: u16 = 1008;
/// A message is too big to process.
pub const CLOSE_TOO_BIG: u16 = 1009;

/// Longest payload of a control frame (RFC 6455 §5.5).
pub const MAX_CONTROL_PAYLOAD: usize = 125;
/// Longest close reason: the control-frame limit less the 2-byte status code.
pub const MAX_CLOSE_REASON: usize = MAX_CONTROL_PAYLOAD - 2;
/// Longest frame header: 2 fixed bytes, 8 of extended length and a 4-byte masking key.
pub const MAX_HEADER_LEN: usize = 14;

/// A frame's opcode; the values RFC 6455 reserves are refused when parsing, so they have no variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpCode {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl OpCode {
    /// The opcode for the low four bits of a frame's first byte, `None` for reserved values.
    pub fn from_bits(bits: u8) -> Option<OpCode> {
        match bits {
            0x0 => Some(OpCode::Continuation),
            0x1 => Some(OpCode::Text),
            0x2 => Some(OpCode::Binary),
            0x8 => Some(OpCode::Close),
            0x9 => Some(OpCode::Ping),
            0xA => Some(OpCode::Pong),
            _ => None,
        }
    }

    pub fn bits(self) -> u8 {
        match self {
            OpCode::Continuation => 0x0,
            OpCode::Text => 0x1,
            OpCode::Binary => 0x2,
            OpCode::Close => 0x8,
            OpCode::Ping => 0x9,
            OpCode::Pong => 0xA,
        }
    }

    /// Close, ping and pong: never fragmented, at most 125 bytes, allowed between the
    /// fragments of a data message.
    pub fn is_control(self) -> bool {
        matches!(self, OpCode::Close | OpCode::Ping | OpCode::Pong)
    }
}

/// Why the peer's bytes fail the connection: the close code to send it and a short reason
/// (for the close frame and the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolError {
    pub code: u16,
    pub reason: &'static str,
}

impl ProtocolError {
    /// A protocol violation (1002).
    pub const fn protocol(reason: &'static str) -> Self {
        ProtocolError { code: CLOSE_PROTOCOL_ERROR, reason }
    }

    /// Data inconsistent with its type, such as invalid UTF-8 (1007).
    pub const fn invalid_data(reason: &'static str) -> Self {
        ProtocolError { code: CLOSE_INVALID_DATA, reason }
    }

    /// A message over the size limit (1009).
    pub const fn too_big(reason: &'static str) -> Self {
        ProtocolError { code: CLOSE_TOO_BIG, reason }
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (close code {})", self.reason, self.code)
    }
}

impl std::error::Error for ProtocolError {}

/// A parsed frame header. `header_len` bytes of the buffer it came from were the header; the
/// payload (`payload_len` bytes, masked with `mask`) follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub fin: bool,
    pub rsv1: bool,
    pub rsv2: bool,
    pub rsv3: bool,
    pub opcode: OpCode,
    /// Always `Some` from `parse_header`, which refuses unmasked client frames.
    pub mask: Option<[u8; 4]>,
    pub payload_len: u64,
    pub header_len: usize,
}

/// The first `N` bytes of `buf` as an array, if it has that many.
fn leading<const N: usize>(buf: &[u8]) -> Option<[u8; N]> {
    buf.get(..N)?.try_into().ok()
}

/// Parse the header of a frame a client sent, from the start of `buf`. `Ok(None)`: more
/// bytes are needed (each check is made as soon as the bytes it needs are there, so a bad
/// header fails early even when it arrives a byte at a time). `max_payload` limits a data
/// frame's payload (1009 past it; control frames are held to 125 bytes by the RFC instead).
/// `rsv1_allowed`: an extension using RSV1 (permessage-deflate) was negotiated; RSV1 is
/// then accepted on the first frame of a data message only. Length encodings longer than
/// needed are accepted: RFC 6455 §5.2 puts the minimal-encoding rule on the sender.
pub fn parse_header(buf: &[u8], max_payload: u64, rsv1_allowed: bool) -> Result<Option<FrameHeader>, ProtocolError> {
    let Some([first, second]) = leading::<2>(buf) else {
        return Ok(None);
    };
    let fin = first & 0x80 != 0;
    let rsv1 = first & 0x40 != 0;
    let rsv2 = first & 0x20 != 0;
    let rsv3 = first & 0x10 != 0;
    if rsv2 || rsv3 {
        return Err(ProtocolError::protocol("reserved bit set without an extension using it"));
    }
    let opcode = OpCode::from_bits(first & 0x0F).ok_or(ProtocolError::protocol("reserved opcode"))?;
    if rsv1 && !rsv1_allowed {
        return Err(ProtocolError::protocol("RSV1 set without a negotiated extension"));
    }
    if rsv1 && (opcode.is_control() || opcode == OpCode::Continuation) {
        return Err(ProtocolError::protocol("RSV1 set on a control or continuation frame"));
    }
    if opcode.is_control() && !fin {
        return Err(ProtocolError::protocol("fragmented control frame"));
    }
    if second & 0x80 == 0 {
        return Err(ProtocolError::protocol("unmasked frame from the client"));
    }
    let rest = buf.get(2..).unwrap_or_default();
    let (payload_len, length_bytes) = match second & 0x7F {
        126 => match leading::<2>(rest) {
            Some(bytes) => (u64::from(u16::from_be_bytes(bytes)), 2),
            None => return Ok(None),
        },
        127 => {
            if rest.first().is_some_and(|&top| top & 0x80 != 0) {
                return Err(ProtocolError::protocol("64-bit payload length with its top bit set"));
            }
            match leading::<8>(rest) {
                Some(bytes) => (u64::from_be_bytes(bytes), 8),
                None => return Ok(None),
            }
        }
        short => (u64::from(short), 0),
    };
    if opcode.is_control() {
        if payload_len > MAX_CONTROL_PAYLOAD as u64 {
            return Err(ProtocolError::protocol("control frame payload over 125 bytes"));
        }
    } else if payload_len > max_payload {
        return Err(ProtocolError::too_big("message too big"));
    }
    let Some(mask) = leading::<4>(rest.get(length_bytes..).unwrap_or_default()) else {
        return Ok(None);
    };
    Ok(Some(FrameHeader {
        fin,
        rsv1,
        rsv2,
        rsv3,
        opcode,
        mask: Some(mask),
        payload_len,
        header_len: 2 + length_bytes + 4,
    }))
}

/// Unmask (or mask: XOR is its own inverse) `data` in place. `offset`: where `data[0]` sits
/// in the frame's payload, so that a payload arriving in pieces is unmasked piece by piece.
/// Works eight bytes at a time, with the key rotated to line up with `data[0]`.
pub fn unmask(data: &mut [u8], key: [u8; 4], offset: usize) {
    let mut key = key;
    key.rotate_left(offset % 4);
    let [k0, k1, k2, k3] = key;
    let word = u64::from_ne_bytes([k0, k1, k2, k3, k0, k1, k2, k3]);
    let mut words = data.chunks_exact_mut(8);
    for chunk in &mut words {
        if let Ok(bytes) = <&mut [u8; 8]>::try_from(chunk) {
            *bytes = (u64::from_ne_bytes(*bytes) ^ word).to_ne_bytes();
        }
    }
    // The tail starts at a multiple of 8 from data[0], so the rotated key still lines up.
    for (byte, k) in words.into_remainder().iter_mut().zip(key.iter().cycle()) {
        *byte ^= k;
    }
}

/// Unmask `src` into `dst` (the same length) in one pass, for a payload copied out of the
/// read buffer: `offset` as for `unmask`. `dst` may be uninitialised; all of it is written.
pub fn unmask_into(dst: &mut [MaybeUninit<u8>], src: &[u8], key: [u8; 4], offset: usize) {
    let mut key = key;
    key.rotate_left(offset % 4);
    let [k0, k1, k2, k3] = key;
    let word = u64::from_ne_bytes([k0, k1, k2, k3, k0, k1, k2, k3]);
    let mut out = dst.chunks_exact_mut(8);
    let mut words = src.chunks_exact(8);
    for (to, from) in (&mut out).zip(&mut words) {
        if let Ok(bytes) = <[u8; 8]>::try_from(from) {
            let masked = (u64::from_ne_bytes(bytes) ^ word).to_ne_bytes();
            for (slot, byte) in to.iter_mut().zip(masked) {
                slot.write(byte);
            }
        }
    }
    let tail = words.remainder().iter().zip(key.iter().cycle());
    for (slot, (byte, k)) in out.into_remainder().iter_mut().zip(tail) {
        slot.write(byte ^ k);
    }
}

/// Append `src` unmasked to `out` (`offset` as for `unmask`).
pub fn extend_unmasked(out: &mut Vec<u8>, src: &[u8], key: [u8; 4], offset: usize) {
    out.reserve(src.len());
    let start = out.len();
    if let Some(spare) = out.spare_capacity_mut().get_mut(..src.len()) {
        unmask_into(spare, src, key, offset);
        // SAFETY: `reserve` made room for `src.len()` more bytes and `unmask_into` has just
        // written every one of the `src.len()` bytes after the current length.
        unsafe { out.set_len(start + src.len()) };
    }
}

/// Append a server frame's header (unmasked), with the shortest length encoding.
pub fn write_header(out: &mut Vec<u8>, fin: bool, rsv1: bool, opcode: OpCode, len: usize) {
    let first = (u8::from(fin) << 7) | (u8::from(rsv1) << 6) | opcode.bits();
    if len <= MAX_CONTROL_PAYLOAD {
        out.extend_from_slice(&[first, len as u8]);
    } else if let Ok(len16) = u16::try_from(len) {
        out.extend_from_slice(&[first, 126]);
        out.extend_from_slice(&len16.to_be_bytes());
    } else {
        out.extend_from_slice(&[first, 127]);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
}

/// Append a whole single-frame message or control frame. `rsv1`: the payload is compressed
/// (permessage-deflate; data frames only).
pub fn write_frame(out: &mut Vec<u8>, opcode: OpCode, rsv1: bool, payload: &[u8]) {
    out.reserve(MAX_HEADER_LEN + payload.len());
    write_header(out, true, rsv1, opcode, payload.len());
    out.extend_from_slice(payload);
}

/// Whether a close code received from the peer may appear on the wire (RFC 6455 §7.4 and the
/// IANA registry): 1004 is reserved, 1005, 1006 and 1015 are for reporting only, 1012-1014
/// are registered since the RFC, 3000-4999 belong to libraries and applications.
pub fn valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// `reason` cut to at most 123 bytes at a character boundary, so that with the status code
/// it fits a control frame.
pub fn truncate_reason(reason: &str) -> &str {
    let mut end = reason.len().min(MAX_CLOSE_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason.get(..end).unwrap_or_default()
}

/// Append a close frame's payload: the status code and the reason, truncated to fit.
pub fn write_close_payload(out: &mut Vec<u8>, code: u16, reason: &str) {
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(truncate_reason(reason).as_bytes());
}

/// Append a close frame. `None`: no status code and so no reason (an empty payload). The
/// caller sends only codes a sender may use (not 1005, 1006 or 1015).
pub fn write_close_frame(out: &mut Vec<u8>, code: Option<u16>, reason: &str) {
    let mut payload = Vec::with_capacity(MAX_CONTROL_PAYLOAD);
    if let Some(code) = code {
        write_close_payload(&mut payload, code, reason);
    }
    write_frame(out, OpCode::Close, false, &payload);
}

/// The status code and reason of a received close frame's (unmasked) payload: a 1-byte
/// payload or a code not allowed on the wire is a protocol error (1002), a reason that is not
/// UTF-8 is 1007.
pub fn parse_close_payload(payload: &[u8]) -> Result<(Option<u16>, &str), ProtocolError> {
    let Some(code) = leading::<2>(payload) else {
        return if payload.is_empty() {
            Ok((None, ""))
        } else {
            Err(ProtocolError::protocol("close frame with a 1-byte payload"))
        };
    };
    let code = u16::from_be_bytes(code);
    if !valid_close_code(code) {
        return Err(ProtocolError::protocol("invalid close code"));
    }
    let reason = simdutf8::basic::from_utf8(payload.get(2..).unwrap_or_default())
        .map_err(|_| ProtocolError::invalid_data("close reason is not UTF-8"))?;
    Ok((Some(code), reason))
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
