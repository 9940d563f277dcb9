//! WebSocket (RFC 6455, RFC 7692): the pure protocol parts — frame codec (`frame`), the
//! opening handshake (`handshake`), message assembly with its checks (`reader`) and
//! permessage-deflate (`deflate`) — and the connection that runs them on the loop thread
//! (`conn`, which assembles binary messages in Python `bytes`: `payload`), started by
//! accepting a handshake (`accept`).

pub mod accept;
pub mod conn;
pub mod deflate;
pub mod frame;
pub mod handshake;
pub mod payload;
pub mod reader;

/// Why inflating a compressed message stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InflateError {
    /// The message would grow past the size limit (close 1009); detected while inflating,
    /// before the output exceeds the limit.
    TooBig,
    /// The compressed data is not valid DEFLATE (close 1007 per RFC 7692 §8 is not
    /// mandated; the connection fails with 1002 or 1007 at the caller's choice).
    Corrupt,
}

/// The decompressing half of permessage-deflate, as message assembly (`reader`) uses it.
/// `deflate::Inflater` implements it; `reader` does not depend on that type.
pub trait Inflate {
    /// Inflate a piece of a compressed message (a frame's payload, or part of one), appending
    /// to `out`. `fin`: the message's last piece (the implementation appends the `00 00 ff ff` tail RFC 7692 §7.2.2
    /// strips, and resets its window if context takeover is off). `out.len()` must never
    /// exceed `limit`: past it, `Err(TooBig)`.
    fn inflate(&mut self, input: &[u8], fin: bool, limit: usize, out: &mut Vec<u8>) -> Result<(), InflateError>;
}
