//! Who leads, and when a follower is woken to. A leader leaves the poller to run requests
//! or to wait for the GIL, and comes back to it when that is done; a thread that finds
//! nobody leading takes the lead at once, as with a mutex. A mutex also woke a follower
//! each time a leader left: a wake and a poll that found little, for every batch, so that
//! with a CPU-bound app two threads served more than the pool's 256 (docs/design.md). Now
//! a follower is woken at once only where nobody else would come back to the poller soon:
//! the leader leaves to run requests itself, or apps are blocked (two threads inside one,
//! or a thread got the GIL from one: `runner`). A leader that leaves only to wait for the
//! GIL behind a runner's CPU-bound work leaves the waking to a watcher in the kernel's idle
//! scheduling class, which runs only when a CPU would otherwise idle, and hands the lead to
//! the follower that parked last (the one whose stack is still in the caches). Where other
//! processes keep the CPUs busy the idle class may not run for long: a backstop in the
//! normal class hands on a lead left for a whole switch interval, the wait a thread wanting
//! the GIL accepts too. Where the idle class is missing, every leaving leader wakes a
//! follower.

use crate::sync::{lock_unpoisoned, wait_timeout_unpoisoned, wait_unpoisoned};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::Thread;
use std::time::Duration;

/// The threads' names (within the kernel's 15 characters, so that tests can find them).
const WATCHER_THREAD: &str = "wsgi-lead-idle";
const BACKSTOP_THREAD: &str = "wsgi-backstop";

/// A parked follower: its thread, and whether the lead has been handed to it.
struct Follower {
    thread: Thread,
    called: AtomicBool,
}

#[derive(Default)]
struct State {
    /// A thread leads, or has been handed the lead and is waking to take it.
    led: bool,
    /// Followers, the last parked on top.
    parked: Vec<Arc<Follower>>,
    /// The idle watcher runs: leaving leaders leave the waking to it.
    watched: bool,
    /// The watcher waits for a leader to leave.
    watcher_waiting: bool,
    /// Leads left so far: the backstop's way to see that a lead stayed left.
    leaves: u64,
    /// The backstop waits for a leader to leave (it looks again an interval later).
    backstop_waiting: bool,
    stopping: bool,
}

impl State {
    /// Hand the lead to the follower parked last; false if none is parked.
    fn call_next(&mut self) -> bool {
        let Some(next) = self.parked.pop() else { return false };
        self.led = true;
        next.called.store(true, Ordering::Release);
        next.thread.unpark();
        true
    }
}

#[derive(Default)]
pub struct Lead {
    state: Mutex<State>,
    /// The watcher's wait for a leader to leave.
    left: Condvar,
    /// The backstop's.
    left_backstop: Condvar,
}

/// The lead, held: dropping it leaves it (see `Lead`), `leave(true)` wakes a follower at
/// once.
pub struct Leading<'a> {
    lead: &'a Lead,
    eager: bool,
}

impl Leading<'_> {
    /// Leave the lead; `eager`: a follower is woken now (the leader goes to run requests
    /// and nobody else would come back to the poller while they block).
    pub fn leave(mut self, eager: bool) {
        self.eager = eager;
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let mut st = self.lead.lock();
        st.led = false;
        st.leaves += 1;
        if st.parked.is_empty() {
            return;
        }
        if self.eager || !st.watched || st.stopping {
            st.call_next();
            return;
        }
        if st.watcher_waiting {
            st.watcher_waiting = false;
            self.lead.left.notify_one();
        }
        if st.backstop_waiting {
            st.backstop_waiting = false;
            self.lead.left_backstop.notify_one();
        }
    }
}

impl Lead {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock_unpoisoned(&self.state)
    }

    /// Wait to lead: at once if nobody does, else parked until the lead is handed over.
    pub fn take(&self) -> Leading<'_> {
        let me = {
            let mut st = self.lock();
            if !st.led {
                st.led = true;
                return Leading { lead: self, eager: false };
            }
            let me = Arc::new(Follower { thread: std::thread::current(), called: AtomicBool::new(false) });
            st.parked.push(me.clone());
            me
        };
        // `park` may return without an `unpark`; only the flag says the lead was handed.
        while !me.called.load(Ordering::Acquire) {
            std::thread::park();
        }
        Leading { lead: self, eager: false }
    }

    /// A follower takes up a lead that was left, now: an app blocked (see `runner`).
    pub fn take_up(&self) {
        let mut st = self.lock();
        if !st.led {
            st.call_next();
        }
    }

    /// The server stops: every follower is woken in turn (each leader that leaves hands
    /// the lead on at once), and the watcher ends.
    pub fn stop(&self) {
        let mut st = self.lock();
        st.stopping = true;
        if !st.led {
            st.call_next();
        }
        self.left.notify_all();
        self.left_backstop.notify_all();
    }

    /// Start the watcher and its backstop (Linux), the backstop looking every `interval`
    /// while a lead is left; without the idle class leaving leaders wake followers.
    pub fn watch(self: &Arc<Self>, interval: Duration) {
        #[cfg(target_os = "linux")]
        {
            // Started from here, in the caller's class: a thread starts in its creator's,
            // and could not leave the idle class.
            let backstop = self.clone();
            let started =
                std::thread::Builder::new().name(BACKSTOP_THREAD.into()).spawn(move || backstop.backstop(interval));
            if started.is_err() {
                return;
            }
            let lead = self.clone();
            let spawned = std::thread::Builder::new().name(WATCHER_THREAD.into()).spawn(move || {
                if crate::wsgi::idle_watch::set_class(libc::SCHED_IDLE) {
                    lead.watcher();
                }
            });
            // Never joined: they end at `stop`, and hold no Python object.
            drop((started, spawned));
        }
        #[cfg(not(target_os = "linux"))]
        let _ = interval;
    }

    /// The backstop's life: a lead left with followers parked, and not taken or handed on
    /// in a whole `interval`, is handed on. It sleeps while the lead is held.
    fn backstop(&self, interval: Duration) {
        let mut st = self.lock();
        let mut seen = None;
        loop {
            if st.stopping {
                return;
            }
            let left = !st.led && !st.parked.is_empty();
            if left && seen == Some(st.leaves) {
                st.call_next();
                continue;
            }
            if left {
                seen = Some(st.leaves);
                st = wait_timeout_unpoisoned(&self.left_backstop, st, interval);
            } else {
                seen = None;
                st.backstop_waiting = true;
                st = wait_unpoisoned(&self.left_backstop, st);
                st.backstop_waiting = false;
            }
        }
    }

    /// The watcher's life, in the idle class: a lead left with followers parked is handed
    /// to one when this thread gets to run, that is when a CPU has nothing else to do.
    fn watcher(&self) {
        let mut st = self.lock();
        st.watched = true;
        loop {
            if st.stopping {
                // `stop` has handed an unled lead on; leaving leaders do from now on.
                st.watched = false;
                return;
            }
            if !st.led && st.call_next() {
                // The follower woken runs before this thread does again.
                continue;
            }
            st.watcher_waiting = true;
            st = wait_unpoisoned(&self.left, st);
            st.watcher_waiting = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Park `n` threads behind the lead in order, each reporting its number when it leads
    /// and leaving the lead at once.
    fn park_in_order(lead: &Arc<Lead>, n: usize, tx: &mpsc::Sender<usize>) -> Vec<std::thread::JoinHandle<()>> {
        let mut handles = Vec::new();
        for i in 0..n {
            let (shared, tx) = (lead.clone(), tx.clone());
            handles.push(std::thread::spawn(move || {
                let _l = shared.take();
                tx.send(i).expect("receiver alive");
            }));
            // Parked before the next one comes.
            while lead.lock().parked.len() < i + 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        handles
    }

    /// A lead whose watcher runs (the calling thread blocks until it does).
    fn watched() -> Arc<Lead> {
        let lead = Arc::new(Lead::default());
        lead.watch(Duration::from_millis(5));
        while !lead.lock().watched {
            std::thread::sleep(Duration::from_millis(1));
        }
        lead
    }

    /// Take the lead, park `n` followers behind it, let `leave` leave it, and return the
    /// order in which the followers led.
    fn leaders_after(lead: &Arc<Lead>, n: usize, leave: impl FnOnce(Leading<'_>)) -> Vec<usize> {
        let (tx, rx) = mpsc::channel();
        let first = lead.take();
        let handles = park_in_order(lead, n, &tx);
        leave(first);
        let mut order: Vec<usize> = (0..n).map(|_| rx.recv().expect("a leader")).collect();
        for h in handles {
            h.join().expect("no panic");
        }
        if lead.lock().stopping {
            order.sort_unstable();
        }
        order
    }

    #[test]
    fn without_a_watcher_the_lead_goes_to_the_follower_parked_last() {
        let lead = Arc::new(Lead::default());
        assert_eq!(leaders_after(&lead, 3, |first| drop(first)), vec![2, 1, 0]);
        // Nobody leads now: the next taker leads at once.
        drop(lead.take());
        assert!(!lead.lock().led);
    }

    #[test]
    fn a_lead_left_lazily_waits_for_a_taker_and_an_eager_one_is_handed_on() {
        // As if the watcher ran but never got a CPU, and had no backstop.
        let lead = Arc::new(Lead::default());
        lead.lock().watched = true;
        assert_eq!(leaders_after(&lead, 1, |first| first.leave(true)), vec![0]);
        let order = leaders_after(&lead, 2, |first| {
            first.leave(false);
            let mut st = lead.lock();
            assert!(!st.led && st.parked.len() == 2);
            // The followers' own leaves (lazy too) hand on only without a watcher.
            st.watched = false;
            drop(st);
            // An app blocked: the lead is taken up at once.
            lead.take_up();
        });
        assert_eq!(order, vec![1, 0]);
    }

    #[test]
    fn with_a_watcher_a_left_lead_is_handed_on_when_a_cpu_idles() {
        // This test's threads all block, so a CPU idles and the watcher runs.
        let lead = watched();
        assert_eq!(leaders_after(&lead, 2, |first| drop(first)), vec![1, 0]);
        lead.stop();
        while lead.lock().watched {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn the_backstop_hands_on_a_lead_the_watcher_left_alone() {
        // As if the watcher ran but never got a CPU: only the backstop can hand it on.
        let lead = Arc::new(Lead::default());
        lead.lock().watched = true;
        let backstop = {
            let lead = lead.clone();
            std::thread::spawn(move || lead.backstop(Duration::from_millis(5)))
        };
        assert_eq!(leaders_after(&lead, 2, |first| drop(first)), vec![1, 0]);
        lead.stop();
        backstop.join().expect("the backstop ends at the stop");
    }

    /// The scheduling classes of this process's threads named `name`.
    #[cfg(target_os = "linux")]
    fn classes_of(name: &str) -> Vec<libc::c_int> {
        let mut classes = Vec::new();
        for entry in std::fs::read_dir("/proc/self/task").expect("tasks").flatten() {
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            let tid = entry.file_name().to_str().and_then(|t| t.parse::<libc::pid_t>().ok());
            if let (true, Some(tid)) = (comm.trim() == name, tid) {
                // SAFETY: sched_getscheduler only reads the policy of thread `tid`.
                classes.push(unsafe { libc::sched_getscheduler(tid) });
            }
        }
        classes
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_watcher_runs_in_the_idle_class_and_the_backstop_in_the_normal_one() {
        let lead = watched();
        let watchers = classes_of(WATCHER_THREAD);
        let backstops = classes_of(BACKSTOP_THREAD);
        assert!(!watchers.is_empty() && watchers.iter().all(|c| *c == libc::SCHED_IDLE), "{watchers:?}");
        assert!(!backstops.is_empty() && backstops.iter().all(|c| *c == libc::SCHED_OTHER), "{backstops:?}");
        lead.stop();
    }

    #[test]
    fn the_stop_wakes_every_follower() {
        // Followers parked while the lead is held; the stop, then the leader leaving,
        // wakes them one after another.
        let lead = watched();
        let order = leaders_after(&lead, 3, |first| {
            lead.stop();
            drop(first);
        });
        assert_eq!(order, vec![0, 1, 2]);
    }

    #[test]
    fn one_leader_at_a_time_under_contention() {
        let lead = Arc::new(Lead::default());
        lead.watch(Duration::from_millis(5));
        let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (lead, inside) = (lead.clone(), inside.clone());
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let _l = lead.take();
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("no two leaders");
        }
        lead.stop();
    }
}
