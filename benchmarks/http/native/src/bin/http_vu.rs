//! Virtual-user load generator reproducing a published k6 scenario: each of
//! V users loops GET /, sleep(think), GET /api, GET / for the duration.
//!
//!     http-vu --url http://127.0.0.1:PORT --users 10 --duration 10
//!             [--warmup 2] [--think-ms 100]
//!
//! One OS thread per user, each with its own blocking keep-alive connection.
//! Only requests that start after the warm-up and finish before the end are
//! measured (those still running at the end are counted as `late`); errors
//! are counted when the failed request overlaps that window, reconnections
//! when the request needing them starts inside it, iterations when they
//! complete inside it. Prints one JSON object on stdout.

use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use bench_http::cli::Args;
use bench_http::client::{Client, ErrorKind};
use bench_http::stats;

const ERROR_PAUSE: Duration = Duration::from_millis(10);

struct Config {
    addr: SocketAddr,
    host: String,
    users: usize,
    duration: f64,
    warmup: f64,
    think: Duration,
}

/// The measured window.
#[derive(Clone, Copy)]
struct Window {
    start: Instant,
    end: Instant,
}

impl Window {
    fn contains(&self, t: Instant) -> bool {
        t >= self.start && t <= self.end
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Route {
    Root,
    Api,
}

impl Route {
    fn path(self) -> &'static str {
        match self {
            Route::Root => "/",
            Route::Api => "/api",
        }
    }
}

#[derive(Default)]
struct Tally {
    root: Vec<u64>,
    api: Vec<u64>,
    non_2xx: u64,
    /// Started in the window but finished after its end: not measured.
    late: u64,
    errors: [u64; ErrorKind::ALL.len()],
    reconnects: u64,
    iterations: u64,
    /// Durations of the iterations measured (think time included): the users' cycle,
    /// which the request count follows in steps once the server keeps up.
    cycles: Vec<u64>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.root.extend(other.root);
        self.api.extend(other.api);
        self.non_2xx += other.non_2xx;
        self.late += other.late;
        for (mine, theirs) in self.errors.iter_mut().zip(other.errors) {
            *mine += theirs;
        }
        self.reconnects += other.reconnects;
        self.iterations += other.iterations;
        self.cycles.extend(other.cycles);
    }
}

struct User {
    client: Client,
    window: Window,
    tally: Tally,
    /// Only the first error of each user goes to stderr.
    reported: bool,
}

impl User {
    /// One request, recorded in the tally.
    fn request(&mut self, route: Route) {
        let before = self.client.reconnects();
        let start = Instant::now();
        let result = self.client.get(route.path());
        let end = Instant::now();
        if self.window.contains(start) {
            self.tally.reconnects += self.client.reconnects() - before;
        }
        match result {
            Ok(status) => {
                if self.window.contains(start) && self.window.contains(end) {
                    let nanos = u64::try_from((end - start).as_nanos()).unwrap_or(u64::MAX);
                    match route {
                        Route::Root => self.tally.root.push(nanos),
                        Route::Api => self.tally.api.push(nanos),
                    }
                    if !(200..300).contains(&status) {
                        self.tally.non_2xx += 1;
                    }
                } else if self.window.contains(start) {
                    self.tally.late += 1;
                }
            }
            Err(err) => {
                // Failures overlapping the window count, so that a request
                // that times out after the end is not lost.
                if start <= self.window.end && end >= self.window.start {
                    let slot = ErrorKind::ALL
                        .iter()
                        .position(|&k| k == err.kind)
                        .unwrap_or(0);
                    self.tally.errors[slot] += 1;
                }
                if !self.reported {
                    self.reported = true;
                    eprintln!("http-vu: GET {}: {err}", route.path());
                }
                thread::sleep(ERROR_PAUSE);
            }
        }
    }

    /// Sleep `pause`, but not past the end of the run.
    fn pause(&self, pause: Duration) {
        let left = self.window.end.saturating_duration_since(Instant::now());
        thread::sleep(pause.min(left));
    }

    fn run(mut self, think: Duration) -> Tally {
        let over = |user: &User| Instant::now() >= user.window.end;
        // A failed request does not end the iteration, as in k6.
        while !over(&self) {
            let began = Instant::now();
            self.request(Route::Root);
            self.pause(think);
            if over(&self) {
                break;
            }
            self.request(Route::Api);
            if over(&self) {
                break;
            }
            self.request(Route::Root);
            let ended = Instant::now();
            if self.window.contains(ended) {
                self.tally.iterations += 1;
            }
            if self.window.contains(began) && self.window.contains(ended) {
                let nanos = u64::try_from((ended - began).as_nanos()).unwrap_or(u64::MAX);
                self.tally.cycles.push(nanos);
            }
        }
        self.tally
    }
}

fn parse_url(url: &str) -> Result<(SocketAddr, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("only http:// URLs are supported: {url}"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if !(path.is_empty() || path == "/") {
        return Err(format!("the URL must not have a path: {url}"));
    }
    let has_port = match authority.rfind(']') {
        Some(bracket) => authority[bracket..].contains(':'),
        None => authority.contains(':'),
    };
    let target = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let addr = target
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("cannot resolve {authority}"))?;
    Ok((addr, authority.to_string()))
}

fn parse_config() -> Result<Config, String> {
    let args = Args::parse(&["url", "users", "duration", "warmup", "think-ms"])?;
    let url: String = args.required("url")?;
    let (addr, host) = parse_url(&url)?;
    let users: usize = args.required("users")?;
    let duration: f64 = args.required("duration")?;
    let warmup: f64 = args.get_or("warmup", 2.0)?;
    let think_ms: f64 = args.get_or("think-ms", 100.0)?;
    if users == 0 {
        return Err("--users must be at least 1".into());
    }
    let seconds_ok = |s: f64| s.is_finite() && (0.0..1e6).contains(&s);
    if !seconds_ok(duration)
        || duration == 0.0
        || !seconds_ok(warmup)
        || !seconds_ok(think_ms / 1e3)
    {
        return Err(
            "--duration, --warmup and --think-ms must be non-negative (duration > 0)".into(),
        );
    }
    Ok(Config {
        addr,
        host,
        users,
        duration,
        warmup,
        think: Duration::from_secs_f64(think_ms / 1e3),
    })
}

fn report(config: &Config, mut tally: Tally) -> Value {
    let mut all: Vec<u64> = tally.root.iter().chain(&tally.api).copied().collect();
    let requests = all.len();
    let mut errors = Map::new();
    for (kind, count) in ErrorKind::ALL.iter().zip(tally.errors) {
        errors.insert(kind.name().to_string(), json!(count));
    }
    let rps = requests as f64 / config.duration;
    json!({
        "users": config.users,
        "duration": config.duration,
        "warmup": config.warmup,
        "think_ms": config.think.as_secs_f64() * 1e3,
        "requests": requests,
        "errors": tally.errors.iter().sum::<u64>(),
        "error_kinds": errors,
        "non_2xx": tally.non_2xx,
        "late": tally.late,
        "reconnects": tally.reconnects,
        "rps": (rps * 100.0).round() / 100.0,
        "iterations": tally.iterations,
        "cycle_ms": stats::summary(&mut tally.cycles),
        "latency_ms": {
            "all": stats::summary(&mut all),
            "/": stats::summary(&mut tally.root),
            "/api": stats::summary(&mut tally.api),
        },
    })
}

fn main() -> ExitCode {
    let config = match parse_config() {
        Ok(config) => Arc::new(config),
        Err(msg) => {
            eprintln!(
                "http-vu: {msg}\nusage: http-vu --url http://HOST:PORT --users N --duration SECONDS \
                 [--warmup SECONDS] [--think-ms MS]"
            );
            return ExitCode::from(2);
        }
    };
    let now = Instant::now();
    let start = now + Duration::from_secs_f64(config.warmup);
    let window = Window {
        start,
        end: start + Duration::from_secs_f64(config.duration),
    };
    let mut threads = Vec::with_capacity(config.users);
    for i in 0..config.users {
        let config = Arc::clone(&config);
        let spawned = thread::Builder::new()
            .name(format!("vu-{i}"))
            .stack_size(256 * 1024)
            .spawn(move || {
                let user = User {
                    client: Client::new(config.addr, &config.host),
                    window,
                    tally: Tally::default(),
                    reported: false,
                };
                user.run(config.think)
            });
        match spawned {
            Ok(handle) => threads.push(handle),
            Err(e) => {
                eprintln!("http-vu: cannot start user {i}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut tally = Tally::default();
    for handle in threads {
        match handle.join() {
            Ok(user) => tally.merge(user),
            Err(_) => eprintln!("http-vu: a user thread panicked"),
        }
    }
    println!("{}", report(&config, tally));
    ExitCode::SUCCESS
}
