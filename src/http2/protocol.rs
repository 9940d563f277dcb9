//! `H2Protocol`: the asyncio protocol of an HTTP/2 connection. It feeds the client's bytes
//! to the connection's core (`core`), makes each new stream a request of the server's
//! interface (the same `Dispatch` as HTTP/1.1, with the stream id as the request's
//! number), and writes what the core answers. An HTTP/1.1 connection hands its transport
//! over to it: on the client preface (h2c with prior knowledge) or when TLS chose `h2`.
//!
//! How the connection's events become requests is `streams`; its timers and its close,
//! `lifecycle`; the request API the interfaces use, `respond`.
//!
//! As in `HttpProtocol`, the state sits behind a lock never held across a call into
//! Python: what calls out is collected as `Out`s and run after unlocking. Response parts
//! an application gives while the connection runs its callbacks (`pumping`) are written
//! when they return; one given later queues one `_flush` for the end of the loop
//! iteration, so that the streams answered in one iteration leave in one write. A pass
//! starts at most `STARTS_PER_PASS` applications, so that the first of many streams read
//! at once are answered while the rest are served.

use super::core::H2Core;
use super::streams::StreamObjects;
use super::tunnel::{H2Tunnel, Tunnel};
use crate::carrier::Carrier;
use crate::clock::monotonic;
use crate::http::config::HttpServerState;
use crate::intmap::IntMap;
use crate::sync::{GilCell, GilGuard};
use crate::transport::stream::{Held, Hold};
use crate::transport::writer::Writer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};
use std::collections::VecDeque;

pub struct H2Conn {
    pub core: H2Core,
    pub transport: Option<Py<PyAny>>,
    /// Where the frames go (swordfish's transports take them without a bytes object).
    pub(super) writer: Option<Writer>,
    pub client: Option<Py<PyAny>>,
    pub server: Option<Py<PyAny>>,
    pub https: bool,
    pub streams: IntMap<u32, StreamObjects>,
    /// Streams that carry another protocol (RFC 8441 WebSockets), by id (see `tunnel`).
    pub tunnels: IntMap<u32, Tunnel>,
    pub lost: bool,
    pub writing_paused: bool,
    /// When the transport last paused our writing (the client reads too little).
    pub(super) paused_since: f64,
    /// The transport's reading is paused: more than `OUTPUT_CAP` of the client's input
    /// waits unread by `h2`.
    pub(super) reading_paused: bool,
    /// The connection is running its callbacks: response parts are written at their end.
    pub pumping: bool,
    /// A `_flush` is queued for the end of the loop iteration.
    pub(super) flush_queued: bool,
    /// The transport was asked to close (after the last frames).
    pub(super) closed: bool,
    /// No longer among the server's connections.
    pub(super) forgotten: bool,
    pub(super) timer: Option<Py<PyAny>>,
    /// When the last stream ended (for the keep-alive timeout).
    pub idle_since: f64,
    /// `--http2-keep-alive-interval`: the next PING, or the wait for its answer.
    pub(super) ping_timer: Option<Py<PyAny>>,
    /// `--http2-stall-timeout`: the check of the streams that wait on the client; armed
    /// (the flag, set before the handle exists) while one does.
    pub(super) stall_timer: Option<Py<PyAny>>,
    pub(super) stall_armed: bool,
    /// Waiting for the client to go (an RSGI app's `client_disconnect()`).
    pub lost_waiters: Vec<Py<PyAny>>,
    /// After an h2c upgrade: stream 1's frames, given to `h2` once the client's preface
    /// and SETTINGS are in `early` (see `upgrade`).
    pub(super) upgrade: Option<Vec<u8>>,
    pub(super) early: Vec<u8>,
    /// Streams whose applications are not started yet, oldest first: the request of each
    /// and its id (see `STARTS_PER_PASS`).
    pub(super) unstarted: VecDeque<(Py<PyAny>, u32)>,
}

impl H2Conn {
    /// After an h2c upgrade, the client's bytes are held until its preface and SETTINGS
    /// are in, which stream 1 follows (otherwise `h2` reads them in place: `drive_on`).
    /// False if they are not a preface.
    fn push_early(&mut self, data: &[u8]) -> bool {
        self.early.extend_from_slice(data);
        match super::upgrade::preface_and_settings(&self.early) {
            Err(()) => false,
            Ok(None) => true,
            Ok(Some(n)) => {
                let early = std::mem::take(&mut self.early);
                self.core.push(&early[..n]);
                if let Some(frames) = self.upgrade.take() {
                    self.core.push(&frames);
                }
                self.core.push(&early[n..]);
                true
            }
        }
    }
}

/// Work to do once the lock is released.
pub enum Out {
    /// Start the application of stream `id` with the interface's request.
    Start(Py<PyAny>, u32),
    Resolve(Py<PyAny>, Py<PyAny>),
    /// These readers hear that the request is over (`true`: a WebSocket handshake's).
    Disconnect(Vec<Py<PyAny>>, bool),
    Cancel(Py<PyAny>),
    AccessLog(Py<PyAny>, u16, u64, f64),
    LogError(String, Option<Py<PyAny>>),
    Close,
    Forget,
    QueueFlush,
    PauseReading,
    ResumeReading,
    /// The client's bytes for a tunnel's protocol; its end; the stream gone.
    TunnelData(Py<H2Tunnel>, super::body::Chunks),
    TunnelEof(Py<H2Tunnel>),
    TunnelLost(Py<H2Tunnel>),
    /// Resume (`true`) or pause a tunnel's protocol's writing.
    TunnelWriting(Py<H2Tunnel>, bool),
    /// The server shuts down (`true`: another worker serves on).
    TunnelShutdown(Py<H2Tunnel>, bool),
    /// Check the stalled streams in this many seconds (see `lifecycle`).
    ArmStall(f64),
}

#[pyclass(module = "swordfish._native", frozen)]
pub struct H2Protocol {
    pub state: Py<HttpServerState>,
    pub conn: GilCell<H2Conn>,
}

/// Frames held for the transport before `h2` waits (see `pipe`); also how much of the
/// client's input may wait unread before the socket is no longer read. A client that sends
/// frames `h2` must answer (PING, SETTINGS) and reads nothing stops being read, instead of
/// growing the server's memory.
pub(super) const OUTPUT_CAP: usize = 256 * 1024;

/// Applications a pass of `pump` starts; the streams beyond wait for the next pass, after
/// the answers given so far are written (held for the end of the loop iteration while
/// they are small). One client sending 100 streams at once then gets the first answers
/// while the server works on the rest, and sends its next requests meanwhile, instead of
/// leaving the server idle while it reads all 100 answers (a quarter of the time, at one
/// connection x 100 streams). Measured: hello at 1 x 100 105-116k req/s with every
/// stream started in one pass, 138-149k with 8, 16 or 32 a pass (docs/design.md, HTTP/2).
const STARTS_PER_PASS: usize = 16;

impl H2Protocol {
    pub fn lock(&self, py: Python<'_>) -> PyResult<GilGuard<'_, H2Conn>> {
        self.conn.lock(py)
    }

    /// A protocol for a connection an HTTP/1.1 connection hands over, with its addresses.
    pub fn new(
        state: Py<HttpServerState>,
        settings: &super::Settings,
        client: Option<Py<PyAny>>,
        server: Option<Py<PyAny>>,
        https: bool,
    ) -> Self {
        let core = H2Core::new(settings, OUTPUT_CAP);
        H2Protocol {
            state,
            conn: GilCell::new(H2Conn {
                core,
                transport: None,
                writer: None,
                client,
                server,
                https,
                streams: IntMap::default(),
                tunnels: IntMap::default(),
                lost: false,
                writing_paused: false,
                paused_since: 0.0,
                reading_paused: false,
                pumping: false,
                flush_queued: false,
                closed: false,
                forgotten: false,
                timer: None,
                idle_since: monotonic(),
                ping_timer: None,
                stall_timer: None,
                stall_armed: false,
                lost_waiters: Vec::new(),
                upgrade: None,
                early: Vec::new(),
                unstarted: VecDeque::new(),
            }),
        }
    }

    /// Take the transport over: `data`, what the client sent so far, is read first;
    /// `upgrade`: the frames of an h2c upgrade's request (see `upgrade`).
    pub fn take_over(
        slf: &Bound<'_, Self>,
        transport: &Bound<'_, PyAny>,
        data: &[u8],
        upgrade: Option<Vec<u8>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        {
            let mut c = this.lock(py)?;
            c.upgrade = upgrade;
            c.writer = Some(Writer::of(transport)?);
            c.transport = Some(transport.clone().unbind());
        }
        this.state.get().connections.bind(py).add(slf)?;
        transport.call_method1(intern!(py, "set_protocol"), (slf,))?;
        Self::pump(slf, Some(data))?;
        let delay = this.state.get().settings.timeout_keep_alive;
        Self::arm_idle(slf, delay)?;
        if let Some(interval) = this.state.get().http2.as_ref().and_then(|h| h.keep_alive_interval) {
            Self::arm_ping(slf, interval, "_on_ping")?;
        }
        Ok(())
    }

    /// Bytes from the client (`data_received`, or swordfish's socket transport directly).
    pub fn feed(slf: &Bound<'_, Self>, data: &[u8]) -> PyResult<()> {
        Self::pump(slf, Some(data))
    }

    /// Run the connection: the client's `data`, then until nothing more moves — new
    /// streams started, bodies handed to readers, responses written.
    pub fn pump(slf: &Bound<'_, Self>, mut data: Option<&[u8]>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let mut evented;
        loop {
            let (outs, output) = {
                let mut c = this.lock(py)?;
                if c.closed && data.is_some() {
                    return Ok(());
                }
                c.flush_queued = false;
                let mut events = Vec::new();
                match data.take() {
                    Some(d) => {
                        if let Some(m) = this.state.get().metrics() {
                            m.received(d.len());
                        }
                        if c.upgrade.is_none() {
                            c.core.drive_on(d, &mut events);
                        } else if c.push_early(d) {
                            c.core.drive(&mut events);
                        } else {
                            c.closed = true;
                            drop(c);
                            return Self::run(slf, vec![Out::Close]);
                        }
                    }
                    None => c.core.drive(&mut events),
                }
                let mut outs = Vec::new();
                // What the events made (an answer given at once, a refusal) is polled out
                // by the next pass.
                evented = !events.is_empty();
                this.handle(py, &mut c, events, &mut outs)?;
                let starts = c.unstarted.len().min(STARTS_PER_PASS);
                outs.extend(c.unstarted.drain(..starts).map(|(request, id)| Out::Start(request, id)));
                let output = if c.writing_paused { Vec::new() } else { c.core.take_output() };
                let unread = c.core.unread();
                if unread > OUTPUT_CAP && !c.reading_paused && !c.closed {
                    c.reading_paused = true;
                    outs.push(Out::PauseReading);
                } else if unread <= OUTPUT_CAP && c.reading_paused && !c.closed {
                    c.reading_paused = false;
                    outs.push(Out::ResumeReading);
                }
                if let Some(out) = this.stall_check(&mut c) {
                    outs.push(out);
                }
                if c.core.closed() && !c.closed && !c.writing_paused {
                    c.closed = true;
                    outs.push(Out::Close);
                }
                c.pumping = true;
                (outs, output)
            };
            // A pass that starts applications moves: streams it leaves unstarted get the next.
            let moved = evented || !outs.is_empty() || !output.is_empty();
            if !output.is_empty() {
                this.write_out(py, output)?;
            }
            let r = Self::run(slf, outs);
            this.lock(py)?.pumping = false;
            r?;
            if !moved {
                return Ok(());
            }
        }
    }

    pub(super) fn write_out(&self, py: Python<'_>, output: Vec<u8>) -> PyResult<()> {
        if let Some(m) = self.state.get().metrics() {
            m.sent(output.len() as u64);
        }
        let writer = self.lock(py)?.writer.as_ref().map(|w| w.clone_ref(py));
        match writer {
            Some(w) => w.write(py, Held::Owned(output), Some(Hold::IfSmall)),
            None => Ok(()),
        }
    }

    /// Run the collected work; starting applications comes last, so that they find the
    /// connection's state as the other work left it.
    pub fn run(slf: &Bound<'_, Self>, mut outs: Vec<Out>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let state = this.state.get();
        outs.sort_by_key(|o| matches!(o, Out::Start(..)));
        for out in outs {
            let r: PyResult<()> = (|| {
                match out {
                    Out::Start(request, id) => {
                        let carrier = Carrier::H2(slf.clone().unbind());
                        state.dispatch.start(py, &carrier, request, u64::from(id))?;
                    }
                    Out::Resolve(fut, value) => {
                        let fut = fut.bind(py);
                        if !crate::tasks::is_done(fut)? {
                            crate::tasks::set_result(fut, value.bind(py))?;
                        }
                    }
                    Out::Disconnect(readers, upgrade) => state.disconnect(py, readers, upgrade)?,
                    Out::TunnelData(t, data) => {
                        for chunk in &data.0 {
                            H2Tunnel::deliver(t.bind(py), chunk)?;
                        }
                    }
                    Out::TunnelEof(t) => H2Tunnel::eof(t.bind(py))?,
                    Out::TunnelLost(t) => H2Tunnel::lost(t.bind(py))?,
                    Out::TunnelWriting(t, on) => H2Tunnel::writing(t.bind(py), on)?,
                    Out::TunnelShutdown(t, restart) => H2Tunnel::shutdown(t.bind(py), restart)?,
                    Out::Cancel(task) => {
                        task.call_method1(py, intern!(py, "cancel"), ("the client reset the stream",))?;
                    }
                    Out::AccessLog(request, status, size, secs) => {
                        if let Some(log) = &state.access_log {
                            log.call1(py, (request, status, size, secs, py.None()))?;
                        }
                    }
                    Out::LogError(msg, exc) => state.log_error(py, msg, exc)?,
                    Out::Close => Self::linger_close(slf)?,
                    Out::Forget => {
                        let forget = {
                            let mut c = this.lock(py)?;
                            !std::mem::replace(&mut c.forgotten, true)
                        };
                        if forget {
                            state.connections.bind(py).discard(slf)?;
                        }
                    }
                    Out::PauseReading | Out::ResumeReading => {
                        let t = this.lock(py)?.transport.as_ref().map(|t| t.clone_ref(py));
                        if let Some(t) = t {
                            let name = if matches!(out, Out::PauseReading) {
                                intern!(py, "pause_reading")
                            } else {
                                intern!(py, "resume_reading")
                            };
                            t.call_method0(py, name)?;
                        }
                    }
                    Out::ArmStall(delay) => Self::arm_stall(slf, delay)?,
                    Out::QueueFlush => {
                        let cb = slf.getattr(intern!(py, "_flush"))?;
                        crate::event_loop::call_at_iteration_end(state.lp.bind(py), &cb)?;
                    }
                }
                Ok(())
            })();
            crate::pyutil::report_step(py, r, slf.as_any())?;
        }
        Ok(())
    }

    /// After a change made outside `pump` (a response part, a body read): write it at the
    /// end of this loop iteration, once for all streams.
    pub fn changed(c: &mut H2Conn, outs: &mut Vec<Out>) {
        if !c.pumping && !c.flush_queued && !c.lost {
            c.flush_queued = true;
            outs.push(Out::QueueFlush);
        }
    }
}

#[pymethods]
impl H2Protocol {
    fn connection_made(&self, _transport: &Bound<'_, PyAny>) {}

    fn data_received(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        match data.cast::<PyBytes>() {
            Ok(b) => Self::feed(slf, b.as_bytes()),
            Err(_) => Self::feed(slf, &data.extract::<Vec<u8>>()?),
        }
    }

    /// The client closed its side: the connection is over once `h2` has read what came.
    fn eof_received(slf: &Bound<'_, Self>) -> PyResult<Option<bool>> {
        let closed = {
            let mut c = slf.get().lock(slf.py())?;
            c.core.push_eof();
            c.closed
        };
        if !closed {
            Self::pump(slf, None)?;
        }
        Ok(None)
    }

    fn connection_lost(slf: &Bound<'_, Self>, _exc: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let mut outs = Vec::new();
        let dropped = {
            let mut c = this.lock(py)?;
            c.lost = true;
            c.closed = true;
            for s in c.streams.values_mut() {
                outs.push(Out::Disconnect(std::mem::take(&mut s.readers), s.upgrade));
                for w in s.drain.drain(..) {
                    outs.push(Out::Resolve(w, py.None()));
                }
            }
            for (_, t) in c.tunnels.drain() {
                outs.push(Out::TunnelLost(t.transport));
            }
            for w in std::mem::take(&mut c.lost_waiters) {
                outs.push(Out::Resolve(w, py.None()));
            }
            // Started all the same: an application's end is what ends its stream (its
            // count among the active requests, the access log), and it hears the loss.
            outs.extend(c.unstarted.drain(..).map(|(request, id)| Out::Start(request, id)));
            if let Some(m) = this.state.get().metrics() {
                m.connection_closed();
            }
            // Kept among the server's connections while an application runs, so that a
            // graceful shutdown waits for it.
            if c.streams.is_empty() {
                outs.push(Out::Forget);
            }
            let timers = [c.timer.take(), c.ping_timer.take(), c.stall_timer.take()];
            (c.transport.take(), c.writer.take(), timers)
        };
        for t in dropped.2.iter().flatten() {
            t.call_method0(py, intern!(py, "cancel"))?;
        }
        drop(dropped);
        Self::run(slf, outs)
    }

    fn pause_writing(slf: &Bound<'_, Self>) -> PyResult<()> {
        let arm = {
            let mut c = slf.get().lock(slf.py())?;
            c.writing_paused = true;
            c.paused_since = monotonic();
            slf.get().stall_check(&mut c)
        };
        Self::run(slf, arm.into_iter().collect())
    }

    fn resume_writing(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let mut outs = Vec::new();
        {
            let mut c = slf.get().lock(py)?;
            c.writing_paused = false;
            for s in c.streams.values_mut() {
                for w in s.drain.drain(..) {
                    outs.push(Out::Resolve(w, py.None()));
                }
            }
            let ids: Vec<u32> = c.tunnels.keys().copied().collect();
            for id in ids {
                Self::tunnel_writable(py, &mut c, id, &mut outs);
            }
        }
        Self::run(slf, outs)?;
        Self::pump(slf, None)
    }

    /// Write what the streams gave since the last time (queued by `changed`).
    fn _flush(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::pump(slf, None)
    }

    /// The keep-alive timeout ran out (see `lifecycle`).
    fn _on_idle(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::on_idle(slf)
    }

    /// `--http2-keep-alive-interval` passed (see `lifecycle`).
    fn _on_ping(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::on_ping(slf)
    }

    /// A PING's answer was due (see `lifecycle`).
    fn _on_ping_timeout(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::on_ping_timeout(slf)
    }

    /// A stalled stream may be due (see `lifecycle`).
    fn _on_stall(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::on_stall(slf)
    }

    /// Graceful shutdown: GOAWAY with the last stream id; the streams in flight finish,
    /// then the connection closes. One that lingers after its last GOAWAY (`linger_close`)
    /// closes at once: a server shutting down does not wait for its clients.
    fn shutdown(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let restart = slf.get().state.get().settings.draining.load(std::sync::atomic::Ordering::Relaxed);
        let outs = {
            let mut c = slf.get().lock(py)?;
            if c.closed {
                drop(c);
                return Self::end_linger(slf);
            }
            c.core.graceful_shutdown();
            c.tunnels.values().map(|t| Out::TunnelShutdown(t.transport.clone_ref(py), restart)).collect()
        };
        Self::run(slf, outs)?;
        Self::pump(slf, None)
    }

    /// Close at once (the graceful timeout ran out).
    fn abort(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let t = {
            let mut c = slf.get().lock(py)?;
            c.core.abrupt_shutdown(h2::Reason::NO_ERROR);
            c.transport.as_ref().map(|t| t.clone_ref(py))
        };
        Self::pump(slf, None)?;
        if let Some(t) = t {
            t.call_method0(py, intern!(py, "abort"))?;
        }
        Ok(())
    }

    /// Cancel the application tasks still running on this connection (the graceful
    /// timeout ran out) and return them.
    fn cancel_tasks(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let tasks: Vec<Py<PyAny>> =
            self.lock(py)?.streams.values().filter_map(|s| s.task.as_ref().map(|t| t.clone_ref(py))).collect();
        for t in &tasks {
            t.call_method1(py, intern!(py, "cancel"), ("the server's graceful shutdown timed out",))?;
        }
        Ok(tasks)
    }

    /// Whether a stream is being served (for the server's shutdown).
    #[getter]
    fn busy(&self, py: Python<'_>) -> PyResult<bool> {
        let c = self.lock(py)?;
        Ok(!c.streams.is_empty() || !c.tunnels.is_empty())
    }

    /// The client's and the server's addresses, as the interfaces have them.
    #[getter]
    fn addresses(&self, py: Python<'_>) -> PyResult<Py<PyTuple>> {
        let c = self.lock(py)?;
        let none = || py.None();
        let client = c.client.as_ref().map_or_else(none, |a| a.clone_ref(py));
        let server = c.server.as_ref().map_or_else(none, |a| a.clone_ref(py));
        Ok(PyTuple::new(py, [client, server])?.unbind())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        visit.call(&self.state)?;
        if let Some(c) = self.conn.try_lock(py) {
            visit.call(&c.transport)?;
            if let Some(w) = &c.writer {
                w.visit(&visit)?;
            }
            visit.call(&c.client)?;
            visit.call(&c.server)?;
            visit.call(&c.timer)?;
            visit.call(&c.ping_timer)?;
            visit.call(&c.stall_timer)?;
            for w in &c.lost_waiters {
                visit.call(w)?;
            }
            for (request, _) in &c.unstarted {
                visit.call(request)?;
            }
            for t in c.tunnels.values() {
                visit.call(&t.transport)?;
            }
            for s in c.streams.values() {
                for w in s.readers.iter().chain(&s.drain) {
                    visit.call(w)?;
                }
                visit.call(&s.task)?;
                visit.call(&s.log)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self, py: Python<'_>) {
        if let Some(mut c) = self.conn.try_lock(py) {
            c.streams.clear();
            c.tunnels.clear();
            c.transport = None;
            c.writer = None;
            c.timer = None;
            c.ping_timer = None;
            c.stall_timer = None;
            c.lost_waiters.clear();
            c.unstarted.clear();
        }
    }
}
