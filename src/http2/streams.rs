//! How the HTTP/2 connection's events become requests of the server's interface: a new
//! stream's head becomes the interface's request (or a refusal, or a static file's
//! answer), body bytes go to the readers waiting for them, a reset stream's application
//! is cancelled; and each stream's Python objects, with its access log line.

use super::core::{BodyTake, Event, H2Core};
use super::protocol::{H2Conn, H2Protocol, Out};
use super::request::Request;
use crate::clock::monotonic;
use crate::http::dispatch::RequestView;
use crate::http::parse::Reject;
use crate::http::settings::Settings;
use crate::http::static_files::{Body as StaticBody, Conditions, StaticFiles};
use pyo3::intern;
use pyo3::prelude::*;
use std::sync::atomic::Ordering;

/// The Python side of a stream: its application's waiters and task, and what the access
/// log and the metrics want.
#[derive(Default)]
pub struct StreamObjects {
    /// Pending body reads (for ASGI, `receive()` calls), oldest first.
    pub readers: Vec<Py<PyAny>>,
    /// Writers waiting for the stream's queue (or the transport) to drain.
    pub drain: Vec<Py<PyAny>>,
    pub task: Option<Py<PyAny>>,
    pub head_method: bool,
    pub log: Option<Py<PyAny>>,
    pub start: Option<f64>,
    pub status: u16,
    pub sent: u64,
    /// The stream was reset before its application's task was known: the task is
    /// cancelled as soon as it is.
    pub reset: bool,
    /// A WebSocket handshake (an extended CONNECT): its DATA is for the tunnel the
    /// application may open, and its readers hear `websocket.disconnect`.
    pub upgrade: bool,
}

impl H2Protocol {
    /// What the core's events ask of the driver.
    pub(super) fn handle(
        &self,
        py: Python<'_>,
        c: &mut H2Conn,
        events: Vec<Event>,
        outs: &mut Vec<Out>,
    ) -> PyResult<()> {
        let state = self.state.get();
        let st = &state.settings;
        for event in events {
            match event {
                Event::Request(id) => self.begin(py, c, id, outs)?,
                Event::Body(id) => {
                    if c.tunnels.contains_key(&id) {
                        Self::tunnel_take(py, c, id, outs);
                        continue;
                    }
                    let Some(s) = c.streams.get_mut(&id).filter(|s| !s.upgrade) else { continue };
                    while !s.readers.is_empty() {
                        let w = s.readers.remove(0);
                        if crate::tasks::is_done(w.bind(py))? {
                            continue;
                        }
                        match c.core.take_body(id) {
                            BodyTake::Data(data, more) => {
                                let data = super::respond::to_pybytes(py, &data)?;
                                outs.push(Out::Resolve(w, state.dispatch.body_message(py, data, more)?));
                            }
                            BodyTake::Wait => s.readers.insert(0, w),
                            BodyTake::Gone => outs.push(Out::Disconnect(vec![w], false)),
                        }
                        break;
                    }
                }
                Event::Writable(id) => {
                    Self::tunnel_writable(py, c, id, outs);
                    if let Some(s) = c.streams.get_mut(&id) {
                        for w in s.drain.drain(..) {
                            outs.push(Out::Resolve(w, py.None()));
                        }
                    }
                }
                Event::Reset(id) => {
                    if let Some(t) = c.tunnels.remove(&id) {
                        outs.push(Out::TunnelLost(t.transport));
                    }
                    let Some(s) = c.streams.get_mut(&id) else { continue };
                    outs.push(Out::Disconnect(std::mem::take(&mut s.readers), s.upgrade));
                    for w in s.drain.drain(..) {
                        outs.push(Out::Resolve(w, py.None()));
                    }
                    // The client (or the protocol) gave up on the stream: its application
                    // is told at once, not at its next write (CVE-2025-8671 makes a server
                    // that keeps working for reset streams a target). A WebSocket's hears
                    // it as the connection's end (1006), as over HTTP/1.1.
                    match s.task.take() {
                        _ if s.upgrade => {}
                        Some(t) => outs.push(Out::Cancel(t)),
                        None => s.reset = true,
                    }
                    // Once: `record` takes the start (a response already logged is not).
                    if let Some(out) = record(st, s, 499) {
                        outs.push(out);
                    }
                }
                Event::Ended(id) => {
                    if let Some(s) = c.streams.get_mut(&id).filter(|s| !s.readers.is_empty()) {
                        outs.push(Out::Disconnect(std::mem::take(&mut s.readers), s.upgrade));
                    }
                }
                // The transport closes once the last frames are written (`pump`).
                Event::Closed => {}
            }
        }
        Ok(())
    }

    /// A new stream: the interface's request, then its application, or a refusal.
    fn begin(&self, py: Python<'_>, c: &mut H2Conn, id: u32, outs: &mut Vec<Out>) -> PyResult<()> {
        let state = self.state.get();
        let st = &state.settings;
        let Some(parts) = c.core.request_taken(id) else { return Ok(()) };
        let request = Request::new(&parts, c.core.body_ended(id));
        let head_method = parts.method == http::Method::HEAD;
        let view = RequestView {
            buf: &request.buf,
            head: &request.head,
            client: c.client.as_ref(),
            server: c.server.as_ref(),
            https: c.https,
            h2: true,
            connect_protocol: request.protocol.as_deref(),
        };
        let refused = request.refusal(&st.limits);
        if let Some(files) = state.static_files.as_ref().filter(|_| request.protocol.is_none() && refused.is_none()) {
            if self.serve_static(py, &mut c.core, files, id, &view, head_method, outs)? {
                return Ok(());
            }
        }
        let served = match refused {
            Some(refused) => Err(refused),
            None => state.dispatch.request(py, &view),
        };
        let refusal = match &served {
            Err(r @ Reject::Upgrade { field, .. }) => Some((r.status(), *field)),
            Err(r) => Some((r.status(), &b""[..])),
            // An extended CONNECT for a protocol not served over HTTP/2 (only `websocket` is).
            Ok(s) if request.protocol.is_some() && !s.upgrade => Some((501, &b""[..])),
            Ok(_) if st.active_requests.load(Ordering::Relaxed) >= st.limit_concurrency => {
                Some((Reject::Unavailable.status(), &b""[..]))
            }
            Ok(_) => None,
        };
        let log = match (&served, &state.access_log) {
            (Ok(s), Some(_)) => Some(s.request.clone_ref(py)),
            _ => None,
        };
        let mut objects =
            StreamObjects { head_method, log, start: st.timed().then(monotonic), ..StreamObjects::default() };
        if let Some((status, extra)) = refusal {
            let (head, body) = super::writing::simple(st, status, head_method, extra);
            objects.status = status;
            objects.sent = body.len() as u64;
            let part = super::writing::Part::Head { head, trailers: false };
            let _ = c.core.respond(id, head_method, part);
            let _ = c.core.respond(id, head_method, super::writing::Part::Body { data: body, more: false });
            if let Some(out) = record(st, &mut objects, status) {
                outs.push(out);
            }
            return Ok(());
        }
        let Ok(served) = served else { return Ok(()) };
        objects.upgrade = served.upgrade;
        st.active_requests.fetch_add(1, Ordering::Relaxed);
        st.total_requests.fetch_add(1, Ordering::Relaxed);
        c.streams.insert(id, objects);
        c.unstarted.push_back((served.request, id));
        Ok(())
    }

    /// Answer stream `id` from the static files if its path is under their route (`true`).
    #[allow(clippy::too_many_arguments)] // the stream's request, as `begin` has it
    fn serve_static(
        &self,
        py: Python<'_>,
        core: &mut H2Core,
        files: &StaticFiles,
        id: u32,
        view: &RequestView<'_>,
        head_method: bool,
        outs: &mut Vec<Out>,
    ) -> PyResult<bool> {
        let state = self.state.get();
        let st = &state.settings;
        let method = view.field(&view.head.method);
        let Some(rest) = files.route_of(view.field(&view.head.target), method) else { return Ok(false) };
        let fields = view.head.headers.iter().map(|(n, v)| (view.field(n), view.field(v)));
        let answer = files.answer(&st.head_rules(), method, rest, &Conditions::from_fields(fields));
        let log = state
            .access_log
            .as_ref()
            .map(|_| state.dispatch.request(py, view).map_or_else(|_| py.None(), |s| s.request));
        st.total_requests.fetch_add(1, Ordering::Relaxed);
        let status = answer.head.status;
        let mut objects =
            StreamObjects { head_method, log, start: st.timed().then(monotonic), status, ..StreamObjects::default() };
        let head = super::writing::Part::Head { head: answer.head, trailers: false };
        let _ = core.respond(id, head_method, head);
        match answer.body {
            StaticBody::Empty => {
                let _ =
                    core.respond(id, head_method, super::writing::Part::Body { data: Default::default(), more: false });
            }
            StaticBody::Bytes(b) => {
                objects.sent = if head_method { 0 } else { b.len() as u64 };
                let _ = core.respond(id, head_method, super::writing::Part::Body { data: b.into(), more: false });
            }
            StaticBody::File { file, offset, len } => {
                objects.sent = if head_method { 0 } else { len };
                let _ = core.respond_file(id, head_method, file, offset, len);
            }
        }
        if let Some(out) = record(st, &mut objects, status) {
            outs.push(out);
        }
        Ok(true)
    }

    pub fn record_task(&self, py: Python<'_>, id: u64, task: Py<PyAny>) -> PyResult<()> {
        let reset = {
            let mut c = self.lock(py)?;
            match c.streams.get_mut(&(id as u32)) {
                Some(s) if s.reset => true,
                Some(s) => {
                    s.task = Some(task.clone_ref(py));
                    false
                }
                None => false,
            }
        };
        if reset {
            task.call_method1(py, intern!(py, "cancel"), ("the client reset the stream",))?;
        }
        Ok(())
    }
}

/// The access log line and the metrics of a stream's response, once.
pub fn record(st: &Settings, s: &mut StreamObjects, status: u16) -> Option<Out> {
    let start = s.start.take()?;
    let seconds = monotonic() - start;
    if let Some(m) = st.metrics() {
        m.response(status, seconds);
    }
    s.log.take().map(|log| Out::AccessLog(log, status, s.sent, seconds))
}
