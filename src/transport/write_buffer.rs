//! The queue of bytes a transport could not write at once, flushed with one vectored write.
//!
//! A `bytes` object is immutable, so it is queued by reference (no copy); anything else
//! (bytearray, memoryview) could change after `write()` returns, so its bytes are copied.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;

/// Upper bound of iovecs per write call (Linux IOV_MAX is 1024).
const MAX_IOVECS: usize = 256;
/// A copy this small is appended to the queued copy before it rather than queued apart.
const SMALL_APPEND: usize = 4096;

enum Chunk {
    Shared(Py<PyBytes>, usize),
    Owned(Vec<u8>, usize),
}

impl Chunk {
    fn remaining<'a>(&'a self, py: Python<'a>) -> &'a [u8] {
        match self {
            Chunk::Shared(b, start) => &b.as_bytes(py)[*start..],
            Chunk::Owned(v, start) => &v[*start..],
        }
    }

    fn advance(&mut self, n: usize) {
        match self {
            Chunk::Shared(_, start) | Chunk::Owned(_, start) => *start += n,
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
                Chunk::Owned(..) => None,
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

    /// Write as much as the descriptor takes. Returns the number of bytes written;
    /// `WouldBlock` ends the flush without an error.
    ///
    /// The registration is edge-triggered, so this must not stop while the descriptor can
    /// still take more: one vectored write carries at most MAX_IOVECS chunks, and when it
    /// was taken whole the next batch is written at once (no new edge would come for it).
    pub fn flush(&mut self, py: Python<'_>, fd: RawFd, sink: Sink) -> io::Result<usize> {
        let mut total = 0;
        while self.size > 0 {
            let mut iov: Vec<libc::iovec> = Vec::with_capacity(self.chunks.len().min(MAX_IOVECS));
            for c in self.chunks.iter().take(MAX_IOVECS) {
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
            let len = front.remaining(py).len();
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
