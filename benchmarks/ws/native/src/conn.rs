//! One client connection: TCP connect and opening handshake, then whole
//! messages in (fragments joined, compressed messages inflated) and out
//! (masked, compressed when permessage-deflate was agreed). The two halves
//! can go to separate tasks for the broadcast scenario.

use std::net::{IpAddr, SocketAddr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};

use crate::deflate::{negotiated, Deflater, Inflater};
use crate::frame::{self, MaskKeys};
use crate::handshake::{self, Target};

/// Read buffer to start with; grows to fit the largest frame.
const INITIAL_BUFFER: usize = 128 << 10;
/// Free space kept for each read.
const MIN_READ: usize = 16 << 10;

pub struct Options {
    pub offer_deflate: bool,
    /// zlib level of the client's compressed messages.
    pub level: u32,
    /// Source address to bind (None: the kernel's choice).
    pub source: Option<IpAddr>,
}

/// What `Reader::next` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    /// A whole text or binary message; its payload is `Reader::message()`.
    Message {
        text: bool,
    },
    Ping(Vec<u8>),
    /// The server's close frame, with its status code if any.
    Close(Option<u16>),
}

/// Where the last message's payload is.
enum Last {
    Buffer(usize, usize),
    Assembled,
    Inflated,
}

pub struct Reader {
    half: OwnedReadHalf,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Size of the frame that is waiting for its last bytes.
    want: usize,
    inflater: Option<Inflater>,
    /// A fragmented message being joined: (is text, is compressed).
    partial: Option<(bool, bool)>,
    assembled: Vec<u8>,
    inflated: Vec<u8>,
    last: Last,
    /// Payload bytes received, as on the wire (compressed when compressed).
    pub wire_bytes: u64,
}

pub struct Writer {
    half: OwnedWriteHalf,
    keys: MaskKeys,
    deflater: Option<Deflater>,
    frame: Vec<u8>,
    compressed: Vec<u8>,
    /// Payload bytes sent, as on the wire.
    pub wire_bytes: u64,
}

pub struct Conn {
    pub reader: Reader,
    pub writer: Writer,
    /// The server's `Sec-WebSocket-Extensions` (empty: none).
    pub extensions: String,
    pub deflate: bool,
}

async fn tcp(target: &Target, source: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let stream = match source {
        None => TcpStream::connect((target.host.as_str(), target.port)).await?,
        Some(ip) => {
            let addr = tokio::net::lookup_host((target.host.as_str(), target.port))
                .await?
                .find(|a| a.is_ipv4() == ip.is_ipv4())
                .ok_or_else(|| std::io::Error::other("no address of the source's family"))?;
            let socket = if ip.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
            socket.bind(SocketAddr::new(ip, 0))?;
            socket.connect(addr).await?
        }
    };
    stream.set_nodelay(true)?;
    Ok(stream)
}

impl Conn {
    /// Connect and upgrade; `seed` varies the mask keys between connections.
    pub async fn open(target: &Target, opts: &Options, seed: u64) -> Result<Conn, String> {
        let mut stream = tcp(target, opts.source).await.map_err(|e| format!("connect: {e}"))?;
        let key = tungstenite::handshake::client::generate_key();
        stream
            .write_all(&handshake::request(target, &key, opts.offer_deflate))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let mut buf = vec![0u8; INITIAL_BUFFER];
        let mut end = 0;
        let accepted = loop {
            if let Some(accepted) = handshake::parse_response(&buf[..end], &key)? {
                break accepted;
            }
            let n = stream.read(&mut buf[end..]).await.map_err(|e| format!("handshake: {e}"))?;
            if n == 0 {
                return Err("connection closed during the handshake".into());
            }
            end += n;
        };
        let params = negotiated(&accepted.extensions, opts.offer_deflate)?;
        let (read_half, write_half) = stream.into_split();
        Ok(Conn {
            deflate: params.is_some(),
            reader: Reader {
                half: read_half,
                buf,
                // Frames sent right behind the 101 are already in the buffer.
                start: accepted.head_len,
                end,
                want: 0,
                inflater: params.as_ref().map(|_| Inflater::default()),
                partial: None,
                assembled: Vec::new(),
                inflated: Vec::new(),
                last: Last::Assembled,
                wire_bytes: 0,
            },
            writer: Writer {
                half: write_half,
                keys: MaskKeys::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                deflater: params.as_ref().map(|p| Deflater::new(p, opts.level)),
                frame: Vec::new(),
                compressed: Vec::new(),
                wire_bytes: 0,
            },
            extensions: accepted.extensions,
        })
    }

    /// The next message (pings answered on the way); a close is an error.
    pub async fn recv(&mut self) -> Result<bool, String> {
        loop {
            match self.reader.next().await? {
                Incoming::Message { text } => return Ok(text),
                Incoming::Ping(payload) => self.writer.pong(&payload).await?,
                Incoming::Close(code) => return Err(closed(code)),
            }
        }
    }
}

pub fn closed(code: Option<u16>) -> String {
    match code {
        Some(code) => format!("server closed the connection ({code})"),
        None => "server closed the connection".into(),
    }
}

impl Reader {
    /// The payload of the message `next` last returned.
    pub fn message(&self) -> &[u8] {
        match self.last {
            Last::Buffer(from, to) => &self.buf[from..to],
            Last::Assembled => &self.assembled,
            Last::Inflated => &self.inflated,
        }
    }

    pub async fn next(&mut self) -> Result<Incoming, String> {
        loop {
            if let Some(incoming) = self.take_frame()? {
                return Ok(incoming);
            }
            self.fill().await?;
        }
    }

    /// Consume the complete frames at the front of the buffer until one
    /// completes something for the caller.
    fn take_frame(&mut self) -> Result<Option<Incoming>, String> {
        loop {
            let Some(h) = frame::parse_header(&self.buf[self.start..self.end])? else {
                return Ok(None);
            };
            let total = h.header_len + h.len;
            if self.end - self.start < total {
                self.want = total;
                return Ok(None);
            }
            let (from, to) = (self.start + h.header_len, self.start + total);
            self.start = to;
            self.want = 0;
            self.wire_bytes += h.len as u64;
            let payload = &self.buf[from..to];
            let text = match h.opcode {
                frame::OP_PING => return Ok(Some(Incoming::Ping(payload.to_vec()))),
                frame::OP_PONG => continue,
                frame::OP_CLOSE => {
                    let code = (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
                    return Ok(Some(Incoming::Close(code)));
                }
                frame::OP_CONTINUATION => {
                    let Some((text, _)) = self.partial else {
                        return Err("continuation frame outside a message".into());
                    };
                    if h.rsv1 {
                        return Err("RSV1 on a continuation frame".into());
                    }
                    self.assembled.extend_from_slice(payload);
                    if !h.fin {
                        continue;
                    }
                    text
                }
                op => {
                    if self.partial.is_some() {
                        return Err("new message inside a fragmented one".into());
                    }
                    if h.rsv1 && self.inflater.is_none() {
                        return Err("compressed frame without permessage-deflate".into());
                    }
                    let text = op == frame::OP_TEXT;
                    if h.fin && !h.rsv1 {
                        self.last = Last::Buffer(from, to);
                        return Ok(Some(Incoming::Message { text }));
                    }
                    self.partial = Some((text, h.rsv1));
                    self.assembled.clear();
                    self.assembled.extend_from_slice(payload);
                    if !h.fin {
                        continue;
                    }
                    text
                }
            };
            // The last frame of a fragmented or compressed message.
            let compressed = self.partial.take().is_some_and(|(_, c)| c);
            if compressed {
                if let Some(inflater) = self.inflater.as_mut() {
                    inflater.decompress(&self.assembled, &mut self.inflated)?;
                }
                self.last = Last::Inflated;
            } else {
                self.last = Last::Assembled;
            }
            return Ok(Some(Incoming::Message { text }));
        }
    }

    /// Read more bytes, first making room for the frame being waited for.
    async fn fill(&mut self) -> Result<(), String> {
        let pending = self.end - self.start;
        if pending == 0 {
            self.start = 0;
            self.end = 0;
        }
        let need = self.want.max(pending + MIN_READ);
        if self.start + need > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.start = 0;
            self.end = pending;
            if need > self.buf.len() {
                self.buf.resize(need.next_power_of_two(), 0);
            }
        }
        let n = self.half.read(&mut self.buf[self.end..]).await.map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("server closed the TCP connection".into());
        }
        self.end += n;
        Ok(())
    }
}

impl Writer {
    /// Send one message (compressed when permessage-deflate was agreed).
    pub async fn send(&mut self, text: bool, payload: &[u8]) -> Result<(), String> {
        let opcode = if text { frame::OP_TEXT } else { frame::OP_BINARY };
        self.frame.clear();
        let key = self.keys.next_key();
        match self.deflater.as_mut() {
            Some(deflater) => {
                deflater.compress(payload, &mut self.compressed)?;
                frame::encode(&mut self.frame, opcode, true, &self.compressed, key);
                self.wire_bytes += self.compressed.len() as u64;
            }
            None => {
                frame::encode(&mut self.frame, opcode, false, payload, key);
                self.wire_bytes += payload.len() as u64;
            }
        }
        self.write_frame().await
    }

    pub async fn pong(&mut self, payload: &[u8]) -> Result<(), String> {
        self.frame.clear();
        frame::encode(&mut self.frame, frame::OP_PONG, false, payload, self.keys.next_key());
        self.write_frame().await
    }

    /// Start the closing handshake with 1000 (normal closure).
    pub async fn close(&mut self) -> Result<(), String> {
        self.frame.clear();
        frame::encode(&mut self.frame, frame::OP_CLOSE, false, &1000u16.to_be_bytes(), self.keys.next_key());
        self.write_frame().await
    }

    async fn write_frame(&mut self) -> Result<(), String> {
        self.half.write_all(&self.frame).await.map_err(|e| format!("write: {e}"))
    }
}

/// Close politely: send a close frame and wait (at most `wait`) for the
/// server's, so that servers do not log aborted connections.
pub async fn close(reader: &mut Reader, writer: &mut Writer, wait: std::time::Duration) {
    if writer.close().await.is_err() {
        return;
    }
    let _ = tokio::time::timeout(wait, async {
        while let Ok(incoming) = reader.next().await {
            if let Incoming::Close(_) = incoming {
                break;
            }
        }
    })
    .await;
}
