//! The broadcast scenario, granian's published WebSocket benchmark: N
//! connections each send K messages, which the app relays to all N. The
//! figure is the messages all connections received together per second,
//! from the first send until every connection has its N*K. Each message
//! starts with its send time (16 hex digits, ns since the start), so the
//! delivery latency comes too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{json, Map, Value};

use bench_ws::conn::{self, closed, Conn, Incoming, Reader, Writer};
use bench_ws::stats;

use crate::config::{negotiation, Config, Errors};

const STAMP: usize = 16;

async fn send_all(mut writer: Writer, config: Arc<Config>, t0: Instant) -> (Writer, Result<(), String>) {
    let mut message = config.payload.clone();
    message.resize(message.len().max(STAMP), b'.');
    for _ in 0..config.messages {
        let stamp = format!("{:016x}", t0.elapsed().as_nanos() as u64);
        message[..STAMP].copy_from_slice(stamp.as_bytes());
        if let Err(e) = writer.send(config.text, &message).await {
            return (writer, Err(e));
        }
    }
    (writer, Ok(()))
}

struct Received {
    reader: Reader,
    count: usize,
    finished: Option<Duration>,
    samples: Vec<u64>,
    error: Option<String>,
}

async fn receive_all(mut reader: Reader, config: Arc<Config>, t0: Instant, expected: usize) -> Received {
    let size = config.payload.len().max(STAMP);
    let mut samples = Vec::with_capacity(expected);
    let mut error = None;
    while samples.len() < expected {
        let text = match tokio::time::timeout(config.timeout, reader.next()).await {
            Ok(Ok(Incoming::Message { text })) => text,
            // A short run need not answer the server's keep-alive pings.
            Ok(Ok(Incoming::Ping(_))) => continue,
            Ok(Ok(Incoming::Close(code))) => {
                error = Some(closed(code));
                break;
            }
            Ok(Err(e)) => {
                error = Some(e);
                break;
            }
            Err(_) => {
                error = Some("no message within the timeout".into());
                break;
            }
        };
        let now = t0.elapsed().as_nanos() as u64;
        let message = reader.message();
        let stamp = std::str::from_utf8(&message[..STAMP.min(message.len())])
            .ok()
            .and_then(|s| u64::from_str_radix(s, 16).ok());
        match stamp {
            Some(sent) if text == config.text && message.len() == size => samples.push(now.saturating_sub(sent)),
            _ => {
                error = Some("a relayed message differs from those sent".into());
                break;
            }
        }
    }
    Received { reader, count: samples.len(), finished: error.is_none().then(|| t0.elapsed()), samples, error }
}

pub async fn run(config: &Arc<Config>) -> Result<Value, String> {
    let n = config.connections;
    let (conns, errors) = config.open_all(n).await;
    if errors.count() > 0 {
        return Err(format!("{} of {n} connections failed: {}", errors.count(), errors.first().unwrap_or("")));
    }
    let mut out = Map::new();
    for (key, value) in negotiation(&conns) {
        out.insert(key.into(), value);
    }
    // The app registers a connection just after accepting it: give the last
    // ones time to be registered before anyone sends.
    tokio::time::sleep(config.settle).await;
    let expected = n * config.messages;
    let t0 = Instant::now();
    let (mut senders, mut receivers) = (Vec::new(), Vec::new());
    for Conn { reader, writer, .. } in conns {
        senders.push(tokio::spawn(send_all(writer, Arc::clone(config), t0)));
        receivers.push(tokio::spawn(receive_all(reader, Arc::clone(config), t0, expected)));
    }
    let mut errors = Errors::default();
    let mut writers = Vec::new();
    for sender in senders {
        match sender.await {
            Ok((writer, result)) => {
                writers.push(writer);
                if let Err(e) = result {
                    errors.add(e);
                }
            }
            Err(e) => errors.add(format!("task: {e}")),
        }
    }
    let (mut readers, mut samples, mut received, mut last) = (Vec::new(), Vec::new(), 0, Duration::ZERO);
    for receiver in receivers {
        match receiver.await {
            Ok(r) => {
                received += r.count;
                samples.extend_from_slice(&r.samples);
                last = last.max(r.finished.unwrap_or(Duration::ZERO));
                if let Some(e) = r.error {
                    errors.add(format!("{e} after {} of {expected} messages", r.count));
                }
                readers.push(r.reader);
            }
            Err(e) => errors.add(format!("task: {e}")),
        }
    }
    join_all(readers.iter_mut().zip(writers.iter_mut()).map(|(r, w)| conn::close(r, w, Duration::from_secs(1)))).await;
    if errors.count() > 0 {
        return Err(format!("{} connections failed: {}", errors.count(), errors.first().unwrap_or("")));
    }
    let secs = last.as_secs_f64();
    out.insert("mode".into(), json!("broadcast"));
    out.insert("connections".into(), json!(n));
    out.insert("messages_each".into(), json!(config.messages));
    out.insert("size".into(), json!(config.payload.len().max(STAMP)));
    out.insert("kind".into(), json!(if config.text { "text" } else { "binary" }));
    out.insert("duration_s".into(), json!(secs));
    out.insert("messages".into(), json!(received));
    out.insert("msgs_per_s".into(), json!(received as f64 / secs));
    for (key, value) in stats::latency(&mut samples) {
        out.insert(key.into(), value);
    }
    out.insert("errors".into(), json!(0));
    Ok(Value::Object(out))
}
