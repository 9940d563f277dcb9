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
        if !matches!(self.mark, Some((at, _)) if now.duration_since(at) < CPU_WINDOW) {
            self.account(now, process_cpu_time());
        }
        self.used
    }

    /// The process had used `cpu` of CPU time by `now`: a window ends (if one began).
    fn account(&mut self, now: Instant, cpu: Duration) {
        if let Some((at, before)) = self.mark {
            let window = now.duration_since(at).as_secs_f64();
            if window > 0.0 {
                self.used = cpu.saturating_sub(before).as_secs_f64() / window;
                // A long window (the server was idle) counts for as much as its length.
                let weight = 1.0 - (-window / LOAD_SPAN.as_secs_f64()).exp();
                self.load += (self.used - self.load) * weight;
            }
        }
        self.mark = Some((now, cpu));
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

    /// Windows of a whole CPU make the process loaded within about a `LOAD_SPAN`; a long
    /// idle window makes it unloaded at once; a short burst at low load does not count.
    #[test]
    fn load_follows_the_windows() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut share = CpuShare::default();
        share.account(start, Duration::ZERO);
        assert!(share.load < LOADED);
        let mut cpu = Duration::ZERO;
        for i in 1..=40 {
            cpu += ms(5);
            share.account(start + ms(5 * i), cpu);
        }
        assert!((share.used - 1.0).abs() < 1e-9, "{}", share.used);
        assert!(share.load >= LOADED, "{}", share.load);
        share.account(start + ms(200) + ms(1000), cpu);
        assert_eq!(share.used, 0.0);
        assert!(share.load < LOADED, "{}", share.load);
        cpu += ms(5);
        share.account(start + ms(1205), cpu);
        assert!(share.load < LOADED, "one busy window of 5 ms: {}", share.load);
    }
}
