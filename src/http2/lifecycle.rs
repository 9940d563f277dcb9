//! The life of an HTTP/2 connection around its streams: the keep-alive timeout of an idle
//! connection, the keep-alive PINGs and their deadline, the stall timeout of a response
//! that waits on the client, and the lingering close after the last GOAWAY.

use super::protocol::{H2Conn, H2Protocol, Out};
use crate::clock::monotonic;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyString;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl H2Protocol {
    /// The loop's `call_later(delay, self.<callback>)`: the handle of a timer.
    fn later(slf: &Bound<'_, Self>, delay: f64, callback: &Bound<'_, PyString>) -> PyResult<Py<PyAny>> {
        let cb = slf.getattr(callback)?;
        slf.get().state.get().lp.call_method1(slf.py(), intern!(slf.py(), "call_later"), (delay, cb))
    }

    pub(super) fn arm_ping(slf: &Bound<'_, Self>, delay: f64, callback: &str) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        if this.lock(py)?.closed {
            return Ok(());
        }
        let h = Self::later(slf, delay, &PyString::new(py, callback))?;
        let old = this.lock(py)?.ping_timer.replace(h);
        if let Some(old) = old {
            old.call_method0(py, intern!(py, "cancel"))?;
        }
        Ok(())
    }

    /// The connection is over (its last frames, a GOAWAY among them, are written): the
    /// server's side is shut, and the socket closes when the client closes its own, or
    /// after the keep-alive timeout (at once while the server shuts down). Closed at once, a socket with unread input from the
    /// client would send a reset, which can destroy that GOAWAY before the client reads it
    /// (RFC 9113 §6.8 asks the sender of a GOAWAY to let in-flight frames arrive).
    pub(super) fn linger_close(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let t = {
            let mut c = slf.get().lock(py)?;
            c.closed = true;
            c.transport.as_ref().map(|t| t.clone_ref(py))
        };
        let Some(t) = t else { return Ok(()) };
        // A server shutting down does not wait for its clients.
        let shutting_down = slf.get().state.get().settings.shutting_down.load(Ordering::Relaxed);
        if shutting_down || !t.call_method0(py, intern!(py, "can_write_eof"))?.is_truthy(py)? {
            return t.call_method0(py, intern!(py, "close")).map(drop);
        }
        if let Err(e) = t.call_method0(py, intern!(py, "write_eof")) {
            // The client is gone already (ENOTCONN): nothing to linger for.
            if !e.is_instance_of::<pyo3::exceptions::PyOSError>(py) {
                return Err(e);
            }
            return t.call_method0(py, intern!(py, "close")).map(drop);
        }
        let delay = slf.get().state.get().settings.timeout_keep_alive;
        let old = slf.get().lock(py)?.timer.take();
        if let Some(h) = old {
            h.call_method0(py, intern!(py, "cancel"))?;
        }
        let h = Self::later(slf, delay, intern!(py, "_on_idle"))?;
        slf.get().lock(py)?.timer = Some(h);
        Ok(())
    }

    /// The linger after the last GOAWAY (`linger_close`) is over, because its time ran out
    /// or the server shuts down: the socket closes.
    pub(super) fn end_linger(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let t = slf.get().lock(py)?.transport.as_ref().map(|t| t.clone_ref(py));
        match t {
            Some(t) => t.call_method0(py, intern!(py, "close")).map(drop),
            None => Ok(()),
        }
    }

    /// With no stream open, the connection closes after the keep-alive timeout.
    pub(super) fn arm_idle(slf: &Bound<'_, Self>, delay: f64) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let old = {
            let mut c = this.lock(py)?;
            if c.lost || c.closed {
                return Ok(());
            }
            c.timer.take()
        };
        if let Some(h) = old {
            h.call_method0(py, intern!(py, "cancel"))?;
        }
        let h = Self::later(slf, delay, intern!(py, "_on_idle"))?;
        this.lock(py)?.timer = Some(h);
        Ok(())
    }
    /// The keep-alive timeout ran out: closed if no stream opened meanwhile.
    pub(super) fn on_idle(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let timeout = slf.get().state.get().settings.timeout_keep_alive;
        let left = {
            let mut c = slf.get().lock(py)?;
            c.timer = None;
            if c.lost {
                return Ok(());
            }
            if c.closed {
                // The client did not close its side within the linger.
                drop(c);
                return Self::end_linger(slf);
            }
            if c.core.has_streams() || !c.streams.is_empty() {
                timeout
            } else {
                c.idle_since + timeout - monotonic()
            }
        };
        if left > 0.0 {
            return Self::arm_idle(slf, left);
        }
        // One GOAWAY with the last stream taken: with none in flight there is nothing for
        // a PING to settle (a request crossing it has a higher id, which the client may
        // send again on a new connection).
        slf.get().lock(py)?.core.abrupt_shutdown(h2::Reason::NO_ERROR);
        Self::pump(slf, None)?;
        if !slf.get().lock(py)?.closed {
            Self::linger_close(slf)?;
        }
        Ok(())
    }

    /// Whether no stream is open (for shedding when descriptors run out: `http::shed`).
    pub fn idle(&self, py: Python<'_>) -> PyResult<bool> {
        let c = self.lock(py)?;
        Ok(!c.closed && !c.lost && c.streams.is_empty() && c.tunnels.is_empty() && !c.core.has_streams())
    }

    /// Close an idle connection to free its descriptor: a GOAWAY, then the socket closes
    /// once it is written (no lingering for the client: the descriptor is what is wanted).
    pub fn shed(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        slf.get().lock(py)?.core.abrupt_shutdown(h2::Reason::NO_ERROR);
        Self::pump(slf, None)?;
        let t = slf.get().lock(py)?.transport.as_ref().map(|t| t.clone_ref(py));
        if let Some(t) = t {
            t.call_method0(py, intern!(py, "close"))?;
        }
        Ok(())
    }

    /// `--http2-keep-alive-interval` passed: a PING, whose answer is waited for.
    pub(super) fn on_ping(slf: &Bound<'_, Self>) -> PyResult<()> {
        let sent = slf.get().lock(slf.py())?.core.send_ping();
        if !sent {
            return Ok(());
        }
        Self::pump(slf, None)?;
        let h = slf.get().state.get().http2.as_ref().map(|h| h.keep_alive_timeout);
        Self::arm_ping(slf, h.unwrap_or(20.0), "_on_ping_timeout")
    }

    /// A PING's answer was due: a client that did not give it is gone.
    pub(super) fn on_ping_timeout(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let (outstanding, t) = {
            let c = slf.get().lock(py)?;
            (c.core.ping_outstanding(), c.transport.as_ref().map(|t| t.clone_ref(py)))
        };
        if outstanding {
            if let Some(t) = t {
                t.call_method0(py, intern!(py, "abort"))?;
            }
            return Ok(());
        }
        let h2 = slf.get().state.get().http2.as_ref().map(|h| (h.keep_alive_interval, h.keep_alive_timeout));
        if let Some((Some(interval), timeout)) = h2 {
            Self::arm_ping(slf, (interval - timeout).max(0.0), "_on_ping")?;
        }
        Ok(())
    }

    /// A check of the stall timeout to arm, if a stream waits on the client's window or the
    /// transport on the client's reading (after a drive, on `pause_writing`), and none is.
    pub(super) fn stall_check(&self, c: &mut H2Conn) -> Option<Out> {
        let timeout = self.state.get().http2.as_ref().and_then(|h| h.stall_timeout)?;
        if c.stall_armed || c.closed || !(c.core.stalled() || c.writing_paused) {
            return None;
        }
        c.stall_armed = true;
        Some(Out::ArmStall(timeout))
    }

    pub(super) fn arm_stall(slf: &Bound<'_, Self>, delay: f64) -> PyResult<()> {
        let py = slf.py();
        let h = Self::later(slf, delay, intern!(py, "_on_stall"))?;
        let mut c = slf.get().lock(py)?;
        if c.lost {
            drop(c);
            return h.call_method0(py, intern!(py, "cancel")).map(drop);
        }
        c.stall_timer = Some(h);
        Ok(())
    }

    /// The stall timeout may have run out: the streams that waited on the client's window
    /// that long with no byte moving are reset, and their apps hear that the client went; a
    /// transport whose writing stayed paused that long (the client reads nothing) is
    /// aborted, as no frame can reach that client any more.
    pub(super) fn on_stall(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let Some(timeout) = this.state.get().http2.as_ref().and_then(|h| h.stall_timeout) else { return Ok(()) };
        let mut abort = None;
        let outs = {
            let mut c = this.lock(py)?;
            c.stall_timer = None;
            c.stall_armed = false;
            if c.lost || c.closed {
                return Ok(());
            }
            let mut events = Vec::new();
            // A bad value was refused by the settings; none here may panic either.
            let timeout = Duration::try_from_secs_f64(timeout).unwrap_or(Duration::MAX);
            let mut next = c.core.expire_stalled(timeout, &mut events);
            if c.writing_paused {
                let left = c.paused_since + timeout.as_secs_f64() - monotonic();
                if left <= 0.0 {
                    abort = c.transport.as_ref().map(|t| t.clone_ref(py));
                } else {
                    let left = Duration::try_from_secs_f64(left).unwrap_or(Duration::MAX);
                    next = Some(next.map_or(left, |n| n.min(left)));
                }
            }
            let mut outs = Vec::new();
            this.handle(py, &mut c, events, &mut outs)?;
            if let Some(next) = next {
                c.stall_armed = true;
                outs.push(Out::ArmStall(next.as_secs_f64()));
            }
            outs
        };
        Self::run(slf, outs)?;
        if let Some(t) = abort {
            return t.call_method0(py, intern!(py, "abort")).map(drop);
        }
        Self::pump(slf, None)
    }
}
