//! The thread engine's side of the supervisor's connection board: whether this worker may
//! accept a connection now. The policy is the loop path's (python/swordfish/server/
//! balance.py says why, with the measurements): before each accept the worker writes its
//! open connections to its slot and takes one only while it holds no more than the fewest
//! any other accepting worker holds, plus one, plus an eighth of that; otherwise it stops
//! watching its listeners for a pause that doubles from `PAUSE` to `GIVE_UP`, and after
//! `GIVE_UP` of refusals takes one anyway (a worker whose count is lowest but who is stuck
//! must not leave the queue to nobody). Here the engine's leader asks, without the GIL.

use memmap2::{MmapOptions, MmapRaw};
use std::fs::File;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

/// A slot whose worker does not accept (free, or stopped accepting).
const NOT_ACCEPTING: i64 = -1;
const PAUSE: Duration = Duration::from_millis(1);
const GIVE_UP: Duration = Duration::from_millis(50);

pub struct Gate {
    map: MmapRaw,
    slots: usize,
    slot: usize,
    refused_since: Option<Instant>,
    last_asked: Option<Instant>,
    next_pause: Duration,
}

impl Gate {
    /// Map the board (the supervisor's memory file `fd`, which the caller keeps open for
    /// the call) as worker `slot`.
    pub fn attach(fd: RawFd, slot: usize) -> std::io::Result<Gate> {
        // SAFETY: the caller's descriptor is open for this call; the map keeps its own.
        let file = File::from(unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()?);
        let len = usize::try_from(file.metadata()?.len()).unwrap_or(0);
        let slots = len / std::mem::size_of::<i64>();
        if slot >= slots {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "no such slot on the board"));
        }
        let map = MmapOptions::new().len(slots * std::mem::size_of::<i64>()).map_raw(&file)?;
        Ok(Gate { map, slots, slot, refused_since: None, last_asked: None, next_pause: PAUSE })
    }

    fn cell(&self, i: usize) -> &AtomicI64 {
        debug_assert!(i < self.slots);
        // SAFETY: the map is page-aligned and `slots` 8-byte cells long, and `i` is one of
        // them; other processes only ever store whole aligned 8-byte values in it, which
        // an atomic load sees whole.
        unsafe { &*self.map.as_ptr().cast::<AtomicI64>().add(i) }
    }

    fn over_share(&self, mine: i64) -> bool {
        let others = (0..self.slots).filter(|&i| i != self.slot).map(|i| self.cell(i).load(Ordering::Relaxed));
        match others.filter(|&n| n != NOT_ACCEPTING).min() {
            None => false,
            Some(fewest) => mine > fewest + 1 + fewest / 8,
        }
    }

    /// None if this worker may accept one connection now (holding `mine`), else how long
    /// to stop watching the listeners before asking again.
    pub fn pause(&mut self, mine: usize, now: Instant) -> Option<Duration> {
        let mine = i64::try_from(mine).unwrap_or(i64::MAX);
        self.cell(self.slot).store(mine, Ordering::Relaxed);
        // Asked again within a pause and a bit: connections are still waiting. Asked after
        // longer, the socket had been quiet: a new run of refusals begins.
        if self.last_asked.is_none_or(|t| now.duration_since(t) > 2 * GIVE_UP) {
            self.refused_since = None;
            self.next_pause = PAUSE;
        }
        self.last_asked = Some(now);
        let stuck = self.refused_since.is_some_and(|t| now.duration_since(t) >= GIVE_UP);
        if stuck || !self.over_share(mine) {
            self.refused_since = None;
            self.next_pause = PAUSE;
            // The connection it is about to take.
            self.cell(self.slot).store(mine + 1, Ordering::Relaxed);
            return None;
        }
        self.refused_since.get_or_insert(now);
        let pause = self.next_pause;
        self.next_pause = (self.next_pause * 2).min(GIVE_UP);
        Some(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    fn board(counts: &[i64]) -> File {
        let mut f = tempfile_in_memory();
        for c in counts {
            f.write_all(&c.to_ne_bytes()).expect("write");
        }
        f
    }

    fn tempfile_in_memory() -> File {
        use std::os::fd::FromRawFd;
        // SAFETY: memfd_create takes a valid C string and flags.
        let fd = unsafe { libc::memfd_create(c"gate-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: a new descriptor, owned by nobody else.
        unsafe { File::from_raw_fd(fd) }
    }

    #[test]
    fn accepts_within_its_share_and_pauses_beyond() {
        let f = board(&[0, 10, NOT_ACCEPTING]);
        let mut g = Gate::attach(f.as_raw_fd(), 0).expect("attach");
        let t0 = Instant::now();
        // 12 <= 10 + 1 + 1: accepted, and the count written is the one it takes.
        assert_eq!(g.pause(12, t0), None);
        assert_eq!(g.cell(0).load(Ordering::Relaxed), 13);
        // 13 is over: pauses doubling from PAUSE.
        assert_eq!(g.pause(13, t0), Some(PAUSE));
        assert_eq!(g.pause(13, t0 + PAUSE), Some(2 * PAUSE));
        // Refused for GIVE_UP: one is taken anyway.
        assert_eq!(g.pause(13, t0 + GIVE_UP), None);
    }

    #[test]
    fn alone_it_always_accepts() {
        let f = board(&[5, NOT_ACCEPTING]);
        let mut g = Gate::attach(f.as_raw_fd(), 0).expect("attach");
        assert_eq!(g.pause(1000, Instant::now()), None);
        assert!(Gate::attach(f.as_raw_fd(), 2).is_err());
    }
}
