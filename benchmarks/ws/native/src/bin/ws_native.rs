//! ws-native: the limit reference of the WebSocket benchmark, the least a
//! single-threaded Rust server (tokio current_thread + tokio-tungstenite)
//! does for the suite's scenarios.
//!
//!     ws-native --port PORT [--host 127.0.0.1] [--read-buffer 16384]
//!
//! `/broadcast`: every text or binary message is relayed to every connection
//! on `/broadcast`; any other path: echo, text as text and binary as binary.
//! No permessage-deflate (tungstenite has none): offers are declined.
//! `--read-buffer`: tungstenite allocates each connection's read buffer up
//! front, 128 KiB by default, which would make the reference the most
//! memory-hungry server of the idle test; 16 KiB reads a 64 KiB message in
//! a few reads.
//! Prints `READY <port>` once listening; exits on SIGINT/SIGTERM.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use bench_ws::cli::Args;

/// The connections on `/broadcast`, each with the queue of its writer task.
#[derive(Default)]
struct Hub {
    next_id: u64,
    members: HashMap<u64, mpsc::UnboundedSender<Message>>,
}

async fn echo(mut ws: WebSocketStream<TcpStream>) {
    while let Some(Ok(message)) = ws.next().await {
        // Pings and the reply to a close are queued by tungstenite itself
        // and go out on the next read or write.
        if (message.is_text() || message.is_binary()) && ws.send(message).await.is_err() {
            break;
        }
    }
}

async fn broadcast(ws: WebSocketStream<TcpStream>, hub: Rc<RefCell<Hub>>) {
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
    let id = {
        let mut hub = hub.borrow_mut();
        hub.next_id += 1;
        let id = hub.next_id;
        hub.members.insert(id, tx);
        id
    };
    let writer = tokio::task::spawn_local(async move {
        // Everything already queued goes out with one flush.
        while let Some(message) = rx.recv().await {
            let mut result = sink.feed(message).await;
            while let (Ok(()), Ok(more)) = (&result, rx.try_recv()) {
                result = sink.feed(more).await;
            }
            if result.is_err() || sink.flush().await.is_err() {
                return;
            }
        }
        let _ = sink.close().await;
    });
    while let Some(Ok(message)) = stream.next().await {
        if message.is_text() || message.is_binary() {
            for member in hub.borrow().members.values() {
                let _ = member.send(message.clone());
            }
        } else if message.is_close() {
            break;
        }
    }
    hub.borrow_mut().members.remove(&id);
    let _ = writer.await;
}

// The callback's error type (an HTTP response) is tungstenite's, not ours.
#[allow(clippy::result_large_err)]
async fn handle(stream: TcpStream, hub: Rc<RefCell<Hub>>, config: WebSocketConfig) {
    let _ = stream.set_nodelay(true);
    let mut path = String::new();
    let callback = |request: &Request, response: Response| {
        path = request.uri().path().to_string();
        Ok(response)
    };
    let accepted = tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(config)).await;
    let Ok(ws) = accepted else {
        return;
    };
    if path == "/broadcast" {
        broadcast(ws, hub).await;
    } else {
        echo(ws).await;
    }
}

async fn serve(addr: SocketAddr, config: WebSocketConfig) -> io::Result<()> {
    let listener =
        TcpListener::bind(addr).await.map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    let port = listener.local_addr()?.port();
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    {
        let mut stdout = io::stdout().lock();
        writeln!(stdout, "READY {port}")?;
        stdout.flush()?;
    }
    let hub = Rc::new(RefCell::new(Hub::default()));
    loop {
        tokio::select! {
            biased;
            _ = sigterm.recv() => return Ok(()),
            _ = sigint.recv() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::task::spawn_local(handle(stream, Rc::clone(&hub), config));
                }
                Err(e) => {
                    // Typically EMFILE: back off instead of spinning on it.
                    eprintln!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
}

fn listen_addr(args: &Args) -> Result<SocketAddr, String> {
    let host = args.string("host").unwrap_or("127.0.0.1");
    let port: u16 = args.required("port")?;
    let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_string() };
    format!("{host}:{port}").parse().map_err(|e| format!("bad address {host}:{port}: {e}"))
}

fn options() -> Result<(SocketAddr, WebSocketConfig), String> {
    let args = Args::parse(&["host", "port", "read-buffer"], &[])?;
    let read_buffer: usize = args.get_or("read-buffer", 16 << 10)?;
    Ok((listen_addr(&args)?, WebSocketConfig::default().read_buffer_size(read_buffer.max(1024))))
}

fn main() -> ExitCode {
    let (addr, config) = match options() {
        Ok(options) => options,
        Err(msg) => {
            eprintln!("ws-native: {msg}\nusage: ws-native --port PORT [--host 127.0.0.1] [--read-buffer BYTES]");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let result = runtime.and_then(|runtime| tokio::task::LocalSet::new().block_on(&runtime, serve(addr, config)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ws-native: {e}");
            ExitCode::FAILURE
        }
    }
}
