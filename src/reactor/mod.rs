//! The I/O reactor: an epoll (via mio) instance, registration of raw file descriptors, and
//! the mapping of readiness events to "reader ready" / "writer ready".
//!
//! mio registers descriptors edge-triggered. `add_reader` callbacks have level-triggered
//! semantics (called again on every iteration while the fd stays readable), so the loop
//! re-arms every descriptor that fired before it polls again: `EPOLL_CTL_MOD` re-evaluates
//! readiness and queues a new event if the descriptor is still ready.

mod spin;

use mio::event::Event;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};
use spin::{yield_cpu, SignalsHeld, SpinWindow};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

pub const WAKER_TOKEN: Token = Token(usize::MAX);
const TIMER_TOKEN: Token = Token(usize::MAX - 1);

pub struct Poller {
    poll: Poll,
    events: Events,
    /// A timerfd that wakes the poll at the next timer's deadline to the nanosecond: epoll's
    /// own timeout counts whole milliseconds (rounded up), which made every timer up to a
    /// millisecond late. None where it cannot be made; the poll's timeout then decides.
    timer: Option<OwnedFd>,
    /// The deadline the timerfd is set to (CLOCK_MONOTONIC seconds and nanoseconds).
    armed: Option<(i64, i64)>,
    /// How long a wait polls before it sleeps (see `spin`).
    spin: SpinWindow,
}

impl Poller {
    pub fn new() -> io::Result<(Poller, Registry)> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let timer = new_timerfd(&registry);
        let spin = SpinWindow::from_env();
        Ok((Poller { poll, events: Events::with_capacity(1024), timer, armed: None, spin }, registry))
    }

    pub fn registry(&self) -> &Registry {
        self.poll.registry()
    }

    /// Wait for events; EINTR is reported as an empty, successful poll.
    pub fn poll(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.poll_until(timeout, None)
    }

    /// `poll`, woken at `deadline` (CLOCK_MONOTONIC seconds) by the timerfd, not later.
    /// `timeout` (whole milliseconds, rounded up) still bounds the wait, so a timerfd that
    /// says nothing, or a deadline slightly early for the caller's clock, costs at most the
    /// old precision and never a busy loop.
    pub fn poll_until(&mut self, timeout: Option<Duration>, deadline: Option<f64>) -> io::Result<()> {
        if let (Some(when), Some(fd)) = (deadline, &self.timer) {
            if timeout != Some(Duration::ZERO) {
                let at = timespec_at_or_after(when);
                if self.armed != Some(at) {
                    // Setting the timer also clears an expiry not read yet, so the next
                    // expiry is a new edge for the edge-triggered registration.
                    self.armed = set_timerfd(fd, at).ok().map(|()| at);
                }
            }
        }
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                self.events.clear();
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// A wait of the loop with nothing to run: `poll_until`, but when `may_spin` (the loop
    /// watches descriptors) it first polls without sleeping for as long as recent waits
    /// say is worth it, and learns from how long this one took.
    pub fn park(&mut self, timeout: Option<Duration>, deadline: Option<f64>, may_spin: bool) -> io::Result<()> {
        if !may_spin {
            return self.poll_until(timeout, deadline);
        }
        let start = Instant::now();
        let budget = self.spin.budget(timeout);
        let mut rest = timeout;
        if !budget.is_zero() {
            let held = SignalsHeld::hold();
            loop {
                self.poll_until(Some(Duration::ZERO), None)?;
                if !self.events.is_empty() {
                    return Ok(());
                }
                if held.as_ref().is_some_and(SignalsHeld::pending) {
                    // Back to the loop, which runs the handler once the mask is restored.
                    return Ok(());
                }
                if start.elapsed() >= budget {
                    break;
                }
                yield_cpu();
            }
            rest = timeout.map(|t| t.saturating_sub(start.elapsed()));
        }
        let result = self.poll_until(rest, deadline);
        self.spin.slept(start.elapsed());
        result
    }

    /// Every descriptor event of the last poll.
    pub fn ready(&self) -> impl Iterator<Item = (RawFd, Readiness)> + '_ {
        self.events.iter().filter(|e| e.token() != WAKER_TOKEN && e.token() != TIMER_TOKEN).map(|e| {
            let r = Readiness {
                readable: is_readable(e),
                writable: is_writable(e),
                read_closed: e.is_read_closed() || e.is_error(),
            };
            (e.token().0 as RawFd, r)
        })
    }
}

/// A non-blocking CLOCK_MONOTONIC timerfd registered for reads, or None if that fails.
fn new_timerfd(registry: &Registry) -> Option<OwnedFd> {
    // SAFETY: plain system call; a non-negative result is a descriptor we now own.
    let raw = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
    if raw < 0 {
        return None;
    }
    // SAFETY: `raw` is the descriptor timerfd_create just returned, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    registry.register(&mut SourceFd(&fd.as_raw_fd()), TIMER_TOKEN, Interest::READABLE).ok()?;
    Some(fd)
}

/// The first whole nanosecond at or after `when` seconds.
fn timespec_at_or_after(when: f64) -> (i64, i64) {
    let secs = when.floor();
    let nanos = ((when - secs) * 1e9).ceil() as i64 + 1; // +1: the float may round down
    let secs = secs as i64;
    if nanos >= 1_000_000_000 {
        (secs + 1, nanos - 1_000_000_000)
    } else {
        (secs, nanos)
    }
}

/// Expire `fd` once at the absolute CLOCK_MONOTONIC time `at`.
fn set_timerfd(fd: &OwnedFd, at: (i64, i64)) -> io::Result<()> {
    let spec = libc::itimerspec {
        it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
        it_value: libc::timespec { tv_sec: at.0 as libc::time_t, tv_nsec: at.1 as libc::c_long },
    };
    // SAFETY: a valid timerfd and a valid itimerspec; the old value is not asked for.
    let r = unsafe { libc::timerfd_settime(fd.as_raw_fd(), libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What one event says about a descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Readiness {
    pub readable: bool,
    pub writable: bool,
    /// The peer closed its end (or an error is pending): a read that returns data may be
    /// followed by end-of-file without another event.
    pub read_closed: bool,
}

// Errors and hang-ups wake both directions, as the stdlib's epoll selector does, so the
// callback gets to see the error from its own read or write.
fn is_readable(e: &Event) -> bool {
    e.is_readable() || e.is_error() || e.is_read_closed()
}

fn is_writable(e: &Event) -> bool {
    e.is_writable() || e.is_error() || e.is_write_closed()
}

pub fn interest(read: bool, write: bool) -> Option<Interest> {
    match (read, write) {
        (true, true) => Some(Interest::READABLE | Interest::WRITABLE),
        (true, false) => Some(Interest::READABLE),
        (false, true) => Some(Interest::WRITABLE),
        (false, false) => None,
    }
}

/// Move `fd` from interest `old` to interest `new` (None: not registered).
/// Change what epoll watches `fd` for, with no fallback: ENOENT says the descriptor was
/// closed (and dropped from epoll) since it was registered.
pub fn modify(registry: &Registry, fd: RawFd, interest: Interest) -> io::Result<()> {
    registry.reregister(&mut SourceFd(&fd), Token(fd as usize), interest)
}

pub fn update(registry: &Registry, fd: RawFd, old: Option<Interest>, new: Option<Interest>) -> io::Result<()> {
    let token = Token(fd as usize);
    match (old, new) {
        (None, Some(i)) => match registry.register(&mut SourceFd(&fd), token, i) {
            // Left registered by a closed-and-reused descriptor we never saw removed.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => registry.reregister(&mut SourceFd(&fd), token, i),
            r => r,
        },
        (Some(_), Some(i)) => match registry.reregister(&mut SourceFd(&fd), token, i) {
            // The fd was closed (which drops it from epoll) and its number reused.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => registry.register(&mut SourceFd(&fd), token, i),
            r => r,
        },
        (Some(_), None) => {
            // Closing an fd removes it from epoll; EBADF/ENOENT here are expected.
            let _ = registry.deregister(&mut SourceFd(&fd));
            Ok(())
        }
        (None, None) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn level_semantics_through_rearm() {
        let (poller, registry) = Poller::new().unwrap();
        let mut poller = poller;
        let (mut a, b) = UnixStream::pair().unwrap();
        let fd = b.as_raw_fd();
        update(&registry, fd, None, interest(true, false)).unwrap();
        a.write_all(b"x").unwrap();
        poller.poll(Some(Duration::from_millis(100))).unwrap();
        assert_eq!(
            poller.ready().map(|(f, r)| (f, r.readable, r.writable)).collect::<Vec<_>>(),
            vec![(fd, true, false)]
        );
        // Not drained: edge-triggered epoll stays silent...
        poller.poll(Some(Duration::ZERO)).unwrap();
        assert_eq!(poller.ready().count(), 0);
        // ...until re-armed.
        update(&registry, fd, interest(true, false), interest(true, false)).unwrap();
        poller.poll(Some(Duration::ZERO)).unwrap();
        assert_eq!(
            poller.ready().map(|(f, r)| (f, r.readable, r.writable)).collect::<Vec<_>>(),
            vec![(fd, true, false)]
        );
    }

    #[test]
    fn closed_fd_is_tolerated() {
        let (_poller, registry) = Poller::new().unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        let fd = b.as_raw_fd();
        update(&registry, fd, None, interest(true, true)).unwrap();
        drop(b);
        drop(a);
        assert!(update(&registry, fd, interest(true, true), None).is_ok());
    }

    #[test]
    fn the_timer_wakes_the_poll_at_its_deadline() {
        let (mut poller, _registry) = Poller::new().unwrap();
        assert!(poller.timer.is_some());
        for _ in 0..2 {
            let deadline = crate::clock::monotonic() + 0.02;
            // A ten-second timeout: only the timerfd can end this poll soon. (A signal may
            // end a poll early too, hence the loop.)
            while crate::clock::monotonic() < deadline {
                poller.poll_until(Some(Duration::from_secs(10)), Some(deadline)).unwrap();
                assert_eq!(poller.ready().count(), 0); // the timer is not a descriptor event
            }
            assert!(crate::clock::monotonic() < deadline + 5.0, "not woken by the timer");
        }
        // An expired deadline asked for again is not a new event: the timeout ends the poll,
        // there is no busy loop on a timer that stays readable.
        let deadline = crate::clock::monotonic() + 0.005;
        poller.poll_until(Some(Duration::from_secs(10)), Some(deadline)).unwrap();
        let start = crate::clock::monotonic();
        poller.poll_until(Some(Duration::from_millis(50)), Some(deadline)).unwrap();
        assert!(crate::clock::monotonic() - start >= 0.045);
    }

    #[test]
    fn deadlines_round_up_to_the_nanosecond() {
        assert_eq!(timespec_at_or_after(5.0), (5, 1));
        for when in [0.25, 12.5, 7.999_999_999_9, 86_400.123_456_789, 1.0e6 + 0.999_999_999] {
            let (s, ns) = timespec_at_or_after(when);
            assert!((0..1_000_000_000).contains(&ns));
            let back = s as f64 + ns as f64 * 1e-9;
            assert!(back >= when && back - when < 1e-6, "{when} -> {s}.{ns:09}");
        }
    }

    #[test]
    fn interest_combinations() {
        assert!(interest(false, false).is_none());
        assert_eq!(interest(true, true), Some(Interest::READABLE | Interest::WRITABLE));
    }
}
