//! Switching protocols (RFC 9110 §7.8): the `101` head goes out, the connection stops
//! reading HTTP and hands its transport, and what the client sent after the head, to the
//! protocol the interface takes over with. The HTTP connection stays among the server's
//! connections for graceful shutdown, passing `shutdown()` and `abort()` on to that
//! protocol until it reports its end.

use super::conn::{Phase, Writing};
use super::link::{Act, LoopAct};
use super::protocol::HttpProtocol;
use super::reading::record;
use super::respond::RespondError;
use pyo3::prelude::*;

/// The transport handed over.
pub struct Handover {
    pub transport: Py<PyAny>,
    /// Bytes the client sent after the request head.
    pub leftover: Vec<u8>,
    /// Reading was paused by the HTTP connection: the new protocol resumes it.
    pub reading_paused: bool,
    /// The application's receive calls pending on the request.
    pub waiters: Vec<Py<PyAny>>,
}

impl HttpProtocol {
    /// Answer request `gen` with the switching head `head` and give up the transport.
    pub fn upgrade(slf: &Bound<'_, Self>, gen: u64, head: Vec<u8>) -> PyResult<Result<Handover, RespondError>> {
        let py = slf.py();
        let this = slf.get();
        let mut acts = Vec::new();
        let handover = {
            let mut c = this.lock(py)?;
            if c.gone() {
                return Ok(Err(RespondError::Gone));
            }
            let Some(req) = c.current(gen) else { return Ok(Err(RespondError::Finished)) };
            if !matches!(req.writing, Writing::Init) {
                return Ok(Err(RespondError::AlreadyStarted));
            }
            req.status = 101;
            req.writing = Writing::Done;
            let waiters = std::mem::take(&mut req.objects).0;
            record(&this.state.get().settings, req, 101, 0, &mut acts);
            if let Some(m) = this.st(py).metrics() {
                m.upgraded();
            }
            acts.push(Act::Write(head));
            c.req = None;
            c.phase = Phase::Upgraded;
            c.stop_timer(&mut acts);
            let Some(transport) = c.objects.transport.as_ref().map(|t| t.clone_ref(py)) else {
                return Ok(Err(RespondError::Gone));
            };
            let reading_paused = std::mem::take(&mut c.reading_paused);
            Handover { transport, leftover: std::mem::take(&mut c.rbuf), reading_paused, waiters }
        };
        Self::run_acts(slf, acts)?;
        Ok(Ok(handover))
    }

    /// The protocol the connection switched to.
    pub fn upgraded_to(&self, py: Python<'_>, protocol: Py<PyAny>) -> PyResult<()> {
        self.lock(py)?.objects.upgraded = Some(protocol);
        Ok(())
    }

    /// The switched-to protocol's connection is over.
    pub fn upgrade_ended(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let mut acts = Vec::new();
        let dropped = {
            let this = slf.get();
            let mut c = this.lock(py)?;
            if let Some(m) = this.st(py).metrics() {
                if c.phase == Phase::Upgraded {
                    m.upgrade_ended();
                }
                if c.objects.transport.is_some() {
                    m.connection_closed();
                }
            }
            c.phase = Phase::Lost;
            let o = &mut c.objects;
            if o.apps.is_empty() {
                acts.push(Act::World(LoopAct::Forget));
            }
            (o.transport.take(), o.writer.take(), o.on_timer.take(), o.upgraded.take())
        };
        drop(dropped);
        Self::run_acts(slf, acts)
    }
}
