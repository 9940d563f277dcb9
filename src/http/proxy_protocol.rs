//! The PROXY protocol header (HAProxy's; v1 text, v2 binary) a load balancer puts before
//! a connection's first byte of HTTP with `--proxy-protocol`: where the connection really
//! came from and went to. Parsed with the `ppp` crate; this module says what the server
//! does with each result. Pure Rust, no Python: tested by `cargo test`.

use ppp::v1;
use ppp::v2;
use ppp::{HeaderResult, PartialResult};
use std::net::{IpAddr, SocketAddr};

/// What a complete header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A relayed connection: the client's address and the address it connected to.
    Relayed { client: SocketAddr, server: SocketAddr },
    /// The proxy's own connection (v2 LOCAL, a health check), v1 UNKNOWN, or an address
    /// family that is not IP: the connection's own addresses stand.
    Own,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preface {
    /// More bytes are needed.
    Incomplete,
    /// The header took `len` bytes of the input; the HTTP bytes follow.
    Done { len: usize, origin: Origin },
    /// Not a PROXY header, or a malformed one: the connection is closed.
    Invalid,
}

/// The longest v1 header, its CRLF included (HAProxy's specification).
const V1_MAX: usize = 107;

/// Reads the header at the start of `input`.
pub fn parse(input: &[u8]) -> Preface {
    // A v1 header is judged whole: `ppp` takes a partial line that ends on a separator
    // ("... 56324 ") for a malformed one, and a header split there by TCP is valid.
    // Once the line is whole, a header `ppp` still calls partial ("... 192.16...") is
    // malformed: nothing that follows could complete it.
    let v1_prefix = input.starts_with(b"PROXY") || b"PROXY".starts_with(input);
    let v1_whole = v1_prefix && input.contains(&b'\n');
    if v1_prefix && !v1_whole && input.len() < V1_MAX {
        return Preface::Incomplete;
    }
    let result = HeaderResult::parse(input);
    if result.is_incomplete() {
        return if v1_whole { Preface::Invalid } else { Preface::Incomplete };
    }
    match result {
        HeaderResult::V1(Ok(header)) => {
            let origin = match header.addresses {
                v1::Addresses::Tcp4(a) => {
                    relayed(a.source_address.into(), a.source_port, a.destination_address.into(), a.destination_port)
                }
                v1::Addresses::Tcp6(a) => {
                    relayed(a.source_address.into(), a.source_port, a.destination_address.into(), a.destination_port)
                }
                v1::Addresses::Unknown => Origin::Own,
            };
            Preface::Done { len: header.header.len(), origin }
        }
        HeaderResult::V2(Ok(header)) => {
            let origin = match (header.command, header.addresses) {
                (v2::Command::Local, _) => Origin::Own,
                (v2::Command::Proxy, v2::Addresses::IPv4(a)) => {
                    relayed(a.source_address.into(), a.source_port, a.destination_address.into(), a.destination_port)
                }
                (v2::Command::Proxy, v2::Addresses::IPv6(a)) => {
                    relayed(a.source_address.into(), a.source_port, a.destination_address.into(), a.destination_port)
                }
                (v2::Command::Proxy, _) => Origin::Own,
            };
            // A stream connection relayed as datagrams makes no sense: refused.
            if header.protocol == v2::Protocol::Datagram {
                return Preface::Invalid;
            }
            Preface::Done { len: header.len(), origin }
        }
        HeaderResult::V1(Err(_)) | HeaderResult::V2(Err(_)) => Preface::Invalid,
    }
}

fn relayed(client: IpAddr, client_port: u16, server: IpAddr, server_port: u16) -> Origin {
    Origin::Relayed { client: SocketAddr::new(client, client_port), server: SocketAddr::new(server, server_port) }
}

#[cfg(test)]
#[path = "proxy_protocol_tests.rs"]
mod tests;
