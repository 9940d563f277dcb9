//! ws-load: the WebSocket benchmark's load client, one thread (tokio
//! current_thread: it is pinned to one core), one JSON line on stdout.
//!
//!     ws-load --url ws://127.0.0.1:PORT/ [--mode echo|broadcast|idle|check]
//!             [--connections N] [--size BYTES] [--kind text|binary]
//!             [--payload FILE] [--deflate] [--level 6]
//!             [--duration 5] [--warmup 1] [--messages 2500] [--settle 0.5]
//!             [--sources 1] [--timeout 10]
//!
//! echo: N connections, each its own closed loop (send a message, wait for
//! its echo, check it, repeat) for the duration after the warm-up.
//! broadcast: N connections each send K messages that the app relays to
//! every connection; runs until every connection received N*K.
//! idle: open N connections, print, hold them until stdin closes.
//! check: one connection echoes a few sizes of both kinds (a probe).
//! --deflate offers permessage-deflate; whether the server agreed is in the
//! output (`deflate`, `extensions`), read from its 101 response.

mod broadcast;
mod check;
mod config;
mod echo;
mod idle;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::{json, Value};

use config::{Config, Mode};

const USAGE: &str = "usage: ws-load --url ws://HOST:PORT/PATH [--mode echo|broadcast|idle|check] \
[--connections N] [--size BYTES] [--kind text|binary] [--payload FILE] [--deflate] [--level N] \
[--duration S] [--warmup S] [--messages K] [--settle S] [--sources N] [--timeout S]";

fn main() -> ExitCode {
    let config = match Config::from_args() {
        Ok(config) => config,
        Err(msg) => {
            eprintln!("ws-load: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("ws-load: {e}");
            return ExitCode::FAILURE;
        }
    };
    let config = Arc::new(config);
    let result = runtime.block_on(async {
        match config.mode {
            Mode::Echo => echo::run(&config).await,
            Mode::Broadcast => broadcast::run(&config).await,
            Mode::Idle => idle::run(&config).await,
            Mode::Check => check::run(&config).await,
        }
    });
    // A run that could not measure anything still prints one JSON line, with
    // the reason, for the runner's table.
    let (line, code) = match result {
        Ok(Value::Null) => return ExitCode::SUCCESS,
        Ok(value) => (value, ExitCode::SUCCESS),
        Err(reason) => (json!({"mode": config.mode.name(), "failed": reason}), ExitCode::FAILURE),
    };
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "{line}").and_then(|()| stdout.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    code
}
