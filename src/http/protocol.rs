//! `HttpProtocol`: an asyncio `Protocol` (so it runs on any loop) that reads HTTP/1.1
//! requests, hands each to the interface that serves it (`dispatch`), and keeps the
//! connection's timers and flow control. One request is served at a time: pipelined requests wait in the read buffer,
//! which keeps responses in order without queueing them.
//!
//! All state sits behind one mutex that is never held across a call into Python code:
//! work that calls out (writes, closing, waking the app, timers) is collected as `Act`s and
//! run after unlocking, because a write may call `pause_writing` straight back.

use super::config::HttpServerState;
use super::conn::{Act, BodyState, Conn, Expect, Phase, Reading, Request, TimerKind, Writing};
use super::parse::{find_head_end, parse_head, ChunkedDecoder, Framing, Reject};
use super::proxy_protocol::{self, Origin, Preface};
use super::response::reason;
use super::static_files::serve::Static;
use crate::clock::{coarse_monotonic, coarse_resolution, monotonic};
use crate::event_loop::create_future;
use crate::sync::{GilCell, GilGuard};
use crate::transport::stream::StreamCore;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};
use std::sync::atomic::Ordering;

/// Above this much unread body (or pipelined input), reading pauses.
pub const READ_HIGH_WATER: usize = 64 * 1024;

#[pyclass(module = "swordfish._native", frozen)]
pub struct HttpProtocol {
    pub state: Py<HttpServerState>,
    pub conn: GilCell<Conn>,
}

impl HttpProtocol {
    pub fn lock(&self, py: Python<'_>) -> PyResult<GilGuard<'_, Conn>> {
        self.conn.lock(py)
    }

    pub fn st<'a>(&'a self, py: Python<'a>) -> &'a HttpServerState {
        let _ = py;
        self.state.get()
    }

    /// Bytes from the client (`data_received`, or swordfish's socket transport directly).
    pub fn feed(slf: &Bound<'_, Self>, data: &[u8]) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let mut acts = Vec::new();
        {
            let mut c = this.lock(py)?;
            if c.closing() {
                return Ok(());
            }
            if let Some(m) = this.st(py).metrics() {
                m.received(data.len());
            }
            c.rbuf.extend_from_slice(data);
            this.advance(py, &mut c, &mut acts)?;
        }
        Self::run_acts(slf, acts)
    }

    /// Set the connection's deadline; arm the loop timer only when none is armed early enough.
    pub fn set_timer(&self, c: &mut Conn, kind: TimerKind, timeout: f64, acts: &mut Vec<Act>) {
        c.timer_kind = kind;
        if kind == TimerKind::None {
            return;
        }
        // The coarse clock: this runs for every request, and a deadline in seconds does not
        // need the precise one. `timer_at` and `_on_timer` read the same clock.
        let now = coarse_monotonic();
        c.deadline = now + timeout;
        match &c.timer {
            Some(_) if c.timer_at <= c.deadline + 1e-3 => {}
            Some(_) => {
                if let Some(h) = c.timer.take() {
                    acts.push(Act::CancelTimer(h));
                }
                acts.push(Act::ArmTimer(timeout));
            }
            None => acts.push(Act::ArmTimer(timeout)),
        }
    }

    /// Refuse the request with `status` and close (RFC 9112 §… : after a framing error the
    /// rest of the stream cannot be trusted).
    /// `scope`: the request refused before it got one (a 503), for the access log, and
    /// `head_method` whether that one is a HEAD (the reply to a HEAD has no body).
    pub fn reject(
        &self,
        py: Python<'_>,
        c: &mut Conn,
        why: Reject,
        scope: Option<Py<PyAny>>,
        head_method: bool,
        acts: &mut Vec<Act>,
    ) {
        let status = why.status();
        let extra = match why {
            Reject::Upgrade { field, .. } => field,
            _ => b"",
        };
        let state = self.state.get();
        let response_started = c.req.as_ref().is_some_and(|r| r.writing.head_written());
        if !response_started {
            let head_method = c.req.as_ref().map_or(head_method, |r| r.head_method);
            acts.push(Act::Write(state.simple_response(status, head_method, extra)));
            let size = if head_method { 0 } else { reason(status).len() as u64 };
            match c.req.as_mut() {
                Some(req) => self.record(req, status, size, acts),
                None if state.timed() => {
                    // The head has been arriving since the header timer was set.
                    let now = coarse_monotonic();
                    let began = if c.timer_kind == TimerKind::Header { c.deadline - state.timeout_header } else { now };
                    if let Some(m) = state.metrics() {
                        m.response(status, now - began);
                    }
                    if state.access_log.is_some() {
                        let client = c.client.as_ref().map(|cl| cl.clone_ref(py));
                        acts.push(Act::AccessLog(scope, client, status, size, now - began));
                    }
                }
                None => {}
            }
        }
        if let Some(req) = c.req.as_mut() {
            req.writing = Writing::Done;
        }
        c.close_after();
        c.rbuf.clear();
        acts.push(Act::Close);
    }

    /// The response to `req` is over (complete, refused, cut short or switched): its
    /// access-log line and its count in the metrics, once.
    pub fn record(&self, req: &mut Request, status: u16, size: u64, acts: &mut Vec<Act>) {
        let Some(start) = req.start.take() else { return };
        let seconds = monotonic() - start;
        if let Some(m) = self.state.get().metrics() {
            m.response(status, seconds);
        }
        if let Some(log) = req.log.take() {
            acts.push(Act::AccessLog(Some(log), None, status, size, seconds));
        }
    }

    /// The PROXY protocol header at the start of the connection: whether it is complete
    /// (and the connection's addresses are now the ones it gives). A malformed or missing
    /// one closes the connection, with nothing passed to the app and nothing answered.
    fn proxy_preface(&self, py: Python<'_>, c: &mut Conn, acts: &mut Vec<Act>) -> PyResult<bool> {
        match proxy_protocol::parse(&c.rbuf) {
            Preface::Incomplete => Ok(false),
            Preface::Invalid => {
                c.close_after();
                c.rbuf.clear();
                acts.push(Act::Close);
                Ok(false)
            }
            Preface::Done { len, origin } => {
                c.rbuf.drain(..len);
                c.proxy_preface = false;
                if let Origin::Relayed { client, server } = origin {
                    let address = |a: std::net::SocketAddr| -> PyResult<Py<PyAny>> {
                        Ok((a.ip().to_string(), a.port()).into_pyobject(py)?.into_any().unbind())
                    };
                    c.client = Some(address(client)?);
                    c.server = self.state.get().dispatch.server_address(py, Some(address(server)?))?;
                }
                Ok(true)
            }
        }
    }

    /// Parse and feed what the read buffer holds, as far as the current state allows.
    pub fn advance(&self, py: Python<'_>, c: &mut Conn, acts: &mut Vec<Act>) -> PyResult<()> {
        let state = self.state.get();
        loop {
            if c.closing() {
                return Ok(());
            }
            if c.proxy_preface && !self.proxy_preface(py, c, acts)? {
                return Ok(());
            }
            if c.req.is_none() {
                // RFC 9112 §2.2: empty lines before a request line are ignored.
                let skip = c.rbuf.chunks(2).take_while(|p| *p == b"\r\n").count() * 2;
                if skip > 0 {
                    c.rbuf.drain(..skip);
                }
                if c.rbuf.is_empty() {
                    return Ok(());
                }
                if c.timer_kind == TimerKind::KeepAlive {
                    self.set_timer(c, TimerKind::Header, state.timeout_header, acts);
                }
                let end = match find_head_end(&c.rbuf, &state.limits) {
                    Ok(Some(end)) => end,
                    Ok(None) => return Ok(()),
                    Err(r) => {
                        self.reject(py, c, r, None, false, acts);
                        return Ok(());
                    }
                };
                let head = match parse_head(&c.rbuf, end, &state.limits) {
                    Ok(h) => h,
                    Err(r) => {
                        self.reject(py, c, r, None, false, acts);
                        return Ok(());
                    }
                };
                if state.shutting_down.load(Ordering::Relaxed) && c.gen > 0 {
                    c.close_after();
                    acts.push(Act::Close);
                    return Ok(());
                }
                let head_method = &c.rbuf[head.method.clone()] == b"HEAD";
                if let Some(files) = &state.static_files {
                    match self.serve_static(py, c, files, &head, head_method, acts)? {
                        Static::Not => {}
                        Static::Answered(true) => continue,
                        Static::Answered(false) | Static::Held => return Ok(()),
                    }
                }
                // The previous request here may still be running after its response is
                // complete: the next one (pipelined or not) takes its place rather than
                // adding one. Older ones still running count.
                let previous = usize::from(c.apps.iter().any(|(g, _)| *g == c.gen));
                let running = state.active_requests.load(Ordering::Relaxed).saturating_sub(previous);
                let served = match state.dispatch.request(py, c, &head) {
                    Ok(r) => r,
                    Err(r) => {
                        self.reject(py, c, r, None, head_method, acts);
                        return Ok(());
                    }
                };
                let request = served.request;
                if running >= state.limit_concurrency {
                    self.reject(py, c, Reject::Unavailable, Some(request), head_method, acts);
                    return Ok(());
                }
                c.gen += 1;
                let body = match head.framing {
                    Framing::Length(n) => BodyState::Length(n),
                    Framing::Chunked => BodyState::Chunked(ChunkedDecoder::new(state.limits.body_size)),
                };
                let reading = Reading::new(body);
                c.rbuf.drain(..head.len);
                c.timer_kind = TimerKind::None;
                state.active_requests.fetch_add(1, Ordering::Relaxed);
                state.total_requests.fetch_add(1, Ordering::Relaxed);
                let keep = head.keep_alive && !c.shutdown;
                let expect = if head.expect_continue && !reading.is_read() { Expect::Waiting } else { Expect::None };
                c.req = Some(Request {
                    gen: c.gen,
                    minor: head.minor,
                    head_method,
                    keep_alive: keep,
                    reading,
                    body_buf: Vec::new(),
                    expect,
                    receive_waiters: Vec::new(),
                    writing: Writing::Init,
                    upgrade: served.upgrade,
                    status: 0,
                    sent: 0,
                    log: state.access_log.as_ref().map(|_| request.clone_ref(py)),
                    start: state.timed().then(monotonic),
                });
                c.apps.push((c.gen, None));
                acts.push(Act::Start(request, c.gen));
                continue;
            }
            // A request is in flight: feed its body, then stop (pipelined input waits).
            let Some(req) = c.req.as_mut() else { return Ok(()) };
            if !c.rbuf.is_empty() {
                let discard = matches!(req.reading, Reading::Discard(_));
                let (Reading::Body(body) | Reading::Discard(body)) = &mut req.reading else {
                    return self.body_read(py, c, acts);
                };
                let mut sink = Vec::new();
                let out = if discard { &mut sink } else { &mut req.body_buf };
                let (consumed, ended) = match body {
                    BodyState::Length(rem) => {
                        let n = c.rbuf.len().min(usize::try_from(*rem).unwrap_or(usize::MAX));
                        out.extend_from_slice(&c.rbuf[..n]);
                        *rem -= n as u64;
                        (n, *rem == 0)
                    }
                    BodyState::Chunked(dec) => match dec.feed(&c.rbuf, out) {
                        Ok(n) => (n, dec.is_done()),
                        Err(r) => {
                            let (waiters, upgrade) = (std::mem::take(&mut req.receive_waiters), req.upgrade);
                            self.reject(py, c, r, None, false, acts);
                            for w in waiters {
                                acts.push(Act::Resolve(w, state.dispatch.disconnect_message(py, upgrade)?));
                            }
                            return Ok(());
                        }
                    },
                };
                if ended {
                    req.reading = if discard { Reading::Done } else { Reading::Ended };
                }
                c.rbuf.drain(..consumed);
            }
            return self.body_read(py, c, acts);
        }
    }

    /// After body bytes were read: a reader waiting gets them, a complete exchange ends,
    /// and a backlog pauses reading.
    fn body_read(&self, py: Python<'_>, c: &mut Conn, acts: &mut Vec<Act>) -> PyResult<()> {
        let Some(req) = c.req.as_mut() else { return Ok(()) };
        if !req.receive_waiters.is_empty() && self.body_ready(req) {
            // The oldest call still waiting gets it; one the app stopped waiting on
            // (cancelled) is dropped, and with none left the data waits for the next call.
            while !req.receive_waiters.is_empty() {
                let w = req.receive_waiters.remove(0);
                if !crate::tasks::is_done(w.bind(py))? {
                    let msg = self.take_body(py, req)?;
                    acts.push(Act::Resolve(w, msg));
                    break;
                }
            }
        }
        if req.complete() && req.reading.is_read() {
            self.finish_request(c, acts);
            return self.advance(py, c, acts);
        }
        let backlog = if req.reading.is_read() { c.rbuf.len() } else { req.body_buf.len() };
        if backlog >= READ_HIGH_WATER && !c.reading_paused {
            c.reading_paused = true;
            acts.push(Act::PauseReading);
        }
        Ok(())
    }

    /// Whether a reader of the body has something to take: bytes, or the body's end.
    pub fn body_ready(&self, req: &Request) -> bool {
        !req.body_buf.is_empty() || matches!(req.reading, Reading::Ended)
    }

    /// The next body message: all the body read so far, and whether more follows.
    pub fn take_body(&self, py: Python<'_>, req: &mut Request) -> PyResult<Py<PyAny>> {
        let ended = req.reading.is_read();
        let msg = self.state.get().dispatch.body_message(py, &req.body_buf, !ended)?;
        req.body_buf.clear();
        if req.body_buf.capacity() > READ_HIGH_WATER * 2 {
            req.body_buf = Vec::new();
        }
        if ended {
            req.reading = Reading::Done;
        }
        Ok(msg)
    }

    /// Resolve `waiter` (with None) once the connection is lost; false if it is already.
    /// Waiters already done (given up on) are dropped, so that a client that stays
    /// connected through many requests does not pile them up.
    pub fn watch_lost(&self, py: Python<'_>, waiter: &Py<PyAny>) -> PyResult<bool> {
        let mut c = self.lock(py)?;
        if c.lost() {
            return Ok(false);
        }
        c.lost_waiters.retain(|w| !crate::tasks::is_done(w.bind(py)).unwrap_or(false));
        c.lost_waiters.push(waiter.clone_ref(py));
        Ok(true)
    }

    /// The response is complete and the body read: keep the connection for the next request
    /// or close it.
    pub fn finish_request(&self, c: &mut Conn, acts: &mut Vec<Act>) {
        let state = self.state.get();
        let Some(req) = c.req.take() else { return };
        if !req.keep_alive || c.shutdown || state.shutting_down.load(Ordering::Relaxed) {
            c.close_after();
            acts.push(Act::Close);
            return;
        }
        if c.reading_paused {
            c.reading_paused = false;
            acts.push(Act::ResumeReading);
        }
        if c.rbuf.is_empty() {
            self.set_timer(c, TimerKind::KeepAlive, state.timeout_keep_alive, acts);
        } else {
            self.set_timer(c, TimerKind::Header, state.timeout_header, acts);
        }
    }
}

/// Seconds a connection that has not sent its first request yet gets on graceful shutdown.
const FIRST_REQUEST_GRACE: f64 = 1.0;

#[pymethods]
impl HttpProtocol {
    #[new]
    fn new(state: Py<HttpServerState>) -> Self {
        HttpProtocol {
            state,
            conn: GilCell::new(Conn {
                transport: None,
                write: None,
                core: None,
                client: None,
                server: None,
                https: false,
                proxy_preface: false,
                rbuf: Vec::new(),
                req: None,
                gen: 0,
                phase: Phase::Open,
                shutdown: false,
                reading_paused: false,
                writing_paused: false,
                drain_waiters: Vec::new(),
                lost_waiters: Vec::new(),
                timer: None,
                timer_at: 0.0,
                deadline: 0.0,
                timer_kind: TimerKind::None,
                number: 0,
                on_timer: None,
                apps: Vec::new(),
                upgraded: None,
                static_held: false,
                static_burst: 0,
            }),
        }
    }

    fn connection_made(slf: &Bound<'_, Self>, transport: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let state = this.state.get();
        let extra = |name: &str| transport.call_method1(intern!(py, "get_extra_info"), (name,));
        let address = |v: Bound<'_, PyAny>| -> Option<Py<PyAny>> {
            let t = v.cast::<PyTuple>().ok()?;
            if t.len() < 2 {
                return None;
            }
            let host = t.get_item(0).ok()?;
            let port = t.get_item(1).ok()?;
            Some(PyTuple::new(py, [host, port]).ok()?.into_any().unbind())
        };
        let client = address(extra("peername")?);
        let mut server = address(extra("sockname")?);
        if server.is_none() {
            // A Unix socket: (path, None), as uvicorn and the ASGI spec's examples have it.
            let name = extra("sockname")?;
            if name.is_instance_of::<pyo3::types::PyString>() {
                server = Some(PyTuple::new(py, [name, py.None().into_bound(py)])?.into_any().unbind());
            }
        }
        let server = state.dispatch.server_address(py, server)?;
        let https = !extra("sslcontext")?.is_none();
        let write = transport.getattr(intern!(py, "write"))?.unbind();
        let core = match transport.getattr_opt(intern!(py, "_core"))? {
            Some(core) => core.cast_into::<StreamCore>().ok().map(Bound::unbind),
            None => None,
        };
        let on_timer = slf.getattr(intern!(py, "_on_timer"))?.unbind();
        // --proxy-protocol: only a trusted peer's header is believed; anyone else could
        // claim any address, so their connections are closed unanswered.
        let proxy_preface = match &state.proxy_protocol {
            Some(trusted) => {
                let host = match &client {
                    Some(c) => c.bind(py).get_item(0)?,
                    None => py.None().into_bound(py),
                };
                if !trusted.bind(py).call1((host,))?.is_truthy()? {
                    transport.call_method0(intern!(py, "close"))?;
                    return Ok(());
                }
                true
            }
            None => false,
        };
        state.connections.bind(py).add(slf)?;
        if let Some(m) = state.metrics() {
            m.connection_opened();
        }
        let mut acts = Vec::new();
        {
            let mut c = this.lock(py)?;
            c.transport = Some(transport.clone().unbind());
            c.write = Some(write);
            c.core = core;
            c.client = client;
            c.server = server;
            c.https = https;
            c.proxy_preface = proxy_preface;
            c.on_timer = Some(on_timer);
            c.number = state.connections_made.fetch_add(1, Ordering::Relaxed);
            this.set_timer(&mut c, TimerKind::Header, state.timeout_header, &mut acts);
            if state.shutting_down.load(Ordering::Relaxed) {
                // Accepted before the listener closed: its first request is served.
                c.shutdown = true;
                this.set_timer(&mut c, TimerKind::Header, state.timeout_header.min(FIRST_REQUEST_GRACE), &mut acts);
            }
        }
        Self::run_acts(slf, acts)
    }

    fn data_received(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        match data.cast::<PyBytes>() {
            Ok(b) => Self::feed(slf, b.as_bytes()),
            Err(_) => Self::feed(slf, &data.extract::<Vec<u8>>()?),
        }
    }

    /// The client closed its side: treated as a disconnect (the transport then closes).
    fn eof_received(&self) -> Option<bool> {
        None
    }

    fn connection_lost(slf: &Bound<'_, Self>, _exc: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let mut acts = Vec::new();
        let mut dropped = Vec::new();
        {
            let mut c = this.lock(py)?;
            c.phase = Phase::Lost;
            if let Some(h) = c.timer.take() {
                acts.push(Act::CancelTimer(h));
            }
            c.timer_kind = TimerKind::None;
            if let Some(req) = c.req.as_mut() {
                for w in std::mem::take(&mut req.receive_waiters) {
                    acts.push(Act::Resolve(w, this.state.get().dispatch.disconnect_message(py, req.upgrade)?));
                }
            }
            let lost_waiters = std::mem::take(&mut c.lost_waiters);
            for w in c.drain_waiters.drain(..).chain(lost_waiters) {
                acts.push(Act::Resolve(w, py.None()));
            }
            let transport = c.transport.take();
            if let (Some(m), Some(_)) = (this.st(py).metrics(), &transport) {
                m.connection_closed();
            }
            dropped.push(transport);
            dropped.push(c.write.take());
            dropped.push(c.core.take().map(Py::into_any));
            dropped.push(c.on_timer.take());
            c.rbuf = Vec::new();
            // Kept among the server's connections while an app still runs, so that a
            // graceful shutdown waits for it and cancels it at the timeout.
            if c.apps.is_empty() {
                acts.push(Act::Forget);
            }
        }
        drop(dropped);
        Self::run_acts(slf, acts)
    }

    fn pause_writing(&self, py: Python<'_>) -> PyResult<()> {
        self.lock(py)?.writing_paused = true;
        Ok(())
    }

    fn resume_writing(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let mut acts = Vec::new();
        {
            let mut c = slf.get().lock(py)?;
            c.writing_paused = false;
            for w in c.drain_waiters.drain(..) {
                acts.push(Act::Resolve(w, py.None()));
            }
            if c.static_held {
                // The client read the answers it asked for: on with its next requests.
                c.static_held = false;
                c.static_burst = 0;
                slf.get().advance(py, &mut c, &mut acts)?;
            }
        }
        Self::run_acts(slf, acts)
    }

    /// A future that resolves once writing may go on, or None if it may now (for a file
    /// body written piece by piece where the loop has no `sendfile`).
    fn _drain(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let mut c = self.lock(py)?;
        if !c.writing_paused || c.lost() {
            return Ok(None);
        }
        let fut = create_future(self.state.get().lp.bind(py))?.unbind();
        c.drain_waiters.push(fut.clone_ref(py));
        Ok(Some(fut))
    }

    fn _on_timer(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let mut acts = Vec::new();
        {
            let mut c = this.lock(py)?;
            c.timer = None;
            if c.lost() || c.timer_kind == TimerKind::None {
                return Ok(());
            }
            // The loop's timer fired on the precise clock; the deadline is on the coarse one,
            // which lags by about a tick: within that, the deadline has passed. (A tick that
            // came late only costs a re-arm for the few milliseconds left.)
            let now = coarse_monotonic();
            if now + coarse_resolution() < c.deadline {
                acts.push(Act::ArmTimer(c.deadline - now));
            } else {
                // Header read too slow, or idle keep-alive over: close quietly.
                c.timer_kind = TimerKind::None;
                c.close_after();
                acts.push(Act::Close);
            }
        }
        Self::run_acts(slf, acts)
    }

    /// Graceful shutdown of this connection: close now if idle, else after the response.
    fn shutdown(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let mut acts = Vec::new();
        {
            let mut c = slf.get().lock(py)?;
            c.shutdown = true;
            if let Some(upgraded) = c.upgraded.as_ref().map(|u| u.clone_ref(py)) {
                drop(c);
                upgraded.call_method0(py, intern!(py, "shutdown"))?;
                return Ok(());
            }
            if c.lost() {
                return Ok(());
            }
            // A new connection (no request yet) is not an idle keep-alive one: its client
            // has a request on the way, so it gets that one request (answered with
            // `connection: close`) if it arrives within FIRST_REQUEST_GRACE. Closing it
            // would drop a request sent in good faith, e.g. to a worker that retires
            // (--max-requests) while sharing the accept queue with its replacement.
            if c.req.is_none() && c.gen == 0 {
                let grace = slf.get().state.get().timeout_header.min(FIRST_REQUEST_GRACE);
                slf.get().set_timer(&mut c, TimerKind::Header, grace, &mut acts);
                drop(c);
                return Self::run_acts(slf, acts);
            }
            match c.req.as_mut() {
                None => {
                    c.close_after();
                    acts.push(Act::Close);
                }
                Some(r) => r.keep_alive = false,
            }
        }
        Self::run_acts(slf, acts)
    }

    /// Close at once (the graceful timeout ran out).
    fn abort(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let upgraded = {
            let mut c = slf.get().lock(py)?;
            c.close_after();
            c.upgraded.as_ref().map(|u| u.clone_ref(py))
        };
        if let Some(upgraded) = upgraded {
            upgraded.call_method0(py, intern!(py, "abort"))?;
            return Ok(());
        }
        Self::run_acts(slf, vec![Act::Abort])
    }

    /// Cancel the app tasks still running on this connection (the graceful timeout ran
    /// out) and return them, for the server to wait for their clean-up.
    fn cancel_tasks(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let tasks: Vec<Py<PyAny>> =
            self.lock(py)?.apps.iter().filter_map(|(_, t)| t.as_ref().map(|t| t.clone_ref(py))).collect();
        for t in &tasks {
            t.call_method1(py, intern!(py, "cancel"), ("the server's graceful shutdown timed out",))?;
        }
        Ok(tasks)
    }

    /// The file sent as the body of request `gen` is out (`ok`) or failed.
    fn _pathsend_done(slf: &Bound<'_, Self>, gen: u64, ok: bool) -> PyResult<()> {
        Self::file_sent(slf, gen, ok)
    }

    /// Whether a request is being served (for the server's shutdown).
    #[getter]
    fn busy(&self, py: Python<'_>) -> PyResult<bool> {
        let c = self.lock(py)?;
        Ok(c.req.is_some() || c.upgraded.is_some())
    }

    /// The protocol this connection switched to reports its end.
    fn _upgrade_ended(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::upgrade_ended(slf)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        visit.call(&self.state)?;
        if let Some(c) = self.conn.try_lock(py) {
            visit.call(&c.transport)?;
            visit.call(&c.write)?;
            visit.call(&c.core)?;
            visit.call(&c.on_timer)?;
            visit.call(&c.timer)?;
            for w in c.drain_waiters.iter().chain(&c.lost_waiters) {
                visit.call(w)?;
            }
            for (_, t) in &c.apps {
                visit.call(t)?;
            }
            visit.call(&c.upgraded)?;
            if let Some(r) = &c.req {
                for w in &r.receive_waiters {
                    visit.call(w)?;
                }
                visit.call(&r.log)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self, py: Python<'_>) {
        if let Some(mut c) = self.conn.try_lock(py) {
            c.transport = None;
            c.write = None;
            c.core = None;
            c.on_timer = None;
            c.timer = None;
            c.drain_waiters.clear();
            c.lost_waiters.clear();
            c.apps.clear();
            c.req = None;
            c.upgraded = None;
        }
    }
}
