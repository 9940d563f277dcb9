//! The server loop shared by `http-native` and `fake-db`: one tokio
//! current_thread runtime (a single OS thread), hyper HTTP/1.1 with keep-alive
//! (or HTTP/2 with prior knowledge: `Protocol::Http2`), `READY <port>` on
//! stdout once listening, clean exit on SIGINT/SIGTERM.

use std::convert::Infallible;
use std::error::Error;
use std::future::Future;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};

/// What the connections speak.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    /// h2c with prior knowledge (the HTTP/2 benchmark's reference).
    Http2,
}

/// Serve `handler` on `addr` until SIGINT or SIGTERM. `name` prefixes errors.
pub fn run<F, Fut, B>(name: &str, addr: SocketAddr, protocol: Protocol, handler: F) -> ExitCode
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn Error + Send + Sync>>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let result = match runtime {
        Ok(runtime) => runtime.block_on(serve(addr, protocol, handler)),
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve<F, Fut, B>(addr: SocketAddr, protocol: Protocol, handler: F) -> io::Result<()>
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn Error + Send + Sync>>,
{
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    let port = listener.local_addr()?.port();
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    {
        let mut stdout = io::stdout().lock();
        writeln!(stdout, "READY {port}")?;
        stdout.flush()?;
    }
    loop {
        let stream = tokio::select! {
            biased;
            _ = sigterm.recv() => return Ok(()),
            _ = sigint.recv() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Typically EMFILE: back off instead of spinning on it.
                    eprintln!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        tokio::spawn(async move {
            // Resets and malformed requests end only that connection.
            if protocol == Protocol::Http2 {
                let conn = http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service_fn(handler));
                let _ = conn.await;
            } else {
                let conn = http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), service_fn(handler));
                let _ = conn.await;
            }
        });
    }
}

/// `--host H --port P` as a socket address (host defaults to 127.0.0.1).
pub fn listen_addr(args: &crate::cli::Args) -> Result<SocketAddr, String> {
    let host = args.string("host").unwrap_or("127.0.0.1");
    let port: u16 = args.required("port")?;
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    format!("{host}:{port}")
        .parse()
        .map_err(|e| format!("bad address {host}:{port}: {e}"))
}
