//! Single-threaded epoll (mio) TCP echo server: the limit reference of the
//! swordfish echo benchmark.
//!
//!     echo-native [--host 127.0.0.1] [--port 0] [--poll-us 0]
//!
//! With `--poll-us N` it polls without waiting for up to N µs before each wait
//! that would sleep (the reference for a server that polls before sleeping).
//!
//! Prints `READY <port> native` on stdout once listening, then echoes whatever
//! each connection sends: bytes read are written back at once, and whatever the
//! socket does not take is kept and flushed when it becomes writable. While
//! more than `MAX_PENDING` bytes wait for one connection, that connection is
//! not read (back-pressure), so a peer that sends without reading cannot make
//! the server buffer without limit.

use std::io::{self, ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

const LISTENER: Token = Token(usize::MAX);
const READ_CHUNK: usize = 256 * 1024;
const MAX_PENDING: usize = 4 * 1024 * 1024;

struct Conn {
    stream: TcpStream,
    /// Bytes read but not yet written back; `pending[sent..]` is still owed.
    pending: Vec<u8>,
    sent: usize,
    /// Whether WRITABLE interest is registered (only while bytes are owed).
    writable_armed: bool,
    /// The peer has shut down its side; close once everything owed is sent.
    eof: bool,
}

impl Conn {
    fn owed(&self) -> usize {
        self.pending.len() - self.sent
    }

    /// Write as much of the owed bytes as the socket takes.
    fn flush(&mut self) -> io::Result<()> {
        while self.sent < self.pending.len() {
            match self.stream.write(&self.pending[self.sent..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        if self.sent == self.pending.len() {
            self.pending.clear();
            self.sent = 0;
        }
        Ok(())
    }

    /// Echo `data`: write it directly when nothing is owed, keep the rest.
    fn echo(&mut self, data: &[u8]) -> io::Result<()> {
        let mut done = 0;
        if self.owed() == 0 {
            while done < data.len() {
                match self.stream.write(&data[done..]) {
                    Ok(0) => return Err(ErrorKind::WriteZero.into()),
                    Ok(n) => done += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
        }
        if done < data.len() {
            if self.sent > 0 {
                self.pending.drain(..self.sent);
                self.sent = 0;
            }
            self.pending.extend_from_slice(&data[done..]);
        }
        Ok(())
    }

    /// Handle readiness: flush, then read (edge-triggered: until WouldBlock
    /// or back-pressure). Returns false when the connection should close.
    fn service(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        self.flush()?;
        while !self.eof && self.owed() < MAX_PENDING {
            match self.stream.read(buf) {
                Ok(0) => self.eof = true,
                Ok(n) => self.echo(&buf[..n])?,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(!(self.eof && self.owed() == 0))
    }
}

struct Server {
    poll: Poll,
    listener: TcpListener,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    buf: Vec<u8>,
    poll_for: Duration,
}

impl Server {
    fn accept_all(&mut self) {
        loop {
            let (stream, _) = match self.listener.accept() {
                Ok(pair) => pair,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: report, keep serving the others.
                    eprintln!("echo-native: accept: {e}");
                    return;
                }
            };
            let _ = stream.set_nodelay(true);
            let slot = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            let mut conn = Conn { stream, pending: Vec::new(), sent: 0, writable_armed: false, eof: false };
            if let Err(e) = self.poll.registry().register(&mut conn.stream, Token(slot), Interest::READABLE) {
                eprintln!("echo-native: register: {e}");
                self.free.push(slot);
                continue;
            }
            self.conns[slot] = Some(conn);
        }
    }

    fn ready(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let keep = match conn.service(&mut self.buf) {
            Ok(keep) => keep,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => false,
            Err(e) if e.kind() == ErrorKind::BrokenPipe => false,
            Err(e) => {
                eprintln!("echo-native: connection {slot}: {e}");
                false
            }
        };
        if !keep {
            self.close(slot);
            return;
        }
        let want_write = conn.owed() > 0;
        if want_write != conn.writable_armed {
            let interest = if want_write { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
            match self.poll.registry().reregister(&mut conn.stream, Token(slot), interest) {
                Ok(()) => conn.writable_armed = want_write,
                Err(e) => {
                    eprintln!("echo-native: reregister: {e}");
                    self.close(slot);
                }
            }
        }
    }

    fn close(&mut self, slot: usize) {
        if let Some(mut conn) = self.conns[slot].take() {
            let _ = self.poll.registry().deregister(&mut conn.stream);
            self.free.push(slot);
        }
    }

    fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        loop {
            if !self.poll_for.is_zero() {
                let start = Instant::now();
                while start.elapsed() < self.poll_for {
                    self.poll.poll(&mut events, Some(Duration::ZERO))?;
                    if !events.is_empty() {
                        break;
                    }
                }
            }
            if events.is_empty() {
                match self.poll.poll(&mut events, None) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept_all(),
                    Token(slot) => self.ready(slot),
                }
            }
            events.clear();
        }
    }
}

fn parse_args() -> Result<(SocketAddr, Duration), String> {
    let mut host = String::from("127.0.0.1");
    let mut port = String::from("0");
    let mut poll_us = String::from("0");
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().ok_or_else(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--host" => host = value,
            "--port" => port = value,
            "--poll-us" => poll_us = value,
            _ => return Err(format!("unknown option {arg}")),
        }
    }
    let poll_us: u64 = poll_us.parse().map_err(|e| format!("bad --poll-us {poll_us}: {e}"))?;
    let addr = format!("{host}:{port}").parse().map_err(|e| format!("bad address {host}:{port}: {e}"))?;
    Ok((addr, Duration::from_micros(poll_us)))
}

fn main() -> ExitCode {
    let (addr, poll_for) = match parse_args() {
        Ok(parsed) => parsed,
        Err(msg) => {
            eprintln!("echo-native: {msg}\nusage: echo-native [--host H] [--port P] [--poll-us N]");
            return ExitCode::from(2);
        }
    };
    let start = || -> io::Result<Server> {
        let poll = Poll::new()?;
        let mut listener = TcpListener::bind(addr)?;
        poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(Server { poll, listener, conns: Vec::new(), free: Vec::new(), buf: vec![0; READ_CHUNK], poll_for })
    };
    let mut server = match start() {
        Ok(server) => server,
        Err(e) => {
            eprintln!("echo-native: cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let port = server.listener.local_addr().map(|a| a.port()).unwrap_or(0);
    println!("READY {port} native");
    let _ = io::stdout().flush();
    match server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("echo-native: poll: {e}");
            ExitCode::FAILURE
        }
    }
}
