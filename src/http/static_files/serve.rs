//! The connection's side of a static file: the request is taken off the read buffer as any
//! other (its body read and dropped, keep-alive, the access log), the answer's head and body
//! are written. The same code serves the loop's connections and the WSGI thread engine's
//! (`Conn::serve_static`, generic over the driver's `World`). A large file is queued for the
//! driver to send with `sendfile` from Rust (swordfish's socket transport, the thread
//! engine); on another loop's transport, or TLS, it goes to the loop's `sendfile` through
//! the response's file path (`Writing::File` until `file_sent`). Answers to pipelined
//! requests stop while the client does not read them, so that they do not pile up in
//! memory.

use super::super::conn::{self, BodyState, Reading, World, Writing};
use super::super::dispatch::RequestView;
use super::super::encode::Encoder;
use super::super::link::{Act, Conn};
use super::super::parse::{ChunkedDecoder, Framing, Head};
use super::super::protocol::HttpProtocol;
use super::super::reading::READ_HIGH_WATER;
use super::super::settings::Settings;
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
    /// Answered, the file to be sent by the driver (`Act::SendFile`); the connection goes on.
    ByDriver,
}

impl HttpProtocol {
    /// Answer `head` if its path is under the static route (see `Conn::serve_static`); a
    /// large file goes to the loop's `sendfile` where the transport is not swordfish's.
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
        let queue_files = c.native_writer;
        // The access log formats the request as the interface presents it; one the
        // interface would refuse (a WebSocket handshake it turns down) is still logged, as
        // input that made no request is.
        let log = |c: &mut Conn| {
            state.access_log.as_ref().map(|_| {
                state.dispatch.request(py, &RequestView::of(c, head)).map_or_else(|_| py.None(), |s| s.request)
            })
        };
        Ok(match c.serve_static(&state.settings, files, head, head_method, queue_files, log, acts) {
            Static::ByDriver => {
                c.objects.file_sender = Some(files.sender.clone_ref(py));
                Static::Answered(true)
            }
            other => other,
        })
    }
}

impl<W: World> conn::Conn<W> {
    /// Answer `head` if its path is under the static route. `queue_files`: the driver
    /// sends a file queued behind its head itself (`Act::WriteFile`); otherwise the file
    /// goes by `Act::SendFile` and the result is `Static::ByDriver`. `log`: the request as
    /// the access log has it, asked for only when the request is answered.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn serve_static(
        &mut self,
        st: &Settings,
        files: &StaticFiles,
        head: &Head,
        head_method: bool,
        queue_files: bool,
        log: impl FnOnce(&mut Self) -> Option<W::Log>,
        acts: &mut Vec<conn::Act<W>>,
    ) -> Static {
        let c = self;
        let method = &c.rbuf[head.method.clone()];
        let Some(rest) = files.route_of(&c.rbuf[head.target.clone()], method) else { return Static::Not };
        if c.writing_paused || c.static_burst >= BURST {
            c.static_held = true;
            if c.rbuf.len() >= READ_HIGH_WATER && !c.reading_paused {
                c.reading_paused = true;
                acts.push(conn::Act::PauseReading);
            }
            return Static::Held;
        }
        let fields = head.headers.iter().map(|(n, v)| (&c.rbuf[n.clone()], &c.rbuf[v.clone()]));
        let answer = files.answer(&st.head_rules(), method, rest, &Conditions::from_fields(fields));
        let log = log(c);
        let reading = match head.framing {
            Framing::Length(0) => Reading::Done,
            Framing::Length(n) => Reading::Discard(BodyState::Length(n)),
            Framing::Chunked => Reading::Discard(BodyState::Chunked(ChunkedDecoder::new(st.limits.body_size))),
        };
        st.total_requests.fetch_add(1, Ordering::Relaxed);
        let keep_alive = head.keep_alive && !c.shutdown && !answer.head.close;
        let start = st.timed().then(monotonic);
        let req = c.begin(head, head_method, reading, keep_alive, false, log, start);
        req.status = answer.head.status;
        let gen = req.gen;
        let mut out = Vec::new();
        let encoder = close_head(req, answer.head, None, &mut out);
        let mut burst = out.len();
        let by_driver = match (encoder, answer.body) {
            (Encoder::Length(n), Body::File { file, offset, len }) if n == len && queue_files => {
                // The driver's transport queues the file behind the head and sends it
                // itself: the response is complete once queued, as one of bytes is.
                req.sent = len;
                burst += usize::try_from(len).unwrap_or(usize::MAX);
                acts.push(conn::Act::Write(out));
                acts.push(conn::Act::WriteFile { file, offset, len });
                false
            }
            (Encoder::Length(n), Body::File { file, offset, len }) if n == len => {
                req.sent = len;
                req.writing = Writing::File { by_connection: true };
                acts.push(conn::Act::Write(out));
                acts.push(conn::Act::SendFile { file, offset, len, gen });
                true
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
                acts.push(conn::Act::WriteLater(out, Hold::IfSmall));
                false
            }
        };
        c.static_burst = c.static_burst.saturating_add(burst);
        if by_driver {
            // On to the request's body, read and dropped while the file goes out.
            return Static::ByDriver;
        }
        Static::Answered(c.end_response(st, acts))
    }
}
