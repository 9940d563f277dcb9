//! `Settings`: what every connection of one server reads and counts — limits, timeouts,
//! the response head's rules, the request counters and the metrics — free of Python
//! objects, so that a connection served without the GIL reads the same.

use super::head::HeadRules;
use super::parse::Limits;
use crate::metrics::counters::Counters;
use crate::metrics::slot::CountersMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;

pub struct Settings {
    pub limits: Limits,
    pub timeout_header: f64,
    pub timeout_keep_alive: f64,
    pub limit_concurrency: usize,
    pub date_header: bool,
    pub server_header: Option<Vec<u8>>,
    /// The configured headers added to every response, as (lower-case name, serialized
    /// `name: value\r\n` line); a header of the same name set by the app replaces one.
    pub default_headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// An access log is kept.
    pub access_log: bool,
    /// `--metrics`: this worker's counters.
    pub metrics: Option<Arc<CountersMap>>,
    pub active_requests: AtomicUsize,
    pub total_requests: AtomicU64,
    /// Connections made so far: each connection's number, in the order they came.
    pub connections_made: AtomicU64,
    pub shutting_down: AtomicBool,
    /// The shutdown is a retirement (a supervisor replaces this worker): a kept-alive
    /// connection closes only after a response that said `connection: close`, so that a
    /// request its client sends meanwhile is answered, never dropped (see
    /// `Conn::finish_request`).
    pub draining: AtomicBool,
}

impl Settings {
    pub fn metrics(&self) -> Option<&Counters> {
        self.metrics.as_deref().map(CountersMap::counters)
    }

    /// Whether a request's duration is wanted (for the access log or the metrics).
    pub fn timed(&self) -> bool {
        self.access_log || self.metrics.is_some()
    }

    /// A plain-text reply the server makes itself, with its `date` and `server` fields.
    pub fn simple_response(&self, status: u16, head_method: bool, extra: &[u8]) -> Vec<u8> {
        super::response::simple_response(status, head_method, self.date_header, self.server_header.as_deref(), extra)
    }

    /// The rules every response head follows.
    pub fn head_rules(&self) -> HeadRules<'_> {
        HeadRules { date: self.date_header, server: self.server_header.as_deref(), defaults: &self.default_headers }
    }
}
