//! The idle scenario: open N connections (with or without offering
//! permessage-deflate), print what was opened, then hold them without a word
//! until stdin closes, while the runner reads the server's memory.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

use crate::config::Config;

pub async fn run(config: &Arc<Config>) -> Result<Value, String> {
    let started = Instant::now();
    let (conns, errors) = config.open_all(config.connections).await;
    if conns.is_empty() {
        return Err(errors.first().unwrap_or("no connection").to_string());
    }
    let line = json!({
        "mode": "idle",
        "connections": config.connections,
        "opened": conns.len(),
        "deflate_agreed": conns.iter().filter(|c| c.deflate).count(),
        "extensions": conns[0].extensions,
        "open_s": started.elapsed().as_secs_f64(),
        "errors": errors.count(),
        "error_kinds": errors.json(),
    });
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{line}").and_then(|()| stdout.flush()).map_err(|e| format!("stdout: {e}"))?;
    }
    // Closing stdin (or the runner dying) ends the hold; the sockets close
    // with the process.
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    drop(conns);
    Ok(Value::Null)
}
