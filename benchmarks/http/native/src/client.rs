//! A blocking HTTP/1.1 keep-alive client for GET requests, one per virtual
//! user. Responses are framed by content-length, chunked transfer-encoding or
//! connection close; bodies are read and discarded. A connection the server
//! closes (Connection: close, EOF, reset) is replaced by a new one on the next
//! request, and counted in `reconnects`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use httparse::Status;

const TIMEOUT: Duration = Duration::from_secs(10);
const READ_CHUNK: usize = 64 * 1024;
/// Longest accepted response head, chunk-size line or trailer section.
const MAX_HEAD: usize = 64 * 1024;
const MAX_HEADERS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Connect,
    Timeout,
    /// The server closed or reset the connection before the response ended.
    Closed,
    /// Not a valid HTTP/1.1 response.
    Parse,
    Io,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 5] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Closed,
        ErrorKind::Parse,
        ErrorKind::Io,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Closed => "closed",
            ErrorKind::Parse => "parse",
            ErrorKind::Io => "io",
        }
    }
}

#[derive(Debug)]
pub struct Error {
    pub kind: ErrorKind,
    pub detail: String,
    /// Nothing of the response arrived: on a reused connection this is a
    /// keep-alive connection the server had already closed.
    untouched: bool,
}

impl Error {
    fn new(kind: ErrorKind, detail: impl Into<String>) -> Error {
        Error {
            kind,
            detail: detail.into(),
            untouched: false,
        }
    }

    fn io(err: io::Error, untouched: bool) -> Error {
        let kind = match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ErrorKind::Timeout,
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof => ErrorKind::Closed,
            _ => ErrorKind::Io,
        };
        let detail = match kind {
            ErrorKind::Timeout => format!("nothing received for {} s", TIMEOUT.as_secs()),
            _ => err.to_string(),
        };
        Error {
            kind,
            detail,
            untouched,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.detail)
    }
}

pub struct Client {
    addr: SocketAddr,
    host: String,
    conn: Option<Conn>,
    opened: u64,
    request: Vec<u8>,
}

impl Client {
    /// `host` is sent as the Host header (the URL's authority).
    pub fn new(addr: SocketAddr, host: &str) -> Client {
        Client {
            addr,
            host: host.to_string(),
            conn: None,
            opened: 0,
            request: Vec::new(),
        }
    }

    /// Connections opened after the first one.
    pub fn reconnects(&self) -> u64 {
        self.opened.saturating_sub(1)
    }

    /// Send `GET path` and read the whole response; returns its status.
    pub fn get(&mut self, path: &str) -> Result<u16, Error> {
        self.request.clear();
        // Writing to a Vec cannot fail.
        let _ = write!(
            self.request,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: http-vu\r\n\r\n",
            self.host
        );
        let mut retried = false;
        loop {
            let reused = self.conn.is_some();
            let conn = match self.conn.take() {
                Some(conn) => conn,
                None => self.connect()?,
            };
            let conn = self.conn.insert(conn);
            match conn.exchange(&self.request) {
                Ok(head) => {
                    if !head.keep_alive {
                        self.conn = None;
                    }
                    return Ok(head.status);
                }
                Err(err) => {
                    self.conn = None;
                    // Like browsers and k6, retry once on a fresh connection
                    // when an idle keep-alive connection turns out closed.
                    if reused && err.untouched && !retried && err.kind == ErrorKind::Closed {
                        retried = true;
                        continue;
                    }
                    return Err(err);
                }
            }
        }
    }

    fn connect(&mut self) -> Result<Conn, Error> {
        let connect_err = |e: io::Error| Error::new(ErrorKind::Connect, e.to_string());
        let stream = TcpStream::connect_timeout(&self.addr, TIMEOUT).map_err(connect_err)?;
        stream.set_nodelay(true).map_err(connect_err)?;
        stream
            .set_read_timeout(Some(TIMEOUT))
            .map_err(connect_err)?;
        stream
            .set_write_timeout(Some(TIMEOUT))
            .map_err(connect_err)?;
        self.opened += 1;
        Ok(Conn {
            stream,
            buf: Vec::new(),
            received: false,
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
        })
    }
}

struct Head {
    status: u16,
    keep_alive: bool,
}

enum Framing {
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

struct Conn {
    stream: TcpStream,
    /// Received bytes not consumed yet.
    buf: Vec<u8>,
    /// Whether any byte of the current response arrived.
    received: bool,
    scratch: Box<[u8]>,
}

impl Conn {
    fn exchange(&mut self, request: &[u8]) -> Result<Head, Error> {
        self.buf.clear();
        self.received = false;
        self.stream
            .write_all(request)
            .map_err(|e| Error::io(e, true))?;
        let (mut head, framing) = loop {
            let (head, framing) = self.read_head()?;
            // Interim responses (100 Continue, 103 Early Hints) precede the
            // real one.
            if (100..200).contains(&head.status) && head.status != 101 {
                continue;
            }
            break (head, framing);
        };
        match framing {
            Framing::Empty => {}
            Framing::Length(n) => self.skip(n)?,
            Framing::Chunked => self.skip_chunked()?,
            Framing::UntilClose => {
                self.skip_to_eof()?;
                head.keep_alive = false;
            }
        }
        Ok(head)
    }

    /// Read more bytes into `buf`; returns how many (0 at EOF).
    fn read_some(&mut self) -> Result<usize, Error> {
        loop {
            match self.stream.read(&mut self.scratch) {
                Ok(n) => {
                    self.buf.extend_from_slice(&self.scratch[..n]);
                    self.received |= n > 0;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io(e, !self.received)),
            }
        }
    }

    /// Read more bytes into `buf`; EOF is an error (`Closed`).
    fn fill(&mut self) -> Result<(), Error> {
        if self.read_some()? == 0 {
            let mut err = Error::new(ErrorKind::Closed, "connection closed by server");
            err.untouched = !self.received;
            return Err(err);
        }
        Ok(())
    }

    fn read_head(&mut self) -> Result<(Head, Framing), Error> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut response = httparse::Response::new(&mut headers);
            match response.parse(&self.buf) {
                Ok(Status::Complete(len)) => {
                    let parsed = interpret(&response);
                    self.buf.drain(..len);
                    return parsed;
                }
                Ok(Status::Partial) if self.buf.len() > MAX_HEAD => {
                    return Err(Error::new(ErrorKind::Parse, "response head too long"));
                }
                Ok(Status::Partial) => self.fill()?,
                Err(e) => {
                    return Err(Error::new(
                        ErrorKind::Parse,
                        format!("bad response head: {e}"),
                    ))
                }
            }
        }
    }

    /// Consume exactly `n` body bytes.
    fn skip(&mut self, mut n: u64) -> Result<(), Error> {
        loop {
            let take = n.min(self.buf.len() as u64) as usize;
            self.buf.drain(..take);
            n -= take as u64;
            if n == 0 {
                return Ok(());
            }
            self.fill()?;
        }
    }

    fn skip_chunked(&mut self) -> Result<(), Error> {
        loop {
            match httparse::parse_chunk_size(&self.buf) {
                Ok(Status::Complete((len, 0))) => {
                    self.buf.drain(..len);
                    return self.skip_trailers();
                }
                Ok(Status::Complete((len, size))) => {
                    self.buf.drain(..len);
                    self.skip(size)?;
                    while self.buf.len() < 2 {
                        self.fill()?;
                    }
                    if &self.buf[..2] != b"\r\n" {
                        return Err(Error::new(ErrorKind::Parse, "chunk not followed by CRLF"));
                    }
                    self.buf.drain(..2);
                }
                Ok(Status::Partial) if self.buf.len() > MAX_HEAD => {
                    return Err(Error::new(ErrorKind::Parse, "chunk size line too long"));
                }
                Ok(Status::Partial) => self.fill()?,
                Err(_) => return Err(Error::new(ErrorKind::Parse, "bad chunk size")),
            }
        }
    }

    /// Skip trailer fields up to and including the empty line ending them.
    fn skip_trailers(&mut self) -> Result<(), Error> {
        let mut seen = 0;
        loop {
            match self.buf.windows(2).position(|w| w == b"\r\n") {
                Some(0) => {
                    self.buf.drain(..2);
                    return Ok(());
                }
                Some(end) => {
                    seen += end + 2;
                    self.buf.drain(..end + 2);
                }
                None if seen + self.buf.len() > MAX_HEAD => {
                    return Err(Error::new(ErrorKind::Parse, "trailers too long"));
                }
                None => self.fill()?,
            }
        }
    }

    fn skip_to_eof(&mut self) -> Result<(), Error> {
        loop {
            self.buf.clear();
            if self.read_some()? == 0 {
                return Ok(());
            }
        }
    }
}

/// Status, keep-alive and body framing of a parsed response head.
fn interpret(response: &httparse::Response) -> Result<(Head, Framing), Error> {
    let parse_err = |msg: &str| Error::new(ErrorKind::Parse, msg);
    let status = response.code.ok_or_else(|| parse_err("no status code"))?;
    // HTTP/1.0 closes unless it says keep-alive; HTTP/1.1 keeps unless close.
    // A 101 switches protocols: the connection is no longer HTTP.
    let mut keep_alive = response.version == Some(1) && status != 101;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    for header in response.headers.iter() {
        let value = std::str::from_utf8(header.value).map_err(|_| parse_err("non-ASCII header"))?;
        if header.name.eq_ignore_ascii_case("content-length") {
            let n: u64 = value
                .trim()
                .parse()
                .map_err(|_| parse_err("bad content-length"))?;
            if length.is_some_and(|m| m != n) {
                return Err(parse_err("conflicting content-length"));
            }
            length = Some(n);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked only counts as the last coding applied.
            transfer_encoding = true;
            if let Some(last) = value.split(',').map(str::trim).rfind(|c| !c.is_empty()) {
                chunked = last.eq_ignore_ascii_case("chunked");
            }
        } else if header.name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case("keep-alive") && response.version == Some(0) {
                    keep_alive = true;
                }
            }
        }
    }
    let framing = if (100..200).contains(&status) || status == 204 || status == 304 {
        Framing::Empty
    } else if transfer_encoding {
        // Transfer-encoding overrides content-length (RFC 9112 6.3).
        if chunked {
            Framing::Chunked
        } else {
            Framing::UntilClose
        }
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    Ok((Head { status, keep_alive }, framing))
}
