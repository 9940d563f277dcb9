//! TLS on the thread engine's connections, by rustls, over the record layer the loop's TLS
//! uses too (`transport::tls::records`): what the socket brings is opened into the read
//! buffer, and what the connection writes is sealed into records that wait here until the
//! socket takes them. None of it needs the GIL. A client that offers `h2` by ALPN is served
//! HTTP/2 by the loop: its ClientHello is peeked at (`hello`), not read, so that the
//! connection moves there untouched and the loop's TLS takes it from its first byte.

use crate::transport::tls::records;
use std::io::Write;
use std::sync::Arc;

/// Sealed records kept between writes; a burst's larger buffer is given back.
const KEPT: usize = 64 * 1024;

pub struct Tls {
    conn: rustls::ServerConnection,
    /// Records not written yet: `sealed[at..]`.
    sealed: Vec<u8>,
    at: usize,
    /// The client sent close_notify.
    pub closed: bool,
    /// The connection failed (a bad record, a refused handshake); its alert waits in
    /// `sealed`.
    pub failed: bool,
}

impl Tls {
    pub fn new(config: Arc<rustls::ServerConfig>) -> Option<Tls> {
        let conn = records::server(config).ok()?;
        Some(Tls { conn, sealed: Vec::new(), at: 0, closed: false, failed: false })
    }

    /// The handshake is not over (and has not failed): what the client sends next may cost
    /// the server a signature.
    pub fn handshaking(&self) -> bool {
        !self.failed && self.conn.is_handshaking()
    }

    /// Open `raw` (the client's records) into `plain`; the handshake's answers, or a
    /// failure's alert, wait to be written. False once the connection has failed.
    pub fn open(&mut self, raw: &[u8], plain: &mut Vec<u8>) -> bool {
        if !self.failed {
            match records::open(&mut self.conn, raw, plain) {
                Ok(closed) => self.closed |= closed,
                Err(_) => self.failed = true,
            }
            records::drain(&mut self.conn, &mut self.sealed);
        }
        !self.failed
    }

    /// Seal `plain` into records to be written.
    pub fn seal(&mut self, plain: &[u8]) {
        if self.failed || plain.is_empty() {
            return;
        }
        // rustls buffers without limit here (`records::server`): the write takes it all.
        if self.conn.writer().write_all(plain).is_err() {
            self.failed = true;
        }
        records::drain(&mut self.conn, &mut self.sealed);
    }

    /// close_notify, to be written before the socket closes.
    pub fn close(&mut self) {
        if !self.failed {
            self.conn.send_close_notify();
            records::drain(&mut self.conn, &mut self.sealed);
        }
    }

    /// Records waiting to be written.
    pub fn unsent(&self) -> &[u8] {
        &self.sealed[self.at..]
    }

    /// The socket took `n` bytes of `unsent()`.
    pub fn sent(&mut self, n: usize) {
        self.at = (self.at + n).min(self.sealed.len());
        if self.at == self.sealed.len() {
            self.at = 0;
            if self.sealed.capacity() > KEPT {
                self.sealed = Vec::new();
            }
            self.sealed.clear();
        }
    }
}

/// What a connection's first bytes say about its ClientHello.
#[derive(Debug, PartialEq, Eq)]
pub enum Hello {
    /// Not all of it has come.
    Partial,
    /// It offers `h2` by ALPN: the loop serves the connection.
    H2,
    /// Anything else (not TLS at all included: the handshake then refuses it here).
    Other,
}

/// Read the ClientHello at the start of `peeked`.
pub fn hello(peeked: &[u8]) -> Hello {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut data = peeked;
    while !data.is_empty() {
        match acceptor.read_tls(&mut data) {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) => return Hello::Other,
        }
    }
    match acceptor.accept() {
        Ok(None) => Hello::Partial,
        Ok(Some(accepted)) => {
            let h2 = accepted.client_hello().alpn().is_some_and(|mut offer| offer.any(|p| p == b"h2"));
            if h2 {
                Hello::H2
            } else {
                Hello::Other
            }
        }
        Err(_) => Hello::Other,
    }
}
