//! Native transports and what the loop needs to drive them.

pub mod datagram;
pub mod native;
pub mod pybuf;
pub mod stream;
pub mod tls;
pub mod write_buffer;
pub mod writer;

use crate::reactor::Readiness;
use datagram::DatagramCore;
use pyo3::prelude::*;
use pyo3::{intern, PyTraverseError, PyVisit};
use stream::StreamCore;

/// An object that owns a descriptor registered with the loop and is called directly when it
/// is ready (no Python handle per event).
pub enum IoTarget {
    Stream(Py<StreamCore>),
    /// The core, and its Python transport, kept alive by the loop while it is registered
    /// (the core itself only holds a weak reference to it).
    Datagram(Py<DatagramCore>, Py<PyAny>),
}

impl IoTarget {
    pub fn clone_ref(&self, py: Python<'_>) -> IoTarget {
        match self {
            IoTarget::Stream(s) => IoTarget::Stream(s.clone_ref(py)),
            IoTarget::Datagram(d, t) => IoTarget::Datagram(d.clone_ref(py), t.clone_ref(py)),
        }
    }

    /// Handle readiness. Errors other than SystemExit/KeyboardInterrupt are reported by the
    /// transport itself.
    pub fn dispatch(&self, py: Python<'_>, ev: Readiness) -> PyResult<()> {
        match self {
            IoTarget::Stream(s) => StreamCore::on_ready(s.bind(py), ev),
            IoTarget::Datagram(d, _) => DatagramCore::on_ready(d.bind(py), ev),
        }
    }

    /// The stdlib refuses `add_reader`/`add_writer` on a descriptor that a transport still
    /// uses: the error message for that, or None when the transport is closing.
    pub fn busy_message(&self, py: Python<'_>, fd: i32) -> Option<String> {
        let core = match self {
            IoTarget::Stream(s) => s.bind(py).clone().into_any(),
            IoTarget::Datagram(d, _) => d.bind(py).clone().into_any(),
        };
        if core.call_method0(intern!(py, "is_closing")).and_then(|v| v.is_truthy()).unwrap_or(true) {
            return None;
        }
        let t = core.getattr(intern!(py, "_transport_repr")).ok()?;
        Some(format!("File descriptor {fd} is used by transport {t}"))
    }

    pub fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self {
            IoTarget::Stream(s) => visit.call(s),
            IoTarget::Datagram(d, t) => {
                visit.call(d)?;
                visit.call(t)
            }
        }
    }
}

/// `repr()` of a transport's Python object, or what to say once it is gone.
pub fn describe_transport(py: Python<'_>, transport: Option<Py<PyAny>>, fd: i32) -> PyResult<String> {
    match transport {
        Some(t) => Ok(t.bind(py).repr()?.to_string()),
        None => Ok(format!("<closed transport fd={fd}>")),
    }
}

/// Write (and TLS read) buffer limits with the stdlib's defaults: `high` from `low` or a
/// default, `low` a quarter of `high`.
pub fn flow_limits(high: Option<i64>, low: Option<i64>, default_high: i64) -> PyResult<(usize, usize)> {
    let hi = high.unwrap_or_else(|| match low {
        None => default_high,
        Some(l) => l.saturating_mul(4),
    });
    // Python's floor division (high=-1 gives low=-1, as in the stdlib's message).
    let lo = low.unwrap_or(hi.div_euclid(4));
    if !(hi >= lo && lo >= 0) {
        return Err(pyo3::exceptions::PyValueError::new_err(format!("high ({hi}) must be >= low ({lo}) must be >= 0")));
    }
    Ok((hi as usize, lo as usize))
}
