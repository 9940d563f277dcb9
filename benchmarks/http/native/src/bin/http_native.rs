//! The limit reference of the HTTP benchmark: the least a single-threaded
//! hyper server has to do for each workload route.
//!
//!     http-native --port PORT [--host 127.0.0.1] [--http2]
//!
//! `--http2`: HTTP/2 with prior knowledge (h2c) instead of HTTP/1.1.
//!
//! GET / -> "Hello, world!"; GET /10k -> 10240 bytes; GET /100k -> 102400
//! bytes (the RSGI suite's largest body); POST /echo -> the
//! request body streamed back chunk by chunk (chunked, no content-length);
//! anything else -> 404.

use std::convert::Infallible;
use std::process::ExitCode;

use bytes::Bytes;
use http_body_util::{BodyExt, BodyStream, Either, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};

use bench_http::cli::Args;
use bench_http::serve;

static HELLO: &[u8] = b"Hello, world!";
static TEN_K: [u8; 10240] = [b'x'; 10240];
static HUNDRED_K: [u8; 102400] = [b'x'; 102400];

type EchoBody = StreamBody<BodyStream<http_body_util::combinators::MapFrame<Incoming, DataOnly>>>;
type DataOnly = fn(Frame<Bytes>) -> Frame<Bytes>;
type Body = Either<Full<Bytes>, EchoBody>;

fn fixed(status: StatusCode, content_type: &'static str, body: &'static [u8]) -> Response<Body> {
    let mut response = Response::new(Either::Left(Full::new(Bytes::from_static(body))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Request trailers (if any) become empty data frames, which hyper skips:
/// the echo app sends back body chunks only.
fn data_only(frame: Frame<Bytes>) -> Frame<Bytes> {
    if frame.is_data() {
        frame
    } else {
        Frame::data(Bytes::new())
    }
}

fn echo(body: Incoming) -> Response<Body> {
    // A stream body has no exact size hint, so hyper answers chunked as an
    // app that loops on receive/send would, even when the request had a
    // content-length.
    let frames = body.map_frame(data_only as DataOnly);
    let mut response = Response::new(Either::Right(StreamBody::new(BodyStream::new(frames))));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    response
}

async fn handle(req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let method = req.method();
    let path = req.uri().path();
    let response = if method == Method::GET && path == "/" {
        fixed(StatusCode::OK, "text/plain", HELLO)
    } else if method == Method::GET && path == "/10k" {
        fixed(StatusCode::OK, "application/octet-stream", &TEN_K)
    } else if method == Method::GET && path == "/100k" {
        fixed(StatusCode::OK, "application/octet-stream", &HUNDRED_K)
    } else if method == Method::POST && path == "/echo" {
        echo(req.into_body())
    } else {
        fixed(StatusCode::NOT_FOUND, "text/plain", b"Not Found")
    };
    Ok(response)
}

fn main() -> ExitCode {
    let http2 = std::env::args().any(|a| a == "--http2");
    let argv: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--http2")
        .collect();
    let addr = match Args::parse_from(argv, &["host", "port"])
        .and_then(|args| serve::listen_addr(&args))
    {
        Ok(addr) => addr,
        Err(msg) => {
            eprintln!("http-native: {msg}\nusage: http-native --port PORT [--host 127.0.0.1]");
            return ExitCode::from(2);
        }
    };
    let protocol = if http2 {
        serve::Protocol::Http2
    } else {
        serve::Protocol::Http1
    };
    serve::run("http-native", addr, protocol, handle)
}
