//! The PROXY protocol header on the wire: v1 and v2 headers written out byte by byte here
//! (as HAProxy's specification lays them out), complete, split and malformed.

use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};

const SIG: [u8; 12] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A];

/// A v2 header: version/command byte, family/protocol byte, then `body` (addresses, TLVs).
fn v2(command: u8, family: u8, body: &[u8]) -> Vec<u8> {
    let mut out = SIG.to_vec();
    out.push(0x20 | command);
    out.push(family);
    out.extend_from_slice(&u16::try_from(body.len()).expect("short body").to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn ipv4_body() -> Vec<u8> {
    let mut body = vec![192, 168, 0, 1, 10, 0, 0, 2];
    body.extend_from_slice(&56324u16.to_be_bytes());
    body.extend_from_slice(&443u16.to_be_bytes());
    body
}

fn addr(ip: [u8; 4], port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port)
}

#[test]
fn v1_tcp4_then_http() {
    let input = b"PROXY TCP4 192.168.0.1 10.0.0.2 56324 443\r\nGET / HTTP/1.1\r\n";
    let len = b"PROXY TCP4 192.168.0.1 10.0.0.2 56324 443\r\n".len();
    let origin = Origin::Relayed { client: addr([192, 168, 0, 1], 56324), server: addr([10, 0, 0, 2], 443) };
    assert_eq!(parse(input), Preface::Done { len, origin });
}

#[test]
fn v1_tcp6_and_unknown() {
    let input = b"PROXY TCP6 2001:db8::1 ::1 4000 8080\r\n";
    let client = SocketAddr::new(IpAddr::V6("2001:db8::1".parse::<Ipv6Addr>().expect("ip")), 4000);
    let server = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 8080);
    assert_eq!(parse(input), Preface::Done { len: input.len(), origin: Origin::Relayed { client, server } });
    // UNKNOWN: the proxy could not tell; the rest of the line is ignored.
    let unknown = b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\nGET";
    assert_eq!(parse(unknown), Preface::Done { len: unknown.len() - 3, origin: Origin::Own });
    assert_eq!(parse(b"PROXY UNKNOWN\r\n"), Preface::Done { len: 15, origin: Origin::Own });
}

#[test]
fn v1_arriving_in_pieces() {
    let input = b"PROXY TCP4 192.168.0.1 10.0.0.2 56324 443\r\n";
    for end in 0..input.len() {
        assert_eq!(parse(&input[..end]), Preface::Incomplete, "{end} bytes");
    }
    assert!(matches!(parse(input), Preface::Done { .. }));
}

#[test]
fn v1_malformed() {
    for bad in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"PROXY TCP4 192.168.0.1 10.0.0.2 56324\r\n",       // a port missing
        b"PROXY TCP4 192.168.0.1 10.0.0.2 56324 70000\r\n", // a port past 65535
        b"PROXY TCP4 2001:db8::1 10.0.0.2 1 2\r\n",         // an IPv6 address as TCP4
        b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",              // no such protocol
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",                // no CR
        b"proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n",              // lowercase
        b"PROXY TCP4 192.168.0.1 192.16...\r\n",            // an address cut short, the line whole
        b"PROXY TCP4 192.168.0.1\r\nGET / HTTP/1.1\r\n",    // the same, HTTP after it
    ] {
        assert_eq!(parse(bad), Preface::Invalid, "{:?}", String::from_utf8_lossy(bad));
    }
    // 107 bytes without the end of the line: longer than any v1 header can be.
    let mut long = b"PROXY TCP4 ".to_vec();
    long.resize(107, b'1');
    assert_eq!(parse(&long), Preface::Invalid);
}

#[test]
fn v2_ipv4_then_http() {
    let mut input = v2(0x1, 0x11, &ipv4_body());
    let len = input.len();
    input.extend_from_slice(b"GET / HTTP/1.1\r\n");
    let origin = Origin::Relayed { client: addr([192, 168, 0, 1], 56324), server: addr([10, 0, 0, 2], 443) };
    assert_eq!(parse(&input), Preface::Done { len, origin });
}

#[test]
fn v2_ipv6() {
    let mut body = Vec::new();
    body.extend_from_slice(&"2001:db8::7".parse::<Ipv6Addr>().expect("ip").octets());
    body.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    body.extend_from_slice(&1234u16.to_be_bytes());
    body.extend_from_slice(&80u16.to_be_bytes());
    let input = v2(0x1, 0x21, &body);
    let client = SocketAddr::new(IpAddr::V6("2001:db8::7".parse::<Ipv6Addr>().expect("ip")), 1234);
    let server = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 80);
    assert_eq!(parse(&input), Preface::Done { len: input.len(), origin: Origin::Relayed { client, server } });
}

#[test]
fn v2_tlvs_are_skipped() {
    let mut body = ipv4_body();
    body.extend_from_slice(&[0x01, 0x00, 0x02, b'h', b'2']); // ALPN "h2"
    body.extend_from_slice(&[0x04, 0x00, 0x03, 0x00, 0x00, 0x00]); // NOOP, 3 bytes
    let input = v2(0x1, 0x11, &body);
    let origin = Origin::Relayed { client: addr([192, 168, 0, 1], 56324), server: addr([10, 0, 0, 2], 443) };
    assert_eq!(parse(&input), Preface::Done { len: input.len(), origin });
}

#[test]
fn v2_local_and_unspecified_keep_the_connections_addresses() {
    let local = v2(0x0, 0x00, &[]);
    assert_eq!(parse(&local), Preface::Done { len: 16, origin: Origin::Own });
    // LOCAL with addresses (a health check may send them): ignored.
    let local_v4 = v2(0x0, 0x11, &ipv4_body());
    assert_eq!(parse(&local_v4), Preface::Done { len: local_v4.len(), origin: Origin::Own });
    let unspecified = v2(0x1, 0x00, &[]);
    assert_eq!(parse(&unspecified), Preface::Done { len: 16, origin: Origin::Own });
}

#[test]
fn v2_arriving_in_pieces() {
    let input = v2(0x1, 0x11, &ipv4_body());
    for end in 0..input.len() {
        assert_eq!(parse(&input[..end]), Preface::Incomplete, "{end} bytes");
    }
}

#[test]
fn v2_malformed() {
    let mut bad_version = v2(0x1, 0x11, &ipv4_body());
    bad_version[12] = 0x11; // version 1 in the binary form
    let mut bad_command = v2(0x1, 0x11, &ipv4_body());
    bad_command[12] = 0x2F;
    let short_addresses = v2(0x1, 0x11, &ipv4_body()[..8]); // 8 bytes for IPv4's 12
    let datagram = v2(0x1, 0x12, &ipv4_body());
    let mut bad_family = v2(0x1, 0x11, &ipv4_body());
    bad_family[13] = 0x41;
    let mut bad_signature = v2(0x1, 0x11, &ipv4_body());
    bad_signature[3] = 0x0B;
    for (name, bad) in [
        ("version", bad_version),
        ("command", bad_command),
        ("short addresses", short_addresses),
        ("datagram", datagram),
        ("family", bad_family),
        ("signature", bad_signature),
    ] {
        assert_eq!(parse(&bad), Preface::Invalid, "{name}");
    }
}
