//! The reading side of a connection, free of Python objects: the PROXY header, request
//! heads and bodies out of the read buffer, refusals, keep-alive and the connection's
//! deadlines. The driver (the asyncio protocol, `protocol`) calls these under its lock and
//! does what needs its own objects in between: making the interface's request from a head,
//! starting the application, handing body bytes to a reader.

use super::conn::{Act, BodyBuf, BodyState, Conn, Expect, Reading, Request, TimerKind, World, Writing};
use super::parse::{find_head_end, parse_head, ChunkedDecoder, Framing, Head, Reject};
use super::proxy_protocol::{self, Origin, Preface};
use super::response::reason;
use super::settings::Settings;
use crate::clock::{coarse_monotonic, coarse_resolution, monotonic};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

/// Above this much unread body (or pipelined input), reading pauses.
pub const READ_HIGH_WATER: usize = 64 * 1024;

/// What the read buffer holds next.
pub enum Next {
    /// Nothing to do until more bytes come (or the connection is closing).
    Wait,
    /// The PROXY header relays the connection: these are its client's and server's
    /// addresses from now on. Ask again.
    Relayed { client: SocketAddr, server: SocketAddr },
    /// A request head is complete at the start of the read buffer: the driver makes its
    /// request and calls `begin`, or refuses it (`reject`).
    Head(Head),
    /// The current request has body bytes (or its end) to hand to a reader, or nothing
    /// new: the driver hands them on, then calls `body_read`.
    Body,
    /// The request's body framing was invalid: the request was refused and the connection
    /// closes; its readers are let go (an `Act::Unwait`).
    BodyRefused,
}

impl<W: World> Conn<W> {
    /// Set the connection's deadline; arm the timer only when none is armed early enough.
    pub fn set_timer(&mut self, kind: TimerKind, timeout: f64, acts: &mut Vec<Act<W>>) {
        self.timer_kind = kind;
        if kind == TimerKind::None {
            return;
        }
        // The coarse clock: this runs for every request, and a deadline in seconds does not
        // need the precise one. `timer_at` and `timer_fired` read the same clock.
        let now = coarse_monotonic();
        self.deadline = now + timeout;
        if self.timer_armed && self.timer_at <= self.deadline + 1e-3 {
            return;
        }
        if self.timer_armed {
            acts.push(Act::CancelTimer);
        }
        self.timer_armed = true;
        self.timer_at = now + timeout;
        acts.push(Act::ArmTimer(timeout));
    }

    /// The timer fired. The timer fires on the precise clock; the deadline is on the
    /// coarse one, which lags by about a tick: within that, the deadline has passed. (A
    /// tick that came late only costs a re-arm for the few milliseconds left.)
    pub fn timer_fired(&mut self, acts: &mut Vec<Act<W>>) {
        self.timer_armed = false;
        if self.lost() || self.timer_kind == TimerKind::None {
            return;
        }
        let now = coarse_monotonic();
        if now + coarse_resolution() < self.deadline {
            self.timer_armed = true;
            self.timer_at = self.deadline;
            acts.push(Act::ArmTimer(self.deadline - now));
        } else {
            // Header read too slow, or idle keep-alive over: close quietly.
            self.timer_kind = TimerKind::None;
            self.close_after();
            acts.push(Act::Close);
        }
    }

    /// Stop the timer (the connection is lost or switched protocols).
    pub fn stop_timer(&mut self, acts: &mut Vec<Act<W>>) {
        self.timer_kind = TimerKind::None;
        if std::mem::take(&mut self.timer_armed) {
            acts.push(Act::CancelTimer);
        }
    }

    /// Refuse the request with `status` and close (after a framing error the rest of the
    /// stream cannot be trusted). `log`: the request refused before it began (a 503), for
    /// the access log, and `head_method` whether that one is a HEAD (the reply to a HEAD
    /// has no body).
    pub fn reject(
        &mut self,
        st: &Settings,
        why: Reject,
        log: Option<W::Log>,
        head_method: bool,
        acts: &mut Vec<Act<W>>,
    ) {
        let status = why.status();
        let extra = match why {
            Reject::Upgrade { field, .. } => field,
            _ => b"",
        };
        let response_started = self.req.as_ref().is_some_and(|r| r.writing.head_written());
        if !response_started {
            let head_method = self.req.as_ref().map_or(head_method, |r| r.head_method);
            acts.push(Act::Write(st.simple_response(status, head_method, extra)));
            let size = if head_method { 0 } else { reason(status).len() as u64 };
            match self.req.as_mut() {
                Some(req) => record(st, req, status, size, acts),
                None if st.timed() => {
                    // The head has been arriving since the header timer was set.
                    let now = coarse_monotonic();
                    let began =
                        if self.timer_kind == TimerKind::Header { self.deadline - st.timeout_header } else { now };
                    if let Some(m) = st.metrics() {
                        m.response(status, now - began);
                    }
                    if st.access_log {
                        acts.push(Act::AccessLog(log, status, size, now - began, true));
                    }
                }
                None => {}
            }
        }
        if let Some(req) = self.req.as_mut() {
            req.writing = Writing::Done;
        }
        self.close_after();
        self.rbuf.clear();
        acts.push(Act::Close);
    }

    /// What to do next with the read buffer. A head that cannot be read is refused here.
    pub fn next(&mut self, st: &Settings, acts: &mut Vec<Act<W>>) -> Next {
        if self.closing() {
            return Next::Wait;
        }
        if self.proxy_preface {
            match proxy_protocol::parse(&self.rbuf) {
                Preface::Incomplete => return Next::Wait,
                Preface::Invalid => {
                    // A malformed or missing header closes the connection, with nothing
                    // passed to the app and nothing answered.
                    self.close_after();
                    self.rbuf.clear();
                    acts.push(Act::Close);
                    return Next::Wait;
                }
                Preface::Done { len, origin } => {
                    self.rbuf.drain(..len);
                    self.proxy_preface = false;
                    if let Origin::Relayed { client, server } = origin {
                        return Next::Relayed { client, server };
                    }
                }
            }
        }
        if self.req.is_some() {
            return self.feed_body(st, acts);
        }
        // RFC 9112 §2.2: empty lines before a request line are ignored.
        let skip = self.rbuf.chunks(2).take_while(|p| *p == b"\r\n").count() * 2;
        if skip > 0 {
            self.rbuf.drain(..skip);
        }
        if self.rbuf.is_empty() {
            return Next::Wait;
        }
        if self.timer_kind == TimerKind::KeepAlive {
            self.set_timer(TimerKind::Header, st.timeout_header, acts);
        }
        let parsed = match find_head_end(&self.rbuf, &st.limits) {
            Ok(Some(end)) => parse_head(&self.rbuf, end, &st.limits),
            Ok(None) => return Next::Wait,
            Err(r) => Err(r),
        };
        let head = match parsed {
            Ok(h) => h,
            Err(r) => {
                self.reject(st, r, None, false, acts);
                return Next::Wait;
            }
        };
        if st.shutting_down.load(Ordering::Relaxed) && self.gen > 0 && !st.draining.load(Ordering::Relaxed) {
            self.close_after();
            acts.push(Act::Close);
            return Next::Wait;
        }
        Next::Head(head)
    }

    /// Whether `head`'s method is HEAD.
    pub fn is_head_method(&self, head: &Head) -> bool {
        self.rbuf.get(head.method.clone()) == Some(b"HEAD".as_slice())
    }

    /// Begin serving `head` (at the start of the read buffer, taken off it here) as the
    /// next request; `reading` is how its body is read.
    #[allow(clippy::too_many_arguments)] // a request's every field but its response
    pub fn begin(
        &mut self,
        head: &Head,
        head_method: bool,
        mut reading: Reading,
        keep_alive: bool,
        upgrade: bool,
        log: Option<W::Log>,
        start: Option<f64>,
    ) -> &mut Request<W> {
        self.gen += 1;
        let mut body_buf = BodyBuf::default();
        match reading {
            // The request is all in the read buffer, its body at least as long as its head:
            // the buffer becomes the body's, the head skipped, rather than the body copied
            // out of it (the next read starts a new one).
            Reading::Body(BodyState::Length(n))
                if self.rbuf.len() as u64 == head.len as u64 + n && n >= head.len as u64 && !head.expect_continue =>
            {
                body_buf = BodyBuf::from_parts(std::mem::take(&mut self.rbuf), head.len);
                reading = Reading::Ended;
            }
            _ => {
                self.rbuf.drain(..head.len);
            }
        }
        self.timer_kind = TimerKind::None;
        let expect = if head.expect_continue && !reading.is_read() { Expect::Waiting } else { Expect::None };
        self.req.insert(Request {
            gen: self.gen,
            minor: head.minor,
            head_method,
            keep_alive,
            reading,
            body_buf,
            expect,
            writing: Writing::Init,
            upgrade,
            status: 0,
            sent: 0,
            log,
            start,
            objects: W::RequestObjects::default(),
        })
    }

    /// Begin the request of `head` for the application (see `begin`): the body is read
    /// for it, and the request counts as active until the application ends. Its
    /// generation.
    pub fn begin_request(
        &mut self,
        st: &Settings,
        head: &Head,
        head_method: bool,
        upgrade: bool,
        log: Option<W::Log>,
    ) -> u64 {
        let body = match head.framing {
            Framing::Length(n) => BodyState::Length(n),
            Framing::Chunked => BodyState::Chunked(ChunkedDecoder::new(st.limits.body_size)),
        };
        st.active_requests.fetch_add(1, Ordering::Relaxed);
        st.total_requests.fetch_add(1, Ordering::Relaxed);
        let keep = head.keep_alive && !self.shutdown && !st.shutting_down.load(Ordering::Relaxed);
        let start = st.timed().then(monotonic);
        self.begin(head, head_method, Reading::new(body), keep, upgrade, log, start).gen
    }

    /// Feed the current request's body from the read buffer.
    fn feed_body(&mut self, st: &Settings, acts: &mut Vec<Act<W>>) -> Next {
        let Some(req) = self.req.as_mut() else { return Next::Wait };
        if self.rbuf.is_empty() {
            return Next::Body;
        }
        let discard = matches!(req.reading, Reading::Discard(_));
        let (Reading::Body(body) | Reading::Discard(body)) = &mut req.reading else {
            return Next::Body;
        };
        let mut sink = Vec::new();
        let out = if discard { &mut sink } else { req.body_buf.tail() };
        let (consumed, ended) = match body {
            BodyState::Length(rem) => {
                let n = self.rbuf.len().min(usize::try_from(*rem).unwrap_or(usize::MAX));
                out.extend_from_slice(&self.rbuf[..n]);
                *rem -= n as u64;
                (n, *rem == 0)
            }
            BodyState::Chunked(dec) => match dec.feed(&self.rbuf, out) {
                Ok(n) => (n, dec.is_done()),
                Err(r) => {
                    let (readers, upgrade) = (std::mem::take(&mut req.objects), req.upgrade);
                    self.reject(st, r, None, false, acts);
                    acts.push(Act::Unwait(readers, upgrade));
                    return Next::BodyRefused;
                }
            },
        };
        if ended {
            req.reading = if discard { Reading::Done } else { Reading::Ended };
        }
        self.rbuf.drain(..consumed);
        Next::Body
    }

    /// After body bytes were handed on: a complete exchange ends (true: read on), and a
    /// backlog pauses reading.
    pub fn body_read(&mut self, st: &Settings, acts: &mut Vec<Act<W>>) -> bool {
        let Some(req) = self.req.as_mut() else { return false };
        if req.complete() && req.reading.is_read() {
            self.finish_request(st, acts);
            return true;
        }
        let backlog = if req.reading.is_read() { self.rbuf.len() } else { req.body_buf.len() };
        if backlog >= READ_HIGH_WATER && !self.reading_paused {
            self.reading_paused = true;
            acts.push(Act::PauseReading);
        }
        false
    }

    /// The response is complete and the body read: keep the connection for the next request
    /// or close it.
    pub fn finish_request(&mut self, st: &Settings, acts: &mut Vec<Act<W>>) {
        let Some(req) = self.req.take() else { return };
        // Draining, `keep_alive` is what the response's head said: a connection whose last
        // response promised to stay open waits for its next request (or its keep-alive
        // timeout), which is answered with `connection: close`.
        let ending = self.shutdown || st.shutting_down.load(Ordering::Relaxed);
        if !req.keep_alive || (ending && !st.draining.load(Ordering::Relaxed)) {
            self.close_after();
            acts.push(Act::Close);
            return;
        }
        if self.reading_paused {
            self.reading_paused = false;
            acts.push(Act::ResumeReading);
        }
        if self.rbuf.is_empty() {
            self.set_timer(TimerKind::KeepAlive, st.timeout_keep_alive, acts);
        } else {
            self.set_timer(TimerKind::Header, st.timeout_header, acts);
        }
    }

    /// Graceful shutdown of this connection: close now if idle, else after the response.
    /// Draining (`drain`, a retiring worker), an idle one is left to its next request or
    /// its keep-alive timeout instead, and a response already under way keeps the
    /// connection open as its head said. A new connection (no request yet) is not an idle
    /// keep-alive one: its client has a request on the way, so it gets that one request
    /// (answered with `connection: close`) if it arrives within `grace`. Closing it would
    /// drop a request sent in good faith, e.g. to a worker that retires while sharing the
    /// accept queue with its replacement.
    pub fn shut_down(&mut self, drain: bool, grace: f64, acts: &mut Vec<Act<W>>) {
        self.shutdown = true;
        if self.lost() {
            return;
        }
        if self.req.is_none() && self.gen == 0 {
            self.set_timer(TimerKind::Header, grace, acts);
            return;
        }
        match self.req.as_mut() {
            None if drain => {}
            None => {
                self.close_after();
                acts.push(Act::Close);
            }
            Some(r) if drain && r.writing.head_written() => {}
            Some(r) => r.keep_alive = false,
        }
    }
}

/// Whether a reader of the body has something to take: bytes, or the body's end.
pub fn body_ready<W: World>(req: &Request<W>) -> bool {
    !req.body_buf.is_empty() || matches!(req.reading, Reading::Ended)
}

/// The body read so far, taken for a reader (and whether more follows).
pub fn take_body<W: World, T>(req: &mut Request<W>, with: impl FnOnce(&[u8], bool) -> T) -> T {
    let ended = req.reading.is_read();
    let msg = with(req.body_buf.bytes(), !ended);
    req.body_buf.clear(READ_HIGH_WATER * 2);
    if ended {
        req.reading = Reading::Done;
    }
    msg
}

/// The body read so far, its buffer handed to a reader that keeps it (and whether more
/// follows).
pub fn take_body_buf<W: World>(req: &mut Request<W>) -> (BodyBuf, bool) {
    let ended = req.reading.is_read();
    if ended {
        req.reading = Reading::Done;
    }
    (std::mem::take(&mut req.body_buf), !ended)
}

/// The response to `req` is over (complete, refused, cut short or switched): its
/// access-log line and its count in the metrics, once.
pub fn record<W: World>(st: &Settings, req: &mut Request<W>, status: u16, size: u64, acts: &mut Vec<Act<W>>) {
    let Some(start) = req.start.take() else { return };
    let seconds = monotonic() - start;
    if let Some(m) = st.metrics() {
        m.response(status, seconds);
    }
    if let Some(log) = req.log.take() {
        acts.push(Act::AccessLog(Some(log), status, size, seconds, false));
    }
}
