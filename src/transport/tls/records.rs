//! rustls's record layer as both of the server's TLS paths drive it, free of Python: a
//! server connection made from the shared configuration, records opened into plaintext,
//! and sealed records drained into a buffer. The loop's `TlsCore` (`engine.rs`) and the
//! WSGI thread engine (`wsgi/engine/tls.rs`) wrap it with their own buffering.

use std::io::BufRead;
use std::sync::Arc;

/// A server connection for `config`, with no limit of its own on what waits to be sent:
/// the caller's flow control bounds that (as with a memory BIO), not a limit of rustls's
/// that would cut writes short.
pub fn server(config: Arc<rustls::ServerConfig>) -> Result<rustls::ServerConnection, rustls::Error> {
    let mut conn = rustls::ServerConnection::new(config)?;
    conn.set_buffer_limit(None);
    Ok(conn)
}

/// Take `data` (records from the client) and append what it decrypts to `plain`:
/// whether the client has closed (close_notify), or the failure (a bad record, a refused
/// handshake: its alert is then waiting to be sent).
pub fn open(conn: &mut rustls::ServerConnection, mut data: &[u8], plain: &mut Vec<u8>) -> Result<bool, rustls::Error> {
    // The plaintext is shorter than its records: room for all of it at once, rather than
    // a reallocation (and a copy of what came before) each time the buffer doubles.
    plain.reserve(data.len());
    let mut closed = false;
    while !data.is_empty() {
        match conn.read_tls(&mut data) {
            Ok(0) => break, // after close_notify: nothing more is read
            Ok(_) => {}
            Err(e) => return Err(rustls::Error::General(e.to_string())),
        }
        let state = conn.process_new_packets()?;
        closed |= state.peer_has_closed();
        // Copied out of rustls's queue as it lies (`fill_buf`), not into zeroed room first.
        let mut ready = state.plaintext_bytes_to_read();
        let mut reader = conn.reader();
        while ready > 0 {
            let chunk = reader.fill_buf().map_err(|e| rustls::Error::General(e.to_string()))?;
            let n = chunk.len().min(ready);
            if n == 0 {
                break;
            }
            plain.extend_from_slice(&chunk[..n]);
            reader.consume(n);
            ready -= n;
        }
    }
    Ok(closed)
}

/// Append every record waiting to be sent to `out`.
pub fn drain(conn: &mut rustls::ServerConnection, out: &mut Vec<u8>) {
    while conn.wants_write() {
        // Writing into a Vec does not fail.
        if conn.write_tls(out).is_err() {
            break;
        }
    }
}
