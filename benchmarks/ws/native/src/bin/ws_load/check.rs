//! The probe run before a server is measured: one connection echoes a few
//! messages of both kinds and every size the suite uses (and the payload
//! file, if given), each checked byte for byte.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use bench_ws::conn::{self, Conn};

use crate::config::{negotiation, Config};

const SIZES: [usize; 4] = [0, 16, 1024, 65536];

async fn echo_once(conn: &mut Conn, text: bool, message: &[u8], timeout: Duration) -> Result<(), String> {
    conn.writer.send(text, message).await?;
    let echoed =
        tokio::time::timeout(timeout, conn.recv()).await.map_err(|_| "no echo within the timeout".to_string())??;
    if echoed != text || conn.reader.message() != message {
        let kind = if text { "text" } else { "binary" };
        return Err(format!("the echo of a {}-byte {kind} message differs", message.len()));
    }
    Ok(())
}

pub async fn run(config: &Arc<Config>) -> Result<Value, String> {
    let (mut conns, errors) = config.open_all(1).await;
    let Some(mut conn) = conns.pop() else {
        return Err(errors.first().unwrap_or("no connection").to_string());
    };
    let mut messages: Vec<(bool, Vec<u8>)> = Vec::new();
    for size in SIZES {
        messages.push((true, "swordfish ".bytes().cycle().take(size).collect()));
        messages.push((false, (0..size).map(|i| (i % 256) as u8).collect()));
    }
    messages.push((config.text, config.payload.clone()));
    for (text, message) in &messages {
        echo_once(&mut conn, *text, message, config.timeout).await?;
    }
    conn::close(&mut conn.reader, &mut conn.writer, Duration::from_secs(1)).await;
    let mut out = json!({"mode": "check", "ok": true, "messages": messages.len()});
    for (key, value) in negotiation(std::slice::from_ref(&conn)) {
        out[key] = value;
    }
    Ok(out)
}
