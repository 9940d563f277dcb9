//! The writing side of a connection, free of Python objects: the response head, held until
//! the first body part decides the framing; body parts framed by the `Encoder`; trailers; a
//! file as the body; then what follows a complete response (the next request, the rest of
//! an unread body, or closing), and a response the application left unfinished. The
//! interface checks its own messages; the bytes on the wire are made here.

use super::conn::{Act, BodyBuf, Conn, Expect, Reading, Request, TimerKind, World, Writing};
use super::encode::{EncodeError, Encoder};
use super::head::{frame_head, Framing, ResponseHead};
use super::reading::record;
use super::response::{bodiless, push_decimal, reason};
use super::settings::Settings;
use crate::transport::stream::{Hold, HOLD_SMALL};

/// A part of the response.
pub enum Part<'a, W: World> {
    Head {
        head: ResponseHead,
        trailers: bool,
    },
    /// Body bytes; `object()` gives the same bytes as the driver's object, written by
    /// reference when they are many.
    Body {
        data: &'a [u8],
        object: &'a dyn Fn() -> W::Bytes,
        more: bool,
    },
    /// Serialized trailer fields.
    Trailers {
        fields: Vec<u8>,
        more: bool,
    },
    /// A file of this size is the body: the interface sends it, then calls `file_sent`;
    /// or, `open` (the file and the offset to send from), the connection sends it.
    File {
        size: u64,
        open: Option<(std::fs::File, u64)>,
    },
}

/// A part the response cannot take where it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RespondError {
    /// The client is gone.
    Gone,
    /// The connection went on to its next request: this response is complete.
    Finished,
    AlreadyStarted,
    NotStarted,
    /// A body part after the last one.
    BodyComplete,
    /// Trailers not announced with the head, or before the body's end.
    NoTrailers,
    /// A file as the body after the body started.
    FileNotAllowed,
    FileLength,
    TooLong,
    TooShort,
}

/// What a part did.
pub enum Taken {
    /// Taken; the response goes on, or is complete and the connection went on with what
    /// follows.
    Done,
    /// The interface is to send a file of this size as the body, then call `file_sent`.
    File(u64),
}

/// How an application ended without completing its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfinished {
    Raised,
    ReturnedBeforeStart,
    ReturnedBeforeEnd,
}

impl<W: World> Conn<W> {
    /// Give request `gen`'s response its next part. A complete response ends here (see
    /// `end_response`); `true` in the result then says the connection reads on.
    pub fn take_part(
        &mut self,
        st: &Settings,
        gen: u64,
        part: Part<'_, W>,
        acts: &mut Vec<Act<W>>,
    ) -> Result<(Taken, bool), RespondError> {
        if self.lost() {
            return Err(RespondError::Gone);
        }
        let closing = self.closing();
        let native_writer = self.native_writer;
        let Some(req) = self.current(gen) else { return Err(RespondError::Finished) };
        if closing && req.complete() {
            // The connection answered for the application (a refused body) and is closing:
            // nothing more reaches the client.
            return Err(RespondError::Gone);
        }
        let mut done = false;
        let mut error = None;
        let mut file = Taken::Done;
        match part {
            Part::Head { head, trailers } => {
                if !matches!(req.writing, Writing::Init) {
                    return Err(RespondError::AlreadyStarted);
                }
                req.status = head.status;
                req.keep_alive &= !head.close;
                req.writing = Writing::Head { head, trailers };
            }
            Part::Body { data, object, more } => {
                take_body_part(st, req, data, object, more, acts, &mut done, &mut error)?;
            }
            Part::Trailers { fields: more_fields, more } => {
                let Writing::Trailers { encoder, fields } = &mut req.writing else {
                    return Err(RespondError::NoTrailers);
                };
                fields.extend_from_slice(&more_fields);
                if !more {
                    let mut out = Vec::new();
                    // Only a chunked body carries trailers; the length was checked at its end.
                    let _ = encoder.end(fields, &mut out);
                    if !out.is_empty() {
                        acts.push(Act::WriteLater(out, Hold::IfSmall));
                    }
                    done = true;
                }
            }
            Part::File { size, open } => {
                if !matches!(req.writing, Writing::Head { .. }) {
                    return Err(RespondError::FileNotAllowed);
                }
                let Writing::Head { head, .. } = std::mem::replace(&mut req.writing, Writing::Done) else {
                    return Err(RespondError::FileNotAllowed);
                };
                if head.length.is_some_and(|n| n != size) {
                    req.writing = Writing::Head { head, trailers: false };
                    return Err(RespondError::FileLength);
                }
                let mut head = head;
                if req.head_method && head.length.is_none() && !bodiless(head.status, false) {
                    // The file's size is known: HEAD gets the content-length GET would.
                    head.bytes.extend_from_slice(b"content-length: ");
                    push_decimal(&mut head.bytes, size);
                    head.bytes.extend_from_slice(b"\r\n");
                    head.length = Some(size);
                }
                let mut out = Vec::new();
                let encoder = close_head(req, head, Some(size), &mut out);
                acts.push(Act::Write(out));
                if encoder == Encoder::Bodiless || size == 0 {
                    done = true;
                } else {
                    req.sent = size;
                    match open {
                        // Queued behind the head: the response is complete, as one of
                        // bytes is once queued.
                        Some((file, offset)) if native_writer => {
                            acts.push(Act::WriteFile { file, offset, len: size });
                            done = true;
                        }
                        Some((file, offset)) => {
                            req.writing = Writing::File { by_connection: true };
                            acts.push(Act::SendFile { file, offset, len: size, gen });
                        }
                        None => {
                            req.writing = Writing::File { by_connection: false };
                            file = Taken::File(size);
                        }
                    }
                }
            }
        }
        if let Some(e) = error {
            let (status, sent) = (req.status, req.sent);
            record(st, req, status, sent, acts);
            req.writing = Writing::Done;
            req.keep_alive = false;
            self.close_after();
            acts.push(Act::Close);
            return Err(e);
        }
        let read_on = done && self.end_response(st, acts);
        Ok((file, read_on))
    }

    /// Whether request `gen`'s body has had every byte its `Content-Length` announced, so
    /// that nothing the application may still send is more than the end of it.
    pub fn length_reached(&mut self, gen: u64) -> bool {
        matches!(self.current(gen).map(|r| &r.writing), Some(Writing::Body { encoder: Encoder::Length(0), .. }))
    }

    /// The last byte of the response is queued: log it, and ready the connection for what
    /// follows. Whether it reads on (the caller then goes on with the read buffer).
    pub fn end_response(&mut self, st: &Settings, acts: &mut Vec<Act<W>>) -> bool {
        let Some(req) = self.req.as_mut() else { return false };
        req.writing = Writing::Done;
        let (status, sent) = (req.status, req.sent);
        record(st, req, status, sent, acts);
        acts.push(Act::Unwait(std::mem::take(&mut req.objects), req.upgrade));
        if req.reading.is_read() {
            self.finish_request(st, acts);
            true
        } else if req.expect == Expect::Waiting {
            // The client waits for 100 before sending the body: the connection cannot be reused.
            req.keep_alive = false;
            self.close_after();
            acts.push(Act::Close);
            false
        } else {
            // The rest of the body is read and dropped: reading may have paused on it. It has
            // the keep-alive timeout to arrive, or a client could hold the connection forever.
            if let Reading::Body(body) | Reading::Discard(body) = std::mem::replace(&mut req.reading, Reading::Done) {
                req.reading = Reading::Discard(body);
            }
            req.body_buf = BodyBuf::default();
            if self.reading_paused && !self.lost() {
                self.reading_paused = false;
                acts.push(Act::ResumeReading);
            }
            self.set_timer(TimerKind::KeepAlive, st.timeout_keep_alive, acts);
            true
        }
    }

    /// The file sent as the body of request `gen` is out (`ok`) or failed. Whether the
    /// connection reads on.
    pub fn file_sent(&mut self, st: &Settings, gen: u64, ok: bool, acts: &mut Vec<Act<W>>) -> bool {
        let Some(req) = self.current(gen) else { return false };
        if ok {
            if let Some(m) = st.metrics() {
                m.sent(req.sent);
            }
            return self.end_response(st, acts);
        }
        req.writing = Writing::Done;
        self.close_after();
        acts.push(Act::Close);
        false
    }

    /// The application of request `gen` returned (or raised, `raised`) with its response
    /// not complete: the client gets a 500 if nothing was written, and the connection
    /// closes. None if the response was complete (or a file the connection's own sender
    /// is sending goes on: RSGI's `response_file` returns at once).
    pub fn app_unfinished(
        &mut self,
        st: &Settings,
        gen: u64,
        raised: bool,
        acts: &mut Vec<Act<W>>,
    ) -> Option<Unfinished> {
        let lost = self.lost();
        let req = self.current(gen)?;
        if req.complete() || matches!(req.writing, Writing::File { by_connection: true }) {
            return None;
        }
        let how = match (raised, &req.writing) {
            (true, _) => Unfinished::Raised,
            (false, Writing::Init) => Unfinished::ReturnedBeforeStart,
            (false, _) => Unfinished::ReturnedBeforeEnd,
        };
        let head_written = req.writing.head_written();
        if !head_written && !lost {
            acts.push(Act::Write(st.simple_response(500, req.head_method, b"")));
        }
        // The request gets its access-log line even though its response is a 500 or was
        // cut short (not when the client left before anything was sent).
        let (status, size) = if head_written {
            (req.status, req.sent)
        } else {
            (500, if req.head_method { 0 } else { reason(500).len() as u64 })
        };
        if head_written || !lost {
            record(st, req, status, size, acts);
        }
        req.writing = Writing::Done;
        req.keep_alive = false;
        self.close_after();
        acts.push(Act::Close);
        Some(how)
    }
}

/// A body part (`data`; `object()` is the same bytes as an object, written by reference
/// when large): framed, and the head before it if it is the first. `Err`: the response
/// cannot take a body part where it stands; `error`: this part failed the response.
#[allow(clippy::too_many_arguments)] // take_part's state, lent to one of its arms
fn take_body_part<W: World>(
    st: &Settings,
    req: &mut Request<W>,
    data: &[u8],
    object: &dyn Fn() -> W::Bytes,
    more: bool,
    acts: &mut Vec<Act<W>>,
    done: &mut bool,
    error: &mut Option<RespondError>,
) -> Result<(), RespondError> {
    let mut out = Vec::new();
    let fresh = match std::mem::replace(&mut req.writing, Writing::Done) {
        Writing::Head { head, trailers } => {
            let whole = (!more && !trailers).then_some(data.len() as u64);
            let encoder = close_head(req, head, whole, &mut out);
            req.writing = Writing::Body { encoder, trailers };
            true
        }
        w @ Writing::Body { .. } => {
            req.writing = w;
            false
        }
        w => {
            let e = if matches!(w, Writing::Init) { RespondError::NotStarted } else { RespondError::BodyComplete };
            req.writing = w;
            return Err(e);
        }
    };
    let Writing::Body { encoder, trailers } = &mut req.writing else {
        return Err(RespondError::NotStarted);
    };
    let (trailers, mut big, mut tail) = (*trailers, None, Vec::new());
    match encoder.chunk(data.len(), &mut out) {
        // Nothing of this part goes out: the connection closes. If nothing went out
        // before either, the client gets a 500, as for an application that failed
        // before its response.
        Err(_) => {
            *error = Some(RespondError::TooLong);
            out.clear();
            if fresh {
                req.status = 500;
                req.sent = if req.head_method { 0 } else { reason(500).len() as u64 };
                acts.push(Act::Write(st.simple_response(500, req.head_method, b"")));
            }
        }
        Ok(framed) => {
            if framed.send {
                // A part the transport would not hold for the end of the iteration leaves
                // at once either way: written by reference, it costs no copy. A smaller one
                // is copied next to the head, so that it can be held with it.
                if W::BY_REFERENCE && data.len() > HOLD_SMALL {
                    big = Some(object());
                } else {
                    out.extend_from_slice(data);
                }
            }
            if *encoder != Encoder::Bodiless {
                req.sent += data.len() as u64;
            }
            tail.extend_from_slice(framed.suffix);
        }
    }
    if !more && error.is_none() {
        let encoder = *encoder;
        let mut scratch = Vec::new();
        if encoder.end(b"", if trailers { &mut scratch } else { &mut tail }) == Err(EncodeError::TooShort) {
            *error = Some(RespondError::TooShort);
        }
        if trailers {
            req.writing = Writing::Trailers { encoder, fields: Vec::new() };
        } else {
            *done = true;
        }
    }
    // Every piece may be held for a moment: a response that goes on leaves with its next
    // part (often the last) in one write, and small complete responses written together
    // leave together (`Hold::IfSmall`).
    let hold = if *done { Hold::IfSmall } else { Hold::Iteration };
    match big {
        None => {
            out.extend_from_slice(&tail);
            if !out.is_empty() {
                acts.push(Act::WriteLater(out, hold));
            }
        }
        Some(obj) => {
            // One vectored write at the last piece: the head and tail are held with the
            // body (by reference) until then.
            if !out.is_empty() {
                acts.push(Act::WriteLater(out, Hold::Iteration));
            }
            acts.push(Act::WriteObj(obj, (!*done || !tail.is_empty()).then_some(Hold::Iteration)));
            if !tail.is_empty() {
                acts.push(Act::WriteLater(tail, hold));
            }
        }
    }
    Ok(())
}

/// Write the head's framing and end; the encoder for its body.
pub fn close_head<W: World>(
    req: &mut Request<W>,
    head: ResponseHead,
    whole: Option<u64>,
    out: &mut Vec<u8>,
) -> Encoder {
    if req.expect == Expect::Waiting && !req.reading.is_read() {
        // The client waits for a 100 that a final response rules out: its body may never
        // come, so the connection cannot be reused. Say so (RFC 9110 §10.1.1).
        req.keep_alive = false;
    }
    let framing = Framing { status: head.status, head_method: req.head_method, minor: req.minor, length: head.length };
    *out = head.bytes;
    frame_head(out, &framing, whole, &mut req.keep_alive)
}
