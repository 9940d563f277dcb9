//! The leader's work: one thread at a time holds the poller (`lead` says which). It
//! accepts, reads and parses (without the GIL), fires the connections' timers, and keeps
//! polling while the requests it finds are being taken up; when one needs a thread to run
//! it (see `runner`), it leaves the poller to a follower and runs it. TLS handshakes are
//! taken through the same way, after the lead is left (`Found`).

use super::slot::{Conn, Link, Slot};
use super::socket::{no_delay, Addr, Stream};
use super::tls::Tls;
use super::{Engine, Listener, FIRST_REQUEST_GRACE};
use crate::clock::coarse_resolution;
use crate::http::conn::TimerKind;
use crate::sync::lock_unpoisoned;
use crate::wsgi::idle_watch::Class;
use mio::{Events, Interest, Token};
use pyo3::prelude::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Wakes the poller: an earlier deadline, a request queued from outside, the stop.
pub const WAKER: Token = Token(0);
/// The timer's token for watching the listeners again after the board's pause.
const LISTEN_AGAIN: usize = 1;
pub const FIRST_LISTENER: usize = 2;
/// Connections' tokens start here; listeners' are below.
pub const FIRST_CONNECTION: usize = 1 << 16;

/// Events taken per poll.
const EVENTS: usize = 256;

/// What a poll found: requests ready to run, and TLS connections in their handshake. A
/// handshake's first flight costs the server a signature (a millisecond or more with RSA),
/// and a leader that signed for every connection a burst opened would keep the others'
/// requests waiting behind them all: those connections stay owned, the leader hands the
/// lead on (at once, to a follower) and takes them through their handshakes itself, as it
/// would run requests.
#[derive(Default)]
struct Found {
    jobs: Vec<Arc<Slot>>,
    handshakes: Vec<Arc<Slot>>,
}

impl Engine {
    /// A thread's life: follow until it leads, lead until a request needs a runner, run,
    /// and follow again.
    pub fn work(self: Arc<Self>) {
        // An app's timed waits (a sleep, a lock's timeout) end at their deadline.
        crate::wsgi::idle_watch::exact_timers();
        let mut class = Class::normal();
        // The thread's Python state is made once: each `Python::attach` after only takes
        // the GIL.
        let run = std::panic::AssertUnwindSafe(|| Python::attach(|py| py.detach(|| self.follow_and_lead(&mut class))));
        if std::panic::catch_unwind(run).is_err() {
            // A bug: this thread is gone (its connection with it, if it held one); the
            // others serve on, and the count below lets the server's stop finish.
            eprintln!("swordfish: a WSGI engine thread panicked and stopped");
        }
        let mut alive = lock_unpoisoned(&self.alive);
        *alive -= 1;
        self.exited.notify_all();
    }

    fn follow_and_lead(self: &Arc<Self>, class: &mut Class) {
        let mut events = Events::with_capacity(EVENTS);
        while !self.stop.load(Ordering::Relaxed) {
            // TLS connections whose handshake goes on: taken through it after the lead is
            // left (see `Found`).
            let mut handshakes = Vec::new();
            {
                let lead = self.lead.take();
                let mut poll = lock_unpoisoned(&self.poll);
                // Requests queued before it led may want it first.
                let mut jobs = Vec::new();
                // Whether a follower is woken as this thread leaves (see `lead`).
                let eager = loop {
                    if self.stop.load(Ordering::Relaxed) {
                        // The next follower sees it at once, and so on.
                        let _ = self.waker.wake();
                        return;
                    }
                    if let Some(eager) = self.queue(jobs) {
                        break eager || !handshakes.is_empty();
                    }
                    if !handshakes.is_empty() {
                        break true;
                    }
                    // Handshakes come from this poll alone: the loop leaves before the next.
                    Found { jobs, handshakes } = self.poll_once(&mut poll, &mut events);
                };
                drop(poll);
                lead.leave(eager);
            }
            let ready: Vec<Arc<Slot>> = handshakes.into_iter().filter_map(|s| self.settle(s, true)).collect();
            if !ready.is_empty() {
                self.queue_taken(ready);
            }
            self.run_queue(class);
        }
    }

    fn poll_once(&self, poll: &mut mio::Poll, events: &mut Events) -> Found {
        let timeout = self.timers().next();
        if poll.poll(events, timeout).is_err() {
            // Interrupted: the deadlines are looked at below all the same.
            events.clear();
        }
        let mut found = Found::default();
        for event in events.iter() {
            let token = event.token().0;
            if token == WAKER.0 {
                continue;
            }
            if token < FIRST_CONNECTION {
                if let Some(i) = token.checked_sub(FIRST_LISTENER) {
                    self.accept(i, &mut found);
                }
            } else if let Some(slot) = self.slot(token) {
                if slot.own() {
                    self.settle_or_defer(slot, &mut found);
                }
            }
        }
        self.fire_timers(&mut found.jobs);
        found
    }

    /// An owned connection the socket reported on: settled now, or, in a TLS handshake,
    /// kept owned for after the lead is left.
    fn settle_or_defer(&self, slot: Arc<Slot>, found: &mut Found) {
        if self.tls.is_some() && slot.lock().objects.tls.as_ref().is_some_and(|t| t.handshaking()) {
            found.handshakes.push(slot);
            return;
        }
        found.jobs.extend(self.settle(slot, true));
    }

    /// Whether the board lets this worker take a connection now; if not, the listeners
    /// are not watched until its pause is over.
    fn may_accept(&self) -> bool {
        let pause = match lock_unpoisoned(&self.gate).as_mut() {
            Some(gate) => gate.pause(self.open.load(Ordering::Relaxed), std::time::Instant::now()),
            None => None,
        };
        let Some(pause) = pause else { return true };
        self.watch_listeners(false);
        self.timers().arm(LISTEN_AGAIN, 0, pause);
        false
    }

    /// Watch the listeners (again), or stop.
    fn watch_listeners(&self, on: bool) {
        let mut listeners = lock_unpoisoned(&self.listeners);
        if listeners.watching == on {
            return;
        }
        listeners.watching = on;
        for (i, l) in listeners.held.iter_mut().enumerate() {
            let Some(l) = l else { continue };
            // Registered again, a listener with connections waiting reports them at once.
            let _ = if on {
                self.registry.register(l.source(), Token(FIRST_LISTENER + i), Interest::READABLE)
            } else {
                self.registry.deregister(l.source())
            };
        }
    }

    /// Take every connection waiting on listener `i` (while the board allows).
    fn accept(&self, i: usize, found: &mut Found) {
        loop {
            if !self.may_accept() {
                return;
            }
            let accepted = {
                let listeners = lock_unpoisoned(&self.listeners);
                match listeners.held.get(i) {
                    Some(Some(Listener::Tcp(l))) => l.accept().map(|(s, _)| Stream::Tcp(s)),
                    Some(Some(Listener::Unix(l))) => l.accept().map(|(s, _)| Stream::Unix(s)),
                    _ => return,
                }
            };
            let stream = match accepted {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.raw_os_error() == Some(libc::EMFILE) || e.raw_os_error() == Some(libc::ENFILE) => {
                    // Out of descriptors: what waits is taken when a connection closes and
                    // another arrives.
                    return;
                }
                // The client left before it was taken (ECONNABORTED), and the like.
                Err(_) => continue,
            };
            no_delay(&stream);
            if let Some(slot) = self.open(stream) {
                self.settle_or_defer(slot, found);
            }
        }
    }

    /// A new connection: into the table and the poller, its header timer armed; returned
    /// owned, to be read at once (its request may be there already).
    fn open(&self, stream: Stream) -> Option<Arc<Slot>> {
        let st = self.settings();
        let mut link = Link::new(stream);
        if let Some(config) = &self.tls {
            link.tls = Some(Box::new(Tls::new(config.clone())?));
            // Where HTTP/2 is served, an `h2` offer moves the connection to the loop.
            link.hello = self.handoff.is_some();
        }
        let proxy_preface = match &self.state.get().proxy_protocol {
            // --proxy-protocol: only a trusted peer's header is believed; anyone else could
            // claim any address, so their connections are closed unanswered (the stream
            // closes as it goes).
            Some(trusted) => {
                let host = match &link.client {
                    Some(Addr::Ip(a)) => Some(a.ip().to_string()),
                    _ => None,
                };
                let believed = Python::attach(|py| {
                    trusted.call1(py, (host,)).and_then(|b| b.bind(py).is_truthy()).unwrap_or_else(|e| {
                        e.write_unraisable(py, None);
                        false
                    })
                });
                if !believed {
                    return None;
                }
                true
            }
            None => false,
        };
        let slot = self.insert(|token| {
            let mut c = Conn::new(link);
            c.number = st.connections_made.fetch_add(1, Ordering::Relaxed);
            c.proxy_preface = proxy_preface;
            c.https = self.tls.is_some();
            Arc::new(Slot::new(token, c))
        });
        if let Some(m) = st.metrics() {
            m.connection_opened();
        }
        if !slot.own() {
            return None;
        }
        {
            let mut c = slot.lock();
            if self.registry.register(c.objects.stream.source(), Token(slot.token), Interest::READABLE).is_err() {
                self.close(&slot, &mut c);
                return None;
            }
            let mut acts = Vec::new();
            c.set_timer(TimerKind::Header, st.timeout_header, &mut acts);
            if st.shutting_down.load(Ordering::Relaxed) {
                // Accepted before the listener closed: its first request is served.
                c.shutdown = true;
                c.set_timer(TimerKind::Header, st.timeout_header.min(FIRST_REQUEST_GRACE), &mut acts);
            }
            self.stage(&slot, &mut c, &mut acts);
        }
        Some(slot)
    }

    /// The connections whose deadline has come: the core decides (close, or wait on).
    fn fire_timers(&self, jobs: &mut Vec<Arc<Slot>>) {
        let due = self.timers().due();
        for (token, seq) in due {
            if token == LISTEN_AGAIN {
                self.watch_listeners(true);
                continue;
            }
            let Some(slot) = self.slot(token) else { continue };
            if slot.timer_seq.load(Ordering::Relaxed) != seq {
                continue;
            }
            if !slot.try_own() {
                // Being driven now: looked at again a tick later.
                let later = Duration::from_secs_f64(coarse_resolution());
                self.timers().arm(token, seq, later);
                continue;
            }
            {
                let mut c = slot.lock();
                let mut acts = Vec::new();
                c.timer_fired(&mut acts);
                self.stage(&slot, &mut c, &mut acts);
            }
            jobs.extend(self.settle(slot, false));
        }
    }
}
