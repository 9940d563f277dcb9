//! Exact latency summaries from recorded samples (nanoseconds).

use serde_json::{json, Value};

/// Nearest-rank percentile of an ascending, non-empty slice.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    let n = sorted.len();
    let rank = (p / 100.0 * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// Nanoseconds as milliseconds, rounded to the microsecond.
fn ms(nanos: f64) -> f64 {
    (nanos / 1_000.0).round() / 1_000.0
}

/// `{"count", "p50", "p95", "p99", "max", "mean"}` in milliseconds (null
/// when there are no samples). Sorts `samples`.
pub fn summary(samples: &mut [u64]) -> Value {
    if samples.is_empty() {
        return json!({"count": 0, "p50": null, "p95": null, "p99": null, "max": null, "mean": null});
    }
    samples.sort_unstable();
    let total: u128 = samples.iter().map(|&s| u128::from(s)).sum();
    json!({
        "count": samples.len(),
        "p50": ms(percentile(samples, 50.0) as f64),
        "p95": ms(percentile(samples, 95.0) as f64),
        "p99": ms(percentile(samples, 99.0) as f64),
        "max": ms(samples[samples.len() - 1] as f64),
        "mean": ms(total as f64 / samples.len() as f64),
    })
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 95.0), 95);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&[7], 50.0), 7);
        assert_eq!(percentile(&[1, 2, 3], 50.0), 2);
    }
}
