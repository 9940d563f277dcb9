//! The I/O reactor: an epoll (via mio) instance, registration of raw file descriptors, and
//! the mapping of readiness events to "reader ready" / "writer ready".
//!
//! mio registers descriptors edge-triggered. `add_reader` callbacks have level-triggered
//! semantics (called again on every iteration while the fd stays readable), so the loop
//! re-arms every descriptor that fired before it polls again: `EPOLL_CTL_MOD` re-evaluates
//! readiness and queues a new event if the descriptor is still ready.

use mio::event::Event;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

pub const WAKER_TOKEN: Token = Token(usize::MAX);

pub struct Poller {
    poll: Poll,
    events: Events,
}

impl Poller {
    pub fn new() -> io::Result<(Poller, Registry)> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        Ok((Poller { poll, events: Events::with_capacity(1024) }, registry))
    }

    pub fn registry(&self) -> &Registry {
        self.poll.registry()
    }

    /// Wait for events; EINTR is reported as an empty, successful poll.
    pub fn poll(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                self.events.clear();
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Every descriptor event of the last poll.
    pub fn ready(&self) -> impl Iterator<Item = (RawFd, Readiness)> + '_ {
        self.events.iter().filter(|e| e.token() != WAKER_TOKEN).map(|e| {
            let r = Readiness {
                readable: is_readable(e),
                writable: is_writable(e),
                read_closed: e.is_read_closed() || e.is_error(),
            };
            (e.token().0 as RawFd, r)
        })
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
pub fn update(
    registry: &Registry,
    fd: RawFd,
    old: Option<Interest>,
    new: Option<Interest>,
) -> io::Result<()> {
    let token = Token(fd as usize);
    match (old, new) {
        (None, Some(i)) => match registry.register(&mut SourceFd(&fd), token, i) {
            // Left registered by a closed-and-reused descriptor we never saw removed.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                registry.reregister(&mut SourceFd(&fd), token, i)
            }
            r => r,
        },
        (Some(_), Some(i)) => match registry.reregister(&mut SourceFd(&fd), token, i) {
            // The fd was closed (which drops it from epoll) and its number reused.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                registry.register(&mut SourceFd(&fd), token, i)
            }
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
    use std::os::unix::net::UnixStream;
    use std::os::fd::AsRawFd;
    use std::io::Write;

    #[test]
    fn level_semantics_through_rearm() {
        let (poller, registry) = Poller::new().unwrap();
        let mut poller = poller;
        let (mut a, b) = UnixStream::pair().unwrap();
        let fd = b.as_raw_fd();
        update(&registry, fd, None, interest(true, false)).unwrap();
        a.write_all(b"x").unwrap();
        poller.poll(Some(Duration::from_millis(100))).unwrap();
        assert_eq!(poller.ready().map(|(f, r)| (f, r.readable, r.writable)).collect::<Vec<_>>(), vec![(fd, true, false)]);
        // Not drained: edge-triggered epoll stays silent...
        poller.poll(Some(Duration::ZERO)).unwrap();
        assert_eq!(poller.ready().count(), 0);
        // ...until re-armed.
        update(&registry, fd, interest(true, false), interest(true, false)).unwrap();
        poller.poll(Some(Duration::ZERO)).unwrap();
        assert_eq!(poller.ready().map(|(f, r)| (f, r.readable, r.writable)).collect::<Vec<_>>(), vec![(fd, true, false)]);
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
    fn interest_combinations() {
        assert!(interest(false, false).is_none());
        assert_eq!(interest(true, true), Some(Interest::READABLE | Interest::WRITABLE));
    }
}
