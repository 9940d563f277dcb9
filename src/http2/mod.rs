//! HTTP/2 (RFC 9113). Free of Python objects: the connection over `h2` (`core`, over the
//! in-memory `pipe`), a stream's request body waiting for its reader (`body`), its request
//! head as the interfaces read heads (`request`), its response as they give it
//! (`writing`), h2c by `Upgrade` (`upgrade`). On the loop: the asyncio protocol
//! (`protocol`), how its events become the interface's requests (`streams`), its timers
//! and its close (`lifecycle`), the request API the interfaces call through `Carrier`
//! (`respond`), and a stream as a transport (`tunnel`: WebSockets over HTTP/2). Also the
//! server's HTTP/2 settings and the client preface, by which an HTTP/1.1 connection tells
//! that it is to hand over.

use pyo3::prelude::*;

pub mod body;
pub mod core;
pub mod lifecycle;
pub mod pipe;
pub mod protocol;
pub mod request;
pub mod respond;
pub mod streams;
pub mod tunnel;
pub mod upgrade;
pub mod writing;

/// The server's HTTP/2 settings (the `--http2-*` options).
#[derive(Debug, Clone)]
pub struct Settings {
    pub max_concurrent_streams: u32,
    pub initial_stream_window_size: u32,
    pub initial_connection_window_size: u32,
    pub max_frame_size: u32,
    pub max_headers_size: u32,
    pub max_send_buffer_size: usize,
    /// Seconds between PINGs on an open connection (None: none sent).
    pub keep_alive_interval: Option<f64>,
    /// Seconds a PING's answer may take.
    pub keep_alive_timeout: f64,
    /// Seconds a stream's response may wait on the client with no byte moving before the
    /// stream is reset (None: no limit).
    pub stall_timeout: Option<f64>,
    /// `--http 2`: HTTP/1.1 requests are refused.
    pub only: bool,
    /// WebSockets are served: `SETTINGS_ENABLE_CONNECT_PROTOCOL` says the server takes
    /// them as extended CONNECT streams (RFC 8441).
    pub connect_protocol: bool,
}

#[cfg(any(test, fuzzing))]
impl Settings {
    /// The server's defaults (the `--http2-*` options'), for the unit tests and the fuzz
    /// targets.
    pub fn defaults() -> Settings {
        Settings {
            max_concurrent_streams: 200,
            initial_stream_window_size: 1 << 20,
            initial_connection_window_size: 1 << 20,
            max_frame_size: 16384,
            max_headers_size: 32768,
            max_send_buffer_size: 400 * 1024,
            keep_alive_interval: None,
            keep_alive_timeout: 20.0,
            stall_timeout: Some(60.0),
            only: false,
            connect_protocol: true,
        }
    }
}

/// As `HttpServerState` is given them: a tuple in the order of the fields.
pub type SettingsTuple = (u32, u32, u32, u32, u32, usize, Option<f64>, f64, Option<f64>, bool, bool);

impl From<SettingsTuple> for Settings {
    fn from(t: SettingsTuple) -> Self {
        Settings {
            max_concurrent_streams: t.0,
            initial_stream_window_size: t.1,
            initial_connection_window_size: t.2,
            max_frame_size: t.3,
            max_headers_size: t.4,
            max_send_buffer_size: t.5,
            keep_alive_interval: t.6,
            keep_alive_timeout: t.7,
            stall_timeout: t.8,
            only: t.9,
            connect_protocol: t.10,
        }
    }
}

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Where a connection's first bytes stand against the preface.
#[derive(Debug, PartialEq, Eq)]
pub enum Preface {
    /// The whole preface: the client speaks HTTP/2 (h2c with prior knowledge).
    Whole,
    /// What arrived so far is the start of it (or nothing arrived).
    Partial,
    /// Not the preface.
    No,
}

pub fn preface(buf: &[u8]) -> Preface {
    let n = buf.len().min(PREFACE.len());
    if buf[..n] != PREFACE[..n] {
        Preface::No
    } else if n == PREFACE.len() {
        Preface::Whole
    } else {
        Preface::Partial
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<protocol::H2Protocol>()?;
    m.add_class::<tunnel::H2Tunnel>()
}

/// The socket transport's native read path for `H2Protocol` (see `transport::native`).
pub fn native_reader(protocol: &Bound<'_, PyAny>) -> Option<crate::transport::native::Feed> {
    protocol.is_instance_of::<protocol::H2Protocol>().then_some(feed)
}

fn feed(protocol: &Bound<'_, PyAny>, data: &[u8]) -> PyResult<()> {
    protocol::H2Protocol::feed(protocol.cast::<protocol::H2Protocol>()?, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preface_is_told_from_http1() {
        assert_eq!(preface(b""), Preface::Partial);
        assert_eq!(preface(b"PRI * HT"), Preface::Partial);
        assert_eq!(preface(PREFACE), Preface::Whole);
        assert_eq!(preface(&[PREFACE, b"\x00\x00\x00\x04"].concat()), Preface::Whole);
        assert_eq!(preface(b"GET / HTTP/1.1\r\n"), Preface::No);
        assert_eq!(preface(b"PRI * HTTP/1.1\r\n"), Preface::No);
    }
}
