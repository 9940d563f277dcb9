//! The parsers and decoders that read bytes from the network, as the fuzz targets in
//! `fuzz/` reach them. Compiled only with `--cfg fuzzing` (tools/fuzz.sh sets it): the
//! extension module never has this module, and nothing here is API.

pub use crate::http::parse::{find_head_end, parse_head, ChunkedDecoder, Framing, Head, Limits, Reject};
pub use crate::http::proxy_protocol::{parse as parse_proxy_header, Origin, Preface};
pub use crate::http::static_files::path::{relative, resolve, well_encoded};
pub use crate::http::static_files::validators::{
    date, evaluate, parse_range, Conditions, Outcome, RangeAsk, Validators,
};
pub use crate::http2::core::{BodyTake, Event, H2Core};
pub use crate::http2::request::Request as H2Request;
pub use crate::http2::upgrade::{preface_and_settings, stream_one};
pub use crate::http2::{Settings as H2Settings, PREFACE as H2_PREFACE};
pub use crate::ws::deflate::{Inflater, Negotiated};
pub use crate::ws::frame::ProtocolError;
pub use crate::ws::reader::{Message, MessageReader};
pub use crate::ws::{Inflate, InflateError};
/// The types `h2` speaks in, at the versions swordfish links.
pub use {bytes, h2, http};
