//! The connections' deadlines (the header-read and keep-alive timeouts the connection core
//! asks for with `Act::ArmTimer`), in one heap the polling thread waits on: its poll ends
//! at the earliest. A timer is cancelled by moving its connection's sequence number on, so
//! entries are never searched for; stale ones are dropped when they come up.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    at: Instant,
    token: usize,
    seq: u64,
}

#[derive(Default)]
pub struct Timers {
    heap: BinaryHeap<Reverse<Entry>>,
}

impl Timers {
    /// Arm the timer of connection `token` (its sequence number now `seq`) for `after`;
    /// whether it is now the earliest.
    pub fn arm(&mut self, token: usize, seq: u64, after: Duration) -> bool {
        let at = Instant::now() + after;
        let earliest = self.heap.peek().is_none_or(|Reverse(e)| at < e.at);
        self.heap.push(Reverse(Entry { at, token, seq }));
        earliest
    }

    /// How long until the earliest deadline (None: no timer is armed).
    pub fn next(&self) -> Option<Duration> {
        self.heap.peek().map(|Reverse(e)| e.at.saturating_duration_since(Instant::now()))
    }

    /// The (token, seq) of every timer due now, taken off.
    pub fn due(&mut self) -> Vec<(usize, u64)> {
        let now = Instant::now();
        let mut out = Vec::new();
        while let Some(Reverse(e)) = self.heap.peek() {
            if e.at > now {
                break;
            }
            out.push((e.token, e.seq));
            self.heap.pop();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_only_when_due() {
        let mut t = Timers::default();
        assert!(t.next().is_none());
        assert!(t.arm(1, 1, Duration::from_secs(60)));
        assert!(t.arm(2, 1, Duration::ZERO));
        assert!(!t.arm(3, 1, Duration::from_secs(30)));
        assert_eq!(t.due(), vec![(2, 1)]);
        let left = t.next().expect("armed");
        assert!(left > Duration::from_secs(29) && left <= Duration::from_secs(30));
        assert!(t.due().is_empty());
    }
}
