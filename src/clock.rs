//! The loop's clock: CLOCK_MONOTONIC in seconds, the same clock as `time.monotonic()`,
//! with nanosecond resolution.

pub fn monotonic() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // clock_gettime(CLOCK_MONOTONIC) cannot fail on Linux with a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// CLOCK_MONOTONIC_COARSE in seconds: the same clock as `monotonic`, read without the
/// hardware counter, so it lags by up to `coarse_resolution()` (a scheduler tick) and costs
/// a fraction of a precise read. For deadlines counted in seconds, read on every request.
pub fn coarse_monotonic() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// How far `coarse_monotonic` may lag behind `monotonic`, in seconds.
pub fn coarse_resolution() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Resolution of the clock in seconds, as reported by the kernel.
pub fn resolution() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_never_goes_back() {
        let mut last = monotonic();
        for _ in 0..10_000 {
            let now = monotonic();
            assert!(now >= last);
            last = now;
        }
    }

    #[test]
    fn coarse_clock_lags_the_precise_one_by_at_most_its_resolution() {
        let slack = coarse_resolution();
        assert!(slack > 0.0 && slack < 0.1, "coarse resolution {slack}");
        for _ in 0..1_000 {
            let coarse = coarse_monotonic();
            let precise = monotonic();
            assert!(coarse <= precise, "coarse {coarse} ahead of precise {precise}");
            assert!(precise - coarse <= slack + 1e-3, "coarse {coarse} lags precise {precise} by more than {slack}");
        }
    }

    #[test]
    fn resolution_is_a_microsecond_or_better() {
        let res = resolution();
        assert!(res > 0.0 && res <= 1e-6, "resolution {res}");
    }
}
