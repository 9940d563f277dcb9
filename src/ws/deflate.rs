//! permessage-deflate (RFC 7692) for the server: negotiating the extension from the client's
//! offers, compressing outgoing messages (`Deflater`) and inflating incoming ones (`Inflater`)
//! with a hard cap on the inflated size. Pure: no I/O, no Python.
//!
//! Memory per connection (zlib-rs 0.6.8 through flate2, measured as resident memory over 1000
//! instances): a compressor takes about 200 KiB with a 2^12 window and 312 KiB with 2^15 (most
//! of it a fixed 128 KiB hash table that neither window bits nor flate2 can shrink); a
//! decompressor takes about 19 KiB, growing to about 47 KiB as its 32 KiB window fills,
//! whatever its window bits. Both are therefore allocated only when the first message needs
//! them, and dropped after every message when context takeover is off.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::{Inflate, InflateError};

/// The extension's registered name (RFC 7692 §7).
const EXTENSION_NAME: &[u8] = b"permessage-deflate";

/// The four octets a sync flush ends with, which the sender strips (RFC 7692 §7.2.1) and the
/// receiver appends back before inflating (§7.2.2).
const FLUSH_TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// zlib's default level: most of the gain of level 9 at a fraction of its time.
const COMPRESSION_LEVEL: u32 = 6;

/// The smallest window zlib-rs (like zlib) can deflate with: it refuses 8 bits for raw DEFLATE
/// (and silently uses 9 elsewhere, whose distances a 2^8 inflater may reject), so an offer
/// that requires the server to use 8 bits is declined.
const MIN_DEFLATE_WINDOW_BITS: u8 = 9;

/// The largest LZ77 window DEFLATE allows (RFC 1951), and the default of both endpoints.
const MAX_WINDOW_BITS: u8 = 15;

/// The first output reservation while inflating; later ones double with the output.
const MIN_INFLATE_STEP: usize = 1024;

/// Messages shorter than this are not worth compressing without context takeover: a fresh
/// compressor turns 64 bytes of JSON into 63 on average and anything below 48 bytes into a
/// stored block two bytes longer than the input (measured with zlib-rs at window 12).
const MIN_WORTHWHILE_FRESH: usize = 64;

/// Messages shorter than this gain nothing from compression even with context takeover: 4
/// bytes of JSON still take 4 (measured as above), and 8 take 5.
const MIN_WORTHWHILE_TAKEOVER: usize = 8;

/// The server's permessage-deflate settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// Accept permessage-deflate at all.
    pub enabled: bool,
    /// The compressor's window (9..=15, clamped) when the client allows it; a smaller one when
    /// the client asks. 15 by default. The `websockets` library's server asks for 12 to save
    /// memory; with zlib-rs that saves 112 KiB of a 312 KiB compressor (a fixed hash table is
    /// most of it), and it costs much: a 4 KiB JSON document sent again and again compressed
    /// to 647 bytes in 14.3 µs with a 12-bit window, to 46 bytes in 2.9 µs with a 15-bit one
    /// (its previous copy is within reach). The memory is spent only while a connection sends:
    /// the compressor is allocated by the first message and released when idle
    /// (`Deflater::release`).
    pub server_max_window_bits: u8,
    /// The window (9..=15, clamped) the server asks clients that offer `client_max_window_bits`
    /// to compress with; 15 leaves theirs unrestricted. 15 by default, unlike `websockets`
    /// (which asks for 12 to shrink zlib's inflate window from 32 KiB to 4 KiB): zlib-rs's
    /// decompressor takes the same memory whatever its window bits (measured), so asking would
    /// only make the client's messages 6-13% larger.
    pub client_max_window_bits: u8,
    /// Compress every message on its own, so the compressor is freed between messages (about
    /// 200 KiB less per idle connection) at a cost in ratio for small, similar messages.
    pub server_no_context_takeover: bool,
    /// Ask clients to compress every message on its own, so the decompressor is freed between
    /// messages.
    pub client_no_context_takeover: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            enabled: true,
            server_max_window_bits: MAX_WINDOW_BITS,
            client_max_window_bits: MAX_WINDOW_BITS,
            server_no_context_takeover: false,
            client_no_context_takeover: false,
        }
    }
}

/// The parameters both endpoints agreed on for a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// The server compresses each message on its own.
    pub server_no_context_takeover: bool,
    /// The client compresses each message on its own.
    pub client_no_context_takeover: bool,
    /// The server's compression window, 9..=15.
    pub server_max_window_bits: u8,
    /// The largest window the client compresses with, 8..=15.
    pub client_max_window_bits: u8,
}

/// Chooses the first acceptable permessage-deflate offer from the values of the request's
/// `Sec-WebSocket-Extensions` header fields, and returns the agreed parameters with the value
/// of the response's `Sec-WebSocket-Extensions` header. `None` (no extension in use) when
/// compression is disabled or no offer is acceptable: an offer with an unknown, duplicate or
/// invalid parameter, a syntax error, or one requiring `server_max_window_bits=8` is skipped.
pub fn negotiate<I, V>(header_values: I, config: &ServerConfig) -> Option<(Negotiated, String)>
where
    I: IntoIterator<Item = V>,
    V: AsRef<[u8]>,
{
    if !config.enabled {
        return None;
    }
    header_values.into_iter().find_map(|value| {
        let mut cursor = Cursor { bytes: value.as_ref(), pos: 0 };
        std::iter::from_fn(|| cursor.next_element())
            .find_map(|element| element.and_then(|offer| accept(&offer, config)))
    })
}

/// A permessage-deflate offer's parameters (RFC 7692 §7.1), as the client sent them.
#[derive(Debug, Default)]
struct Offer {
    server_no_context_takeover: bool,
    client_no_context_takeover: bool,
    server_max_window_bits: Option<u8>,
    client_max_window_bits: Option<ClientWindowOffer>,
}

/// `client_max_window_bits` in an offer: supported, and possibly a promise of a bound.
#[derive(Debug, Clone, Copy)]
enum ClientWindowOffer {
    Supported,
    AtMost(u8),
}

impl Offer {
    /// Records one parameter; `None` for an unknown, duplicate or invalid one.
    fn apply(&mut self, name: &[u8], value: Option<&[u8]>) -> Option<()> {
        if name.eq_ignore_ascii_case(b"server_no_context_takeover") {
            set_flag(&mut self.server_no_context_takeover, value)
        } else if name.eq_ignore_ascii_case(b"client_no_context_takeover") {
            set_flag(&mut self.client_no_context_takeover, value)
        } else if name.eq_ignore_ascii_case(b"server_max_window_bits") {
            if self.server_max_window_bits.is_some() {
                return None;
            }
            self.server_max_window_bits = Some(parse_window_bits(value?)?);
            Some(())
        } else if name.eq_ignore_ascii_case(b"client_max_window_bits") {
            if self.client_max_window_bits.is_some() {
                return None;
            }
            self.client_max_window_bits = Some(match value {
                None => ClientWindowOffer::Supported,
                Some(bits) => ClientWindowOffer::AtMost(parse_window_bits(bits)?),
            });
            Some(())
        } else {
            None
        }
    }
}

/// Sets a value-less flag parameter, once.
fn set_flag(flag: &mut bool, value: Option<&[u8]>) -> Option<()> {
    if *flag || value.is_some() {
        return None;
    }
    *flag = true;
    Some(())
}

/// A window size: a decimal integer from 8 to 15 without leading zeroes (RFC 7692 §7.1.2).
fn parse_window_bits(value: &[u8]) -> Option<u8> {
    let bits = match value {
        [digit @ b'8'..=b'9'] => digit - b'0',
        [b'1', digit @ b'0'..=b'5'] => 10 + (digit - b'0'),
        _ => return None,
    };
    Some(bits)
}

/// The server's answer to an offer, or `None` to decline it.
fn accept(offer: &Offer, config: &ServerConfig) -> Option<(Negotiated, String)> {
    let preferred_server_bits = config.server_max_window_bits.clamp(MIN_DEFLATE_WINDOW_BITS, MAX_WINDOW_BITS);
    // The server may always use a smaller window than the client allows (§7.1.2.1).
    let server_max_window_bits =
        offer.server_max_window_bits.map_or(preferred_server_bits, |allowed| allowed.min(preferred_server_bits));
    if server_max_window_bits < MIN_DEFLATE_WINDOW_BITS {
        return None;
    }
    let preferred_client_bits = config.client_max_window_bits.clamp(MIN_DEFLATE_WINDOW_BITS, MAX_WINDOW_BITS);
    // Only a client that offered client_max_window_bits may be told its window (§7.1.2.2).
    let client_max_window_bits = match offer.client_max_window_bits {
        None => None,
        Some(ClientWindowOffer::Supported) => Some(preferred_client_bits).filter(|&bits| bits < MAX_WINDOW_BITS),
        Some(ClientWindowOffer::AtMost(bound)) => Some(bound.min(preferred_client_bits)),
    };
    let negotiated = Negotiated {
        server_no_context_takeover: offer.server_no_context_takeover || config.server_no_context_takeover,
        client_no_context_takeover: offer.client_no_context_takeover || config.client_no_context_takeover,
        server_max_window_bits,
        client_max_window_bits: client_max_window_bits.unwrap_or(MAX_WINDOW_BITS),
    };
    let mut response = String::from("permessage-deflate");
    if negotiated.server_no_context_takeover {
        response.push_str("; server_no_context_takeover");
    }
    if negotiated.client_no_context_takeover {
        response.push_str("; client_no_context_takeover");
    }
    // Echoed when offered (§7.1.2.1 requires it then), and sent unasked to shrink our window.
    if offer.server_max_window_bits.is_some() || server_max_window_bits < MAX_WINDOW_BITS {
        response.push_str(&format!("; server_max_window_bits={server_max_window_bits}"));
    }
    if let Some(bits) = client_max_window_bits {
        response.push_str(&format!("; client_max_window_bits={bits}"));
    }
    Some((negotiated, response))
}

/// Reads one `Sec-WebSocket-Extensions` value, element by element (RFC 6455 §9.1):
/// `extension-token *( ";" token [ "=" ( token / quoted-string ) ] )`, separated by commas,
/// with optional whitespace around every separator.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// The next list element: `Some(Some(offer))` for a well-formed permessage-deflate offer,
    /// `Some(None)` for anything else (another extension, or an offer to decline), `None` at
    /// the end.
    fn next_element(&mut self) -> Option<Option<Offer>> {
        loop {
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.pos += 1,
                _ => break,
            }
        }
        let element = self.element();
        if element.is_none() {
            self.skip_past_element();
        }
        Some(element.flatten())
    }

    /// Parses an element up to its closing comma or the end; `None` on a syntax error or a
    /// permessage-deflate parameter that makes the offer unacceptable.
    fn element(&mut self) -> Option<Option<Offer>> {
        let is_offer = self.token()?.eq_ignore_ascii_case(EXTENSION_NAME);
        let mut offer = Offer::default();
        loop {
            self.skip_whitespace();
            match self.peek() {
                None => break,
                Some(b',') => {
                    self.pos += 1;
                    break;
                }
                Some(b';') => self.pos += 1,
                Some(_) => return None,
            }
            self.skip_whitespace();
            let name = self.token()?;
            self.skip_whitespace();
            let value = if self.peek() == Some(b'=') {
                self.pos += 1;
                self.skip_whitespace();
                Some(self.value()?)
            } else {
                None
            };
            if is_offer {
                offer.apply(name, value.as_deref())?;
            }
        }
        Some(is_offer.then_some(offer))
    }

    /// A parameter value: a token, or a quoted string whose unescaped content must itself be
    /// a token (RFC 6455 §9.1).
    fn value(&mut self) -> Option<Vec<u8>> {
        if self.peek() != Some(b'"') {
            return self.token().map(<[u8]>::to_vec);
        }
        self.pos += 1;
        let mut unescaped = Vec::new();
        loop {
            let byte = self.bump()?;
            match byte {
                b'"' => break,
                b'\\' => unescaped.push(self.bump()?),
                _ => unescaped.push(byte),
            }
        }
        (!unescaped.is_empty() && unescaped.iter().all(|&byte| is_token_byte(byte))).then_some(unescaped)
    }

    /// A non-empty run of token characters.
    fn token(&mut self) -> Option<&'a [u8]> {
        let bytes = self.bytes;
        let start = self.pos;
        while bytes.get(self.pos).is_some_and(|&byte| is_token_byte(byte)) {
            self.pos += 1;
        }
        bytes.get(start..self.pos).filter(|token| !token.is_empty())
    }

    /// Skips the rest of a malformed element, through its closing comma, minding quoted
    /// strings (which may contain commas).
    fn skip_past_element(&mut self) {
        let mut in_quotes = false;
        while let Some(byte) = self.bump() {
            match byte {
                b'\\' if in_quotes => {
                    self.bump();
                }
                b'"' => in_quotes = !in_quotes,
                b',' if !in_quotes => return,
                _ => {}
            }
        }
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.pos += 1;
        Some(byte)
    }
}

/// `tchar` (RFC 7230 §3.2.6).
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// Compresses the server's messages.
pub struct Deflater {
    window_bits: u8,
    no_context_takeover: bool,
    /// Allocated by the first message; dropped after each one without context takeover.
    compressor: Option<Compress>,
}

impl Deflater {
    /// Nothing is allocated until the first message.
    pub fn new(negotiated: &Negotiated) -> Self {
        Deflater {
            window_bits: negotiated.server_max_window_bits.clamp(MIN_DEFLATE_WINDOW_BITS, MAX_WINDOW_BITS),
            no_context_takeover: negotiated.server_no_context_takeover,
            compressor: None,
        }
    }

    /// Free the compressor (a connection gone quiet). Allowed at any time: a fresh compressor
    /// refers to nothing it did not send itself, and the client's window keeps the rest.
    pub fn release(&mut self) {
        self.compressor = None;
    }

    /// Whether compressing a message of `len` bytes is likely to pay (RFC 7692 §6 lets the
    /// server send any message uncompressed, RSV1 clear; that message then stays out of the
    /// compression context on both sides).
    pub fn worth_compressing(&self, len: usize) -> bool {
        let threshold = if self.no_context_takeover { MIN_WORTHWHILE_FRESH } else { MIN_WORTHWHILE_TAKEOVER };
        len >= threshold
    }

    /// Appends the compressed payload of one whole message (RSV1 set on its first frame).
    pub fn compress(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        let window_bits = self.window_bits;
        let compressor = self.compressor.get_or_insert_with(|| {
            Compress::new_with_window_bits(Compression::new(COMPRESSION_LEVEL), false, window_bits)
        });
        let flushed = sync_flush(compressor, data, out).is_some()
            && out.get(start..).is_some_and(|payload| payload.ends_with(&FLUSH_TAIL));
        if flushed {
            out.truncate(out.len() - FLUSH_TAIL.len());
        } else {
            // zlib-rs fails only on an inconsistent state; rather than send nothing, start over
            // with a fresh compressor, whose empty history the peer's window covers.
            out.truncate(start);
            self.compressor = None;
            write_stored(data, out);
        }
        if self.no_context_takeover {
            self.compressor = None;
        }
    }
}

/// Compresses `data` into `out` and ends with a sync flush; `None` if the compressor fails or
/// stops making progress.
fn sync_flush(compressor: &mut Compress, data: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let start_in = compressor.total_in();
    out.reserve(data.len() / 2 + 64);
    loop {
        let consumed = usize::try_from(compressor.total_in() - start_in).ok()?;
        let (in_before, out_before) = (compressor.total_in(), compressor.total_out());
        compressor.compress_vec(data.get(consumed..)?, out, FlushCompress::Sync).ok()?;
        let all_consumed = usize::try_from(compressor.total_in() - start_in).ok()? == data.len();
        // zlib's contract: the flush is complete once it returns with output space left.
        if all_consumed && out.len() < out.capacity() {
            return Some(());
        }
        let progressed = compressor.total_in() != in_before || compressor.total_out() != out_before;
        if !progressed && out.len() < out.capacity() {
            return None;
        }
        out.reserve((data.len() - consumed) / 2 + 1024);
    }
}

/// Appends `data` as non-final stored DEFLATE blocks (RFC 1951 §3.2.4) followed by the header
/// byte of the empty stored block whose length fields the receiver appends: what a sync flush
/// of uncompressed data produces, minus `FLUSH_TAIL`.
fn write_stored(data: &[u8], out: &mut Vec<u8>) {
    for chunk in data.chunks(usize::from(u16::MAX)) {
        let len = u16::try_from(chunk.len()).unwrap_or(u16::MAX);
        out.push(0x00); // BFINAL = 0, BTYPE = 00, then padding to the byte boundary
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out.push(0x00);
}

/// Inflates the client's messages.
pub struct Inflater {
    window_bits: u8,
    no_context_takeover: bool,
    /// Allocated by the first compressed message; dropped after each one without context
    /// takeover, and after an error.
    decompressor: Option<Decompress>,
    /// The client ended its DEFLATE stream with a BFINAL block (allowed, RFC 7692 §7.2.3): the
    /// rest of the message is ignored, and the next one starts a new stream.
    stream_ended: bool,
}

impl Inflater {
    /// Nothing is allocated until the first message.
    pub fn new(negotiated: &Negotiated) -> Self {
        Inflater {
            // A window larger than the client's is harmless, and flate2 takes 9 at least.
            window_bits: negotiated.client_max_window_bits.clamp(MIN_DEFLATE_WINDOW_BITS, MAX_WINDOW_BITS),
            no_context_takeover: negotiated.client_no_context_takeover,
            decompressor: None,
            stream_ended: false,
        }
    }

    fn inflate_frame(&mut self, input: &[u8], fin: bool, limit: usize, out: &mut Vec<u8>) -> Result<(), InflateError> {
        if out.len() > limit {
            return Err(InflateError::TooBig);
        }
        if self.stream_ended {
            return Ok(());
        }
        let window_bits = self.window_bits;
        let decompressor =
            self.decompressor.get_or_insert_with(|| Decompress::new_with_window_bits(false, window_bits));
        let mut ended = inflate_bounded(decompressor, input, limit, out)?;
        if fin && !ended {
            ended = inflate_bounded(decompressor, &FLUSH_TAIL, limit, out)?;
        }
        self.stream_ended = ended;
        Ok(())
    }
}

impl Inflate for Inflater {
    fn inflate(&mut self, input: &[u8], fin: bool, limit: usize, out: &mut Vec<u8>) -> Result<(), InflateError> {
        let result = self.inflate_frame(input, fin, limit, out);
        if result.is_err() || (fin && (self.no_context_takeover || self.stream_ended)) {
            self.decompressor = None;
            self.stream_ended = false;
        }
        result
    }
}

/// Feeds `input` to the decompressor, appending its output to `out` in steps that never let
/// `out` grow (allocate) past `limit`: a bomb is stopped at the limit, not at its end.
/// `Ok(true)` once the DEFLATE stream has ended. If the caller's `out` already has capacity
/// past `limit`, output may fill it before `TooBig`, and is truncated to `limit`.
fn inflate_bounded(
    decompressor: &mut Decompress,
    mut input: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<bool, InflateError> {
    loop {
        let room = limit.saturating_sub(out.len());
        if out.len() == out.capacity() && room > 0 {
            // Doubling keeps the copies linear; reserve_exact keeps the capacity within limit.
            let step = out.len().max(input.len().saturating_mul(4)).max(MIN_INFLATE_STEP);
            out.reserve_exact(step.min(room));
        }
        let (in_before, out_before) = (decompressor.total_in(), decompressor.total_out());
        let had_space = out.len() < out.capacity();
        let status = if had_space {
            decompressor.decompress_vec(input, out, FlushDecompress::None)
        } else {
            // `out` holds `limit` bytes: one more byte of output means the message is too big.
            let mut probe = [0u8; 1];
            decompressor.decompress(input, &mut probe, FlushDecompress::None)
        }
        .map_err(|_| InflateError::Corrupt)?;
        let consumed = usize::try_from(decompressor.total_in() - in_before).map_err(|_| InflateError::Corrupt)?;
        let produced = decompressor.total_out() - out_before;
        if out.len() > limit || (!had_space && produced > 0) {
            out.truncate(limit);
            return Err(InflateError::TooBig);
        }
        input = input.get(consumed..).unwrap_or_default();
        if status == Status::StreamEnd {
            return Ok(true);
        }
        // A decompressor that stopped short of filling `out` has nothing more to give.
        let out_filled = had_space && out.len() == out.capacity();
        if input.is_empty() && !out_filled {
            return Ok(false);
        }
        if consumed == 0 && produced == 0 && !out_filled {
            // No progress with input and space available: not a stream zlib can continue.
            return Err(InflateError::Corrupt);
        }
    }
}

#[cfg(test)]
#[path = "deflate_tests.rs"]
mod tests;
