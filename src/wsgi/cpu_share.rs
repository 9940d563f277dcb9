//! The share of a CPU the process uses, measured from its CPU clock over windows of at
//! least `CPU_WINDOW` and averaged over about `LOAD_SPAN`. The WSGI threads (the loop's
//! pool and the thread engine) run in the batch scheduling class while it is `loaded`
//! (`idle_watch::Class`), and the loop's pool hires threads only while the process does
//! not keep a CPU busy.

use std::time::{Duration, Instant};

/// The share of one CPU from which app threads run in the batch scheduling class.
const LOADED: f64 = 0.5;
/// The span of time over which that share is averaged: bursts at low load (users in step)
/// do not count as load.
const LOAD_SPAN: Duration = Duration::from_millis(100);
/// The least time over which that share is measured.
const CPU_WINDOW: Duration = Duration::from_millis(5);

/// CPU time of the whole process (all its threads).
fn process_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(u64::try_from(ts.tv_sec).unwrap_or(0), u32::try_from(ts.tv_nsec).unwrap_or(0))
}

#[derive(Default)]
pub struct CpuShare {
    /// (when, process CPU time then) of the last look.
    mark: Option<(Instant, Duration)>,
    /// The share of a CPU the process used over the last window.
    used: f64,
    /// That share averaged over about the last `LOAD_SPAN`.
    load: f64,
}

impl CpuShare {
    /// The share of a CPU the process used over the last window, looked at again if the
    /// window is at least `CPU_WINDOW` long.
    pub fn used(&mut self) -> f64 {
        let now = Instant::now();
        match self.mark {
            Some((at, _)) if now.duration_since(at) < CPU_WINDOW => {}
            Some((at, before)) => {
                let cpu = process_cpu_time();
                let window = now.duration_since(at).as_secs_f64();
                self.used = cpu.saturating_sub(before).as_secs_f64() / window;
                // A long window (the server was idle) counts for as much as its length.
                let weight = 1.0 - (-window / LOAD_SPAN.as_secs_f64()).exp();
                self.load += (self.used - self.load) * weight;
                self.mark = Some((now, cpu));
            }
            None => self.mark = Some((now, process_cpu_time())),
        }
        self.used
    }

    /// Whether the process has kept half a CPU busy or more lately (looked at again first).
    pub fn loaded(&mut self) -> bool {
        self.used();
        self.load >= LOADED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread that spins keeps the process loaded; before any window has passed nothing
    /// counts as load.
    #[test]
    fn spinning_counts_as_load() {
        let mut share = CpuShare::default();
        assert!(!share.loaded());
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            std::hint::black_box(share.used());
        }
        assert!(share.used() > 0.5, "{}", share.used());
        assert!(share.loaded());
    }
}
