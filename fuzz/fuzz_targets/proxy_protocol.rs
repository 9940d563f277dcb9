//! The PROXY protocol header, v1 and v2. Properties: a header read from the start of any
//! bytes takes no more than they hold, is read the same from exactly its own bytes, and
//! every shorter prefix of it waits for more (a header split by TCP is never refused); a
//! v1 or v2 header written for addresses the input chooses is read back as those addresses.
#![no_main]

use _native::fuzzing::{parse_proxy_header, Origin, Preface};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

#[derive(Arbitrary, Debug)]
struct Input {
    raw: Vec<u8>,
    v6: bool,
    src: [u8; 16],
    dst: [u8; 16],
    ports: (u16, u16),
    http: Vec<u8>,
}

fn v1(client: SocketAddr, server: SocketAddr) -> Vec<u8> {
    let family = if client.is_ipv4() { "TCP4" } else { "TCP6" };
    format!("PROXY {family} {} {} {} {}\r\n", client.ip(), server.ip(), client.port(), server.port()).into_bytes()
}

fn v2(client: SocketAddr, server: SocketAddr) -> Vec<u8> {
    let mut out = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    out.push(0x21); // version 2, PROXY
    let (family, addresses): (u8, Vec<u8>) = match (client.ip(), server.ip()) {
        (IpAddr::V4(c), IpAddr::V4(s)) => (0x11, [c.octets().as_slice(), s.octets().as_slice()].concat()),
        (IpAddr::V6(c), IpAddr::V6(s)) => (0x21, [c.octets().as_slice(), s.octets().as_slice()].concat()),
        _ => unreachable!("one family"),
    };
    out.push(family); // TCP over IPv4 or IPv6
    out.extend_from_slice(&((addresses.len() + 4) as u16).to_be_bytes());
    out.extend_from_slice(&addresses);
    out.extend_from_slice(&client.port().to_be_bytes());
    out.extend_from_slice(&server.port().to_be_bytes());
    out
}

fn check_delimited(input: &[u8]) {
    let Preface::Done { len, origin } = parse_proxy_header(input) else { return };
    assert!(len <= input.len());
    assert_eq!(parse_proxy_header(&input[..len]), Preface::Done { len, origin });
    for k in 0..len {
        assert_eq!(parse_proxy_header(&input[..k]), Preface::Incomplete, "a {k}-byte prefix of a {len}-byte header");
    }
}

fuzz_target!(|input: Input| {
    check_delimited(&input.raw);
    let (client, server) = if input.v6 {
        (IpAddr::V6(Ipv6Addr::from(input.src)), IpAddr::V6(Ipv6Addr::from(input.dst)))
    } else {
        let four = |a: [u8; 16]| IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]));
        (four(input.src), four(input.dst))
    };
    let (client, server) = (SocketAddr::new(client, input.ports.0), SocketAddr::new(server, input.ports.1));
    for header in [v1(client, server), v2(client, server)] {
        let mut bytes = header.clone();
        bytes.extend_from_slice(&input.http);
        assert_eq!(
            parse_proxy_header(&bytes),
            Preface::Done { len: header.len(), origin: Origin::Relayed { client, server } },
            "{:?}",
            String::from_utf8_lossy(&header)
        );
        check_delimited(&bytes);
    }
});
