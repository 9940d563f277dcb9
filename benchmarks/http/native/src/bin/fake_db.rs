//! A fake database for the server-comparison workload: the ASGI app's `/api`
//! endpoint fetches one number from it over HTTP/1.1 keep-alive.
//!
//!     fake-db --port PORT --latency-ms N [--host 127.0.0.1]
//!
//! Every GET answers, after N ms, 200 with a text/plain decimal integer between
//! 1 and 10000. The wait is a `nanosleep` on a blocking-pool thread: tokio's
//! own timers tick in whole milliseconds, which made a 25 ms query take
//! 25.4-26.7 ms depending on when it arrived, noise larger than the
//! differences between the servers under test.

use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};

use bench_http::cli::Args;
use bench_http::serve;

static QUERIES: AtomicU64 = AtomicU64::new(0);

/// SplitMix64 of the query number: a deterministic pseudo-random sequence.
fn next_value() -> u64 {
    let mut z = QUERIES
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_add(1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    z % 10_000 + 1
}

async fn handle(
    req: Request<Incoming>,
    latency: Duration,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::GET {
        let mut response = Response::new(Full::new(Bytes::from_static(b"Method Not Allowed")));
        *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        return Ok(response);
    }
    if !latency.is_zero() {
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(latency)).await;
    }
    let mut response = Response::new(Full::new(Bytes::from(next_value().to_string())));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(response)
}

fn main() -> ExitCode {
    let parsed = Args::parse(&["host", "port", "latency-ms"]).and_then(|args| {
        let addr = serve::listen_addr(&args)?;
        let latency_ms: f64 = args.required("latency-ms")?;
        if !(latency_ms.is_finite() && latency_ms >= 0.0) {
            return Err(format!("bad value for --latency-ms: {latency_ms}"));
        }
        Ok((addr, Duration::from_secs_f64(latency_ms / 1000.0)))
    });
    let (addr, latency) = match parsed {
        Ok(parsed) => parsed,
        Err(msg) => {
            eprintln!(
                "fake-db: {msg}\nusage: fake-db --port PORT --latency-ms N [--host 127.0.0.1]"
            );
            return ExitCode::from(2);
        }
    };
    serve::run("fake-db", addr, serve::Protocol::Http1, move |req| {
        handle(req, latency)
    })
}
