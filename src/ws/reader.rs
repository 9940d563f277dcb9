//! Message assembly (RFC 6455 §5.4-5.6, RFC 7692 §6): the client's frames, fed in pieces of
//! any size, become whole messages and control frames. Every check that fails the connection
//! is made as the bytes arrive: protocol errors at the frame header, a too-big message from
//! the declared length before its payload is buffered, invalid UTF-8 at the first bad byte.

use super::frame::{self, FrameHeader, OpCode, ProtocolError, MAX_HEADER_LEN};
use super::{Inflate, InflateError};

/// Where a binary message sent in one frame is assembled: the reader knows its length from
/// the header, so the server can have it written straight into the object it hands the
/// application (a `bytes`) instead of copied there afterwards.
pub trait BinaryPayload: Sized {
    /// Room for a `len`-byte payload, which `write_unmasked` then fills front to back; `None`
    /// to assemble it in a `Vec` and take it with `from_vec`.
    fn with_len(len: usize) -> Option<Self>;
    /// Unmask `src` (masked with `key` from the payload's start) into bytes `at..`.
    fn write_unmasked(&mut self, at: usize, src: &[u8], key: [u8; 4]);
    /// A payload assembled in a `Vec` (a fragmented message).
    fn from_vec(data: Vec<u8>) -> Self;
}

impl BinaryPayload for Vec<u8> {
    fn with_len(len: usize) -> Option<Self> {
        Some(Vec::with_capacity(len))
    }

    fn write_unmasked(&mut self, at: usize, src: &[u8], key: [u8; 4]) {
        debug_assert_eq!(at, self.len());
        frame::extend_unmasked(self, src, key, at);
    }

    fn from_vec(data: Vec<u8>) -> Self {
        data
    }
}

/// What the client sent: a whole data message or a control frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<B = Vec<u8>> {
    Text(String),
    Binary(B),
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    /// The client's close frame; `code` is `None` for an empty payload (reason then empty).
    Close {
        code: Option<u16>,
        reason: String,
    },
}

/// How much of a compressed frame is unmasked (on the stack) and inflated per call.
const INFLATE_PIECE: usize = 8192;
/// Most payload space reserved ahead of arrival from a frame's declared length, so that a
/// peer announcing a big frame and sending nothing does not make the reader allocate it.
const RESERVE_AHEAD: usize = 64 * 1024;

/// The data message being assembled.
#[derive(Debug, Clone, Copy)]
struct Partial {
    text: bool,
    compressed: bool,
}

/// The frame whose payload is arriving.
#[derive(Debug, Clone, Copy)]
struct Frame {
    opcode: OpCode,
    fin: bool,
    key: [u8; 4],
    len: u64,
    received: u64,
}

/// Turns the bytes a client sends into `Message`s. After a close frame it discards what
/// follows; after an error it repeats that error.
pub struct MessageReader<B: BinaryPayload = Vec<u8>> {
    max_size: usize,
    inflater: Option<Box<dyn Inflate + Send>>,
    /// A frame header arriving in pieces.
    header: [u8; MAX_HEADER_LEN],
    header_len: usize,
    frame: Option<Frame>,
    partial: Option<Partial>,
    /// The data message's payload so far: unmasked, inflated if it was compressed.
    data: Vec<u8>,
    /// Instead of `data`: a binary message in one uncompressed frame, in its final place.
    whole: Option<B>,
    /// `data[..utf8_checked]` is valid UTF-8 ending at a character boundary (text messages).
    utf8_checked: usize,
    /// A control frame's payload so far.
    control: Vec<u8>,
    closed: bool,
    failed: Option<ProtocolError>,
}

impl<B: BinaryPayload> MessageReader<B> {
    /// `max_size`: the largest data message (after inflating), in bytes (1009 past it).
    /// `inflater`: permessage-deflate was negotiated; frames with RSV1 are refused without it.
    pub fn new(max_size: usize, inflater: Option<Box<dyn Inflate + Send>>) -> Self {
        MessageReader {
            max_size,
            inflater,
            header: [0; MAX_HEADER_LEN],
            header_len: 0,
            frame: None,
            partial: None,
            data: Vec::new(),
            whole: None,
            utf8_checked: 0,
            control: Vec::new(),
            closed: false,
            failed: None,
        }
    }

    /// Consume bytes from the start of `input` up to the end of the next complete message or
    /// control frame, returning how many were consumed and that message; `None` means all of
    /// `input` was consumed (and buffered) without completing one, so call again while input
    /// remains and a message came back. An error carries the close code to fail the
    /// connection with; the reader then keeps returning it.
    pub fn feed(&mut self, input: &[u8]) -> Result<(usize, Option<Message<B>>), ProtocolError> {
        if let Some(err) = self.failed {
            return Err(err);
        }
        if self.closed {
            return Ok((input.len(), None));
        }
        let result = self.advance(input);
        if let Err(err) = result {
            self.failed = Some(err);
            self.data = Vec::new();
            self.whole = None;
            self.control = Vec::new();
        }
        result
    }

    /// Bytes of memory the reader holds for payloads and a partial header (capacity, not
    /// length): at most `max_size` plus a control frame and a header for uncompressed
    /// messages; the inflater's growth of a compressed message's buffer is its own.
    #[cfg(test)]
    pub fn buffered_bytes(&self) -> usize {
        self.data.capacity() + self.control.capacity() + self.header_len
    }

    /// Whether the client's close frame has been read.
    #[cfg(test)]
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    fn advance(&mut self, input: &[u8]) -> Result<(usize, Option<Message<B>>), ProtocolError> {
        let mut used = 0;
        loop {
            let rest = input.get(used..).unwrap_or_default();
            let Some(frame) = self.frame else {
                used += self.read_header(rest)?;
                if self.frame.is_none() {
                    return Ok((used, None));
                }
                continue;
            };
            used += self.read_payload(frame, rest)?;
            let Some(frame) = self.frame.filter(|f| f.received == f.len) else {
                return Ok((used, None));
            };
            self.frame = None;
            if let Some(message) = self.finish_frame(frame)? {
                return Ok((used, Some(message)));
            }
        }
    }

    /// Take header bytes from `input` (into `self.header` while incomplete); on a complete
    /// header, start its frame. Returns the bytes consumed.
    fn read_header(&mut self, input: &[u8]) -> Result<usize, ProtocolError> {
        let had = self.header_len;
        let taken = self.header.iter_mut().skip(had).zip(input).map(|(slot, &byte)| *slot = byte).count();
        let buf = self.header.get(..had + taken).unwrap_or_default();
        match frame::parse_header(buf, u64::MAX, self.inflater.is_some())? {
            Some(header) => {
                self.header_len = 0;
                self.start_frame(&header)?;
                Ok(header.header_len.saturating_sub(had))
            }
            None => {
                self.header_len = had + taken;
                Ok(taken)
            }
        }
    }

    fn start_frame(&mut self, header: &FrameHeader) -> Result<(), ProtocolError> {
        let len = header.payload_len;
        match header.opcode {
            OpCode::Close | OpCode::Ping | OpCode::Pong => {
                // parse_header holds control payloads to 125 bytes.
                self.control.clear();
                self.control.reserve_exact(usize::try_from(len).unwrap_or(0));
            }
            OpCode::Text | OpCode::Binary => {
                if self.partial.is_some() {
                    return Err(ProtocolError::protocol("new data frame inside a fragmented message"));
                }
                let text = header.opcode == OpCode::Text;
                self.partial = Some(Partial { text, compressed: header.rsv1 });
                self.data.clear();
                self.utf8_checked = 0;
                if !text && header.fin && !header.rsv1 && len <= RESERVE_AHEAD as u64 {
                    self.whole = usize::try_from(len).ok().and_then(B::with_len);
                }
            }
            OpCode::Continuation => {
                if self.partial.is_none() {
                    return Err(ProtocolError::protocol("continuation frame without a message to continue"));
                }
            }
        }
        if matches!(self.partial, Some(p) if !p.compressed) && !header.opcode.is_control() {
            let total = (self.data.len() as u64).saturating_add(len);
            if total > self.max_size as u64 {
                return Err(ProtocolError::too_big("message too big"));
            }
            self.reserve_data(usize::try_from(len).unwrap_or(usize::MAX).min(RESERVE_AHEAD));
        }
        let key = header.mask.unwrap_or_default();
        self.frame = Some(Frame { opcode: header.opcode, fin: header.fin, key, len, received: 0 });
        Ok(())
    }

    /// Make room for `additional` more payload bytes, growing geometrically but never past
    /// `max_size` (the caller has checked that `additional` fits under it).
    fn reserve_data(&mut self, additional: usize) {
        let needed = self.data.len().saturating_add(additional);
        if needed <= self.data.capacity() {
            return;
        }
        let target = needed.max(self.data.capacity().saturating_mul(2).min(self.max_size));
        self.data.reserve_exact(target - self.data.len());
    }

    /// Take payload bytes of `frame` from `input`: unmask them and add them to the control
    /// payload or the message (inflating if compressed). Returns the bytes consumed.
    fn read_payload(&mut self, frame: Frame, input: &[u8]) -> Result<usize, ProtocolError> {
        let remaining = frame.len.saturating_sub(frame.received);
        let take = usize::try_from(remaining).map_or(input.len(), |r| r.min(input.len()));
        let piece = input.get(..take).unwrap_or_default();
        let offset = (frame.received % 4) as usize;
        let received = frame.received + take as u64;
        if frame.opcode.is_control() {
            let start = self.control.len();
            self.control.extend_from_slice(piece);
            if let Some(new) = self.control.get_mut(start..) {
                frame::unmask(new, frame.key, offset);
            }
        } else if self.partial.is_some_and(|p| p.compressed) {
            let mut buf = [0u8; INFLATE_PIECE];
            let mut piece_offset = offset;
            let mut left = piece;
            while !left.is_empty() {
                let (now, later) = left.split_at(left.len().min(INFLATE_PIECE));
                let chunk = buf.get_mut(..now.len()).unwrap_or_default();
                chunk.copy_from_slice(now);
                frame::unmask(chunk, frame.key, piece_offset);
                piece_offset += now.len();
                // The message's end goes with the last bytes of its final frame.
                let last = later.is_empty() && received == frame.len && frame.fin;
                self.inflate(chunk, last)?;
                self.check_utf8(false)?;
                left = later;
            }
        } else if let Some(whole) = self.whole.as_mut() {
            whole.write_unmasked(frame.received as usize, piece, frame.key);
        } else {
            self.reserve_data(take);
            frame::extend_unmasked(&mut self.data, piece, frame.key, offset);
            self.check_utf8(false)?;
        }
        if let Some(current) = self.frame.as_mut() {
            current.received = received;
        }
        Ok(take)
    }

    fn inflate(&mut self, input: &[u8], fin: bool) -> Result<(), ProtocolError> {
        let Some(inflater) = self.inflater.as_mut() else {
            return Err(ProtocolError::protocol("compressed frame without permessage-deflate"));
        };
        inflater.inflate(input, fin, self.max_size, &mut self.data).map_err(|err| match err {
            InflateError::TooBig => ProtocolError::too_big("message too big"),
            InflateError::Corrupt => ProtocolError::invalid_data("invalid compressed data"),
        })?;
        if self.data.len() > self.max_size {
            return Err(ProtocolError::too_big("message too big"));
        }
        Ok(())
    }

    /// Validate the text message's bytes that arrived since the last check. Mid-message an
    /// incomplete character at the end is fine (the next bytes may complete it); at the end
    /// (`complete`) it is not.
    fn check_utf8(&mut self, complete: bool) -> Result<(), ProtocolError> {
        if !self.partial.is_some_and(|p| p.text) {
            return Ok(());
        }
        let unchecked = self.data.get(self.utf8_checked..).unwrap_or_default();
        match simdutf8::compat::from_utf8(unchecked) {
            Ok(_) => self.utf8_checked = self.data.len(),
            Err(err) if err.error_len().is_none() && !complete => self.utf8_checked += err.valid_up_to(),
            Err(_) => return Err(ProtocolError::invalid_data("invalid UTF-8 in a text message")),
        }
        Ok(())
    }

    /// A frame's payload is complete: return the control frame, or the message it ended.
    fn finish_frame(&mut self, frame: Frame) -> Result<Option<Message<B>>, ProtocolError> {
        match frame.opcode {
            OpCode::Ping => return Ok(Some(Message::Ping(std::mem::take(&mut self.control)))),
            OpCode::Pong => return Ok(Some(Message::Pong(std::mem::take(&mut self.control)))),
            OpCode::Close => {
                let (code, reason) = frame::parse_close_payload(&self.control)?;
                let message = Message::Close { code, reason: reason.to_owned() };
                self.closed = true;
                self.partial = None;
                self.data = Vec::new();
                self.whole = None;
                self.control = Vec::new();
                return Ok(Some(message));
            }
            OpCode::Text | OpCode::Binary | OpCode::Continuation => {}
        }
        if !frame.fin {
            return Ok(None);
        }
        let Some(partial) = self.partial else {
            return Err(ProtocolError::protocol("continuation frame without a message to continue"));
        };
        if partial.compressed && frame.len == 0 {
            // An empty final frame: read_payload never saw it, but the inflater must.
            self.inflate(&[], true)?;
        }
        self.check_utf8(true)?;
        self.partial = None;
        if !partial.text {
            let payload = match self.whole.take() {
                Some(whole) => whole,
                None => B::from_vec(std::mem::take(&mut self.data)),
            };
            return Ok(Some(Message::Binary(payload)));
        }
        let bytes = std::mem::take(&mut self.data);
        if partial.compressed {
            // The inflater wrote these bytes, so its own code could have changed any of them
            // after they were checked: check the whole message once more.
            return String::from_utf8(bytes)
                .map(|text| Some(Message::Text(text)))
                .map_err(|_| ProtocolError::invalid_data("invalid UTF-8 in a text message"));
        }
        // SAFETY: only this reader wrote `bytes`, appending each piece after the checked
        // prefix and checking it from that prefix's end (a character boundary); the last
        // check just above covered everything up to the end and refused a trailing
        // incomplete character. So all of `bytes` is valid UTF-8.
        Ok(Some(Message::Text(unsafe { String::from_utf8_unchecked(bytes) })))
    }
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
