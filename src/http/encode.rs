//! Response body framing (RFC 9112 §6): one `Encoder` for a body of known length, a
//! chunked body, a body that ends when the connection closes (HTTP/1.0 without a length),
//! and no body at all (the reply to HEAD, 204 and 304). Pure: tested by `cargo test`.

use super::response::{push_chunk_size, LAST_CHUNK};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoder {
    /// `Content-Length`: this many bytes are still to come.
    Length(u64),
    Chunked,
    CloseDelimited,
    /// The response has no body: body bytes the application gives are dropped.
    Bodiless,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    /// More body than the announced length.
    TooLong,
    /// The body ended before the announced length.
    TooShort,
}

/// How a chunk of body goes out: whether it is sent at all, and what follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framed {
    pub send: bool,
    pub suffix: &'static [u8],
}

impl Encoder {
    /// Frame a chunk of `len` bytes: what goes before it is appended to `out`. An error
    /// leaves the encoder as it was.
    pub fn chunk(&mut self, len: usize, out: &mut Vec<u8>) -> Result<Framed, EncodeError> {
        let len64 = len as u64;
        match self {
            Encoder::Length(remaining) => {
                *remaining = remaining.checked_sub(len64).ok_or(EncodeError::TooLong)?;
                Ok(Framed { send: len > 0, suffix: b"" })
            }
            // An empty chunk would end the body.
            Encoder::Chunked if len == 0 => Ok(Framed { send: false, suffix: b"" }),
            Encoder::Chunked => {
                push_chunk_size(out, len);
                Ok(Framed { send: true, suffix: b"\r\n" })
            }
            Encoder::CloseDelimited => Ok(Framed { send: len > 0, suffix: b"" }),
            Encoder::Bodiless => Ok(Framed { send: false, suffix: b"" }),
        }
    }

    /// End the body: a chunked body's last chunk (with `trailers`, serialized field lines,
    /// if any) is appended to `out`. A body shorter than its length is an error.
    pub fn end(&self, trailers: &[u8], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match self {
            Encoder::Length(0) | Encoder::CloseDelimited | Encoder::Bodiless => Ok(()),
            Encoder::Length(_) => Err(EncodeError::TooShort),
            Encoder::Chunked if trailers.is_empty() => {
                out.extend_from_slice(LAST_CHUNK);
                Ok(())
            }
            Encoder::Chunked => {
                out.extend_from_slice(b"0\r\n");
                out.extend_from_slice(trailers);
                out.extend_from_slice(b"\r\n");
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(enc: &mut Encoder, data: &[u8]) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::new();
        let f = enc.chunk(data.len(), &mut out)?;
        if f.send {
            out.extend_from_slice(data);
        }
        out.extend_from_slice(f.suffix);
        Ok(out)
    }

    #[test]
    fn length_counts_down_and_checks_both_ends() {
        let mut enc = Encoder::Length(5);
        assert_eq!(frame(&mut enc, b"ab").unwrap(), b"ab");
        assert_eq!(enc.end(b"", &mut Vec::new()), Err(EncodeError::TooShort));
        assert_eq!(frame(&mut enc, b"cdef"), Err(EncodeError::TooLong));
        assert_eq!(enc, Encoder::Length(3), "a refused chunk changes nothing");
        assert_eq!(frame(&mut enc, b"cde").unwrap(), b"cde");
        assert_eq!(enc.end(b"", &mut Vec::new()), Ok(()));
        assert_eq!(frame(&mut enc, b""), Ok(Vec::new()));
    }

    #[test]
    fn chunked_frames_and_ends_with_trailers() {
        let mut enc = Encoder::Chunked;
        assert_eq!(frame(&mut enc, &[b'x'; 26]).unwrap(), [&b"1a\r\n"[..], &[b'x'; 26], b"\r\n"].concat());
        assert_eq!(frame(&mut enc, b"").unwrap(), b"", "no empty chunk: it would end the body");
        let mut out = Vec::new();
        enc.end(b"", &mut out).unwrap();
        assert_eq!(out, b"0\r\n\r\n");
        out.clear();
        enc.end(b"x-sum: 1\r\n", &mut out).unwrap();
        assert_eq!(out, b"0\r\nx-sum: 1\r\n\r\n");
    }

    #[test]
    fn bodiless_drops_and_close_delimited_passes_through() {
        let mut enc = Encoder::Bodiless;
        assert_eq!(frame(&mut enc, b"dropped").unwrap(), b"");
        assert_eq!(enc.end(b"x: 1\r\n", &mut Vec::new()), Ok(()));
        let mut enc = Encoder::CloseDelimited;
        assert_eq!(frame(&mut enc, b"as is").unwrap(), b"as is");
    }
}
