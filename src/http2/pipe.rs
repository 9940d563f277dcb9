//! The in-memory I/O an HTTP/2 connection (`h2`) reads and writes: the client's bytes are
//! pushed in as they arrive from the transport, and the frames `h2` writes are taken out
//! and handed to the transport. `h2` polls it with tokio's I/O traits; nothing here needs
//! a runtime. Writes are refused above a cap (`Pending`), as a socket's would be when its
//! buffer is full: `h2` then stops reading frames that make it answer (PING, SETTINGS), so
//! a client that sends them and never reads cannot grow the server's memory.
//!
//! The client's bytes are lent, not copied, while the connection runs on them: `lend`
//! gives the pipe the transport's slice for one `drive`, `h2` reads from it, and
//! `end_loan` keeps only what `h2` left unread. Most reads then cost one copy (into `h2`'s
//! buffer) instead of two, and an idle connection holds no input buffer.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The input buffer's capacity kept between reads.
const KEPT_CAPACITY: usize = 16 * 1024;

/// A slice of the client's bytes lent for one `drive`: its address and length, and how
/// much of it `h2` has read.
#[derive(Default)]
struct Loan {
    at: usize,
    len: usize,
    read: usize,
}

#[derive(Default)]
pub struct Buffers {
    /// The client's bytes not yet read by `h2`, from `read_pos` on (before the loan's).
    inbound: Vec<u8>,
    read_pos: usize,
    loan: Option<Loan>,
    /// The client closed its side.
    pub eof: bool,
    /// Frames written by `h2`, for the transport.
    pub outbound: Vec<u8>,
    /// `outbound` takes no more once it holds this much.
    pub cap: usize,
}

impl Buffers {
    pub fn push(&mut self, data: &[u8]) {
        if self.read_pos == self.inbound.len() {
            // All read: a buffer a burst grew is given back rather than kept by a
            // connection that may now stay idle.
            if self.inbound.capacity() > KEPT_CAPACITY {
                self.inbound = Vec::new();
            }
            self.inbound.clear();
            self.read_pos = 0;
        }
        self.inbound.extend_from_slice(data);
    }

    /// Bytes pushed that `h2` has not read yet.
    pub fn unread(&self) -> usize {
        self.inbound.len() - self.read_pos
    }

    /// Lend `data` until `end_loan`, which the caller must call before `data` goes.
    pub fn lend(&mut self, data: &[u8]) {
        self.loan = Some(Loan { at: data.as_ptr() as usize, len: data.len(), read: 0 });
    }

    /// The loan is over: what `h2` did not read of it is copied in; an input buffer that
    /// is all read is given back.
    pub fn end_loan(&mut self) {
        let Some(loan) = self.loan.take() else { return };
        if loan.read < loan.len {
            // SAFETY: the slice is the caller's of `lend`, alive until this call.
            let rest = unsafe { std::slice::from_raw_parts((loan.at + loan.read) as *const u8, loan.len - loan.read) };
            self.push(rest);
        } else if self.unread() == 0 {
            self.inbound = Vec::new();
            self.read_pos = 0;
        }
    }

    /// Up to `n` bytes of the input, in order: the buffer's, then the loan's.
    fn read(&mut self, n: usize, out: &mut ReadBuf<'_>) -> usize {
        let available = self.unread();
        if available > 0 {
            let n = available.min(n);
            out.put_slice(&self.inbound[self.read_pos..self.read_pos + n]);
            self.read_pos += n;
            return n;
        }
        let Some(loan) = self.loan.as_mut() else { return 0 };
        let n = (loan.len - loan.read).min(n);
        // SAFETY: the slice is the caller's of `lend`, alive until `end_loan`; `h2` reads
        // only within the `drive` that `lend` and `end_loan` surround.
        let lent = unsafe { std::slice::from_raw_parts((loan.at + loan.read) as *const u8, n) };
        out.put_slice(lent);
        loan.read += n;
        n
    }
}

/// Both ends share the buffers: `h2` owns one `Pipe`, the connection keeps another.
#[derive(Clone, Default)]
pub struct Pipe(Arc<Mutex<Buffers>>);

impl Pipe {
    pub fn new(cap: usize) -> Self {
        Pipe(Arc::new(Mutex::new(Buffers { cap, ..Buffers::default() })))
    }

    pub fn lock(&self) -> MutexGuard<'_, Buffers> {
        // Nothing panics while holding it; a poisoned lock still holds consistent buffers.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Ends the pipe's loan when dropped.
pub struct LoanEnd(pub Pipe);

impl Drop for LoanEnd {
    fn drop(&mut self) {
        self.0.lock().end_loan();
    }
}

impl AsyncRead for Pipe {
    fn poll_read(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut b = self.lock();
        let room = buf.remaining();
        if b.read(room, buf) == 0 && room > 0 {
            // The connection polls again after pushing more (`H2Core::drive`).
            return if b.eof { Poll::Ready(Ok(())) } else { Poll::Pending };
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Pipe {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(data)])
    }

    /// A frame's head and its payload (which `h2` keeps apart above a small size) in one
    /// call: copied into the output together, as `poll_write` would one after the other.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        parts: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut b = self.lock();
        let mut room = b.cap.saturating_sub(b.outbound.len());
        if room == 0 {
            // The connection polls again once the transport took the output.
            return Poll::Pending;
        }
        let mut n = 0;
        for part in parts {
            let take = room.min(part.len());
            b.outbound.extend_from_slice(&part[..take]);
            n += take;
            room -= take;
            if room == 0 {
                break;
            }
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    #[test]
    fn reads_what_was_pushed_then_waits_then_ends() {
        let mut pipe = Pipe::new(8);
        let mut cx = Context::from_waker(Waker::noop());
        pipe.lock().push(b"abc");
        let mut space = [0u8; 2];
        let mut buf = ReadBuf::new(&mut space);
        assert!(Pin::new(&mut pipe).poll_read(&mut cx, &mut buf).is_ready());
        assert_eq!(buf.filled(), b"ab");
        let mut space = [0u8; 8];
        let mut buf = ReadBuf::new(&mut space);
        assert!(Pin::new(&mut pipe).poll_read(&mut cx, &mut buf).is_ready());
        assert_eq!(buf.filled(), b"c");
        let mut buf = ReadBuf::new(&mut space);
        assert!(Pin::new(&mut pipe).poll_read(&mut cx, &mut buf).is_pending());
        pipe.lock().eof = true;
        let mut buf = ReadBuf::new(&mut space);
        assert!(Pin::new(&mut pipe).poll_read(&mut cx, &mut buf).is_ready());
        assert!(buf.filled().is_empty());
    }

    #[test]
    fn a_lent_slice_is_read_after_the_buffer_and_its_rest_kept() {
        let mut pipe = Pipe::new(8);
        let mut cx = Context::from_waker(Waker::noop());
        pipe.lock().push(b"ab");
        let data = b"cdefg".to_vec();
        pipe.lock().lend(&data);
        let mut space = [0u8; 4];
        let mut buf = ReadBuf::new(&mut space);
        assert!(Pin::new(&mut pipe).poll_read(&mut cx, &mut buf).is_ready());
        assert_eq!(buf.filled(), b"ab");
        let mut buf = ReadBuf::new(&mut space);
        assert!(Pin::new(&mut pipe).poll_read(&mut cx, &mut buf).is_ready());
        assert_eq!(buf.filled(), b"cdef");
        drop(LoanEnd(pipe.clone()));
        drop(data);
        assert_eq!(pipe.lock().unread(), 1);
        let mut buf = ReadBuf::new(&mut space);
        assert!(Pin::new(&mut pipe).poll_read(&mut cx, &mut buf).is_ready());
        assert_eq!(buf.filled(), b"g");
        let mut buf = ReadBuf::new(&mut space);
        assert!(Pin::new(&mut pipe).poll_read(&mut cx, &mut buf).is_pending());
    }

    #[test]
    fn vectored_writes_copy_the_parts_in_order_up_to_the_cap() {
        let mut pipe = Pipe::new(6);
        let mut cx = Context::from_waker(Waker::noop());
        let parts = [io::IoSlice::new(b"ab"), io::IoSlice::new(b""), io::IoSlice::new(b"cdefg")];
        assert!(Pin::new(&mut pipe).is_write_vectored());
        assert!(matches!(Pin::new(&mut pipe).poll_write_vectored(&mut cx, &parts), Poll::Ready(Ok(6))));
        assert_eq!(pipe.lock().outbound, b"abcdef");
        assert!(Pin::new(&mut pipe).poll_write_vectored(&mut cx, &parts).is_pending());
    }

    #[test]
    fn writes_stop_at_the_cap() {
        let mut pipe = Pipe::new(4);
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(&mut pipe).poll_write(&mut cx, b"abcdef") {
            Poll::Ready(Ok(n)) => assert_eq!(n, 4),
            other => panic!("{other:?}"),
        }
        assert!(Pin::new(&mut pipe).poll_write(&mut cx, b"ef").is_pending());
        pipe.lock().outbound.clear();
        assert!(matches!(Pin::new(&mut pipe).poll_write(&mut cx, b"ef"), Poll::Ready(Ok(2))));
    }
}
