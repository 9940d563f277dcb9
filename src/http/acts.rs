//! Running the work the protocol collected under its lock (`Act`): writes, closing, flow
//! control, waking readers, timers, the access log, and starting the application (through
//! the interface).

use super::link::{Act, LoopAct};
use super::protocol::HttpProtocol;
use crate::pyutil::report_step;
use crate::transport::stream::{Held, Hold};
use pyo3::intern;
use pyo3::prelude::*;

impl HttpProtocol {
    /// Run the collected work. Errors of one step are reported, not propagated, so that a
    /// failed write still lets the close that follows happen. Starting the app comes last:
    /// an eager task runs app code at once, and that code must find every earlier step
    /// (a pause of reading, say) already done.
    pub fn run_acts(slf: &Bound<'_, Self>, mut acts: Vec<Act>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        loop {
            Self::run_once(slf, acts)?;
            if this.state.get().static_files.is_none() {
                return Ok(());
            }
            // Static answers stopped after a burst: those are written now, and unless the
            // transport paused the protocol (`resume_writing` goes on then), the requests
            // after them are answered.
            let mut c = this.lock(py)?;
            c.static_burst = 0;
            if !c.static_held || c.writing_paused || c.closing() {
                return Ok(());
            }
            c.static_held = false;
            acts = Vec::new();
            this.advance(py, &mut c, &mut acts)?;
        }
    }

    fn run_once(slf: &Bound<'_, Self>, mut acts: Vec<Act>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let state = this.state.get();
        if let Some(i) = acts.iter().position(|a| matches!(a, Act::World(LoopAct::Start(..)))) {
            let start = acts.remove(i);
            acts.push(start);
        }
        for act in acts {
            let r: PyResult<()> = (|| {
                match act {
                    Act::Write(data) => this.write_out(py, Held::Owned(data), None)?,
                    Act::WriteLater(data, hold) => this.write_out(py, Held::Owned(data), Some(hold))?,
                    Act::WriteObj(obj, hold) => this.write_out(py, Held::Shared(obj.into_bound(py)), hold)?,
                    Act::Close | Act::Abort => {
                        let t = this.lock(py)?.objects.transport.as_ref().map(|t| t.clone_ref(py));
                        if let Some(t) = t {
                            let name =
                                if matches!(act, Act::Close) { intern!(py, "close") } else { intern!(py, "abort") };
                            t.call_method0(py, name)?;
                        }
                    }
                    Act::PauseReading | Act::ResumeReading => {
                        let t = this.lock(py)?.objects.transport.as_ref().map(|t| t.clone_ref(py));
                        if let Some(t) = t {
                            let name = if matches!(act, Act::PauseReading) {
                                intern!(py, "pause_reading")
                            } else {
                                intern!(py, "resume_reading")
                            };
                            t.call_method0(py, name)?;
                        }
                    }
                    Act::World(LoopAct::Start(request, gen)) => {
                        state.dispatch.start(py, &crate::carrier::Carrier::H1(slf.clone().unbind()), request, gen)?
                    }
                    Act::World(LoopAct::Resolve(fut, value)) => {
                        let fut = fut.bind(py);
                        if !crate::tasks::is_done(fut)? {
                            crate::tasks::set_result(fut, value.bind(py))?;
                        }
                    }
                    Act::Unwait(readers, upgrade) => state.disconnect(py, readers.0, upgrade)?,
                    Act::ArmTimer(delay) => {
                        let cb = this.lock(py)?.objects.on_timer.as_ref().map(|c| c.clone_ref(py));
                        if let Some(cb) = cb {
                            let h = state.lp.call_method1(py, intern!(py, "call_later"), (delay, cb))?;
                            let mut c = this.lock(py)?;
                            if c.lost() {
                                drop(c);
                                h.call_method0(py, intern!(py, "cancel"))?;
                            } else {
                                c.objects.timer = Some(h);
                            }
                        }
                    }
                    Act::CancelTimer => {
                        let h = this.lock(py)?.objects.timer.take();
                        if let Some(h) = h {
                            h.call_method0(py, intern!(py, "cancel"))?;
                        }
                    }
                    Act::World(LoopAct::Http2(upgrade)) => super::protocol::hand_to_http2(slf, upgrade)?,
                    Act::World(LoopAct::Forget) => {
                        state.connections.bind(py).discard(slf)?;
                    }
                    Act::World(LoopAct::LogError(msg, exc)) => state.log_error(py, msg, exc)?,
                    Act::AccessLog(request, status, size, secs, refused) => {
                        if let Some(log) = &state.access_log {
                            let client = if refused {
                                this.lock(py)?.objects.client.as_ref().map(|c| c.clone_ref(py))
                            } else {
                                None
                            };
                            log.call1(py, (request, status, size, secs, client))?;
                        }
                    }
                    Act::WriteFile { file, offset, len } => {
                        if let Some(m) = state.metrics() {
                            m.sent(len);
                        }
                        let core = this.lock(py)?.objects.stream().map(|c| c.clone_ref(py));
                        if let Some(core) = core {
                            core.get().write_file(py, file, offset, len)?;
                        }
                    }
                    Act::SendFile { file, offset, len, gen } => {
                        let sender = this.lock(py)?.objects.file_sender.as_ref().map(|s| s.clone_ref(py));
                        let sent = match sender {
                            Some(sender) => Self::send_file_body(slf, &sender, file, offset, len, gen),
                            None => Err(pyo3::exceptions::PyRuntimeError::new_err("no file sender")),
                        };
                        if let Err(e) = sent {
                            // The head is out: the response cannot be completed.
                            Self::file_sent(slf, gen, false)?;
                            return Err(e);
                        }
                    }
                }
                Ok(())
            })();
            report_step(py, r, slf.as_any())?;
        }
        Ok(())
    }

    /// Write response bytes: to swordfish's socket transport without a Python call (`hold`:
    /// held until the end of the loop iteration, so what follows in the same iteration goes
    /// out in the same write), or through the transport's `write` on another loop.
    pub(super) fn write_out(&self, py: Python<'_>, data: Held<'_>, hold: Option<Hold>) -> PyResult<()> {
        if let Some(m) = self.st(py).metrics() {
            m.sent(data.as_bytes().len() as u64);
        }
        let writer = self.lock(py)?.objects.writer.as_ref().map(|w| w.clone_ref(py));
        match writer {
            Some(w) => w.write(py, data, hold),
            None => Ok(()),
        }
    }
}
