//! `--metrics`: what a worker serves, counted (`counters`) in a slot of memory it shares
//! with its supervisor (`slot`), which sums its workers' slots into the Prometheus
//! endpoint. A worker writes only its own slot, with relaxed atomic adds: no lock, no
//! message per request, and no cache line written by two processes.

pub mod counters;
pub mod slot;

use pyo3::prelude::*;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<slot::MetricsSlot>()?;
    m.add("METRICS_DURATION_BUCKETS", counters::BUCKETS.to_vec())?;
    Ok(())
}
