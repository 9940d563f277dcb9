//! The connection a request came on, as the asyncio interfaces hold it: an HTTP/1.x
//! connection (`HttpProtocol`, the request by its generation) or an HTTP/2 connection
//! (`H2Protocol`, the request by its stream id). An interface gives its response parts,
//! reads the body and reports its application's end through it, so that one interface
//! serves both without a copy of its code.

use crate::http::body::BodyRead;
use crate::http::config::HttpServerState;
use crate::http::conn::BodyBuf;
use crate::http::protocol::HttpProtocol;
use crate::http::respond::{AppEnd, Part, RespondError, Responded};
use crate::http2::protocol::H2Protocol;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

pub enum Carrier {
    H1(Py<HttpProtocol>),
    H2(Py<H2Protocol>),
}

impl Carrier {
    pub fn clone_ref(&self, py: Python<'_>) -> Carrier {
        match self {
            Carrier::H1(p) => Carrier::H1(p.clone_ref(py)),
            Carrier::H2(p) => Carrier::H2(p.clone_ref(py)),
        }
    }

    pub fn state(&self) -> &HttpServerState {
        match self {
            Carrier::H1(p) => p.get().state.get(),
            Carrier::H2(p) => p.get().state.get(),
        }
    }

    /// The protocol object (what Python code is given).
    pub fn object<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        match self {
            Carrier::H1(p) => p.bind(py).clone().into_any(),
            Carrier::H2(p) => p.bind(py).clone().into_any(),
        }
    }

    /// The HTTP/1.x connection, if the request came on one.
    pub fn h1(&self) -> Option<&Py<HttpProtocol>> {
        match self {
            Carrier::H1(p) => Some(p),
            Carrier::H2(_) => None,
        }
    }

    pub fn respond(&self, py: Python<'_>, gen: u64, part: Part<'_>) -> PyResult<Result<Responded, RespondError>> {
        match self {
            Carrier::H1(p) => HttpProtocol::respond(p.bind(py), gen, part),
            Carrier::H2(p) => H2Protocol::respond(p.bind(py), gen, part),
        }
    }

    /// Several parts at once (a head and its whole body); stops at the first refused.
    pub fn respond_parts<'py>(
        &self,
        py: Python<'py>,
        gen: u64,
        parts: impl IntoIterator<Item = Part<'py>>,
    ) -> PyResult<Result<Responded, RespondError>> {
        match self {
            Carrier::H1(p) => HttpProtocol::respond_parts(p.bind(py), gen, parts),
            Carrier::H2(p) => {
                let mut r = Ok(Responded::Ready);
                for part in parts {
                    r = H2Protocol::respond(p.bind(py), gen, part)?;
                    if r.is_err() {
                        break;
                    }
                }
                Ok(r)
            }
        }
    }

    /// The whole body of request `gen`, if all of it has arrived and none was taken yet.
    pub fn take_whole_body(&self, py: Python<'_>, gen: u64) -> PyResult<Option<BodyBuf>> {
        match self {
            Carrier::H1(p) => p.get().take_whole_body(py, gen),
            Carrier::H2(p) => H2Protocol::take_whole_body(p.bind(py), gen),
        }
    }

    /// Resolve `waiter` once the connection is lost; false if it is already.
    pub fn watch_lost(&self, py: Python<'_>, waiter: &Py<PyAny>) -> PyResult<bool> {
        match self {
            Carrier::H1(p) => p.get().watch_lost(py, waiter),
            Carrier::H2(p) => p.get().watch_lost(py, waiter),
        }
    }

    /// The next body message of request `gen`, or `waiter()` registered to get it.
    pub fn read_body(
        &self,
        py: Python<'_>,
        gen: u64,
        waiter: impl FnOnce() -> PyResult<Py<PyAny>>,
    ) -> PyResult<BodyRead> {
        match self {
            Carrier::H1(p) => HttpProtocol::read_body(p.bind(py), gen, waiter),
            Carrier::H2(p) => H2Protocol::read_body(p.bind(py), gen, waiter),
        }
    }

    pub fn app_finished(
        &self,
        py: Python<'_>,
        gen: u64,
        exc: Option<Py<PyAny>>,
        disconnected: bool,
        words: &AppEnd,
    ) -> PyResult<()> {
        match self {
            Carrier::H1(p) => HttpProtocol::app_finished(p.bind(py), gen, exc, disconnected, words),
            Carrier::H2(p) => H2Protocol::app_finished(p.bind(py), gen, exc, disconnected, words),
        }
    }

    /// The task running request `gen`'s application (graceful shutdown cancels it at
    /// the timeout; an HTTP/2 stream reset by the client cancels it at once).
    pub fn record_task(&self, py: Python<'_>, gen: u64, task: Py<PyAny>) -> PyResult<()> {
        match self {
            Carrier::H1(p) => {
                if let Some(app) = p.get().lock(py)?.objects.apps.iter_mut().find(|(g, _)| *g == gen) {
                    app.1 = Some(task);
                }
                Ok(())
            }
            Carrier::H2(p) => p.get().record_task(py, gen, task),
        }
    }

    /// Whether request `gen` is a WebSocket handshake (HTTP/1.1's `Upgrade`, HTTP/2's
    /// extended CONNECT).
    pub fn is_upgrade(&self, py: Python<'_>, gen: u64) -> PyResult<bool> {
        match self {
            Carrier::H1(p) => Ok(p.get().lock(py)?.current(gen).is_some_and(|r| r.upgrade)),
            Carrier::H2(p) => Ok(p.get().lock(py)?.streams.get(&(gen as u32)).is_some_and(|s| s.upgrade)),
        }
    }

    /// `waiter` (a receive call during request `gen`'s handshake) is resolved with the
    /// interface's disconnect message if the client leaves first; false if it is gone.
    pub fn wait_handshake(&self, py: Python<'_>, gen: u64, waiter: &Py<PyAny>) -> PyResult<bool> {
        match self {
            Carrier::H1(p) => {
                let mut c = p.get().lock(py)?;
                let gone = c.gone();
                match c.current(gen) {
                    Some(req) if !gone => {
                        req.objects.0.push(waiter.clone_ref(py));
                        Ok(true)
                    }
                    _ => Ok(false),
                }
            }
            Carrier::H2(p) => {
                let mut c = p.get().lock(py)?;
                if c.lost {
                    return Ok(false);
                }
                let id = gen as u32;
                if c.core.streams.get(&id).is_none_or(|s| s.reset) {
                    return Ok(false);
                }
                match c.streams.get_mut(&id) {
                    Some(s) => {
                        s.readers.push(waiter.clone_ref(py));
                        Ok(true)
                    }
                    None => Ok(false),
                }
            }
        }
    }

    pub fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self {
            Carrier::H1(p) => visit.call(p),
            Carrier::H2(p) => visit.call(p),
        }
    }
}
