//! How a native protocol (the HTTP/1.1 connection, HTTP/2, WebSocket) writes to its
//! transport: straight into swordfish's socket transport, encrypted by swordfish's TLS
//! transport, or through any other transport's `write`. On swordfish's two transports the
//! bytes may be held for the end of the loop iteration (`Hold`), so that the writes of many
//! connections in one iteration leave together: on loopback each `sendmsg` also pays for
//! waking the client (docs/design.md, "Response writes wait for the end of the iteration").

use super::stream::{Held, Hold, StreamCore};
use super::tls::TlsCore;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{intern, PyTraverseError, PyVisit};

pub enum Writer {
    /// swordfish's socket transport: into its queue, no Python call.
    Stream(Py<StreamCore>),
    /// swordfish's TLS transport: into the SSL object without a bytes object where it can.
    Tls(Py<TlsCore>),
    /// Any other transport: its `write`.
    Call(Py<PyAny>),
}

impl Writer {
    /// The writer for `transport`: its native core when it is one of swordfish's.
    pub fn of(transport: &Bound<'_, PyAny>) -> PyResult<Writer> {
        let py = transport.py();
        if let Some(core) = transport.getattr_opt(intern!(py, "_core"))? {
            if let Ok(s) = core.cast::<StreamCore>() {
                return Ok(Writer::Stream(s.clone().unbind()));
            }
            if let Ok(t) = core.cast::<TlsCore>() {
                return Ok(Writer::Tls(t.clone().unbind()));
            }
        }
        Ok(Writer::Call(transport.getattr(intern!(py, "write"))?.unbind()))
    }

    /// swordfish's socket transport, when that is what is written to.
    pub fn stream(&self) -> Option<&Py<StreamCore>> {
        match self {
            Writer::Stream(s) => Some(s),
            _ => None,
        }
    }

    pub fn clone_ref(&self, py: Python<'_>) -> Writer {
        match self {
            Writer::Stream(s) => Writer::Stream(s.clone_ref(py)),
            Writer::Tls(t) => Writer::Tls(t.clone_ref(py)),
            Writer::Call(w) => Writer::Call(w.clone_ref(py)),
        }
    }

    /// Write `data`; `hold`: held for the end of the loop iteration on swordfish's
    /// transports (see `Hold`), written at once otherwise.
    pub fn write(&self, py: Python<'_>, data: Held<'_>, hold: Option<Hold>) -> PyResult<()> {
        match self {
            Writer::Stream(core) => match (hold, data) {
                (Some(hold), data) => StreamCore::write_deferred(core.bind(py), data, hold),
                (None, Held::Owned(v)) => core.get().write_now(py, &v, None),
                (None, Held::Shared(b)) => core.get().write_now(py, b.as_bytes(), Some(&b)),
            },
            Writer::Tls(tls) => tls.get().write_held(py, data, hold),
            Writer::Call(w) => {
                match data {
                    Held::Owned(v) => w.call1(py, (PyBytes::new(py, &v),))?,
                    Held::Shared(b) => w.call1(py, (b,))?,
                };
                Ok(())
            }
        }
    }

    pub fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self {
            Writer::Stream(s) => visit.call(s),
            Writer::Tls(t) => visit.call(t),
            Writer::Call(w) => visit.call(w),
        }
    }
}
