//! ws-load's options, the message it sends, and opening many connections.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};

use bench_ws::cli::Args;
use bench_ws::conn::{Conn, Options};
use bench_ws::handshake::{parse_url, Target};

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Echo,
    Broadcast,
    Idle,
    Check,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Echo => "echo",
            Mode::Broadcast => "broadcast",
            Mode::Idle => "idle",
            Mode::Check => "check",
        }
    }
}

/// Handshakes in flight at once: more only overflows the servers' accept
/// queues into SYN retries.
const OPENING: usize = 64;

pub struct Config {
    pub target: Target,
    pub mode: Mode,
    pub connections: usize,
    pub text: bool,
    /// The message: `--payload`'s file, or `--size` bytes of filler.
    pub payload: Vec<u8>,
    pub options: Options,
    pub duration: Duration,
    pub warmup: Duration,
    pub messages: usize,
    pub settle: Duration,
    pub sources: u8,
    pub timeout: Duration,
}

fn seconds(args: &Args, name: &str, default: f64) -> Result<Duration, String> {
    let value: f64 = args.get_or(name, default)?;
    Duration::try_from_secs_f64(value).map_err(|_| format!("bad value for --{name}: {value}"))
}

impl Config {
    pub fn from_args() -> Result<Config, String> {
        let args = Args::parse(
            &[
                "url",
                "mode",
                "connections",
                "size",
                "kind",
                "payload",
                "level",
                "duration",
                "warmup",
                "messages",
                "settle",
                "sources",
                "timeout",
            ],
            &["deflate"],
        )?;
        let mode = match args.string("mode").unwrap_or("echo") {
            "echo" => Mode::Echo,
            "broadcast" => Mode::Broadcast,
            "idle" => Mode::Idle,
            "check" => Mode::Check,
            other => return Err(format!("unknown mode {other}")),
        };
        let text = match args.string("kind").unwrap_or("binary") {
            "text" => true,
            "binary" => false,
            other => return Err(format!("unknown kind {other}")),
        };
        let payload = match args.string("payload") {
            Some(path) => std::fs::read(path).map_err(|e| format!("{path}: {e}"))?,
            None => filler(args.get_or("size", 16usize)?, text),
        };
        if text && std::str::from_utf8(&payload).is_err() {
            return Err("a text payload must be UTF-8".into());
        }
        let sources: u8 = args.get_or("sources", 1)?;
        if sources == 0 || sources > 254 {
            return Err("--sources must be 1..=254".into());
        }
        Ok(Config {
            target: parse_url(&args.required::<String>("url")?)?,
            mode,
            connections: args.get_or("connections", 1usize)?.max(1),
            text,
            payload,
            options: Options {
                offer_deflate: args.flag("deflate"),
                level: args.get_or("level", 6u32)?.min(9),
                source: None,
            },
            duration: seconds(&args, "duration", 5.0)?,
            warmup: seconds(&args, "warmup", 1.0)?,
            messages: args.get_or("messages", 2500usize)?.max(1),
            settle: seconds(&args, "settle", 0.5)?,
            sources,
            timeout: seconds(&args, "timeout", 10.0)?,
        })
    }

    /// Open `n` connections, `OPENING` handshakes at a time, spread over
    /// `--sources` loopback addresses (127.0.0.1, .2, ...) when there is
    /// more than one: each source address has its own ephemeral ports.
    pub async fn open_all(&self, n: usize) -> (Vec<Conn>, Errors) {
        let results: Vec<Result<Conn, String>> = stream::iter(0..n)
            .map(|i| async move {
                let options = Options {
                    source: (self.sources > 1)
                        .then(|| IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1 + (i % usize::from(self.sources)) as u8))),
                    ..self.options
                };
                match tokio::time::timeout(self.timeout, Conn::open(&self.target, &options, i as u64)).await {
                    Ok(result) => result,
                    Err(_) => Err("handshake timed out".into()),
                }
            })
            .buffer_unordered(OPENING)
            .collect()
            .await;
        let mut errors = Errors::default();
        let mut conns = Vec::with_capacity(n);
        for result in results {
            match result {
                Ok(conn) => conns.push(conn),
                Err(e) => errors.add(e),
            }
        }
        (conns, errors)
    }
}

/// `size` bytes of message: printable ASCII for text, every byte value for binary.
fn filler(size: usize, text: bool) -> Vec<u8> {
    (0..size).map(|i| if text { b'a' + (i % 26) as u8 } else { (i * 31 % 251) as u8 }).collect()
}

/// Errors by kind (the message), for the output's `error_kinds`.
#[derive(Default)]
pub struct Errors(BTreeMap<String, u64>);

impl Errors {
    pub fn add(&mut self, e: String) {
        *self.0.entry(e).or_default() += 1;
    }

    pub fn count(&self) -> u64 {
        self.0.values().sum()
    }

    pub fn first(&self) -> Option<&str> {
        self.0.keys().next().map(String::as_str)
    }

    pub fn json(&self) -> Value {
        json!(self.0)
    }
}

/// What the connections agreed to: `deflate` only when all of them did.
pub fn negotiation(conns: &[Conn]) -> Vec<(&'static str, Value)> {
    let agreed = conns.iter().filter(|c| c.deflate).count();
    vec![
        ("deflate", json!(!conns.is_empty() && agreed == conns.len())),
        ("extensions", json!(conns.first().map(|c| c.extensions.as_str()).unwrap_or(""))),
    ]
}
