//! The loop's clock: CLOCK_MONOTONIC in seconds, the same clock as `time.monotonic()`,
//! with nanosecond resolution.

pub fn monotonic() -> f64 {
    read(libc::CLOCK_MONOTONIC)
}

/// CLOCK_MONOTONIC_COARSE in seconds: the same clock as `monotonic`, read without the
/// hardware counter, so it costs a fraction of a precise read and lags behind it by about a
/// scheduler tick (`coarse_resolution()`), a little more when a tick comes late (5.2 ms
/// against a 4 ms tick on this VM). For deadlines counted in seconds, read on every request.
pub fn coarse_monotonic() -> f64 {
    read(libc::CLOCK_MONOTONIC_COARSE)
}

/// The tick of `coarse_monotonic`, in seconds: how far it usually lags behind `monotonic`.
pub fn coarse_resolution() -> f64 {
    read_resolution(libc::CLOCK_MONOTONIC_COARSE)
}

/// Resolution of the clock in seconds, as reported by the kernel.
pub fn resolution() -> f64 {
    read_resolution(libc::CLOCK_MONOTONIC)
}

#[inline]
fn read(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`; on these clocks it cannot fail
    // on Linux with a valid pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    seconds(&ts)
}

fn read_resolution(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_getres writes one timespec into `ts`.
    unsafe { libc::clock_getres(clock, &mut ts) };
    seconds(&ts)
}

#[inline]
fn seconds(ts: &libc::timespec) -> f64 {
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
    fn coarse_clock_is_the_precise_one_a_few_ticks_behind() {
        let tick = coarse_resolution();
        assert!(tick > 0.0 && tick < 0.1, "coarse resolution {tick}");
        for _ in 0..1_000 {
            // Precise reads on both sides: a preemption between two reads only widens the
            // bracket, so neither check depends on scheduling.
            let before = monotonic();
            let coarse = coarse_monotonic();
            let after = monotonic();
            assert!(coarse <= after, "coarse {coarse} ahead of the precise {after} read after it");
            // A late tick makes the lag exceed one tick (measured: 5.2 ms for a 4 ms tick),
            // never by whole seconds: the coarse clock is the same clock, not another one.
            assert!(before - coarse <= 10.0 * tick, "coarse {coarse} lags the precise {before} by more than ten ticks");
        }
    }

    #[test]
    fn resolution_is_a_microsecond_or_better() {
        let res = resolution();
        assert!(res > 0.0 && res <= 1e-6, "resolution {res}");
    }
}
