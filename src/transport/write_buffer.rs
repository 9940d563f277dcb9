//! The queue of bytes a transport could not write at once, flushed with one vectored write.
//!
//! A `bytes` object is immutable, so it is queued by reference (no copy); anything else
//! (bytearray, memoryview) could change after `write()` returns, so its bytes are copied.
//! A native protocol may also queue a range of a file, which goes out with `sendfile`
//! (never copied through user space) when the bytes before it are written.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// Upper bound of iovecs per write call (Linux IOV_MAX is 1024).
const MAX_IOVECS: usize = 256;
/// A copy this small is appended to the queued copy before it rather than queued apart.
const SMALL_APPEND: usize = 4096;
/// The most one `sendfile` call is asked for (Linux sends at most about 2 GiB a call).
const SENDFILE_MAX: u64 = 1 << 30;

enum Chunk {
    Shared(Py<PyBytes>, usize),
    Owned(Vec<u8>, usize),
    /// `left` bytes of `file` from `offset`.
    File {
        file: File,
        offset: u64,
        left: u64,
    },
}

impl Chunk {
    /// The bytes still to write (none for a file: see `len`).
    fn remaining<'a>(&'a self, py: Python<'a>) -> &'a [u8] {
        match self {
            Chunk::Shared(b, start) => &b.as_bytes(py)[*start..],
            Chunk::Owned(v, start) => &v[*start..],
            Chunk::File { .. } => &[],
        }
    }

    fn len(&self, py: Python<'_>) -> usize {
        match self {
            Chunk::File { left, .. } => usize::try_from(*left).unwrap_or(usize::MAX),
            c => c.remaining(py).len(),
        }
    }

    fn advance(&mut self, n: usize) {
        match self {
            Chunk::Shared(_, start) | Chunk::Owned(_, start) => *start += n,
            Chunk::File { offset, left, .. } => {
                *offset += n as u64;
                *left -= n as u64;
            }
        }
    }
}

/// How the bytes leave: `send` on sockets (never raising SIGPIPE), `write` on pipes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Sink {
    Socket,
    Pipe,
}

#[derive(Default)]
pub struct WriteBuffer {
    chunks: VecDeque<Chunk>,
    size: usize,
}

impl WriteBuffer {
    pub fn len(&self) -> usize {
        self.size
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    pub fn clear(&mut self) -> Vec<Py<PyBytes>> {
        self.size = 0;
        // Handed back so the caller drops the Python references outside its lock.
        self.chunks
            .drain(..)
            .filter_map(|c| match c {
                Chunk::Shared(b, _) => Some(b),
                Chunk::Owned(..) | Chunk::File { .. } => None,
            })
            .collect()
    }

    /// Queue `bytes[start..]` by reference.
    pub fn push_shared(&mut self, bytes: Py<PyBytes>, start: usize, len: usize) {
        if start < len {
            self.size += len - start;
            self.chunks.push_back(Chunk::Shared(bytes, start));
        }
    }

    /// Queue a copy of `data`; small copies are appended to a queued copy when possible.
    pub fn push_copy(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.size += data.len();
        if let Some(Chunk::Owned(v, start)) = self.chunks.back_mut() {
            if *start == 0 && data.len() <= SMALL_APPEND {
                v.extend_from_slice(data);
                return;
            }
        }
        self.chunks.push_back(Chunk::Owned(data.to_vec(), 0));
    }

    /// Queue `data`, taking it over; small pieces are appended to a queued copy instead.
    pub fn push_vec(&mut self, data: Vec<u8>) {
        if let Some(Chunk::Owned(v, 0)) = self.chunks.back_mut() {
            if data.len() <= SMALL_APPEND {
                self.size += data.len();
                v.extend_from_slice(&data);
                return;
            }
        }
        if !data.is_empty() {
            self.size += data.len();
            self.chunks.push_back(Chunk::Owned(data, 0));
        }
    }

    /// Queue `len` bytes of `file` from `offset` (counted as queued bytes, for flow control).
    pub fn push_file(&mut self, file: File, offset: u64, len: u64) {
        if len > 0 {
            self.size += usize::try_from(len).unwrap_or(usize::MAX);
            self.chunks.push_back(Chunk::File { file, offset, left: len });
        }
    }

    /// Write as much as the descriptor takes. Returns the number of bytes written;
    /// `WouldBlock` ends the flush without an error.
    ///
    /// The registration is edge-triggered, so this must not stop while the descriptor can
    /// still take more: one vectored write carries at most MAX_IOVECS chunks, and when it
    /// was taken whole the next batch is written at once (no new edge would come for it).
    pub fn flush(&mut self, py: Python<'_>, fd: RawFd, sink: Sink) -> io::Result<usize> {
        let mut total = 0;
        while self.size > 0 {
            if let Some(Chunk::File { file, offset, left }) = self.chunks.front() {
                let n = match send_file(fd, file, *offset, *left) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                };
                self.consume(py, n);
                total += n;
                // A short send need not mean a full socket: only EAGAIN says that (and
                // brings the edge this flush must wait for), so the loop asks again.
                continue;
            }
            // The bytes before the next file, in one vectored write.
            let mut iov: Vec<libc::iovec> = Vec::with_capacity(self.chunks.len().min(MAX_IOVECS));
            for c in self.chunks.iter().take_while(|c| !matches!(c, Chunk::File { .. })).take(MAX_IOVECS) {
                let s = c.remaining(py);
                iov.push(libc::iovec { iov_base: s.as_ptr() as *mut libc::c_void, iov_len: s.len() });
            }
            let offered: usize = iov.iter().map(|v| v.iov_len).sum();
            let n = match write_vectored(fd, &iov, sink) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            };
            drop(iov);
            self.consume(py, n);
            total += n;
            if n < offered {
                break; // the descriptor is full: an edge comes when it has room again
            }
        }
        Ok(total)
    }

    fn consume(&mut self, py: Python<'_>, mut n: usize) {
        self.size -= n;
        while n > 0 {
            let Some(front) = self.chunks.front_mut() else { break };
            let len = front.len(py);
            if n >= len {
                n -= len;
                self.chunks.pop_front();
            } else {
                front.advance(n);
                n = 0;
            }
        }
    }
}

/// One `sendfile` of `file` from `offset`, at most `left` bytes: how many went. A file that
/// ends before `left` is an error (the peer was promised those bytes). SIGPIPE is ignored
/// by Python, so a peer gone is EPIPE, as for `send`.
fn send_file(fd: RawFd, file: &File, offset: u64, left: u64) -> io::Result<usize> {
    let mut off = libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let want = usize::try_from(left.min(SENDFILE_MAX)).unwrap_or(usize::MAX);
    // SAFETY: both descriptors are open (`file` is borrowed for the call) and `off` is a
    // valid off_t the call updates.
    let n = unsafe { libc::sendfile(fd, file.as_raw_fd(), &mut off, want) };
    match n {
        n if n < 0 => Err(io::Error::last_os_error()),
        0 => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the file is shorter than the length sent for it")),
        n => Ok(n as usize),
    }
}

/// One write of `data` without queuing: for the fast path of `write()`.
pub fn write_once(fd: RawFd, data: &[u8], sink: Sink) -> io::Result<usize> {
    let iov = [libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() }];
    match write_vectored(fd, &iov, sink) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => Ok(0),
        r => r,
    }
}

fn write_vectored(fd: RawFd, iov: &[libc::iovec], sink: Sink) -> io::Result<usize> {
    let n = match sink {
        Sink::Socket => {
            // SAFETY: msghdr is plain data; every field we do not set is zero.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = iov.len() as _;
            // SAFETY: the iovecs point into buffers that outlive the call.
            unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) }
        }
        // SAFETY: as above.
        Sink::Pipe => unsafe { libc::writev(fd, iov.as_ptr(), iov.len() as libc::c_int) },
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
