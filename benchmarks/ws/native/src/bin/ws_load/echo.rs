//! The echo scenario: every connection its own closed loop (send, wait for
//! the echo, check it, repeat). Counted are the round trips that start after
//! the warm-up and end before the deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use bench_ws::conn::{self, Conn};
use bench_ws::stats;

use crate::config::{negotiation, Config};

struct Outcome {
    samples: Vec<u64>,
    /// Round trips including the warm-up's.
    all: u64,
    wire_in: u64,
    wire_out: u64,
    error: Option<String>,
}

async fn closed_loop(mut conn: Conn, config: &Config, measure_from: Instant, end: Instant) -> Outcome {
    let mut samples = Vec::new();
    let (mut wire_in, mut wire_out, mut all) = (0, 0, 0);
    let error = loop {
        let sent = Instant::now();
        if sent >= end {
            break None;
        }
        let (in0, out0) = (conn.reader.wire_bytes, conn.writer.wire_bytes);
        if let Err(e) = conn.writer.send(config.text, &config.payload).await {
            break Some(e);
        }
        let text = match tokio::time::timeout(config.timeout, conn.recv()).await {
            Ok(Ok(text)) => text,
            Ok(Err(e)) => break Some(e),
            Err(_) => break Some("no echo within the timeout".into()),
        };
        if text != config.text || conn.reader.message() != config.payload.as_slice() {
            break Some("the echo differs from the message".into());
        }
        let done = Instant::now();
        all += 1;
        if sent >= measure_from && done <= end {
            samples.push((done - sent).as_nanos() as u64);
            wire_in += conn.reader.wire_bytes - in0;
            wire_out += conn.writer.wire_bytes - out0;
        }
    };
    if error.is_none() {
        conn::close(&mut conn.reader, &mut conn.writer, Duration::from_secs(1)).await;
    }
    Outcome { samples, all, wire_in, wire_out, error }
}

pub async fn run(config: &Arc<Config>) -> Result<Value, String> {
    let (conns, mut errors) = config.open_all(config.connections).await;
    if conns.is_empty() {
        return Err(errors.first().unwrap_or("no connection").to_string());
    }
    let mut out = Map::new();
    for (key, value) in negotiation(&conns) {
        out.insert(key.into(), value);
    }
    let measure_from = Instant::now() + config.warmup;
    let end = measure_from + config.duration;
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|conn| {
            let config = Arc::clone(config);
            tokio::spawn(async move { closed_loop(conn, &config, measure_from, end).await })
        })
        .collect();
    let mut samples = Vec::new();
    let (mut wire_in, mut wire_out, mut all) = (0u64, 0u64, 0u64);
    for task in tasks {
        match task.await {
            Ok(outcome) => {
                samples.extend_from_slice(&outcome.samples);
                wire_in += outcome.wire_in;
                wire_out += outcome.wire_out;
                all += outcome.all;
                if let Some(e) = outcome.error {
                    errors.add(e);
                }
            }
            Err(e) => errors.add(format!("task: {e}")),
        }
    }
    let count = samples.len() as u64;
    let secs = config.duration.as_secs_f64();
    out.insert("mode".into(), json!("echo"));
    out.insert("connections".into(), json!(config.connections));
    out.insert("size".into(), json!(config.payload.len()));
    out.insert("kind".into(), json!(if config.text { "text" } else { "binary" }));
    out.insert("duration_s".into(), json!(secs));
    out.insert("messages".into(), json!(count));
    out.insert("msgs_per_s".into(), json!(count as f64 / secs));
    out.insert("all_messages".into(), json!(all));
    for (key, value) in stats::latency(&mut samples) {
        out.insert(key.into(), value);
    }
    let per = |bytes: u64| {
        if count == 0 {
            Value::Null
        } else {
            json!(bytes as f64 / count as f64)
        }
    };
    out.insert("wire_in_per_msg".into(), per(wire_in));
    out.insert("wire_out_per_msg".into(), per(wire_out));
    out.insert("errors".into(), json!(errors.count()));
    out.insert("error_kinds".into(), errors.json());
    Ok(Value::Object(out))
}
