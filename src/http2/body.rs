//! A stream's body bytes waiting between `h2` and the application: the request's DATA
//! payloads received and not yet taken (`Waiting`, and the `Chunks` a reader takes them
//! as), and the response's parts given and not yet handed to `h2` (`Queue`).
//!
//! A payload from `h2` is a slice of its read buffer, and a slice keeps that whole buffer
//! alive, whatever else the buffer held. Kept as slices, the payloads of one-byte DATA
//! frames sent to an application that does not read cost the server their frames' bytes
//! and a slice each, some 40 bytes a byte of body (20.5 MiB for 512 KiB, measured by
//! `tests/test_http2_attacks.py`), where the window promises about one. So a payload is
//! kept as `h2` gave it only when nothing waits before it (a body in one frame, taken
//! before the next comes) or when it is at least half the largest frame the server
//! takes: `h2` reads into buffers of 8 KiB, or of the frame's size where the frame is
//! larger, so such a slice keeps no more than a few times its own bytes, and a client
//! that fills its frames, as clients uploading a body do, has it copied once, by its
//! reader. Smaller payloads behind a waiting one are copied into a buffer of the stream's
//! own, and what a stream holds stays within a few times what its window let in.
//!
//! The response's side has the same hazard the other way: an app that streams small parts
//! (tokens, events) to a client that does not read would have each part wait as an
//! allocation and an entry of its own, and `h2` would hold each as a DATA frame: 46 MiB
//! for a 1 MiB body of one-byte parts, where the send buffer promises 400 KiB. So the
//! small parts are copied together (`Queue::push_small`), and reach `h2` as one DATA
//! frame where they wait for the same chance to go.

use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;

/// Body bytes as they were received: whoever takes them copies them once, into what it
/// needs.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Chunks(pub Vec<Bytes>);

impl Chunks {
    pub fn len(&self) -> usize {
        self.0.iter().map(|b| b.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|b| b.is_empty())
    }

    /// Copy them into `out`, which is `len()` long.
    pub fn copy_to(&self, out: &mut [u8]) {
        let mut at = 0;
        for b in &self.0 {
            if let Some(dst) = out.get_mut(at..at + b.len()) {
                dst.copy_from_slice(b);
            }
            at += b.len();
        }
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        self.copy_to(&mut v);
        v
    }
}

/// Payloads received on a stream and not yet taken, in order: `kept` then `copied`.
#[derive(Debug, Default)]
pub struct Waiting {
    /// Payloads as `h2` gave them, and earlier copies.
    kept: Vec<Bytes>,
    /// The small payloads received since the last one kept, copied.
    copied: BytesMut,
}

impl Waiting {
    /// Add a payload; one of `keep_from` bytes or more is kept as given (see above).
    pub fn push(&mut self, payload: Bytes, keep_from: usize) {
        if payload.is_empty() {
            return;
        }
        if self.is_empty() {
            self.kept.push(payload);
        } else if payload.len() >= keep_from {
            self.close_copy();
            self.kept.push(payload);
        } else {
            self.copied.extend_from_slice(&payload);
        }
    }

    pub fn len(&self) -> usize {
        self.kept.iter().map(|b| b.len()).sum::<usize>() + self.copied.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.copied.is_empty()
    }

    /// All of them, in order; none wait after.
    pub fn take(&mut self) -> Chunks {
        self.close_copy();
        Chunks(std::mem::take(&mut self.kept))
    }

    pub fn clear(&mut self) {
        *self = Waiting::default();
    }

    /// The copies so far go behind the kept payloads, allocation and all: an idle stream
    /// keeps no buffer.
    fn close_copy(&mut self) {
        if !self.copied.is_empty() {
            self.kept.push(std::mem::take(&mut self.copied).freeze());
        }
    }
}

/// Response bytes waiting for `h2`, in order: `parts` then `small`.
#[derive(Debug, Default)]
pub struct Queue {
    parts: VecDeque<Bytes>,
    /// The small parts given since the last other one, copied together.
    small: BytesMut,
    len: usize,
}

impl Queue {
    /// A part to go as it is.
    pub fn push(&mut self, part: Bytes) {
        if part.is_empty() {
            return;
        }
        self.close_small();
        self.len += part.len();
        self.parts.push_back(part);
    }

    /// A small part, copied behind the small parts before it.
    pub fn push_small(&mut self, part: &[u8]) {
        self.len += part.len();
        self.small.extend_from_slice(part);
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Up to `room` bytes from the front, as one piece (None: nothing waits).
    pub fn take(&mut self, room: usize) -> Option<Bytes> {
        let piece = match self.parts.front_mut() {
            Some(front) if front.len() <= room => self.parts.pop_front()?,
            Some(front) => front.split_to(room),
            None if self.small.is_empty() => return None,
            None => self.small.split_to(room.min(self.small.len())).freeze(),
        };
        self.len -= piece.len();
        Some(piece)
    }

    pub fn clear(&mut self) {
        *self = Queue::default();
    }

    fn close_small(&mut self) {
        if !self.small.is_empty() {
            self.parts.push_back(std::mem::take(&mut self.small).freeze());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_copy_out_whole_and_in_order() {
        let c = Chunks(vec![Bytes::from_static(b"ab"), Bytes::new(), Bytes::from_static(b"cde")]);
        assert_eq!((c.len(), c.is_empty()), (5, false));
        assert_eq!(c.to_vec(), b"abcde");
        assert!(Chunks(vec![Bytes::new()]).is_empty() && Chunks::default().to_vec().is_empty());
    }

    #[test]
    fn a_payload_waiting_alone_is_kept_as_given() {
        let buffer = Bytes::from_static(b"frame head and payload");
        let payload = buffer.slice(15..);
        let mut w = Waiting::default();
        w.push(payload.clone(), 1000);
        assert_eq!((w.len(), w.is_empty()), (7, false));
        let c = w.take();
        assert_eq!(c.0.len(), 1);
        assert_eq!(c.0[0].as_ptr(), payload.as_ptr());
        assert!(w.is_empty() && w.take() == Chunks::default());
    }

    #[test]
    fn small_payloads_behind_a_waiting_one_are_copied_into_one_buffer() {
        let buffer = Bytes::from(vec![b'x'; 4096]);
        let mut w = Waiting::default();
        w.push(Bytes::from_static(b"a"), 1000);
        for i in 0..100 {
            w.push(buffer.slice(i..i + 1), 1000);
            w.push(Bytes::new(), 1000);
        }
        assert_eq!(w.len(), 101);
        let c = w.take();
        assert_eq!(c.0.len(), 2);
        // The copy holds its own bytes, not the 4 KiB buffer the slices came from.
        assert!(!buffer.as_ptr_range().contains(&c.0[1].as_ptr()));
        assert_eq!(c.to_vec(), [b"a".as_slice(), &[b'x'; 100]].concat());
        assert_eq!(w.copied.capacity(), 0);
        w.push(Bytes::from_static(b"bc"), 1000);
        w.push(Bytes::from_static(b"d"), 1000);
        w.clear();
        assert!(w.is_empty() && w.take() == Chunks::default());
    }

    #[test]
    fn large_payloads_are_kept_as_given_and_the_order_holds() {
        let big = Bytes::from(vec![b'B'; 1000]);
        let mut w = Waiting::default();
        for part in [&b"a"[..], b"b", &big, b"c", &big, &big, b"d"] {
            let part = if part.len() == 1000 { big.clone() } else { Bytes::copy_from_slice(part) };
            w.push(part, 1000);
        }
        let c = w.take();
        let kept = c.0.iter().filter(|b| b.as_ptr() == big.as_ptr()).count();
        assert_eq!((c.0.len(), kept), (7, 3));
        let whole = [&b"ab"[..], &big, b"c", &big, &big, b"d"].concat();
        assert_eq!((c.len(), c.to_vec()), (whole.len(), whole));
    }

    #[test]
    fn small_parts_go_together_and_in_order_with_the_others() {
        let mut q = Queue::default();
        q.push_small(b"a");
        q.push_small(b"b");
        q.push(Bytes::from_static(b"LARGE"));
        q.push(Bytes::new());
        q.push_small(b"c");
        q.push_small(b"d");
        assert_eq!((q.len(), q.is_empty()), (9, false));
        assert_eq!(q.take(100), Some(Bytes::from_static(b"ab")));
        assert_eq!(q.take(3), Some(Bytes::from_static(b"LAR")));
        assert_eq!(q.take(100), Some(Bytes::from_static(b"GE")));
        assert_eq!(q.len(), 2);
        q.push_small(b"e");
        assert_eq!(q.take(2), Some(Bytes::from_static(b"cd")));
        assert_eq!(q.take(2), Some(Bytes::from_static(b"e")));
        assert_eq!((q.take(2), q.len(), q.is_empty()), (None, 0, true));
        q.push_small(b"f");
        q.push(Bytes::from_static(b"g"));
        q.clear();
        assert_eq!((q.take(10), q.len()), (None, 0));
    }
}
