//! Native load client for the echo benchmark: the `pingpong` test of `client.py`, with
//! the same method and the same JSON line, written in Rust so that the client is not
//! what limits the measurement (the Python client spends more time per round trip than
//! the fast servers do).
//!
//!     echo-client pingpong --port P --size N --concurrency C --duration S --warmup S
//!
//! C threads, each with one blocking socket (TCP_NODELAY), send `b'x' * (N - 1) + b'\n'`
//! and read until N bytes came back (closed loop). All connect and make one checked round
//! trip first, then ping-pong for `--warmup` seconds unrecorded and `--duration` seconds
//! recorded. Prints requests, rps, mibps and the p50/p99 round-trip latency in µs
//! (nearest rank). Errors go to stderr with exit status 1.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

const IO_TIMEOUT: Duration = Duration::from_secs(10);
const MIB: f64 = (1 << 20) as f64;

struct Args {
    port: u16,
    size: usize,
    concurrency: usize,
    duration: f64,
    warmup: f64,
}

fn parse_args() -> Result<Args, String> {
    let mut argv = std::env::args().skip(1);
    if argv.next().as_deref() != Some("pingpong") {
        return Err("usage: echo-client pingpong --port P --size N [--concurrency C] \
                    [--duration S] [--warmup S]"
            .into());
    }
    let mut args = Args { port: 0, size: 0, concurrency: 1, duration: 10.0, warmup: 1.0 };
    while let Some(flag) = argv.next() {
        let value = argv.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--port" => args.port = value.parse().map_err(|e| bad(&e))?,
            "--size" => args.size = value.parse().map_err(|e| bad(&e))?,
            "--concurrency" => args.concurrency = value.parse().map_err(|e| bad(&e))?,
            "--duration" => args.duration = value.parse().map_err(|e| bad(&e))?,
            "--warmup" => args.warmup = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if args.port == 0 || args.size == 0 || args.concurrency == 0 || args.duration <= 0.0 {
        return Err("--port, --size, --concurrency and --duration must be positive".into());
    }
    Ok(args)
}

fn message(size: usize) -> Vec<u8> {
    let mut m = vec![b'x'; size];
    m[size - 1] = b'\n';
    m
}

fn round_trip(sock: &mut TcpStream, msg: &[u8], buf: &mut [u8]) -> Result<(), String> {
    sock.write_all(msg).map_err(|e| format!("send: {e}"))?;
    let mut got = 0;
    while got < buf.len() {
        match sock.read(&mut buf[got..]) {
            Ok(0) => return Err(format!("server closed the connection after {got} bytes")),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("recv: {e}")),
        }
    }
    Ok(())
}

/// One client: connect, check one echo, wait for all the others, then ping-pong for the
/// warm-up and the recorded duration; returns the recorded round trips in ns.
fn worker(args: &Args, start: &Barrier) -> Result<Vec<u64>, String> {
    let mut sock = TcpStream::connect(("127.0.0.1", args.port)).map_err(|e| format!("connect: {e}"))?;
    sock.set_nodelay(true).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
    sock.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
    let msg = message(args.size);
    let mut buf = vec![0u8; args.size];
    let checked = round_trip(&mut sock, &msg, &mut buf).and_then(|()| {
        if buf == msg {
            Ok(())
        } else {
            Err("the echoed message differs from the one sent".to_owned())
        }
    });
    start.wait(); // also on failure, so that the others are not left waiting
    checked?;
    let record_from = Instant::now() + Duration::from_secs_f64(args.warmup);
    let end = record_from + Duration::from_secs_f64(args.duration);
    let mut latencies = Vec::with_capacity(1 << 16);
    loop {
        let t = Instant::now();
        if t >= end {
            break;
        }
        round_trip(&mut sock, &msg, &mut buf)?;
        if t >= record_from {
            latencies.push(t.elapsed().as_nanos() as u64);
        }
    }
    Ok(latencies)
}

fn percentile_us(sorted: &[u64], fraction: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((sorted.len() as f64 * fraction).ceil() as usize).max(1);
    Some(sorted[rank.min(sorted.len()) - 1] as f64 / 1e3)
}

fn json_number(v: Option<f64>) -> String {
    v.map_or_else(|| "null".to_owned(), |v| format!("{v}"))
}

fn run(args: Args) -> Result<String, String> {
    let args = Arc::new(args);
    let start = Arc::new(Barrier::new(args.concurrency));
    let workers: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (args, start) = (args.clone(), start.clone());
            thread::spawn(move || worker(&args, &start))
        })
        .collect();
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.join().map_err(|_| "a client thread panicked".to_owned())??);
    }
    all.sort_unstable();
    let requests = all.len();
    Ok(format!(
        "{{\"requests\": {requests}, \"rps\": {}, \"mibps\": {}, \"p50_us\": {}, \"p99_us\": {}}}",
        requests as f64 / args.duration,
        requests as f64 * args.size as f64 / args.duration / MIB,
        json_number(percentile_us(&all, 0.50)),
        json_number(percentile_us(&all, 0.99)),
    ))
}

fn main() -> std::process::ExitCode {
    match parse_args().and_then(run) {
        Ok(line) => {
            println!("{line}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("echo-client pingpong: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
