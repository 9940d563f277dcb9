//! The timer queue: a binary min-heap ordered by (deadline, insertion order), so timers
//! with equal deadlines fire in the order they were scheduled.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

struct Entry<T> {
    when: f64,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    // Reversed: BinaryHeap is a max-heap and we want the earliest deadline on top.
    fn cmp(&self, other: &Self) -> Ordering {
        other.when.total_cmp(&self.when).then_with(|| other.seq.cmp(&self.seq))
    }
}

pub struct TimerQueue<T> {
    heap: BinaryHeap<Entry<T>>,
    next_seq: u64,
}

impl<T> Default for TimerQueue<T> {
    fn default() -> Self {
        Self { heap: BinaryHeap::new(), next_seq: 0 }
    }
}

impl<T> TimerQueue<T> {
    /// A NaN deadline is due at once: it is not later than any time (the stdlib's heap, up
    /// to 3.12, runs such a timer at the next iteration; 3.13's fails in the poll).
    pub fn push(&mut self, when: f64, item: T) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let when = if when.is_nan() { f64::NEG_INFINITY } else { when };
        self.heap.push(Entry { when, seq, item });
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Deadline and item of the earliest timer.
    pub fn peek(&self) -> Option<(f64, &T)> {
        self.heap.peek().map(|e| (e.when, &e.item))
    }

    pub fn pop(&mut self) -> Option<T> {
        self.heap.pop().map(|e| e.item)
    }

    /// Pop the earliest timer if its deadline is at or before `now`.
    pub fn pop_due(&mut self, now: f64) -> Option<T> {
        match self.heap.peek() {
            Some(e) if e.when <= now => self.pop(),
            _ => None,
        }
    }

    /// Remove every item for which `drop_it` says true and hand them back, keeping the order of
    /// the rest. The caller drops the removed items (they may be Python objects).
    pub fn extract_if(&mut self, mut drop_it: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut kept = Vec::with_capacity(self.heap.len());
        let mut removed = Vec::new();
        for e in std::mem::take(&mut self.heap).into_vec() {
            if drop_it(&e.item) {
                removed.push(e.item);
            } else {
                kept.push(e);
            }
        }
        self.heap = BinaryHeap::from(kept);
        removed
    }

    pub fn drain(&mut self) -> Vec<T> {
        std::mem::take(&mut self.heap).into_vec().into_iter().map(|e| e.item).collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.heap.iter().map(|e| &e.item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_deadline_order() {
        let mut q = TimerQueue::default();
        for (i, when) in [5.0, 1.0, 3.0, 2.0, 4.0].into_iter().enumerate() {
            q.push(when, i);
        }
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![1, 3, 2, 4, 0]);
    }

    #[test]
    fn equal_deadlines_keep_insertion_order() {
        let mut q = TimerQueue::default();
        for i in 0..100 {
            q.push(7.0, i);
        }
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn pop_due_respects_now() {
        let mut q = TimerQueue::default();
        q.push(1.0, "a");
        q.push(2.0, "b");
        assert_eq!(q.pop_due(0.5), None);
        assert_eq!(q.pop_due(1.0), Some("a"));
        assert_eq!(q.pop_due(1.5), None);
        assert_eq!(q.pop_due(9.0), Some("b"));
        assert!(q.is_empty());
    }

    #[test]
    fn extract_if_keeps_heap_order() {
        let mut q = TimerQueue::default();
        for i in 0..50u32 {
            q.push(f64::from(50 - i), i);
        }
        let removed = q.extract_if(|i| i % 2 == 0);
        assert_eq!(removed.len(), 25);
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        let expected: Vec<u32> = (0..50).rev().filter(|i| i % 2 == 1).collect();
        assert_eq!(order, expected);
    }

    #[test]
    fn negative_and_nan_deadlines_are_due_at_once() {
        let mut q = TimerQueue::default();
        q.push(-1.0, 1);
        q.push(f64::NAN, 2);
        q.push(0.0, 3);
        q.push(-f64::NAN, 4);
        q.push(5.0, 5);
        assert_eq!(q.peek().map(|(w, _)| w), Some(f64::NEG_INFINITY));
        let due: Vec<_> = std::iter::from_fn(|| q.pop_due(0.0)).collect();
        assert_eq!(due, [2, 4, 1, 3]);
        assert_eq!(q.len(), 1);
    }
}
