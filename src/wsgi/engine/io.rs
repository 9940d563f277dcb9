//! A connection's I/O in the thread engine, none of it with the GIL: reading and parsing
//! until a request is ready for the app (its head, and its body or the first `PREFETCH`
//! bytes of it, so that a client that sends slowly holds a connection but no app thread),
//! running the core's acts, writing what the socket takes (the rest waits for the poller's
//! next writable event), and closing.

use super::slot::{Act, Conn, Slot};
use super::socket::Filled;
use super::tls::{self, Hello};
use super::Engine;
use crate::http::conn::Phase;
use crate::http::parse::{ChunkedDecoder, Framing, Head};
use crate::http::reading::{Next, READ_HIGH_WATER};
use crate::http::settings::Settings;
use crate::http::static_files::serve::Static;
use crate::wsgi::pool::PREFETCH;
use crate::wsgi::request::WsgiRequest;
use mio::{Interest, Token};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// What the read buffer led to.
pub enum Pumped {
    /// A request is ready for the app (`Link::head`).
    Ready,
    /// Nothing to do until the socket has more, or takes more.
    Idle,
    /// The requests in the read buffer wait while the answers before them are written (a
    /// file, or `READ_HIGH_WATER` bytes): read on once the output is down.
    Full,
    /// The client opened with HTTP/2's preface (h2c with prior knowledge) or asked for h2c
    /// by `Upgrade`: the loop serves HTTP/2, so the connection moves there
    /// (`Engine::hand_off`).
    HandOff,
}

/// Whether the body of `head` (at the start of `rbuf`) has come far enough for the app: all
/// of it or `PREFETCH` bytes. A client that waits for `100 Continue` gets the app at once
/// (its first read answers).
pub fn prefetched(rbuf: &[u8], head: &Head, st: &Settings) -> bool {
    if head.expect_continue {
        return true;
    }
    let body = rbuf.get(head.len..).unwrap_or_default();
    match head.framing {
        Framing::Length(n) => body.len() as u64 >= n.min(PREFETCH as u64),
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::new(st.limits.body_size);
            let mut decoded = Vec::new();
            match decoder.feed(body, &mut decoded) {
                Ok(_) => decoder.is_done() || decoded.len() >= PREFETCH,
                // Refused when the request begins.
                Err(_) => true,
            }
        }
    }
}

impl Engine {
    /// Read and parse until a request is ready or the socket is drained.
    pub fn pump(&self, slot: &Slot, c: &mut Conn) -> Pumped {
        let st = self.settings();
        let mut acts = Vec::new();
        // h2c is cleartext's: over TLS, HTTP/2 is chosen by ALPN (`hello`).
        let http2 = self.handoff.is_some() && c.objects.tls.is_none();
        loop {
            if c.objects.hello {
                if let Some(pumped) = self.hello(c) {
                    return pumped;
                }
            }
            // Before the first request: HTTP/2's preface, or the start of it.
            let mut preface = false;
            if http2 && c.gen == 0 && c.objects.head.is_none() {
                match crate::http2::preface(&c.rbuf) {
                    crate::http2::Preface::Whole => return Pumped::HandOff,
                    crate::http2::Preface::Partial => preface = true,
                    crate::http2::Preface::No => {}
                }
            }
            if !preface && c.objects.head.is_none() && !c.objects.full() {
                // A PROXY header is kept as it came, for a hand-off (once per connection).
                let opening = c.proxy_preface.then(|| c.rbuf.clone());
                let next = c.next(st, &mut acts);
                if let Some(mut header) = opening.filter(|_| !c.proxy_preface) {
                    header.truncate(header.len() - c.rbuf.len());
                    c.objects.proxy_header = header;
                }
                match next {
                    Next::Head(head) => {
                        // An h2c upgrade the loop takes is the loop's, as HTTP/2 is: it
                        // reads the request again there and answers it as stream 1. Not
                        // while an earlier response is still going out here (answered in
                        // HTTP/1.1 then, as RFC 9113 allows).
                        let h2 = self.state.get().http2.as_ref().filter(|_| http2);
                        let quiet = c.objects.unwritten() == 0 && c.objects.file.is_none();
                        if quiet && h2.is_some_and(|h2| crate::http2::upgrade::taken(&c.rbuf, &head, h2).is_some()) {
                            return Pumped::HandOff;
                        }
                        if self.serve_static(slot, c, &head) {
                            continue;
                        }
                        c.objects.head = Some(head)
                    }
                    Next::Relayed { client, server } => {
                        c.objects.relayed(client, server);
                        continue;
                    }
                    // The unread body of the request before, dropped: then the next one.
                    Next::Body => {
                        let finished = c.body_read(st, &mut acts);
                        self.stage(slot, c, &mut acts);
                        if finished {
                            continue;
                        }
                    }
                    Next::Wait | Next::BodyRefused => {}
                }
                self.stage(slot, c, &mut acts);
            }
            if c.closing() || c.objects.close {
                return Pumped::Idle;
            }
            if let Some(head) = &c.objects.head {
                if prefetched(&c.rbuf, head, st) {
                    return Pumped::Ready;
                }
            } else if c.objects.full() {
                // Pipelined requests wait while the client does not read the answers.
                return Pumped::Full;
            }
            if c.objects.drained {
                // Read to its end already: an event says when more comes.
                return Pumped::Idle;
            }
            match c.objects.fill(&mut c.rbuf) {
                Filled::Data { n, drained } => {
                    c.objects.drained = drained;
                    if let Some(m) = st.metrics() {
                        m.received(n);
                    }
                }
                Filled::Drained => {
                    c.objects.drained = true;
                    return Pumped::Idle;
                }
                Filled::Closed => {
                    c.phase = Phase::Lost;
                    return Pumped::Idle;
                }
            }
        }
    }

    /// Under TLS, where HTTP/2 is served: the ClientHello, peeked at. One that offers `h2`
    /// moves the connection to the loop before anything is read; any other is served here.
    /// None once it is known to stay.
    fn hello(&self, c: &mut Conn) -> Option<Pumped> {
        // A ClientHello is one handshake message, at most one record of 16 KiB here.
        let mut peeked = vec![0u8; 5 + (16 << 10)];
        match c.objects.stream.peek(&mut peeked) {
            Ok(Some(0)) | Err(_) => {
                c.phase = Phase::Lost;
                Some(Pumped::Idle)
            }
            Ok(None) => {
                c.objects.drained = true;
                Some(Pumped::Idle)
            }
            Ok(Some(n)) => match tls::hello(&peeked[..n]) {
                Hello::Partial if n < peeked.len() => {
                    // The rest comes with the next event (the poller's are edge-triggered:
                    // new bytes are one even while these wait unread).
                    c.objects.drained = true;
                    Some(Pumped::Idle)
                }
                Hello::H2 => Some(Pumped::HandOff),
                Hello::Partial | Hello::Other => {
                    c.objects.hello = false;
                    None
                }
            },
        }
    }

    /// Answer `head` here if it asks for a static file (`--static-path-dir`), as the loop's
    /// connections do; true if it did. A file too large to go with its head is queued for
    /// `flush`. The GIL is taken only for the access log's request object.
    fn serve_static(&self, slot: &Slot, c: &mut Conn, head: &Head) -> bool {
        let state = self.state.get();
        let Some(files) = &state.static_files else { return false };
        let st = &state.settings;
        // The engine holds answers back by what waits to be written (`pump`), not by bursts.
        c.static_burst = 0;
        let head_method = c.is_head_method(head);
        let logged = state.access_log.is_some();
        let log = |c: &mut Conn| -> Option<Py<PyAny>> {
            if !logged {
                return None;
            }
            Python::attach(|py| {
                let (client, server) = c.objects.address_objects(py);
                let request = WsgiRequest::from_head(&c.rbuf, head, client, server, c.https).ok()?;
                Py::new(py, request).ok().map(Py::into_any)
            })
        };
        let mut acts = Vec::new();
        let answered = !matches!(c.serve_static(st, files, head, head_method, true, log, &mut acts), Static::Not);
        self.stage(slot, c, &mut acts);
        answered
    }

    /// Run the core's acts: bytes to the output buffer, closing, timers, log lines.
    pub fn stage(&self, slot: &Slot, c: &mut Conn, acts: &mut Vec<Act>) {
        let metrics = self.settings().metrics();
        for act in acts.drain(..) {
            match act {
                Act::Write(data) | Act::WriteLater(data, _) | Act::WriteObj(data, _) => {
                    if let Some(m) = metrics {
                        m.sent(data.len() as u64);
                    }
                    if c.objects.unwritten() == 0 {
                        // Nothing waits to go out: the part is the output, not copied into it.
                        c.objects.out = data;
                        c.objects.out_pos = 0;
                    } else {
                        c.objects.out.extend_from_slice(&data);
                    }
                }
                Act::Close => c.objects.close = true,
                Act::Abort => {
                    c.objects.close = true;
                    c.objects.out_pos = c.objects.out.len();
                    c.objects.file = None;
                }
                // Reading is asked for, never pushed: nothing to pause.
                Act::PauseReading | Act::ResumeReading => {}
                Act::ArmTimer(seconds) => self.arm(slot, seconds),
                Act::CancelTimer => {
                    slot.timer_seq.fetch_add(1, Ordering::Relaxed);
                }
                Act::AccessLog(log, status, size, seconds, refused) => {
                    c.objects.logs.push((log, status, size, seconds, refused))
                }
                Act::Unwait(..) | Act::World(()) => {}
                Act::WriteFile { file, offset, len } => {
                    if let Some(m) = metrics {
                        m.sent(len);
                    }
                    c.objects.file = Some((file, offset, len, None));
                }
                Act::SendFile { file, offset, len, gen } => c.objects.file = Some((file, offset, len, Some(gen))),
            }
        }
    }

    /// Arm the connection's timer.
    fn arm(&self, slot: &Slot, seconds: f64) {
        let seq = slot.timer_seq.fetch_add(1, Ordering::Relaxed) + 1;
        let after = Duration::try_from_secs_f64(seconds.max(0.0)).unwrap_or(Duration::MAX);
        if self.timers().arm(slot.token, seq, after) {
            // The poller may be waiting past it.
            let _ = self.waker.wake();
        }
    }

    /// Watch the socket for writing while output waits (and not after).
    fn watch_writes(&self, slot: &Slot, c: &mut Conn) {
        let wanted = c.objects.unwritten() > 0;
        if wanted == c.objects.watch_out {
            return;
        }
        let interest = if wanted { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
        c.objects.watch_out = wanted;
        let _ = self.registry.reregister(c.objects.stream.source(), Token(slot.token), interest);
    }

    /// Close the connection: out of the poller and the engine's table.
    pub fn close(&self, slot: &Slot, c: &mut Conn) {
        if self.leave(slot, c) {
            c.objects.close_tls();
            c.objects.stream.shutdown();
        }
    }

    /// The connection leaves the engine (the poller, its timer, the table) and is counted
    /// closed here; false if it had already.
    fn leave(&self, slot: &Slot, c: &mut Conn) -> bool {
        if c.objects.closed {
            return false;
        }
        c.objects.closed = true;
        c.phase = Phase::Lost;
        slot.timer_seq.fetch_add(1, Ordering::Relaxed);
        let _ = self.registry.deregister(c.objects.stream.source());
        if let Some(m) = self.settings().metrics() {
            m.connection_closed();
        }
        self.forget(slot.token);
        true
    }

    /// Take the connection out of the engine for the loop: a duplicate of its descriptor
    /// and what it read (its preface, or the request asking for the upgrade, onwards); the
    /// engine's own descriptor closes with its slot, without ending the connection. The
    /// loop's protocol counts it open again.
    fn hand_off(&self, slot: &Slot, c: &mut Conn) -> Option<(std::os::fd::OwnedFd, Vec<u8>)> {
        match c.objects.stream.duplicate() {
            Ok(fd) => {
                self.leave(slot, c);
                let mut data = std::mem::take(&mut c.objects.proxy_header);
                data.extend_from_slice(&c.rbuf);
                c.rbuf = Vec::new();
                Some((fd, data))
            }
            Err(_) => {
                // No descriptor to spare: the client is refused as on a full accept queue.
                self.close(slot, c);
                None
            }
        }
    }

    /// Give a connection taken out by `hand_off` to the loop (`handoff(fd, data)`, which
    /// schedules it there); if that fails, the descriptor closes here.
    fn adopt(&self, fd: std::os::fd::OwnedFd, data: Vec<u8>) {
        use std::os::fd::IntoRawFd;
        let Some(handoff) = &self.handoff else { return };
        Python::attach(|py| {
            let raw = fd.into_raw_fd();
            if let Err(e) = handoff.call1(py, (raw, PyBytes::new(py, &data))) {
                // SAFETY: `raw` came from `into_raw_fd` just above and the call that failed
                // did not take it.
                drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) });
                e.write_unraisable(py, None);
            }
        });
    }

    /// Owned: write, read and parse until a request is ready (returned, still owned) or
    /// there is nothing to do; then let the connection go. `event`: the socket reported
    /// something since it was last read to its end.
    pub fn settle(&self, slot: Arc<Slot>, event: bool) -> Option<Arc<Slot>> {
        let mut event = event;
        loop {
            let mut c = slot.lock();
            if c.objects.closed {
                return None;
            }
            if std::mem::take(&mut event) {
                c.objects.drained = false;
            }
            let ready = if c.objects.flush() { self.pump(&slot, &mut c) } else { lost(&mut c) };
            if let Pumped::HandOff = ready {
                let moved = self.hand_off(&slot, &mut c);
                drop(c);
                if let Some((fd, data)) = moved {
                    self.adopt(fd, data);
                }
                return None;
            }
            // What the reading staged (a refusal) goes out now.
            if !c.objects.flush() {
                lost(&mut c);
            }
            let logs = std::mem::take(&mut c.objects.logs);
            if c.lost() || (c.objects.close && c.objects.unwritten() == 0) {
                self.close(&slot, &mut c);
                drop(c);
                self.log(logs);
                return None;
            }
            if matches!(ready, Pumped::Full) && !c.objects.full() {
                // The socket took the answers (static files answered in the pump): on to
                // the requests after them.
                drop(c);
                self.log(logs);
                continue;
            }
            self.watch_writes(&slot, &mut c);
            if c.rbuf.is_empty() && c.rbuf.capacity() > READ_HIGH_WATER {
                // Nor a large request's.
                c.rbuf = Vec::new();
            }
            drop(c);
            self.log(logs);
            if let Pumped::Ready = ready {
                return Some(slot);
            }
            if slot.release() {
                return None;
            }
            // An event came meanwhile.
            event = true;
        }
    }
}

fn lost(c: &mut Conn) -> Pumped {
    c.phase = Phase::Lost;
    Pumped::Idle
}
