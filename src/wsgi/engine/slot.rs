//! One connection of the thread engine: the connection core's state (`Conn`) in the
//! engine's `World`, and who drives it. Its socket is edge-triggered in the poller, so an
//! event for a connection another thread is driving only leaves a mark (`PENDING`), and
//! that thread looks at the socket again before it lets the connection go: no event is
//! lost, and no two threads ever drive one connection.

use super::socket::{Addr, Stream};
use super::tls::Tls;
use crate::http::conn::{self, World};
use crate::http::parse::Head;
use crate::sync::lock_unpoisoned;
use pyo3::prelude::*;
use std::fs::File;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The thread engine as the connection core sees it.
pub struct Threads;

impl World for Threads {
    /// Body parts are copied into the output buffer: they are written with the GIL
    /// released, when no Python object may be read.
    type Bytes = Vec<u8>;
    const BY_REFERENCE: bool = false;
    /// The request (`WsgiRequest`), for the access log.
    type Log = Py<PyAny>;
    type Objects = Link;
    /// The app thread reads the body from the connection itself: no waiters.
    type RequestObjects = ();
    type Act = ();
}

pub type Conn = conn::Conn<Threads>;
pub type Act = conn::Act<Threads>;

/// An access-log line: (request, status, body size, seconds, refused before it began).
pub type LogLine = (Option<Py<PyAny>>, u16, u64, f64, bool);

/// What the engine keeps per connection besides the core's state.
pub struct Link {
    pub stream: Stream,
    /// TLS, on a connection of a TLS listener (see `tls`).
    pub tls: Option<Box<Tls>>,
    /// The ClientHello is still to be looked at, for an `h2` offer (`tls::hello`).
    pub hello: bool,
    pub client: Option<Addr>,
    pub server: Option<Addr>,
    /// `client` and `server` as the environ has them, made with the GIL for the
    /// connection's first request and shared by the rest.
    addr_objects: Option<AddressObjects>,
    /// A request head, complete at the start of the read buffer and parsed, whose body has
    /// arrived far enough for the app (`io::pump`).
    pub head: Option<Head>,
    /// The PROXY protocol header the connection opened with, kept for a hand-off to the
    /// loop, which reads it again.
    pub proxy_header: Vec<u8>,
    /// Response bytes not written yet: `out[out_pos..]`.
    pub out: Vec<u8>,
    pub out_pos: usize,
    /// A file to send after `out`: (file, offset, length, the request to tell when it is
    /// out, if any). One with no request to tell (a static file's) is sent by `flush` as
    /// the socket takes it; the others by the app's thread, waiting.
    pub file: Option<(File, u64, u64, Option<u64>)>,
    /// Close once `out` is written.
    pub close: bool,
    /// The socket is watched for writing too (`out` is waiting for the client).
    pub watch_out: bool,
    /// Access-log lines to hand to the logger once the GIL is held.
    pub logs: Vec<LogLine>,
    /// The socket is closed and out of the poller.
    pub closed: bool,
    /// The last read found the socket empty: it is read again only after an event.
    pub drained: bool,
}

/// The client's and the server's address as the environ has them (None where unknown).
pub type AddressObjects = (Option<Py<PyAny>>, Option<Py<PyAny>>);

/// An address as the environ has it: (host, port), or (path, None) for a Unix socket.
fn address(py: Python<'_>, addr: &Option<Addr>) -> Option<Py<PyAny>> {
    let tuple = match addr.as_ref()? {
        Addr::Ip(a) => (a.ip().to_string(), a.port()).into_pyobject(py).ok()?.into_any(),
        Addr::Path(p) => (p.as_str(), py.None()).into_pyobject(py).ok()?.into_any(),
    };
    Some(tuple.unbind())
}

impl Link {
    /// The client's and the server's address as the environ has them.
    pub fn address_objects(&mut self, py: Python<'_>) -> AddressObjects {
        let (client, server) = (&self.client, &self.server);
        let (c, s) = self.addr_objects.get_or_insert_with(|| (address(py, client), address(py, server)));
        (c.as_ref().map(|o| o.clone_ref(py)), s.as_ref().map(|o| o.clone_ref(py)))
    }

    pub fn new(stream: Stream) -> Link {
        let (client, server) = stream.addresses();
        Link {
            stream,
            tls: None,
            hello: false,
            client,
            server,
            addr_objects: None,
            proxy_header: Vec::new(),
            head: None,
            out: Vec::new(),
            out_pos: 0,
            file: None,
            close: false,
            watch_out: false,
            logs: Vec::new(),
            closed: false,
            drained: false,
        }
    }

    /// The addresses a trusted proxy's PROXY header gave (before the first request).
    pub fn relayed(&mut self, client: SocketAddr, server: SocketAddr) {
        self.client = Some(Addr::Ip(client));
        self.server = Some(Addr::Ip(server));
        self.addr_objects = None;
    }

    /// The requests after the answers waiting here wait too: a file is queued (what is
    /// answered next goes after it), or the output is at its high-water mark (the client
    /// does not read).
    pub fn full(&self) -> bool {
        self.file.is_some() || self.unwritten() >= crate::http::reading::READ_HIGH_WATER
    }

    /// Bytes of the response not written yet, a file's included.
    pub fn unwritten(&self) -> usize {
        let file = self.file.as_ref().map_or(0, |f| usize::try_from(f.2).unwrap_or(usize::MAX));
        let sealed = self.tls.as_ref().map_or(0, |t| t.unsent().len());
        (self.out.len() - self.out_pos).saturating_add(file).saturating_add(sealed)
    }
}

const IDLE: u8 = 0;
const OWNED: u8 = 1;
/// Owned, and an event came meanwhile.
const PENDING: u8 = 2;

pub struct Slot {
    pub token: usize,
    owner: AtomicU8,
    conn: Mutex<Conn>,
    /// Moves on whenever the connection's timer is armed or cancelled (see `timers`).
    pub timer_seq: AtomicU64,
}

impl Slot {
    pub fn new(token: usize, conn: Conn) -> Slot {
        Slot { token, owner: AtomicU8::new(IDLE), conn: Mutex::new(conn), timer_seq: AtomicU64::new(0) }
    }

    /// The connection's state. Only its owner locks it, but for the rare reader that only
    /// looks (a shutdown that finds it owned skips it).
    pub fn lock(&self) -> MutexGuard<'_, Conn> {
        lock_unpoisoned(&self.conn)
    }

    /// Take the connection to drive it; false if another thread drives it (it is told to
    /// look again before letting it go).
    pub fn own(&self) -> bool {
        loop {
            match self.owner.compare_exchange(IDLE, OWNED, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(OWNED) => {
                    if self.owner.compare_exchange(OWNED, PENDING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                        return false;
                    }
                }
                Err(_) => return false,
            }
        }
    }

    /// Take the connection only if nobody drives it, leaving no mark.
    pub fn try_own(&self) -> bool {
        self.owner.compare_exchange(IDLE, OWNED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Let the connection go; false if an event came meanwhile: the caller still owns it
    /// and looks again.
    pub fn release(&self) -> bool {
        if self.owner.compare_exchange(OWNED, IDLE, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            return true;
        }
        self.owner.store(OWNED, Ordering::Release);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot() -> Slot {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let stream = Stream::Unix(mio::net::UnixStream::from_std(a));
        Slot::new(7, Conn::new(Link::new(stream)))
    }

    #[test]
    fn an_event_while_owned_is_not_lost() {
        let s = slot();
        assert!(s.own());
        assert!(!s.own(), "a second thread does not drive it");
        assert!(!s.release(), "the owner looks again");
        assert!(s.release());
        assert!(s.try_own());
        assert!(!s.try_own());
        assert!(s.release());
    }
}
