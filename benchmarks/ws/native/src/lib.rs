//! Shared pieces of the WebSocket benchmark's native tools (see README.md):
//! option parsing, the client side of RFC 6455 (handshake and framing) and of
//! permessage-deflate (RFC 7692) used by `ws-load`, and latency summaries.
//!
//! The client speaks the protocol itself rather than through tungstenite:
//! tungstenite has no permessage-deflate and rejects frames with RSV1 set, and
//! one code path for plain and compressed runs keeps the client's own cost
//! the same in every row.

pub mod cli;
pub mod conn;
pub mod deflate;
pub mod frame;
pub mod handshake;
pub mod stats;
