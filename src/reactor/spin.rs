//! Polling for a short while before the loop goes to sleep.
//!
//! A thread that sleeps in `epoll_wait` and is woken by a packet pays the wake-up: the
//! scheduler, and on a virtual machine the halted vCPU's exit and re-entry. For
//! request-response traffic on one connection that is most of each round trip (an echo
//! server is busy for under half of it). Polling without waiting for a few tens of
//! microseconds first catches the next event before the thread would have slept.
//!
//! The window adapts, as the kernel's halt-polling does for guests: a wait that ended soon
//! after the loop went to sleep doubles it (up to the limit), a wait longer than the limit
//! halves it, down to nothing. A loop whose events come further apart than the limit, or an
//! idle one, therefore stops polling after a few waits and sleeps at once as before. While
//! it polls, the thread yields the CPU at every turn, so a runnable thread beside it is not
//! kept waiting.
//!
//! Signals are blocked while the loop polls, and it checks for a pending one at every turn.
//! Without that, a signal that came while the loop polled would run its C handler at once,
//! interrupt no system call, and leave its Python-level handler waiting for whatever event
//! ended the sleep that followed (`asyncio.run`'s Ctrl-C handler is such a handler). Held,
//! it stops the polling; the mask is restored on the way back to the loop, which delivers
//! it, and the loop runs the Python-level handler before anything else. A signal sent to
//! the whole process while the loop polls may go to another thread that does not block it;
//! the loop then runs its handler after its next event, as it would if the signal had come
//! just before it went to sleep.

use std::time::Duration;

/// Where the window starts when a short wait first asks for it.
const START: Duration = Duration::from_micros(8);
/// The default limit.
const DEFAULT_LIMIT: Duration = Duration::from_micros(50);

/// The environment variable that sets the limit in microseconds (0 turns polling off).
pub const LIMIT_VAR: &str = "SWORDFISH_POLL_SPIN_US";

/// How long the next wait polls before it sleeps.
#[derive(Debug, Clone)]
pub struct SpinWindow {
    window: Duration,
    limit: Duration,
}

impl SpinWindow {
    pub fn new(limit: Duration) -> SpinWindow {
        SpinWindow { window: Duration::ZERO, limit }
    }

    /// The limit from `SWORDFISH_POLL_SPIN_US`, or the default if unset or not a number.
    pub fn from_env() -> SpinWindow {
        let limit = std::env::var(LIMIT_VAR)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(DEFAULT_LIMIT, Duration::from_micros);
        SpinWindow::new(limit)
    }

    /// How long to poll before a wait of at most `timeout` (None: no timeout).
    pub fn budget(&self, timeout: Option<Duration>) -> Duration {
        timeout.map_or(self.window, |t| t.min(self.window))
    }

    /// Learn from a wait that slept: `idle` is the time from the start of the wait (its
    /// polling included) to its end.
    pub fn slept(&mut self, idle: Duration) {
        if idle <= self.limit {
            self.window = (self.window * 2).clamp(START.min(self.limit), self.limit);
        } else {
            self.window /= 2;
            if self.window < START {
                self.window = Duration::ZERO;
            }
        }
    }

    #[cfg(test)]
    pub fn window(&self) -> Duration {
        self.window
    }
}

/// Every signal but the ones a fault raises is blocked in this thread while it lives; the
/// thread's own mask comes back when it is dropped.
pub struct SignalsHeld {
    old: libc::sigset_t,
}

const FAULTS: [libc::c_int; 5] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL, libc::SIGTRAP];

impl SignalsHeld {
    pub fn hold() -> Option<SignalsHeld> {
        // SAFETY: sigset_t is plain data, filled by sigfillset/pthread_sigmask before use.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut set);
            for sig in FAULTS {
                libc::sigdelset(&mut set, sig);
            }
            (libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) == 0).then_some(SignalsHeld { old })
        }
    }

    /// Whether a signal that this hold blocked (not one the thread blocked already) is
    /// waiting to be delivered.
    pub fn pending(&self) -> bool {
        // SAFETY: as above; sigismember only reads the sets.
        unsafe {
            let mut pending: libc::sigset_t = std::mem::zeroed();
            if libc::sigpending(&mut pending) != 0 {
                return false;
            }
            (1..=64).any(|sig| libc::sigismember(&pending, sig) == 1 && libc::sigismember(&self.old, sig) != 1)
        }
    }
}

impl Drop for SignalsHeld {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `hold`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}

/// Give the CPU to another runnable thread, if there is one.
pub fn yield_cpu() {
    // SAFETY: plain system call without arguments.
    unsafe {
        libc::sched_yield();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn short_waits_open_the_window_and_long_ones_close_it() {
        let mut w = SpinWindow::new(50 * US);
        assert_eq!(w.budget(None), Duration::ZERO);
        w.slept(20 * US);
        assert_eq!(w.window(), START);
        for _ in 0..10 {
            w.slept(20 * US);
        }
        assert_eq!(w.window(), 50 * US);
        assert_eq!(w.budget(Some(10 * US)), 10 * US);
        assert_eq!(w.budget(None), 50 * US);
        let mut closed_after = 0;
        while w.window() > Duration::ZERO {
            w.slept(Duration::from_millis(3));
            closed_after += 1;
        }
        assert!(closed_after <= 3, "{closed_after}");
    }

    #[test]
    fn a_zero_limit_never_spins() {
        let mut w = SpinWindow::new(Duration::ZERO);
        for _ in 0..5 {
            w.slept(Duration::ZERO);
            assert_eq!(w.budget(None), Duration::ZERO);
        }
    }

    #[test]
    fn a_held_signal_is_seen_pending_and_delivered_after() {
        use std::sync::atomic::{AtomicBool, Ordering};
        static SEEN: AtomicBool = AtomicBool::new(false);
        extern "C" fn on_usr2(_: libc::c_int) {
            SEEN.store(true, Ordering::SeqCst);
        }
        // SAFETY: a handler that only stores to an atomic; the old one is put back below.
        unsafe {
            let old = libc::signal(libc::SIGUSR2, on_usr2 as *const () as libc::sighandler_t);
            let held = SignalsHeld::hold().unwrap();
            assert!(!held.pending());
            libc::pthread_kill(libc::pthread_self(), libc::SIGUSR2);
            assert!(held.pending());
            assert!(!SEEN.load(Ordering::SeqCst));
            drop(held);
            assert!(SEEN.load(Ordering::SeqCst));
            libc::signal(libc::SIGUSR2, old);
        }
    }
}
