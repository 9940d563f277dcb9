//! The connection's side of a static file: the request is taken off the read buffer as any
//! other (its body read and dropped, keep-alive, the access log), the answer's head and body
//! are written. A large file is queued on swordfish's socket transport, which sends it with
//! `sendfile` from Rust; on another loop's transport, or TLS, it goes to the loop's
//! `sendfile` through the response's file path (`Writing::File` until `file_sent`).
//! Answers to pipelined requests stop while the client does not read them, so that they do
//! not pile up in memory.

use super::super::conn::{BodyState, Reading, Writing};
use super::super::encode::Encoder;
use super::super::link::{Act, Conn};
use super::super::parse::{ChunkedDecoder, Framing, Head};
use super::super::protocol::HttpProtocol;
use super::super::reading::READ_HIGH_WATER;
use super::super::writing::close_head;
use super::{Body, Conditions, StaticFiles};
use crate::clock::monotonic;
use crate::transport::stream::Hold;
use pyo3::prelude::*;
use std::sync::atomic::Ordering;

/// Bytes of static answers queued in one go: then the transport writes them, and says
/// (pausing the protocol) whether the client keeps up, before more are answered.
const BURST: usize = 256 * 1024;

/// What became of a request head, for `advance`.
pub enum Static {
    /// Not a static file's: the interface serves it.
    Not,
    /// Answered, and the connection goes on (`advance` reads on) or not.
    Answered(bool),
    /// Left in the read buffer until the client has read the answers before it.
    Held,
}

impl HttpProtocol {
    /// Answer `head` if its path is under the static route.
    pub(in crate::http) fn serve_static(
        &self,
        py: Python<'_>,
        c: &mut Conn,
        files: &StaticFiles,
        head: &Head,
        head_method: bool,
        acts: &mut Vec<Act>,
    ) -> PyResult<Static> {
        let state = self.state.get();
        let st = &state.settings;
        let method = &c.rbuf[head.method.clone()];
        let Some(rest) = files.route_of(&c.rbuf[head.target.clone()], method) else { return Ok(Static::Not) };
        if c.writing_paused || c.static_burst >= BURST {
            c.static_held = true;
            if c.rbuf.len() >= READ_HIGH_WATER && !c.reading_paused {
                c.reading_paused = true;
                acts.push(Act::PauseReading);
            }
            return Ok(Static::Held);
        }
        let fields = head.headers.iter().map(|(n, v)| (&c.rbuf[n.clone()], &c.rbuf[v.clone()]));
        let answer = files.answer(&st.head_rules(), method, rest, &Conditions::from_fields(fields));
        // The access log formats the request as the interface presents it; one the
        // interface would refuse (a WebSocket handshake it turns down) is still logged, as
        // input that made no request is.
        let log = state.access_log.as_ref().map(|_| {
            state
                .dispatch
                .request(py, &crate::http::dispatch::RequestView::of(c, head))
                .map_or_else(|_| py.None(), |s| s.request)
        });
        let reading = match head.framing {
            Framing::Length(0) => Reading::Done,
            Framing::Length(n) => Reading::Discard(BodyState::Length(n)),
            Framing::Chunked => Reading::Discard(BodyState::Chunked(ChunkedDecoder::new(st.limits.body_size))),
        };
        st.total_requests.fetch_add(1, Ordering::Relaxed);
        let keep_alive = head.keep_alive && !c.shutdown && !answer.head.close;
        let native_writer = c.native_writer;
        let start = st.timed().then(monotonic);
        let req = c.begin(head, head_method, reading, keep_alive, false, log, start);
        req.status = answer.head.status;
        let gen = req.gen;
        let mut out = Vec::new();
        let encoder = close_head(req, answer.head, None, &mut out);
        let mut burst = out.len();
        let answered = match (encoder, answer.body) {
            (Encoder::Length(n), Body::File { file, offset, len }) if n == len && native_writer => {
                // swordfish's socket transport queues the file behind the head and sends it
                // itself: the response is complete once queued, as one of bytes is.
                req.sent = len;
                burst += usize::try_from(len).unwrap_or(usize::MAX);
                acts.push(Act::Write(out));
                acts.push(Act::WriteFile { file, offset, len });
                None
            }
            (Encoder::Length(n), Body::File { file, offset, len }) if n == len => {
                req.sent = len;
                req.writing = Writing::File { by_connection: true };
                acts.push(Act::Write(out));
                acts.push(Act::SendFile { file, offset, len, gen });
                c.objects.file_sender = Some(files.sender.clone_ref(py));
                // On to the request's body, read and dropped while the file goes out.
                Some(true)
            }
            (encoder, body) => {
                if let (Encoder::Length(n), Body::Bytes(data)) = (encoder, body) {
                    if n == data.len() as u64 {
                        out.extend_from_slice(&data);
                        req.sent = n;
                        burst += data.len();
                    }
                }
                // Complete: small answers of one loop iteration leave in one write.
                acts.push(Act::WriteLater(out, Hold::IfSmall));
                None
            }
        };
        c.static_burst = c.static_burst.saturating_add(burst);
        Ok(Static::Answered(answered.unwrap_or_else(|| c.end_response(st, acts))))
    }
}
