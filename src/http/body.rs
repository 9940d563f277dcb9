//! Reading the request body, as an interface's reader asks for it: what has arrived (with
//! `Expect: 100-continue` answered at the first ask), or a waiter the connection resolves
//! when more comes. The waiter is the interface's: an asyncio future for ASGI, a thread's
//! hand-off for WSGI (anything with `done()` and `set_result()`).

use super::conn::{BodyBuf, Expect, Reading};
use super::link::Act;
use super::protocol::HttpProtocol;
use super::reading::body_ready;
use pyo3::prelude::*;

/// What a reader of the body gets.
pub enum BodyRead {
    /// A message (body bytes, or the interface's disconnect message) at once.
    Now(Py<PyAny>),
    /// The waiter, which the connection resolves with the next message.
    Wait(Py<PyAny>),
}

impl HttpProtocol {
    /// The whole body of request `gen`, taken, if all of it has arrived and none of it was
    /// handed over yet: the common case of a small body that came with its head, given to
    /// the interface without a message object.
    pub fn take_whole_body(&self, py: Python<'_>, gen: u64) -> PyResult<Option<BodyBuf>> {
        let mut c = self.lock(py)?;
        let Some(req) = c.current(gen) else { return Ok(None) };
        if !matches!(req.reading, Reading::Ended) {
            return Ok(None);
        }
        req.reading = Reading::Done;
        Ok(Some(std::mem::take(&mut req.body_buf)))
    }

    /// The next body message of request `gen`, or `waiter()` registered to get it.
    pub fn read_body(
        proto: &Bound<'_, HttpProtocol>,
        gen: u64,
        waiter: impl FnOnce() -> PyResult<Py<PyAny>>,
    ) -> PyResult<BodyRead> {
        let py = proto.py();
        let this = proto.get();
        let dispatch = &this.state.get().dispatch;
        let mut acts = Vec::new();
        let immediate = {
            let mut c = this.lock(py)?;
            let lost = c.lost();
            let mut resume = false;
            let result = match c.current(gen) {
                None => Some(dispatch.disconnect_message(py, false)?),
                Some(req) => {
                    if req.expect == Expect::Waiting && !req.writing.head_written() && !lost {
                        req.expect = Expect::Answered;
                        acts.push(Act::Write(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec()));
                    }
                    if body_ready(req) {
                        resume = true;
                        Some(this.take_body(py, req)?)
                    } else if lost || req.complete() {
                        Some(dispatch.disconnect_message(py, false)?)
                    } else {
                        resume = true;
                        None
                    }
                }
            };
            if resume && c.reading_paused && !c.lost() {
                c.reading_paused = false;
                acts.push(Act::ResumeReading);
            }
            result
        };
        HttpProtocol::run_acts(proto, acts)?;
        if let Some(msg) = immediate {
            return Ok(BodyRead::Now(msg));
        }
        let w = waiter()?;
        let mut c = this.lock(py)?;
        match c.current(gen) {
            Some(req) => {
                // Waiters the reader gave up on (a receive() under a timeout that ran out) go
                // first, or polling for a disconnect that way would pile them up.
                let mut pending = Vec::with_capacity(req.objects.0.len() + 1);
                for old in req.objects.0.drain(..) {
                    if !crate::tasks::is_done(old.bind(py)).unwrap_or(false) {
                        pending.push(old);
                    }
                }
                pending.push(w.clone_ref(py));
                req.objects.0 = pending;
                Ok(BodyRead::Wait(w))
            }
            None => {
                drop(c);
                let msg = dispatch.disconnect_message(py, false)?;
                crate::tasks::set_result(w.bind(py), msg.bind(py))?;
                Ok(BodyRead::Wait(w))
            }
        }
    }
}
