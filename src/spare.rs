//! The pool of handles kept for reuse (see `Handle::recyclable`).
//!
//! Reuse is not only cheaper than allocating: it keeps bursts of callbacks from driving the
//! cyclic GC. Every new handle counts towards the next collection, and when thousands of
//! timers fire in one iteration (thousands of tasks sleeping the same delay) the handles of
//! their wake-ups are allocated in one go, which triggers collections; their release later
//! cannot undo that, since a collection resets the count. So the pool keeps as many handles
//! as the largest recent burst needed, and gives back, once a second, half of those that
//! stayed unused all that second: memory follows the working set instead of the peak.

use crate::handles::{Handle, TimerHandle};
use pyo3::prelude::*;

/// Seconds between two trims of the unused part of the pool.
const TRIM_PERIOD: f64 = 1.0;

/// A list of spare objects that remembers how much of it went unused since the last trim.
struct Shelf<T> {
    items: Vec<T>,
    /// The smallest length seen since the last trim: that many items were never needed.
    low_water: usize,
}

impl<T> Default for Shelf<T> {
    fn default() -> Self {
        Shelf { items: Vec::new(), low_water: 0 }
    }
}

impl<T> Shelf<T> {
    fn take(&mut self) -> Option<T> {
        let item = self.items.pop();
        self.low_water = self.low_water.min(self.items.len());
        item
    }

    /// Remove half of what went unused; the caller drops it.
    fn trim(&mut self, out: &mut Vec<T>) {
        let excess = self.low_water / 2;
        out.extend(self.items.drain(..excess));
        self.low_water = self.items.len();
    }
}

#[derive(Default)]
pub struct SparePool {
    handles: Shelf<Py<Handle>>,
    timers: Shelf<Py<TimerHandle>>,
    next_trim: f64,
}

/// What a trim removed, to be dropped once the pool is no longer borrowed.
pub type Trimmed = (Vec<Py<Handle>>, Vec<Py<TimerHandle>>);

impl SparePool {
    pub fn take_handle(&mut self) -> Option<Py<Handle>> {
        self.handles.take()
    }

    pub fn take_timer(&mut self) -> Option<Py<TimerHandle>> {
        self.timers.take()
    }

    /// Keep an emptied handle that nothing else refers to.
    pub fn keep(&mut self, handle: Bound<'_, Handle>) {
        match handle.cast_into_exact::<TimerHandle>() {
            Ok(t) => self.timers.items.push(t.unbind()),
            Err(e) => {
                if let Ok(h) = e.into_inner().cast_into_exact::<Handle>() {
                    self.handles.items.push(h.unbind());
                }
            }
        }
    }

    /// Once per `TRIM_PERIOD`: give back half of what went unused during the last one.
    pub fn trim(&mut self, now: f64) -> Option<Trimmed> {
        if now < self.next_trim {
            return None;
        }
        self.next_trim = now + TRIM_PERIOD;
        let mut out = (Vec::new(), Vec::new());
        self.handles.trim(&mut out.0);
        self.timers.trim(&mut out.1);
        Some(out)
    }

    /// (spare handles, spare timers), for tests.
    pub fn len(&self) -> (usize, usize) {
        (self.handles.items.len(), self.timers.items.len())
    }
}

#[cfg(test)]
mod tests {
    use super::Shelf;

    fn shelf(n: u32) -> Shelf<u32> {
        let mut s = Shelf::default();
        s.items.extend(0..n);
        s.low_water = s.items.len();
        s
    }

    #[test]
    fn trim_gives_back_half_of_what_went_unused() {
        let mut s = shelf(100);
        for _ in 0..40 {
            s.take();
        }
        s.items.extend(0..40); // the burst came back
        let mut out = Vec::new();
        s.trim(&mut out);
        assert_eq!(out.len(), 30); // 60 never left the shelf
        assert_eq!(s.items.len(), 70);
        assert_eq!(s.low_water, 70);
    }

    #[test]
    fn a_shelf_in_use_keeps_everything() {
        let mut s = shelf(10);
        while s.take().is_some() {}
        s.items.extend(0..10);
        let mut out = Vec::new();
        s.trim(&mut out);
        assert!(out.is_empty());
        assert_eq!(s.items.len(), 10);
    }

    #[test]
    fn an_idle_shelf_empties_over_a_few_trims() {
        let mut s = shelf(64);
        let mut out = Vec::new();
        let mut rounds = 0;
        while !s.items.is_empty() && rounds < 10 {
            s.trim(&mut out);
            rounds += 1;
        }
        assert!(s.items.len() <= 1, "left {}", s.items.len());
        assert_eq!(out.len() + s.items.len(), 64);
    }
}
