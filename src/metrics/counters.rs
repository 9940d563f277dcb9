//! One worker's counters: their layout in shared memory (`Counters`, `repr(C)` atomics that
//! start at zero, so a fresh zero-filled slot is a valid one), how the server records into
//! them, and a snapshot of them for the supervisor.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Upper bounds in seconds of the request duration histogram's buckets (Prometheus's
/// `le`), below a last one for anything longer. From 1 ms: a response of this server
/// takes tens of microseconds, so finer buckets would tell the network, not the app.
pub const BUCKETS: [f64; 13] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Response status classes: 1xx to 5xx.
pub const CLASSES: usize = 5;

#[repr(C)]
#[derive(Default)]
pub struct Counters {
    /// Responses by status class (a switch of protocols counts as its 101).
    responses: [AtomicU64; CLASSES],
    /// Responses by duration bucket, each counted once (not cumulated), the last for
    /// longer than every bound.
    duration: [AtomicU64; BUCKETS.len() + 1],
    duration_sum_ns: AtomicU64,
    bytes_received: AtomicU64,
    bytes_sent: AtomicU64,
    connections_total: AtomicU64,
    connections_open: AtomicI64,
    upgraded_total: AtomicU64,
    upgraded_open: AtomicI64,
}

/// The counters at one moment, as plain numbers.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Snapshot {
    pub responses: [u64; CLASSES],
    pub duration: [u64; BUCKETS.len() + 1],
    pub duration_sum: f64,
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub connections_total: u64,
    pub connections_open: i64,
    pub upgraded_total: u64,
    pub upgraded_open: i64,
}

/// The bucket a duration falls in; a negative or NaN one (a clock that went wrong) in the first.
pub fn bucket(seconds: f64) -> usize {
    if seconds.is_nan() || seconds <= 0.0 {
        return 0;
    }
    BUCKETS.iter().position(|&b| seconds <= b).unwrap_or(BUCKETS.len())
}

/// The class of a status: 0 for 1xx to 4 for 5xx; statuses outside 100-599 (an app's
/// own) count with the nearest class.
pub fn class(status: u16) -> usize {
    usize::from(status / 100).clamp(1, CLASSES) - 1
}

impl Counters {
    /// A response is over (complete, refused or cut short) after `seconds`.
    pub fn response(&self, status: u16, seconds: f64) {
        self.responses[class(status)].fetch_add(1, Relaxed);
        self.duration[bucket(seconds)].fetch_add(1, Relaxed);
        let ns = if seconds > 0.0 { (seconds * 1e9) as u64 } else { 0 };
        self.duration_sum_ns.fetch_add(ns, Relaxed);
    }

    pub fn received(&self, bytes: usize) {
        self.bytes_received.fetch_add(bytes as u64, Relaxed);
    }

    pub fn sent(&self, bytes: u64) {
        self.bytes_sent.fetch_add(bytes, Relaxed);
    }

    pub fn connection_opened(&self) {
        self.connections_total.fetch_add(1, Relaxed);
        self.connections_open.fetch_add(1, Relaxed);
    }

    pub fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Relaxed);
    }

    /// A connection the WSGI thread engine moved to the loop is open again there (counted
    /// once in the total, when it was accepted).
    pub fn connection_moved_in(&self) {
        self.connections_open.fetch_add(1, Relaxed);
    }

    /// A connection switched protocols (a WebSocket: the only upgrade served).
    pub fn upgraded(&self) {
        self.upgraded_total.fetch_add(1, Relaxed);
        self.upgraded_open.fetch_add(1, Relaxed);
    }

    pub fn upgrade_ended(&self) {
        self.upgraded_open.fetch_sub(1, Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        let load = |a: &AtomicU64| a.load(Relaxed);
        Snapshot {
            responses: std::array::from_fn(|i| load(&self.responses[i])),
            duration: std::array::from_fn(|i| load(&self.duration[i])),
            duration_sum: load(&self.duration_sum_ns) as f64 / 1e9,
            bytes_received: load(&self.bytes_received),
            bytes_sent: load(&self.bytes_sent),
            connections_total: load(&self.connections_total),
            connections_open: self.connections_open.load(Relaxed),
            upgraded_total: load(&self.upgraded_total),
            upgraded_open: self.upgraded_open.load(Relaxed),
        }
    }

    /// Back to zero, for the slot's next worker (the supervisor keeps what it counted).
    pub fn clear(&self) {
        let all = self.responses.iter().chain(&self.duration).chain([
            &self.duration_sum_ns,
            &self.bytes_received,
            &self.bytes_sent,
            &self.connections_total,
            &self.upgraded_total,
        ]);
        for a in all {
            a.store(0, Relaxed);
        }
        self.connections_open.store(0, Relaxed);
        self.upgraded_open.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_fall_in_the_first_bucket_that_holds_them() {
        assert_eq!(bucket(0.0005), 0);
        assert_eq!(bucket(0.001), 0); // `le`: the bound itself is in
        assert_eq!(bucket(0.0011), 1);
        assert_eq!(bucket(10.0), BUCKETS.len() - 1);
        assert_eq!(bucket(10.5), BUCKETS.len());
        assert_eq!(bucket(-1.0), 0);
        assert_eq!(bucket(f64::NAN), 0);
        assert_eq!(bucket(f64::INFINITY), BUCKETS.len());
    }

    #[test]
    fn statuses_count_by_class() {
        assert_eq!(class(101), 0);
        assert_eq!(class(200), 1);
        assert_eq!(class(304), 2);
        assert_eq!(class(499), 3);
        assert_eq!(class(503), 4);
        assert_eq!(class(99), 0);
        assert_eq!(class(600), 4);
        assert_eq!(class(u16::MAX), 4);
    }

    #[test]
    fn records_and_clears() {
        let c = Counters::default();
        c.response(200, 0.002);
        c.response(404, 0.5);
        c.response(200, 20.0);
        c.received(100);
        c.sent(250);
        c.connection_opened();
        c.connection_opened();
        c.connection_closed();
        c.upgraded();
        let s = c.snapshot();
        assert_eq!(s.responses, [0, 2, 0, 1, 0]);
        assert_eq!(s.duration[bucket(0.002)], 1);
        assert_eq!(s.duration[bucket(0.5)], 1);
        assert_eq!(s.duration[BUCKETS.len()], 1);
        assert!((s.duration_sum - 20.502).abs() < 1e-6);
        assert_eq!((s.bytes_received, s.bytes_sent), (100, 250));
        assert_eq!((s.connections_total, s.connections_open), (2, 1));
        assert_eq!((s.upgraded_total, s.upgraded_open), (1, 1));
        c.clear();
        assert_eq!(c.snapshot(), Snapshot::default());
    }
}
