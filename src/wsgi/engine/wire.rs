//! What goes over a connection's socket, through TLS where the connection has it: reads
//! into the read buffer, and the output (`out`, then a file) written as the socket takes it
//! (the poller's threads) or all of it, waiting (an app thread, with the GIL released).

use super::slot::Link;
use super::socket::Filled;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::AtomicBool;

/// A file's bytes sealed at a time under TLS.
const FILE_CHUNK: usize = 64 * 1024;

/// What an app thread's write did: the file's outcome, if one was sent, and the request to
/// tell.
pub type FileSent = Option<(io::Result<()>, Option<u64>)>;

impl Link {
    /// Read once into `rbuf` (opened, under TLS).
    pub fn fill(&mut self, rbuf: &mut Vec<u8>) -> Filled {
        let Some(tls) = self.tls.as_mut() else { return self.stream.fill(rbuf) };
        if tls.closed {
            return Filled::Closed;
        }
        let mut ok = true;
        let filled = self.stream.read_with(|raw| ok = tls.open(raw, rbuf));
        if !ok {
            // The alert goes out before the close (`flush`).
            return Filled::Closed;
        }
        match filled {
            // close_notify: what came before it is read first, as before a TCP close;
            // the next read sees the close.
            Filled::Data { n, .. } if tls.closed => Filled::Data { n, drained: false },
            other => other,
        }
    }

    /// Write what the socket takes of the output; false if the client is gone.
    pub fn flush(&mut self) -> bool {
        self.flush_some().is_ok()
    }

    /// As `flush`: Ok(true) once everything is written, Ok(false) if the socket is full.
    fn flush_some(&mut self) -> io::Result<bool> {
        if let Some(tls) = self.tls.as_mut() {
            tls.seal(&self.out[self.out_pos..]);
            self.out_pos = self.out.len();
        }
        while self.out_pos < self.out.len() {
            match self.stream.write_some(&self.out[self.out_pos..])? {
                0 => return Ok(false),
                n => self.out_pos += n,
            }
        }
        self.out.clear();
        self.out_pos = 0;
        // A large answer's room is not kept for the connection's life.
        if self.out.capacity() > crate::http::reading::READ_HIGH_WATER {
            self.out = Vec::new();
        }
        loop {
            if !self.write_sealed()? {
                return Ok(false);
            }
            let Some((file, offset, len, None)) = &mut self.file else { return Ok(true) };
            if *len == 0 {
                self.file = None;
                return Ok(true);
            }
            match self.tls.as_mut() {
                None => match self.stream.send_file_some(file, *offset, *len)? {
                    0 => return Ok(false),
                    n => {
                        *offset += n;
                        *len -= n;
                    }
                },
                Some(tls) => {
                    let n = seal_file(tls, file, *offset, *len)?;
                    *offset += n;
                    *len -= n;
                }
            }
        }
    }

    /// Write the sealed records the socket takes; whether they are all out (true without
    /// TLS).
    fn write_sealed(&mut self) -> io::Result<bool> {
        let Some(tls) = self.tls.as_mut() else { return Ok(true) };
        while !tls.unsent().is_empty() {
            match self.stream.write_some(tls.unsent())? {
                0 => return Ok(false),
                n => tls.sent(n),
            }
        }
        Ok(true)
    }

    /// As an app thread: write all of the output, then the file, waiting while the client
    /// does not read. Err if the output could not be written.
    pub fn write_all(&mut self, stop: &AtomicBool) -> io::Result<FileSent> {
        loop {
            match self.flush_some() {
                Ok(true) => break,
                Ok(false) => {
                    if !self.stream.wait(libc::POLLOUT, stop) {
                        return Err(io::Error::from(io::ErrorKind::BrokenPipe));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        let Some((file, offset, len, gen)) = self.file.take() else { return Ok(None) };
        let sent = match self.tls.as_mut() {
            None => self.stream.send_file(&file, offset, len, stop),
            Some(_) => self.seal_file_all(&file, offset, len, stop),
        };
        Ok(Some((sent, gen)))
    }

    /// A file through TLS, all of it, waiting while the client does not read.
    fn seal_file_all(
        &mut self,
        file: &std::fs::File,
        mut offset: u64,
        mut len: u64,
        stop: &AtomicBool,
    ) -> io::Result<()> {
        while len > 0 || self.tls.as_ref().is_some_and(|t| !t.unsent().is_empty()) {
            if !self.write_sealed()? {
                if !self.stream.wait(libc::POLLOUT, stop) {
                    return Err(io::Error::from(io::ErrorKind::BrokenPipe));
                }
                continue;
            }
            if len > 0 {
                let Some(tls) = self.tls.as_mut() else { break };
                let n = seal_file(tls, file, offset, len)?;
                offset += n;
                len -= n;
            }
        }
        Ok(())
    }

    /// Before the socket closes: close_notify, written if the socket takes it now.
    pub fn close_tls(&mut self) {
        if let Some(tls) = self.tls.as_mut() {
            tls.close();
            let _ = self.write_sealed();
        }
    }
}

/// Seal up to `FILE_CHUNK` bytes of `file` from `offset`; how many.
fn seal_file(tls: &mut super::tls::Tls, file: &std::fs::File, offset: u64, len: u64) -> io::Result<u64> {
    let want = usize::try_from(len).unwrap_or(usize::MAX).min(FILE_CHUNK);
    let mut chunk = vec![0u8; want];
    let n = file.read_at(&mut chunk, offset)?;
    if n == 0 {
        // The file is shorter than it was said to be.
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    tls.seal(&chunk[..n]);
    Ok(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wsgi::engine::socket::Stream;
    use std::io::Read;
    use std::os::unix::net::UnixStream as StdUnix;

    fn pair() -> (Link, StdUnix) {
        let (a, b) = StdUnix::pair().expect("pair");
        a.set_nonblocking(true).expect("nonblocking");
        (Link::new(Stream::Unix(mio::net::UnixStream::from_std(a))), b)
    }

    #[test]
    fn write_all_waits_for_a_slow_reader_then_sends_the_file() {
        let (mut link, mut peer) = pair();
        let stop = AtomicBool::new(false);
        let path = std::env::temp_dir().join(format!("swordfish-wire-{}", std::process::id()));
        std::fs::write(&path, vec![9u8; 3 << 20]).expect("write");
        let file = std::fs::File::open(&path).expect("open");
        let _ = std::fs::remove_file(&path);
        link.out = vec![7u8; 4 << 20];
        link.file = Some((file, 1, (3 << 20) - 1, Some(5)));
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            peer.read_to_end(&mut got).expect("read");
            got
        });
        let sent = link.write_all(&stop).expect("write_all");
        assert!(matches!(sent, Some((Ok(()), Some(5)))));
        assert_eq!(link.unwritten(), 0);
        drop(link);
        let got = reader.join().expect("join");
        assert_eq!(got.len(), (4 << 20) + (3 << 20) - 1);
        assert!(got[..4 << 20].iter().all(|&b| b == 7) && got[4 << 20..].iter().all(|&b| b == 9));
    }

    #[test]
    fn a_stop_ends_a_wait() {
        let (mut link, _peer) = pair();
        let stop = AtomicBool::new(true);
        link.out = vec![7u8; 16 << 20];
        assert!(link.write_all(&stop).is_err());
    }

    #[test]
    fn flush_sends_a_queued_file_as_the_socket_takes_it() {
        let (mut link, mut peer) = pair();
        let path = std::env::temp_dir().join(format!("swordfish-wire-flush-{}", std::process::id()));
        std::fs::write(&path, vec![3u8; 4 << 20]).expect("write");
        let file = std::fs::File::open(&path).expect("open");
        let _ = std::fs::remove_file(&path);
        link.out = b"head".to_vec();
        link.file = Some((file, 0, 4 << 20, None));
        let mut got = Vec::new();
        let mut space = vec![0u8; 1 << 16];
        while link.unwritten() > 0 {
            assert!(link.flush());
            if link.unwritten() > 0 {
                let n = peer.read(&mut space).expect("read");
                got.extend_from_slice(&space[..n]);
            }
        }
        assert!(link.file.is_none());
        drop(link);
        peer.read_to_end(&mut got).expect("read to end");
        assert_eq!(&got[..4], b"head");
        assert_eq!(got.len(), 4 + (4 << 20));
    }
}
