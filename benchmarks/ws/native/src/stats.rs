//! Latency summaries of recorded round trips (nanoseconds in, microseconds out).

use serde_json::{json, Value};

/// Nearest-rank percentile of an ascending, non-empty slice.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    let n = sorted.len();
    let rank = (p / 100.0 * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

fn us(nanos: u64) -> f64 {
    (nanos as f64 / 100.0).round() / 10.0
}

/// `p50_us`, `p99_us`, `max_us` and `mean_us` of `samples` (null when there
/// are none), as fields to merge into a result. Sorts `samples`.
pub fn latency(samples: &mut [u64]) -> Vec<(&'static str, Value)> {
    if samples.is_empty() {
        return ["p50_us", "p99_us", "max_us", "mean_us"].into_iter().map(|k| (k, Value::Null)).collect();
    }
    samples.sort_unstable();
    let total: u128 = samples.iter().map(|&s| u128::from(s)).sum();
    vec![
        ("p50_us", json!(us(percentile(samples, 50.0)))),
        ("p99_us", json!(us(percentile(samples, 99.0)))),
        ("max_us", json!(us(samples[samples.len() - 1]))),
        ("mean_us", json!(us((total / samples.len() as u128) as u64))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&[7], 50.0), 7);
    }

    #[test]
    fn microseconds() {
        let mut v = vec![3_000, 1_000, 2_000];
        let fields = latency(&mut v);
        assert_eq!(fields[0], ("p50_us", json!(2.0)));
        assert_eq!(fields[2], ("max_us", json!(3.0)));
        assert!(latency(&mut []).iter().all(|(_, v)| v.is_null()));
    }
}
