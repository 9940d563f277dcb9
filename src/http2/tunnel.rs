//! A stream as a byte transport (RFC 8441): once an extended CONNECT is answered `200`,
//! the stream's DATA frames carry another protocol's bytes both ways. `H2Tunnel` is the
//! asyncio transport a protocol (a `WsProtocol`) is given for such a stream: `write` sends
//! DATA, `close` ends the stream (END_STREAM after what is queued), `abort` resets it
//! (CANCEL), `pause_reading` stops taking the stream's DATA, so its window closes and
//! the client waits. The connection side is the `H2Protocol`'s (`tunnels`): its events
//! feed the tunnel's protocol and tell it of the end.
//!
//! As asyncio's transports do, `connection_lost` comes in a callback of its own after
//! `close` or `abort`, and once after the stream or the connection is gone.

use super::core::BodyTake;
use super::protocol::{H2Conn, H2Protocol, Out};
use super::writing::{self, Taken};
use crate::http::head::ResponseHead;
use crate::http::respond::{Part, RespondError};
use crate::http::writing::Part as Plain;
use crate::sync::GilCell;
use crate::transport::native::{recognise, Feed};
use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{intern, PyTraverseError, PyVisit};

/// A tunnel just opened: its transport, and the readers its protocol takes over.
pub type Opened<'py> = (Bound<'py, H2Tunnel>, Vec<Py<PyAny>>);

/// The connection's side of a tunnel.
pub struct Tunnel {
    pub transport: Py<H2Tunnel>,
    /// The protocol paused reading: the stream's DATA waits (and its window stays shut).
    pub reading_paused: bool,
    /// The protocol was told to pause writing (the stream's queue or the connection's
    /// transport is full).
    pub writing_paused: bool,
}

struct Held {
    protocol: Option<Py<PyAny>>,
    /// The protocol's native read path, if it has one (see `transport::native`).
    feed: Option<Feed>,
    /// `connection_lost` was called (or is queued).
    lost: bool,
}

#[pyclass(module = "swordfish._native", frozen)]
pub struct H2Tunnel {
    conn: Py<H2Protocol>,
    id: u32,
    held: GilCell<Held>,
}

impl H2Protocol {
    /// Answer stream `id` with `head` (a 2xx) and make the stream a tunnel. Returns its
    /// transport and the readers waiting on the stream (a WebSocket's receive calls made
    /// during the handshake), which the caller's protocol takes over; the caller then
    /// sets the protocol and calls `tunnel_started`.
    pub fn open_tunnel<'py>(
        slf: &Bound<'py, Self>,
        id: u64,
        head: ResponseHead,
    ) -> PyResult<Result<Opened<'py>, RespondError>> {
        let py = slf.py();
        if let Err(e) = Self::respond(slf, id, Part::Plain(Plain::Head { head, trailers: false }))? {
            return Ok(Err(e));
        }
        // An empty part sends the head (held until the first body part otherwise).
        if let Err(e) = Self::respond(slf, id, Part::Body { body: PyBytes::new(py, b""), more: true })? {
            return Ok(Err(e));
        }
        let id = id as u32;
        let tunnel = Bound::new(
            py,
            H2Tunnel {
                conn: slf.clone().unbind(),
                id,
                held: GilCell::new(Held { protocol: None, feed: None, lost: false }),
            },
        )?;
        let mut c = slf.get().lock(py)?;
        if c.lost {
            return Ok(Err(RespondError::Gone));
        }
        let waiters = c.streams.get_mut(&id).map(|s| std::mem::take(&mut s.readers)).unwrap_or_default();
        let entry = Tunnel { transport: tunnel.clone().unbind(), reading_paused: false, writing_paused: false };
        c.tunnels.insert(id, entry);
        Ok(Ok((tunnel, waiters)))
    }

    /// The tunnel of stream `id` has its protocol: what the client sent so far is read.
    pub fn tunnel_started(slf: &Bound<'_, Self>, id: u32) -> PyResult<()> {
        let mut outs = Vec::new();
        {
            let mut c = slf.get().lock(slf.py())?;
            Self::tunnel_take(slf.py(), &mut c, id, &mut outs);
            H2Protocol::changed(&mut c, &mut outs);
        }
        Self::run(slf, outs)
    }

    /// Hand what arrived on tunnel `id` to its protocol, unless it paused reading; taking
    /// it gives the client its window back.
    pub(super) fn tunnel_take(py: Python<'_>, c: &mut H2Conn, id: u32, outs: &mut Vec<Out>) {
        let Some(t) = c.tunnels.get(&id) else { return };
        if t.reading_paused {
            return;
        }
        let transport = t.transport.clone_ref(py);
        loop {
            match c.core.take_body(id) {
                BodyTake::Data(data, more) => {
                    if !data.is_empty() {
                        outs.push(Out::TunnelData(transport.clone_ref(py), data));
                    }
                    if !more {
                        outs.push(Out::TunnelEof(transport));
                        return;
                    }
                }
                BodyTake::Wait => return,
                BodyTake::Gone => {
                    c.tunnels.remove(&id);
                    outs.push(Out::TunnelLost(transport));
                    return;
                }
            }
        }
    }

    /// The tunnel of stream `id` can take writes again (its queue drained, or the
    /// connection's transport resumed).
    pub(super) fn tunnel_writable(py: Python<'_>, c: &mut H2Conn, id: u32, outs: &mut Vec<Out>) {
        if c.writing_paused || c.core.streams.get(&id).is_some_and(|s| s.writer_waiting) {
            return;
        }
        if let Some(t) = c.tunnels.get_mut(&id).filter(|t| t.writing_paused) {
            t.writing_paused = false;
            outs.push(Out::TunnelWriting(t.transport.clone_ref(py), true));
        }
    }

    fn tunnel_write(slf: &Bound<'_, Self>, id: u32, data: &[u8]) -> PyResult<()> {
        let py = slf.py();
        let mut outs = Vec::new();
        {
            let mut c = slf.get().lock(py)?;
            if c.lost || !c.tunnels.contains_key(&id) {
                // As asyncio's transports: what is written after the end is dropped.
                return Ok(());
            }
            let part = writing::Part::Body { data: Bytes::copy_from_slice(data), more: true };
            let wait = match c.core.respond(id, false, part) {
                Ok(Taken::Wait) => true,
                Ok(Taken::Ready) => c.writing_paused,
                // The stream is gone: its reset is an event of the next pass.
                Err(_) => false,
            };
            if let Some(s) = c.streams.get_mut(&id) {
                s.sent += data.len() as u64;
            }
            if let Some(t) = c.tunnels.get_mut(&id).filter(|t| wait && !t.writing_paused) {
                t.writing_paused = true;
                outs.push(Out::TunnelWriting(t.transport.clone_ref(py), false));
            }
            H2Protocol::changed(&mut c, &mut outs);
        }
        Self::run(slf, outs)
    }

    /// End tunnel `id`: END_STREAM after what is queued (`abort`: RST_STREAM CANCEL now).
    /// What the client sends after it is not read.
    fn tunnel_close(slf: &Bound<'_, Self>, id: u32, abort: bool) -> PyResult<()> {
        let py = slf.py();
        let mut outs = Vec::new();
        {
            let mut c = slf.get().lock(py)?;
            if c.tunnels.remove(&id).is_none() {
                return Ok(());
            }
            if abort {
                c.core.reset(id, h2::Reason::CANCEL);
            } else {
                let _ = c.core.respond(id, false, writing::Part::Body { data: Bytes::new(), more: false });
                c.core.stop_reading(id);
            }
            H2Protocol::changed(&mut c, &mut outs);
        }
        Self::run(slf, outs)
    }

    fn tunnel_reading(slf: &Bound<'_, Self>, id: u32, on: bool) -> PyResult<()> {
        let py = slf.py();
        let mut outs = Vec::new();
        {
            let mut c = slf.get().lock(py)?;
            let Some(t) = c.tunnels.get_mut(&id) else { return Ok(()) };
            t.reading_paused = !on;
            if on {
                Self::tunnel_take(py, &mut c, id, &mut outs);
                H2Protocol::changed(&mut c, &mut outs);
            }
        }
        Self::run(slf, outs)
    }
}

impl H2Tunnel {
    fn protocol(&self, py: Python<'_>) -> PyResult<Option<(Py<PyAny>, Option<Feed>)>> {
        let h = self.held.lock(py)?;
        if h.lost {
            return Ok(None);
        }
        Ok(h.protocol.as_ref().map(|p| (p.clone_ref(py), h.feed)))
    }

    /// The client's bytes, to the protocol.
    pub fn deliver(slf: &Bound<'_, Self>, data: &[u8]) -> PyResult<()> {
        let py = slf.py();
        let Some((protocol, feed)) = slf.get().protocol(py)? else { return Ok(()) };
        match feed {
            Some(feed) => feed(protocol.bind(py), data),
            None => protocol.call_method1(py, intern!(py, "data_received"), (PyBytes::new(py, data),)).map(drop),
        }
    }

    /// The client ended its side: the protocol hears it, and unless it asks to stay
    /// half open, the tunnel closes as a socket transport would.
    pub fn eof(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let Some((protocol, _)) = slf.get().protocol(py)? else { return Ok(()) };
        let keep = protocol.call_method0(py, intern!(py, "eof_received"))?.is_truthy(py)?;
        if !keep {
            Self::close(slf)?;
        }
        Ok(())
    }

    /// The stream or the connection is gone: the protocol's `connection_lost`, once.
    pub fn lost(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let protocol = {
            let mut h = slf.get().held.lock(py)?;
            if std::mem::replace(&mut h.lost, true) {
                return Ok(());
            }
            h.protocol.as_ref().map(|p| p.clone_ref(py))
        };
        if let Some(p) = protocol {
            p.call_method1(py, intern!(py, "connection_lost"), (py.None(),))?;
        }
        Ok(())
    }

    /// Pause or resume the protocol's writing.
    pub fn writing(slf: &Bound<'_, Self>, on: bool) -> PyResult<()> {
        let py = slf.py();
        let Some((protocol, _)) = slf.get().protocol(py)? else { return Ok(()) };
        let name = if on { intern!(py, "resume_writing") } else { intern!(py, "pause_writing") };
        protocol.call_method0(py, name).map(drop)
    }

    /// The server shuts down: the protocol's `shutdown(restart)` (a `WsProtocol` closes
    /// with 1001, or 1012 when another worker serves on).
    pub fn shutdown(slf: &Bound<'_, Self>, restart: bool) -> PyResult<()> {
        let py = slf.py();
        let Some((protocol, _)) = slf.get().protocol(py)? else { return Ok(()) };
        protocol.call_method1(py, intern!(py, "shutdown"), (restart,)).map(drop)
    }

    /// `connection_lost` in a callback of its own, as asyncio's transports call it.
    fn lose_soon(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let lp = slf.get().conn.get().state.get().lp.clone_ref(py);
        lp.call_method1(py, intern!(py, "call_soon"), (slf.getattr(intern!(py, "_lost"))?,)).map(drop)
    }
}

#[pymethods]
impl H2Tunnel {
    fn write(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let this = slf.get();
        match data.cast::<PyBytes>() {
            Ok(b) => H2Protocol::tunnel_write(this.conn.bind(slf.py()), this.id, b.as_bytes()),
            Err(_) => H2Protocol::tunnel_write(this.conn.bind(slf.py()), this.id, &data.extract::<Vec<u8>>()?),
        }
    }

    fn writelines(slf: &Bound<'_, Self>, lines: &Bound<'_, PyAny>) -> PyResult<()> {
        for line in lines.try_iter()? {
            Self::write(slf, &line?)?;
        }
        Ok(())
    }

    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        if this.held.lock(slf.py())?.lost {
            return Ok(());
        }
        H2Protocol::tunnel_close(this.conn.bind(slf.py()), this.id, false)?;
        Self::lose_soon(slf)
    }

    fn abort(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        if this.held.lock(slf.py())?.lost {
            return Ok(());
        }
        H2Protocol::tunnel_close(this.conn.bind(slf.py()), this.id, true)?;
        Self::lose_soon(slf)
    }

    fn is_closing(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.held.lock(py)?.lost || !self.conn.get().lock(py)?.tunnels.contains_key(&self.id))
    }

    fn pause_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        H2Protocol::tunnel_reading(slf.get().conn.bind(slf.py()), slf.get().id, false)
    }

    fn resume_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
        H2Protocol::tunnel_reading(slf.get().conn.bind(slf.py()), slf.get().id, true)
    }

    fn is_reading(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.conn.get().lock(py)?.tunnels.get(&self.id).is_some_and(|t| !t.reading_paused))
    }

    fn can_write_eof(&self) -> bool {
        false
    }

    /// Bytes queued on the stream, not yet given to `h2`.
    fn get_write_buffer_size(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.conn.get().lock(py)?.core.queued(self.id))
    }

    /// The connection's transport's information (the peer, the TLS object, ...).
    #[pyo3(signature = (name, default=None))]
    fn get_extra_info(&self, py: Python<'_>, name: &str, default: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        let default = default.unwrap_or_else(|| py.None());
        let transport = self.conn.get().lock(py)?.transport.as_ref().map(|t| t.clone_ref(py));
        match transport {
            Some(t) => t.call_method1(py, intern!(py, "get_extra_info"), (name, default)),
            None => Ok(default),
        }
    }

    fn set_protocol(&self, py: Python<'_>, protocol: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut h = self.held.lock(py)?;
        h.feed = recognise(protocol);
        h.protocol = Some(protocol.clone().unbind());
        Ok(())
    }

    fn get_protocol(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.held.lock(py)?.protocol.as_ref().map_or_else(|| py.None(), |p| p.clone_ref(py)))
    }

    fn _lost(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::lost(slf)
    }

    /// A `WsProtocol` tells its owner it is over (the tunnel is already closed).
    fn _upgrade_ended(&self) {}

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.conn)?;
        // SAFETY: the cyclic GC runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        if let Some(h) = self.held.try_lock(py) {
            visit.call(&h.protocol)?;
        }
        Ok(())
    }

    fn __clear__(&self, py: Python<'_>) {
        if let Some(mut h) = self.held.try_lock(py) {
            h.protocol = None;
        }
    }
}
