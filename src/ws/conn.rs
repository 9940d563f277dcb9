//! `WsProtocol`: a WebSocket connection on the loop thread, the asyncio protocol of the
//! transport once the HTTP/1.1 connection switched protocols (it keeps the transport's
//! native read path). It reads messages (`reader`), answers pings, keeps the close handshake
//! and its timeout, pings the client, and holds the messages the application has not read
//! yet (reading stops past `max_queue`). What the application gets is made by the interface
//! that runs it (`WsInterface`), so that this module knows no ASGI.

use super::deflate::{Deflater, Inflater, Negotiated};
use super::frame::{write_close_frame, write_frame, write_header, OpCode, ProtocolError, MAX_HEADER_LEN};
use super::payload::BytesPayload;
use super::reader::{Message, MessageReader};
use crate::event_loop::create_future;
use crate::pyutil::report_step;
use crate::sync::{GilCell, GilGuard};
use crate::transport::stream::{Held, Hold, HOLD_SMALL};
use crate::transport::writer::Writer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{intern, PyTraverseError, PyVisit};
use std::collections::VecDeque;
use std::sync::Arc;

/// Close code the server reports when the connection ended without a close frame.
pub const CLOSE_ABNORMAL: u16 = 1006;
pub const CLOSE_GOING_AWAY: u16 = 1001;
pub const CLOSE_SERVICE_RESTART: u16 = 1012;
pub const CLOSE_INTERNAL_ERROR: u16 = 1011;
/// Close code reported for a close frame without one (RFC 6455 §7.4.1).
pub const CLOSE_NO_STATUS: u16 = 1005;

/// How the application's side of a connection is spoken to.
pub trait WsInterface: Send + Sync + 'static {
    fn text(&self, py: Python<'_>, text: &str) -> PyResult<Py<PyAny>>;
    fn bytes(&self, py: Python<'_>, data: Py<PyBytes>) -> PyResult<Py<PyAny>>;
    fn disconnect(&self, py: Python<'_>, code: u16, reason: &str) -> PyResult<Py<PyAny>>;
}

/// The server's WebSocket settings.
#[derive(Debug, Clone, Copy)]
pub struct WsSettings {
    pub max_size: usize,
    pub max_queue: usize,
    pub ping_interval: Option<f64>,
    pub ping_timeout: Option<f64>,
    /// Seconds the close handshake may take before the connection is cut.
    pub close_timeout: f64,
}

/// Seconds the client gets to answer the server's close frame (as the `websockets`
/// library's default).
const CLOSE_TIMEOUT: f64 = 10.0;

impl WsSettings {
    /// The server's options (`--ws-max-size` and the rest).
    pub fn new(max_size: usize, max_queue: usize, ping_interval: Option<f64>, ping_timeout: Option<f64>) -> Self {
        WsSettings { max_size, max_queue: max_queue.max(1), ping_interval, ping_timeout, close_timeout: CLOSE_TIMEOUT }
    }
}

/// The close handshake (RFC 6455 §7).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Closing {
    Open,
    /// The server sent its close frame and waits for the client's.
    Sent,
    /// Both close frames went, or the connection failed: the transport is closing.
    Done,
}

/// A timer of the connection.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Timer {
    /// Time to ping the client.
    Ping,
    /// The pong did not come in time.
    Pong,
    /// The client's close frame did not come in time.
    Close,
}

struct WsConn {
    transport: Option<Py<PyAny>>,
    writer: Option<Writer>,
    reader: MessageReader<BytesPayload>,
    deflater: Option<Deflater>,
    closing: Closing,
    lost: bool,
    /// Messages read and not yet taken by the application.
    queue: VecDeque<Py<PyAny>>,
    /// The application's pending receive calls.
    waiters: Vec<Py<PyAny>>,
    /// What every receive gets once the connection is over.
    ended: Option<(u16, String)>,
    /// The client's input failed the connection: it is failed once the application had
    /// its turn (see `feed`), and no more input is read meanwhile.
    failing: Option<ProtocolError>,
    reading_paused: bool,
    writing_paused: bool,
    drain_waiters: Vec<Py<PyAny>>,
    timers: Vec<(Timer, Py<PyAny>)>,
    /// A compressed message went out since the last keepalive ping: the compressor stays.
    compressed_lately: bool,
}

/// What to do once the lock is released.
enum Out {
    Write(Vec<u8>),
    /// A frame's header and its large payload, written without copying the payload.
    WriteHeaded(Vec<u8>, Py<PyBytes>),
    Close,
    Abort,
    PauseReading,
    ResumeReading,
    Resolve(Py<PyAny>, Py<PyAny>),
    Arm(Timer, f64),
    Cancel(Py<PyAny>),
    /// The connection is over: tell the owner (the HTTP connection it came from).
    Ended,
    /// Fail the connection in a callback of its own (`failing`).
    FailSoon,
}

#[pyclass(module = "swordfish._native", frozen)]
pub struct WsProtocol {
    settings: WsSettings,
    iface: Arc<dyn WsInterface>,
    lp: Py<PyAny>,
    /// Told `_upgrade_ended()` once the connection is over.
    owner: Py<PyAny>,
    conn: GilCell<WsConn>,
}

/// What a receive call gets: a message now, or a future to wait on.
pub enum Received {
    Now(Py<PyAny>),
    Wait(Py<PyAny>),
}

/// What the application sends.
pub enum Payload<'py> {
    Text(&'py str),
    Binary(Bound<'py, PyBytes>),
}

/// Above this size a binary message's payload is written by reference, not copied behind
/// its header: the transport would not hold such a message for the end of the iteration,
/// so it leaves at once either way.
const BY_REFERENCE: usize = HOLD_SMALL;

/// Why the application cannot send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    Closed,
}

impl WsProtocol {
    /// The connection after the `101` went out on `transport`.
    pub fn new(
        settings: WsSettings,
        iface: Arc<dyn WsInterface>,
        lp: Py<PyAny>,
        owner: Py<PyAny>,
        transport: &Bound<'_, PyAny>,
        deflate: Option<Negotiated>,
    ) -> PyResult<Self> {
        let writer = Writer::of(transport)?;
        let inflater = deflate.map(|n| Box::new(Inflater::new(&n)) as Box<dyn super::Inflate + Send>);
        Ok(WsProtocol {
            settings,
            iface,
            lp,
            owner,
            conn: GilCell::new(WsConn {
                transport: Some(transport.clone().unbind()),
                writer: Some(writer),
                reader: MessageReader::new(settings.max_size, inflater),
                deflater: deflate.map(|n| Deflater::new(&n)),
                closing: Closing::Open,
                lost: false,
                queue: VecDeque::new(),
                waiters: Vec::new(),
                ended: None,
                failing: None,
                reading_paused: false,
                writing_paused: false,
                drain_waiters: Vec::new(),
                timers: Vec::new(),
                compressed_lately: false,
            }),
        })
    }

    fn lock(&self, py: Python<'_>) -> PyResult<GilGuard<'_, WsConn>> {
        self.conn.lock(py)
    }

    /// Start the keepalive pings (once the transport is this protocol's); `waiters`: the
    /// application's receive calls made before the handshake completed.
    pub fn start(slf: &Bound<'_, Self>, waiters: Vec<Py<PyAny>>) -> PyResult<()> {
        slf.get().lock(slf.py())?.waiters.extend(waiters);
        let mut out = Vec::new();
        if let Some(interval) = slf.get().settings.ping_interval {
            out.push(Out::Arm(Timer::Ping, interval));
        }
        Self::run(slf, out)
    }

    /// Bytes from the client.
    pub fn feed(slf: &Bound<'_, Self>, data: &[u8]) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let mut out = Vec::new();
        {
            let mut c = this.lock(py)?;
            let mut pos = 0;
            while pos < data.len() && !c.lost && c.closing != Closing::Done && c.failing.is_none() {
                let rest = data.get(pos..).unwrap_or_default();
                match c.reader.feed(rest) {
                    Ok((n, msg)) => {
                        pos += n.max(1).min(rest.len());
                        match msg {
                            Some(m) => this.on_message(py, &mut c, m, &mut out)?,
                            None => break,
                        }
                    }
                    // The messages before the bad frame were handed to the application: it
                    // answers them in its next step, before the connection fails (Autobahn's
                    // strict behaviour: the echo of a message arrives before the close).
                    Err(e) => {
                        c.failing = Some(e);
                        out.push(Out::FailSoon);
                        break;
                    }
                }
            }
        }
        Self::run(slf, out)
    }

    fn on_message(
        &self,
        py: Python<'_>,
        c: &mut WsConn,
        msg: Message<BytesPayload>,
        out: &mut Vec<Out>,
    ) -> PyResult<()> {
        match msg {
            Message::Text(text) => {
                let m = self.iface.text(py, &text)?;
                self.deliver(py, c, m, out);
            }
            Message::Binary(data) => {
                let m = self.iface.bytes(py, data.into_bytes())?;
                self.deliver(py, c, m, out);
            }
            Message::Ping(payload) => {
                if c.closing == Closing::Open {
                    let mut frame = Vec::with_capacity(payload.len() + 2);
                    write_frame(&mut frame, OpCode::Pong, false, &payload);
                    out.push(Out::Write(frame));
                }
            }
            Message::Pong(_) => {
                // Any pong answers the ping (RFC 6455 §5.5.3 allows unsolicited ones too).
                if let Some(i) = c.timers.iter().position(|(t, _)| *t == Timer::Pong) {
                    let (_, h) = c.timers.remove(i);
                    out.push(Out::Cancel(h));
                    if let Some(interval) = self.settings.ping_interval {
                        out.push(Out::Arm(Timer::Ping, interval));
                    }
                }
            }
            Message::Close { code, reason } => {
                if c.closing == Closing::Open {
                    // Echo the client's code (RFC 6455 §5.5.1); an empty close gets an empty one.
                    let mut frame = Vec::new();
                    write_close_frame(&mut frame, code, "");
                    out.push(Out::Write(frame));
                }
                c.closing = Closing::Done;
                self.end(py, c, code.unwrap_or(CLOSE_NO_STATUS), &reason, out)?;
                // The server closes the TCP connection first (RFC 6455 §7.1.1).
                out.push(Out::Close);
            }
        }
        Ok(())
    }

    /// A message for the application: to a waiting receive, else into the queue.
    fn deliver(&self, py: Python<'_>, c: &mut WsConn, msg: Py<PyAny>, out: &mut Vec<Out>) {
        while !c.waiters.is_empty() {
            let w = c.waiters.remove(0);
            if !crate::tasks::is_done(w.bind(py)).unwrap_or(true) {
                out.push(Out::Resolve(w, msg));
                return;
            }
        }
        c.queue.push_back(msg);
        if c.queue.len() >= self.settings.max_queue && !c.reading_paused {
            c.reading_paused = true;
            out.push(Out::PauseReading);
        }
    }

    /// Fail the connection (RFC 6455 §7.1.7): a close frame with `code`, then closing.
    fn fail(&self, py: Python<'_>, c: &mut WsConn, code: u16, reason: &str, out: &mut Vec<Out>) -> PyResult<()> {
        if c.closing == Closing::Open {
            let mut frame = Vec::new();
            write_close_frame(&mut frame, Some(code), reason);
            out.push(Out::Write(frame));
        }
        c.closing = Closing::Done;
        self.end(py, c, code, reason, out)?;
        out.push(Out::Close);
        Ok(())
    }

    /// The application hears the end: every pending and later receive gets `disconnect`.
    fn end(&self, py: Python<'_>, c: &mut WsConn, code: u16, reason: &str, out: &mut Vec<Out>) -> PyResult<()> {
        if c.ended.is_some() {
            return Ok(());
        }
        c.ended = Some((code, reason.to_owned()));
        for w in std::mem::take(&mut c.waiters) {
            out.push(Out::Resolve(w, self.iface.disconnect(py, code, reason)?));
        }
        for (_, h) in c.timers.drain(..) {
            out.push(Out::Cancel(h));
        }
        Ok(())
    }

    /// The application's next message.
    pub fn receive(slf: &Bound<'_, Self>) -> PyResult<Received> {
        let py = slf.py();
        let this = slf.get();
        let mut out = Vec::new();
        let received = {
            let mut c = this.lock(py)?;
            if let Some(msg) = c.queue.pop_front() {
                if c.reading_paused && c.queue.len() < this.settings.max_queue && !c.lost {
                    c.reading_paused = false;
                    out.push(Out::ResumeReading);
                }
                Received::Now(msg)
            } else if let Some((code, reason)) = &c.ended {
                Received::Now(this.iface.disconnect(py, *code, reason)?)
            } else {
                let fut = create_future(this.lp.bind(py))?.unbind();
                c.waiters.push(fut.clone_ref(py));
                Received::Wait(fut)
            }
        };
        Self::run(slf, out)?;
        Ok(received)
    }

    /// Send a message; `Ok(Some(fut))`: writing is paused, wait for `fut` before the next.
    pub fn send(slf: &Bound<'_, Self>, payload: Payload<'_>) -> PyResult<Result<Option<Py<PyAny>>, SendError>> {
        let py = slf.py();
        let this = slf.get();
        let out = {
            let mut guard = this.lock(py)?;
            let c = &mut *guard;
            if c.lost || c.closing != Closing::Open {
                return Ok(Err(SendError::Closed));
            }
            let (data, opcode) = match &payload {
                Payload::Text(t) => (t.as_bytes(), OpCode::Text),
                Payload::Binary(b) => (b.as_bytes(), OpCode::Binary),
            };
            let mut frame = Vec::with_capacity(data.len().min(BY_REFERENCE) + MAX_HEADER_LEN);
            match c.deflater.as_mut().filter(|d| d.worth_compressing(data.len())) {
                Some(deflater) => {
                    c.compressed_lately = true;
                    let mut compressed = Vec::with_capacity(data.len() / 2 + 16);
                    deflater.compress(data, &mut compressed);
                    write_frame(&mut frame, opcode, true, &compressed);
                    Out::Write(frame)
                }
                None => match payload {
                    Payload::Binary(ref b) if data.len() > BY_REFERENCE => {
                        write_header(&mut frame, true, false, opcode, data.len());
                        Out::WriteHeaded(frame, b.clone().unbind())
                    }
                    _ => {
                        write_frame(&mut frame, opcode, false, data);
                        Out::Write(frame)
                    }
                },
            }
        };
        Self::run(slf, vec![out])?;
        let mut c = this.lock(py)?;
        if c.writing_paused && !c.lost {
            let fut = create_future(this.lp.bind(py))?.unbind();
            c.drain_waiters.push(fut.clone_ref(py));
            return Ok(Ok(Some(fut)));
        }
        Ok(Ok(None))
    }

    /// The server closes: a close frame, then the client's within the close timeout.
    pub fn close(slf: &Bound<'_, Self>, code: u16, reason: &str) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let mut out = Vec::new();
        {
            let mut c = this.lock(py)?;
            if c.lost || c.closing != Closing::Open {
                return Ok(());
            }
            let mut frame = Vec::new();
            write_close_frame(&mut frame, Some(code), reason);
            out.push(Out::Write(frame));
            c.closing = Closing::Sent;
            for (_, h) in c.timers.drain(..) {
                out.push(Out::Cancel(h));
            }
            out.push(Out::Arm(Timer::Close, this.settings.close_timeout));
        }
        Self::run(slf, out)
    }

    /// Whether the connection is over for the application's sends.
    pub fn is_closed(&self, py: Python<'_>) -> PyResult<bool> {
        let c = self.lock(py)?;
        Ok(c.lost || c.closing != Closing::Open)
    }

    fn on_timer(slf: &Bound<'_, Self>, timer: Timer) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let mut out = Vec::new();
        {
            let mut c = this.lock(py)?;
            c.timers.retain(|(t, _)| *t != timer);
            if c.lost {
                return Ok(());
            }
            match timer {
                Timer::Ping if c.closing == Closing::Open => {
                    // A connection that sent nothing compressed for a whole interval gives its
                    // compressor's memory back (about 300 KiB); the next message makes a new one.
                    if !std::mem::take(&mut c.compressed_lately) {
                        if let Some(d) = c.deflater.as_mut() {
                            d.release();
                        }
                    }
                    let mut frame = Vec::new();
                    write_frame(&mut frame, OpCode::Ping, false, b"swordfish");
                    out.push(Out::Write(frame));
                    if let Some(timeout) = this.settings.ping_timeout {
                        out.push(Out::Arm(Timer::Pong, timeout));
                    } else if let Some(interval) = this.settings.ping_interval {
                        out.push(Out::Arm(Timer::Ping, interval));
                    }
                }
                Timer::Pong if c.closing == Closing::Open => {
                    this.fail(py, &mut c, CLOSE_INTERNAL_ERROR, "keepalive ping timeout", &mut out)?;
                }
                Timer::Close => {
                    c.closing = Closing::Done;
                    this.end(py, &mut c, CLOSE_ABNORMAL, "", &mut out)?;
                    out.push(Out::Abort);
                }
                _ => {}
            }
        }
        Self::run(slf, out)
    }

    /// Run what was collected, each step's error reported rather than stopping the next.
    fn run(slf: &Bound<'_, Self>, out: Vec<Out>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        for o in out {
            let r: PyResult<()> = (|| {
                match o {
                    Out::Write(data) => this.write(py, Held::Owned(data), Some(Hold::IfSmall))?,
                    Out::WriteHeaded(header, payload) => {
                        // One vectored write: the header waits for its payload, which goes by
                        // reference.
                        this.write(py, Held::Owned(header), Some(Hold::Iteration))?;
                        this.write(py, Held::Shared(payload.into_bound(py)), None)?;
                    }
                    Out::Close | Out::Abort | Out::PauseReading | Out::ResumeReading => {
                        let t = this.lock(py)?.transport.as_ref().map(|t| t.clone_ref(py));
                        if let Some(t) = t {
                            let name = match o {
                                Out::Close => intern!(py, "close"),
                                Out::Abort => intern!(py, "abort"),
                                Out::PauseReading => intern!(py, "pause_reading"),
                                _ => intern!(py, "resume_reading"),
                            };
                            t.call_method0(py, name)?;
                        }
                    }
                    Out::Resolve(fut, value) => {
                        let fut = fut.bind(py);
                        if !crate::tasks::is_done(fut)? {
                            crate::tasks::set_result(fut, value.bind(py))?;
                        }
                    }
                    Out::Arm(timer, delay) => {
                        let name = match timer {
                            Timer::Ping => intern!(py, "_on_ping"),
                            Timer::Pong => intern!(py, "_on_pong_timeout"),
                            Timer::Close => intern!(py, "_on_close_timeout"),
                        };
                        let cb = slf.getattr(name)?;
                        let h = this.lp.call_method1(py, intern!(py, "call_later"), (delay, cb))?;
                        let mut c = this.lock(py)?;
                        if c.lost {
                            drop(c);
                            h.call_method0(py, intern!(py, "cancel"))?;
                        } else {
                            c.timers.push((timer, h));
                        }
                    }
                    Out::Cancel(h) => {
                        h.call_method0(py, intern!(py, "cancel"))?;
                    }
                    Out::Ended => {
                        this.owner.call_method0(py, intern!(py, "_upgrade_ended"))?;
                    }
                    Out::FailSoon => {
                        this.lp.call_method1(py, intern!(py, "call_soon"), (slf.getattr(intern!(py, "_fail"))?,))?;
                    }
                }
                Ok(())
            })();
            report_step(py, r, slf.as_any())?;
        }
        Ok(())
    }

    /// Frames to swordfish's transports go to them without a Python call, held for the end
    /// of the loop iteration while small (the frames of many connections then leave
    /// together, as the HTTP connection's small responses do); other transports get `write`.
    fn write(&self, py: Python<'_>, data: Held<'_>, hold: Option<Hold>) -> PyResult<()> {
        let writer = {
            let c = self.lock(py)?;
            if c.lost {
                return Ok(());
            }
            c.writer.as_ref().map(|w| w.clone_ref(py))
        };
        match writer {
            Some(w) => w.write(py, data, hold),
            None => Ok(()),
        }
    }
}

#[pymethods]
impl WsProtocol {
    fn connection_made(&self, _transport: &Bound<'_, PyAny>) {}

    fn data_received(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        match data.cast::<PyBytes>() {
            Ok(b) => Self::feed(slf, b.as_bytes()),
            Err(_) => Self::feed(slf, &data.extract::<Vec<u8>>()?),
        }
    }

    /// The client closed its side without a close frame: the connection is over.
    fn eof_received(&self) -> Option<bool> {
        None
    }

    fn connection_lost(slf: &Bound<'_, Self>, _exc: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let mut out = Vec::new();
        let dropped;
        {
            let mut c = this.lock(py)?;
            this.end(py, &mut c, CLOSE_ABNORMAL, "", &mut out)?;
            c.lost = true;
            c.closing = Closing::Done;
            for w in c.drain_waiters.drain(..) {
                out.push(Out::Resolve(w, py.None()));
            }
            dropped = (c.transport.take(), c.writer.take());
            out.push(Out::Ended);
        }
        drop(dropped);
        Self::run(slf, out)
    }

    fn pause_writing(&self, py: Python<'_>) -> PyResult<()> {
        self.lock(py)?.writing_paused = true;
        Ok(())
    }

    fn resume_writing(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let mut out = Vec::new();
        {
            let mut c = slf.get().lock(py)?;
            c.writing_paused = false;
            for w in c.drain_waiters.drain(..) {
                out.push(Out::Resolve(w, py.None()));
            }
        }
        Self::run(slf, out)
    }

    fn _on_ping(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::on_timer(slf, Timer::Ping)
    }

    fn _on_pong_timeout(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::on_timer(slf, Timer::Pong)
    }

    fn _on_close_timeout(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::on_timer(slf, Timer::Close)
    }

    /// Fail the connection for the input error kept in `failing`.
    fn _fail(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let mut out = Vec::new();
        {
            let mut c = this.lock(py)?;
            if let Some(e) = c.failing.take() {
                if !c.lost {
                    this.fail(py, &mut c, e.code, e.reason, &mut out)?;
                }
            }
        }
        Self::run(slf, out)
    }

    /// Graceful shutdown: close with 1001 (going away), or with 1012 (service restart)
    /// when the worker retires and another serves on, so that the client reconnects at once.
    #[pyo3(signature = (restart=false))]
    pub(super) fn shutdown(slf: &Bound<'_, Self>, restart: bool) -> PyResult<()> {
        if restart {
            return Self::close(slf, CLOSE_SERVICE_RESTART, "server restarting");
        }
        Self::close(slf, CLOSE_GOING_AWAY, "server shutting down")
    }

    fn abort(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::run(slf, vec![Out::Abort])
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.lp)?;
        visit.call(&self.owner)?;
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        if let Some(c) = self.conn.try_lock(py) {
            visit.call(&c.transport)?;
            if let Some(w) = &c.writer {
                w.visit(&visit)?;
            }
            for m in c.queue.iter().chain(&c.waiters).chain(&c.drain_waiters) {
                visit.call(m)?;
            }
            for (_, h) in &c.timers {
                visit.call(h)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self, py: Python<'_>) {
        if let Some(mut c) = self.conn.try_lock(py) {
            c.transport = None;
            c.writer = None;
            c.queue.clear();
            c.waiters.clear();
            c.drain_waiters.clear();
            c.timers.clear();
        }
    }
}

/// The socket transport's native read path for `WsProtocol` (see `transport::native`).
pub fn native_reader(protocol: &Bound<'_, PyAny>) -> Option<crate::transport::native::Feed> {
    protocol.is_instance_of::<WsProtocol>().then_some(feed)
}

fn feed(protocol: &Bound<'_, PyAny>, data: &[u8]) -> PyResult<()> {
    WsProtocol::feed(protocol.cast::<WsProtocol>()?, data)
}
