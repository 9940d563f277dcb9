//! Protocols that take bytes straight from the socket transport's read path, as a slice
//! (no bytes object, no Python-level `data_received` call). The transport knows none of
//! them: each registers, at module start, a function that recognises its protocol objects;
//! `set_protocol` asks once, and the read path keeps the answer until the next change.

use pyo3::prelude::*;
use std::sync::OnceLock;

/// Feed bytes to a native protocol object (the object the recogniser accepted).
pub type Feed = fn(&Bound<'_, PyAny>, &[u8]) -> PyResult<()>;

/// Recognise a protocol object: its feed function if it reads natively.
pub type Recognise = fn(&Bound<'_, PyAny>) -> Option<Feed>;

static RECOGNISERS: OnceLock<Vec<Recognise>> = OnceLock::new();

/// Set the recognisers, once, when the extension module starts (later calls are ignored:
/// a module imported again in the same process registers the same functions).
pub fn register(recognisers: Vec<Recognise>) {
    let _ = RECOGNISERS.set(recognisers);
}

/// The feed function of `protocol`, if one of the registered native protocols is it.
pub fn recognise(protocol: &Bound<'_, PyAny>) -> Option<Feed> {
    RECOGNISERS.get()?.iter().find_map(|r| r(protocol))
}
