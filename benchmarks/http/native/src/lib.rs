//! Shared pieces of the HTTP benchmark helpers (see README.md): option
//! parsing, the single-threaded hyper server loop used by `http-native` and
//! `fake-db`, and the blocking HTTP/1.1 client and statistics of `http-vu`.

pub mod cli;
pub mod client;
pub mod serve;
pub mod stats;
