//! Overload without a fall: when the server cannot take another connection (no descriptor
//! left for `accept`), it closes the connections that are least use first, as nginx drains
//! its idle keep-alive ones: every idle kept-alive connection, then the connections whose
//! request head has been arriving longest (a slow client, or one sending a byte at a time
//! to hold the descriptor), so that the next client is served rather than refused until
//! the header-read timeout frees descriptors. Connections with a request in the app, or
//! switched to WebSocket, are never closed here. An HTTP/2 connection with no stream open
//! is idle too (it goes with a GOAWAY).

use super::config::HttpServerState;
use super::conn::TimerKind;
use super::link::Act;
use super::protocol::HttpProtocol;
use crate::http2::protocol::H2Protocol;
use pyo3::prelude::*;

/// What a connection is worth keeping, for shedding: lower goes first.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
enum Keep {
    /// Between two requests, nothing of the next one read.
    Idle,
    /// Its request head is arriving, since this time (the header deadline's start); then
    /// the connection's number, for those accepted within one tick of the coarse clock.
    Head(f64, u64),
}

impl HttpProtocol {
    /// How this connection ranks for shedding; None: it is serving (or closing).
    fn keep(&self, py: Python<'_>) -> PyResult<Option<Keep>> {
        let c = self.lock(py)?;
        if c.closing() || c.req.is_some() || c.objects.upgraded.is_some() {
            return Ok(None);
        }
        Ok(match c.timer_kind {
            TimerKind::KeepAlive if c.rbuf.is_empty() => Some(Keep::Idle),
            TimerKind::Header | TimerKind::KeepAlive => Some(Keep::Head(c.deadline, c.number)),
            TimerKind::None => None,
        })
    }

    /// Close quietly, as the header or keep-alive timer would.
    fn shed(slf: &Bound<'_, Self>) -> PyResult<()> {
        {
            let mut c = slf.get().lock(slf.py())?;
            c.timer_kind = TimerKind::None;
            c.close_after();
        }
        Self::run_acts(slf, vec![Act::Close])
    }
}

/// Close every idle kept-alive connection and, if that makes fewer than `want`, the
/// connections whose head has been arriving longest, up to `want` in all. Returns (idle,
/// heads) closed.
pub fn shed_connections(py: Python<'_>, state: &HttpServerState, want: usize) -> PyResult<(usize, usize)> {
    let mut ranked = Vec::new();
    let mut idle_h2 = Vec::new();
    for item in state.connections.bind(py).iter() {
        match item.cast_into::<HttpProtocol>() {
            Ok(proto) => {
                if let Some(keep) = proto.get().keep(py)? {
                    ranked.push((keep, proto));
                }
            }
            Err(e) => {
                if let Ok(h2) = e.into_inner().cast_into::<H2Protocol>() {
                    if h2.get().idle(py)? {
                        idle_h2.push(h2);
                    }
                }
            }
        }
    }
    let mut idle = idle_h2.len();
    for h2 in idle_h2 {
        H2Protocol::shed(&h2)?;
    }
    // Idle first, then heads by the time they began (a deadline is that time plus the
    // same timeout for all): the oldest first.
    ranked.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    let mut heads = 0;
    for (keep, proto) in ranked {
        match keep {
            Keep::Idle => idle += 1,
            Keep::Head(..) if idle + heads < want => heads += 1,
            Keep::Head(..) => break,
        }
        HttpProtocol::shed(&proto)?;
    }
    Ok((idle, heads))
}
