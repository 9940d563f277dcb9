//! A connection's socket as the thread engine uses it: non-blocking reads into the read
//! buffer, writes that return what the socket did not take, and the blocking forms an app
//! thread uses (with the GIL released) where the app must wait: a streamed part, a file by
//! `sendfile`, more of the request body. Blocking waits are `poll(2)` in slices, so a
//! server that stops is never stuck behind a client that neither reads nor writes.

use mio::net::{TcpStream, UnixStream};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// Every raw libc call goes through here: -1 becomes the `io::Error` of `errno`.
macro_rules! syscall {
    ($fn:ident($($arg:expr),* $(,)?)) => {{
        // SAFETY: each call site passes descriptors it owns and buffers valid for the
        // lengths given.
        let r = unsafe { libc::$fn($($arg),*) };
        if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
    }};
}

/// How long one blocking wait lasts before the server's stop is looked at again.
const SLICE_MS: i32 = 200;

/// Bytes read from a socket at a time.
pub const READ_CHUNK: usize = 64 * 1024;

thread_local! {
    /// Where a thread's reads land before they join a connection's buffer.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// What a read did.
pub enum Filled {
    /// Bytes came; `drained`: the socket had no more then.
    Data { n: usize, drained: bool },
    /// Nothing more for now.
    Drained,
    /// The client closed its side, or the socket failed.
    Closed,
}

/// Where a peer is.
#[derive(Clone)]
pub enum Addr {
    Ip(SocketAddr),
    /// A Unix socket's path (the server's side; a client's has none).
    Path(String),
}

impl Stream {
    pub fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }

    pub fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
        }
    }

    /// (client, server) addresses.
    pub fn addresses(&self) -> (Option<Addr>, Option<Addr>) {
        match self {
            Stream::Tcp(s) => (s.peer_addr().ok().map(Addr::Ip), s.local_addr().ok().map(Addr::Ip)),
            Stream::Unix(s) => {
                let path = s.local_addr().ok().and_then(|a| a.as_pathname().map(|p| p.to_string_lossy().into_owned()));
                (None, path.map(Addr::Path))
            }
        }
    }

    /// A second descriptor of the connection, for the loop to serve it on (the engine's
    /// closes when its slot goes, without ending the connection).
    pub fn duplicate(&self) -> io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        match self {
            Stream::Tcp(s) => s.as_fd().try_clone_to_owned(),
            Stream::Unix(s) => s.as_fd().try_clone_to_owned(),
        }
    }

    /// End the connection both ways now (the descriptor closes when the last holder of the
    /// connection lets it go).
    pub fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }

    /// Write what the socket takes now; how much it took.
    pub fn write_some(&mut self, data: &[u8]) -> io::Result<usize> {
        let r = match self {
            Stream::Tcp(s) => s.write(data),
            Stream::Unix(s) => s.write(data),
        };
        match r {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Read once, appending to `rbuf`. The read goes into the thread's scratch buffer (never
    /// zeroed: only what the kernel wrote is used), so that a connection's buffer holds
    /// what came, not a whole read's room: idle connections cost little memory.
    pub fn fill(&mut self, rbuf: &mut Vec<u8>) -> Filled {
        self.read_with(|got| rbuf.extend_from_slice(got))
    }

    /// Look at what the socket holds without taking it, up to `buf.len()` bytes: how many
    /// (0: the client closed), or None when there is nothing yet.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let at = buf.as_mut_ptr().cast::<libc::c_void>();
        match syscall!(recv(self.fd(), at, buf.len(), libc::MSG_PEEK)) {
            Ok(n) => Ok(Some(n as usize)),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Read once, giving what came to `take` (see `fill`).
    pub fn read_with(&mut self, take: impl FnOnce(&[u8])) -> Filled {
        SCRATCH.with_borrow_mut(|scratch| {
            scratch.reserve(READ_CHUNK);
            let spare = scratch.spare_capacity_mut();
            let want = spare.len();
            match syscall!(read(self.fd(), spare.as_mut_ptr().cast::<libc::c_void>(), want)) {
                Ok(0) => Filled::Closed,
                Ok(n) => {
                    let n = n as usize;
                    // SAFETY: read(2) initialised the first `n` bytes of the spare capacity,
                    // and they are read only through this slice, before the next read.
                    let got = unsafe { std::slice::from_raw_parts(spare.as_ptr().cast::<u8>(), n) };
                    take(got);
                    // A stream socket that gave less than was asked for had no more.
                    Filled::Data { n, drained: n < want }
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => Filled::Drained,
                    io::ErrorKind::Interrupted => Filled::Data { n: 0, drained: false },
                    _ => Filled::Closed,
                },
            }
        })
    }

    /// Wait until the socket can be read (`POLLIN`) or written (`POLLOUT`), or `stop` is
    /// set; false if the socket failed or the server stops.
    pub fn wait(&self, events: libc::c_short, stop: &AtomicBool) -> bool {
        loop {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            let mut p = libc::pollfd { fd: self.fd(), events, revents: 0 };
            match syscall!(poll(&mut p, 1, SLICE_MS)) {
                Ok(0) => continue,
                Ok(_) => return p.revents & (events | libc::POLLHUP | libc::POLLERR) != 0,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
    }

    /// Send what the socket takes now of `len` bytes of `file` from `offset`, with
    /// `sendfile(2)`; how many it took.
    pub fn send_file_some(&mut self, file: &std::fs::File, offset: u64, len: u64) -> io::Result<u64> {
        let mut off = libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let count = usize::try_from(len).unwrap_or(usize::MAX).min(1 << 30);
        match syscall!(sendfile(self.fd(), file.as_raw_fd(), &mut off, count)) {
            // The file is shorter than it was said to be.
            Ok(0) if len > 0 => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(n) => Ok(n as u64),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Send `len` bytes of `file` from `offset` with `sendfile(2)`, waiting while the client
    /// does not read.
    pub fn send_file(
        &mut self,
        file: &std::fs::File,
        mut offset: u64,
        mut left: u64,
        stop: &AtomicBool,
    ) -> io::Result<()> {
        while left > 0 {
            match self.send_file_some(file, offset, left)? {
                0 => {
                    if !self.wait(libc::POLLOUT, stop) {
                        return Err(io::Error::from(io::ErrorKind::BrokenPipe));
                    }
                }
                n => {
                    offset += n;
                    left -= n;
                }
            }
        }
        Ok(())
    }
}

/// Turn Nagle's algorithm off: a response leaves in one write, and the next request waits
/// on it.
pub fn no_delay(stream: &Stream) {
    if let Stream::Tcp(s) = stream {
        let _ = s.set_nodelay(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream as StdUnix;

    fn pair() -> (Stream, StdUnix) {
        let (a, b) = StdUnix::pair().expect("pair");
        a.set_nonblocking(true).expect("nonblocking");
        (Stream::Unix(UnixStream::from_std(a)), b)
    }

    #[test]
    fn fill_reads_drains_and_sees_the_close() {
        let (mut s, mut peer) = pair();
        let mut rbuf = Vec::new();
        assert!(matches!(s.fill(&mut rbuf), Filled::Drained));
        peer.write_all(b"hello").expect("write");
        assert!(matches!(s.fill(&mut rbuf), Filled::Data { n: 5, drained: true }));
        assert_eq!(rbuf, b"hello");
        drop(peer);
        assert!(matches!(s.fill(&mut rbuf), Filled::Closed));
        assert_eq!(rbuf, b"hello");
    }

    #[test]
    fn send_file_some_takes_what_the_socket_takes_and_sees_a_short_file() {
        let (mut s, mut peer) = pair();
        let path = std::env::temp_dir().join(format!("swordfish-send-file-some-{}", std::process::id()));
        let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).expect("write");
        let file = std::fs::File::open(&path).expect("open");
        let _ = std::fs::remove_file(&path);
        let (mut offset, mut left) = (100u64, data.len() as u64 - 100);
        let mut got = Vec::new();
        let mut space = vec![0u8; 1 << 16];
        while left > 0 {
            let n = s.send_file_some(&file, offset, left).expect("send");
            offset += n;
            left -= n;
            if n == 0 {
                // The socket is full: the peer reads some, then more is taken.
                let r = peer.read(&mut space).expect("read");
                got.extend_from_slice(&space[..r]);
            }
        }
        drop(s);
        peer.read_to_end(&mut got).expect("read to end");
        assert_eq!(got, &data[100..]);
        let (mut s, _peer) = pair();
        let short = s.send_file_some(&file, data.len() as u64, 10);
        assert_eq!(short.map_err(|e| e.kind()), Err(io::ErrorKind::UnexpectedEof));
    }
}
