//! `HttpProtocol`: an asyncio `Protocol` (so it runs on any loop) that drives the
//! connection's core (`reading`, `writing`) on the loop: it feeds it the client's bytes,
//! hands each request head to the interface that serves it (`dispatch`), and keeps the
//! connection's transport, timers and flow control. One request is served at a time:
//! pipelined requests wait in the read buffer, which keeps responses in order without
//! queueing them.
//!
//! All state sits behind one mutex that is never held across a call into Python code:
//! work that calls out (writes, closing, waking the app, timers) is collected as `Act`s and
//! run after unlocking, because a write may call `pause_writing` straight back.

use super::config::HttpServerState;
use super::conn::{Phase, TimerKind};
use super::dispatch::RequestView;
use super::link::{Act, Conn, Link, LoopAct, Request};
use super::parse::Reject;
use super::reading::{body_ready, take_body, Next};
use super::static_files::serve::Static;
use crate::event_loop::create_future;
use crate::http2::protocol::H2Protocol;
use crate::http2::Preface;
use crate::sync::{GilCell, GilGuard};
use crate::transport::writer::Writer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};
use std::sync::atomic::Ordering;

#[pyclass(module = "swordfish._native", frozen)]
pub struct HttpProtocol {
    pub state: Py<HttpServerState>,
    pub conn: GilCell<Conn>,
    /// A connection the WSGI thread engine accepted and moved here, with what it read
    /// (`WsgiEngine`'s `handoff`): in the connections' total already, and its bytes are
    /// read first.
    moved: bool,
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

    /// Parse and feed what the read buffer holds, as far as the current state allows:
    /// each request head becomes the interface's request and its application starts.
    pub fn advance(&self, py: Python<'_>, c: &mut Conn, acts: &mut Vec<Act>) -> PyResult<()> {
        let state = self.state.get();
        let st = &state.settings;
        loop {
            if let (Some(h2), 0, false) = (&state.http2, c.gen, c.proxy_preface) {
                match crate::http2::preface(&c.rbuf) {
                    Preface::Partial => return Ok(()),
                    Preface::Whole => {
                        c.phase = Phase::Upgraded;
                        c.stop_timer(acts);
                        acts.push(Act::World(LoopAct::Http2(None)));
                        return Ok(());
                    }
                    // `--http 2`: a client that does not speak HTTP/2 is not answered.
                    Preface::No if h2.only => {
                        c.close_after();
                        acts.push(Act::Close);
                        return Ok(());
                    }
                    Preface::No => {}
                }
            }
            match c.next(st, acts) {
                Next::Wait | Next::BodyRefused => return Ok(()),
                Next::Relayed { client, server } => {
                    let address = |a: std::net::SocketAddr| -> PyResult<Py<PyAny>> {
                        Ok((a.ip().to_string(), a.port()).into_pyobject(py)?.into_any().unbind())
                    };
                    c.objects.client = Some(address(client)?);
                    c.objects.server = state.dispatch.server_address(py, Some(address(server)?))?;
                }
                Next::Head(head) => {
                    if let (Some(h2), false) = (&state.http2, c.https) {
                        if let Some(frames) = crate::http2::upgrade::taken(&c.rbuf, &head, h2) {
                            c.rbuf.drain(..head.len);
                            c.phase = Phase::Upgraded;
                            c.stop_timer(acts);
                            acts.push(Act::Write(crate::http2::upgrade::SWITCHING.to_vec()));
                            acts.push(Act::World(LoopAct::Http2(Some(frames))));
                            return Ok(());
                        }
                    }
                    let head_method = c.is_head_method(&head);
                    if let Some(files) = &state.static_files {
                        match self.serve_static(py, c, files, &head, head_method, acts)? {
                            Static::Not => {}
                            Static::Answered(true) | Static::ByDriver => continue,
                            Static::Answered(false) | Static::Held => return Ok(()),
                        }
                    }
                    // The previous request here may still be running after its response is
                    // complete: the next one (pipelined or not) takes its place rather than
                    // adding one. Older ones still running count.
                    let previous = usize::from(c.objects.apps.iter().any(|(g, _)| *g == c.gen));
                    let running = st.active_requests.load(Ordering::Relaxed).saturating_sub(previous);
                    let served = match state.dispatch.request(py, &RequestView::of(c, &head)) {
                        Ok(r) => r,
                        Err(r) => {
                            c.reject(st, r, None, head_method, acts);
                            return Ok(());
                        }
                    };
                    let request = served.request;
                    if running >= st.limit_concurrency {
                        c.reject(st, Reject::Unavailable, Some(request), head_method, acts);
                        return Ok(());
                    }
                    let log = state.access_log.as_ref().map(|_| request.clone_ref(py));
                    let gen = c.begin_request(st, &head, head_method, served.upgrade, log);
                    c.objects.apps.push((gen, None));
                    acts.push(Act::World(LoopAct::Start(request, gen)));
                }
                // A request is in flight: its body was fed; pipelined input waits.
                Next::Body => {
                    self.hand_body(py, c, acts)?;
                    if !c.body_read(st, acts) {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Body bytes (or the body's end) arrived: the oldest reader still waiting gets them.
    /// One the app stopped waiting on (cancelled) is dropped, and with none left the data
    /// waits for the next read.
    fn hand_body(&self, py: Python<'_>, c: &mut Conn, acts: &mut Vec<Act>) -> PyResult<()> {
        let Some(req) = c.req.as_mut() else { return Ok(()) };
        if req.objects.0.is_empty() || !body_ready(req) {
            return Ok(());
        }
        while !req.objects.0.is_empty() {
            let w = req.objects.0.remove(0);
            if !crate::tasks::is_done(w.bind(py))? {
                let msg = self.take_body(py, req)?;
                acts.push(Act::World(LoopAct::Resolve(w, msg)));
                break;
            }
        }
        Ok(())
    }

    /// The next body message: all the body read so far, and whether more follows.
    pub fn take_body(&self, py: Python<'_>, req: &mut Request) -> PyResult<Py<PyAny>> {
        let dispatch = &self.state.get().dispatch;
        take_body(req, |data, more| dispatch.body_message(py, PyBytes::new(py, data), more))
    }

    /// Resolve `waiter` (with None) once the connection is lost; false if it is already.
    /// Waiters already done (given up on) are dropped, so that a client that stays
    /// connected through many requests does not pile them up.
    pub fn watch_lost(&self, py: Python<'_>, waiter: &Py<PyAny>) -> PyResult<bool> {
        let mut c = self.lock(py)?;
        if c.lost() {
            return Ok(false);
        }
        c.objects.lost_waiters.retain(|w| !crate::tasks::is_done(w.bind(py)).unwrap_or(false));
        c.objects.lost_waiters.push(waiter.clone_ref(py));
        Ok(true)
    }
}

/// Whether TLS's ALPN chose HTTP/2.
fn alpn_h2(transport: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = transport.py();
    if let Some(core) = transport.getattr_opt(intern!(py, "_core"))? {
        if let Ok(tls) = core.cast::<crate::transport::tls::TlsCore>() {
            return Ok(tls.get().alpn(py)?.as_deref() == Some("h2"));
        }
    }
    let ssl = transport.call_method1(intern!(py, "get_extra_info"), ("ssl_object",))?;
    if ssl.is_none() {
        return Ok(false);
    }
    let chosen = ssl.call_method0(intern!(py, "selected_alpn_protocol"))?;
    Ok(!chosen.is_none() && chosen.extract::<&str>()? == "h2")
}

/// Hand the connection to an HTTP/2 protocol, with the bytes read so far.
pub fn hand_to_http2(slf: &Bound<'_, HttpProtocol>, upgrade: Option<Vec<u8>>) -> PyResult<()> {
    let py = slf.py();
    let this = slf.get();
    let state = this.state.get();
    let Some(settings) = &state.http2 else { return Ok(()) };
    let (transport, data, client, server, https) = {
        let mut c = this.lock(py)?;
        let o = &mut c.objects;
        let Some(transport) = o.transport.take() else { return Ok(()) };
        o.writer = None;
        o.on_timer = None;
        let (client, server) = (o.client.take(), o.server.take());
        (transport, std::mem::take(&mut c.rbuf), client, server, c.https)
    };
    let h2 = Bound::new(py, H2Protocol::new(this.state.clone_ref(py), settings, client, server, https))?;
    state.connections.bind(py).discard(slf)?;
    H2Protocol::take_over(&h2, transport.bind(py), &data, upgrade)
}

/// Seconds a connection that has not sent its first request yet gets on graceful shutdown.
const FIRST_REQUEST_GRACE: f64 = 1.0;

#[pymethods]
impl HttpProtocol {
    /// `HttpProtocol(state, early=None)`: `early`, the bytes of a connection the WSGI
    /// thread engine moved here.
    #[new]
    #[pyo3(signature = (state, early=None))]
    fn new(state: Py<HttpServerState>, early: Option<Vec<u8>>) -> Self {
        let mut conn = Conn::new(Link::default());
        let moved = early.is_some();
        if let Some(early) = early {
            conn.rbuf = early;
        }
        HttpProtocol { state, conn: GilCell::new(conn), moved }
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
        let writer = Writer::of(transport)?;
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
            if this.moved {
                m.connection_moved_in();
            } else {
                m.connection_opened();
            }
        }
        let st = &state.settings;
        let mut acts = Vec::new();
        {
            let mut c = this.lock(py)?;
            c.native_writer = writer.stream().is_some();
            c.https = https;
            c.proxy_preface = proxy_preface;
            c.number = st.connections_made.fetch_add(1, Ordering::Relaxed);
            let o = &mut c.objects;
            o.transport = Some(transport.clone().unbind());
            o.writer = Some(writer);
            o.client = client;
            o.server = server;
            o.on_timer = Some(on_timer);
            c.set_timer(TimerKind::Header, st.timeout_header, &mut acts);
            if https && state.http2.is_some() && alpn_h2(transport)? {
                c.phase = Phase::Upgraded;
                c.stop_timer(&mut acts);
                acts.push(Act::World(LoopAct::Http2(None)));
            } else if st.shutting_down.load(Ordering::Relaxed) {
                // Accepted before the listener closed: its first request is served.
                c.shutdown = true;
                c.set_timer(TimerKind::Header, st.timeout_header.min(FIRST_REQUEST_GRACE), &mut acts);
            }
        }
        Self::run_acts(slf, acts)?;
        if this.moved {
            // What the engine read is served before anything the socket has now.
            Self::feed(slf, &[])?;
        }
        Ok(())
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
        let writer;
        {
            let mut c = this.lock(py)?;
            c.phase = Phase::Lost;
            c.stop_timer(&mut acts);
            if let Some(req) = c.req.as_mut() {
                acts.push(Act::Unwait(std::mem::take(&mut req.objects), req.upgrade));
            }
            let o = &mut c.objects;
            let lost_waiters = std::mem::take(&mut o.lost_waiters);
            for w in o.drain_waiters.drain(..).chain(lost_waiters) {
                acts.push(Act::World(LoopAct::Resolve(w, py.None())));
            }
            let transport = o.transport.take();
            if let (Some(m), Some(_)) = (this.st(py).metrics(), &transport) {
                m.connection_closed();
            }
            dropped.push(transport);
            writer = o.writer.take();
            dropped.push(o.on_timer.take());
            // Kept among the server's connections while an app still runs, so that a
            // graceful shutdown waits for it and cancels it at the timeout.
            if o.apps.is_empty() {
                acts.push(Act::World(LoopAct::Forget));
            }
            c.rbuf = Vec::new();
        }
        drop((dropped, writer));
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
            for w in c.objects.drain_waiters.drain(..) {
                acts.push(Act::World(LoopAct::Resolve(w, py.None())));
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
        c.objects.drain_waiters.push(fut.clone_ref(py));
        Ok(Some(fut))
    }

    fn _on_timer(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let mut acts = Vec::new();
        {
            let mut c = slf.get().lock(py)?;
            c.objects.timer = None;
            c.timer_fired(&mut acts);
        }
        Self::run_acts(slf, acts)
    }

    /// Graceful shutdown of this connection: close now if idle, else after the response.
    fn shutdown(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let mut acts = Vec::new();
        {
            let mut c = slf.get().lock(py)?;
            if let Some(upgraded) = c.objects.upgraded.as_ref().map(|u| u.clone_ref(py)) {
                c.shutdown = true;
                drop(c);
                let restart = slf.get().state.get().settings.draining.load(Ordering::Relaxed);
                upgraded.call_method1(py, intern!(py, "shutdown"), (restart,))?;
                return Ok(());
            }
            let st = &slf.get().state.get().settings;
            c.shut_down(st.draining.load(Ordering::Relaxed), st.timeout_header.min(FIRST_REQUEST_GRACE), &mut acts);
        }
        Self::run_acts(slf, acts)
    }

    /// Close at once (the graceful timeout ran out).
    fn abort(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let upgraded = {
            let mut c = slf.get().lock(py)?;
            c.close_after();
            c.objects.upgraded.as_ref().map(|u| u.clone_ref(py))
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
            self.lock(py)?.objects.apps.iter().filter_map(|(_, t)| t.as_ref().map(|t| t.clone_ref(py))).collect();
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
        Ok(c.req.is_some() || c.objects.upgraded.is_some())
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
            let o = &c.objects;
            visit.call(&o.transport)?;
            if let Some(w) = &o.writer {
                w.visit(&visit)?;
            }
            visit.call(&o.on_timer)?;
            visit.call(&o.timer)?;
            visit.call(&o.file_sender)?;
            for w in o.drain_waiters.iter().chain(&o.lost_waiters) {
                visit.call(w)?;
            }
            for (_, t) in &o.apps {
                visit.call(t)?;
            }
            visit.call(&o.upgraded)?;
            if let Some(r) = &c.req {
                for w in &r.objects.0 {
                    visit.call(w)?;
                }
                visit.call(&r.log)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self, py: Python<'_>) {
        if let Some(mut c) = self.conn.try_lock(py) {
            c.objects = Link::default();
            c.req = None;
        }
    }
}
