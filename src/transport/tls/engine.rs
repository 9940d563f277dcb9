//! The record layer under `TlsCore`, one of two:
//! - OpenSSL, through the stdlib's `ssl.SSLObject` on two memory BIOs: any `SSLContext`,
//!   client or server, behaving as the stdlib's transports do;
//! - rustls, for a server whose settings it can serve (`swordfish serve --ssl-engine`): the
//!   socket's bytes go into rustls as a slice, and its records come out as one owned buffer
//!   for the socket's queue, with no memory BIO, no bytes object and no Python call between
//!   (docs/design.md, "TLS with rustls").
//!
//! Both tell the state machine the same things: a step is done or waits for the peer, and a
//! failure is an `ssl.SSLError` (`ssl.SSLCertVerificationError` for the peer's certificate),
//! so the handshake, reading, writing and closing paths do not know which one runs.

use crate::sync::GilCell;
use crate::transport::stream::Held;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{intern, PyTraverseError, PyVisit};
use std::io::Write;
use std::sync::Arc;

/// The most one `SSLObject.read` returns.
const MAX_READ: usize = 256 * 1024;

/// How a handshake or shutdown step ended: done, or waiting for the peer's bytes.
pub(super) enum Step {
    Done,
    Again,
}

/// The `ssl` exception types the state machine tells apart.
pub(super) struct SslErrors {
    pub want_read: Py<PyAny>,
    pub syscall: Py<PyAny>,
    pub ssl_error: Py<PyAny>,
    pub cert_error: Py<PyAny>,
}

impl SslErrors {
    pub fn new(py: Python<'_>) -> PyResult<SslErrors> {
        let ssl_mod = py.import("ssl")?;
        Ok(SslErrors {
            want_read: ssl_mod.getattr("SSLWantReadError")?.unbind(),
            syscall: ssl_mod.getattr("SSLSyscallError")?.unbind(),
            ssl_error: ssl_mod.getattr("SSLError")?.unbind(),
            cert_error: ssl_mod.getattr("SSLCertVerificationError")?.unbind(),
        })
    }

    /// The SSL object needs more bytes from the peer (or its socket, which it has none of).
    pub fn is_again(&self, py: Python<'_>, err: &PyErr) -> bool {
        let v = err.value(py);
        v.is_instance(self.want_read.bind(py)).unwrap_or(false) || v.is_instance(self.syscall.bind(py)).unwrap_or(false)
    }

    /// A rustls failure as the `ssl` module would raise it.
    fn rustls_error(&self, py: Python<'_>, err: &rustls::Error) -> PyErr {
        use rustls::Error as E;
        let cls = match err {
            E::InvalidCertificate(_) | E::NoCertificatesPresented => &self.cert_error,
            _ => &self.ssl_error,
        };
        match cls.bind(py).call1((1, format!("[rustls] {err}"))) {
            Ok(exc) => PyErr::from_value(exc),
            Err(e) => e,
        }
    }
}

pub(super) enum Engine {
    OpenSsl(OpenSsl),
    // Boxed: a rustls connection is over a kilobyte, which an OpenSSL core need not carry.
    Rustls(Box<GilCell<Rustls>>),
}

pub(super) struct OpenSsl {
    /// The `ssl.SSLObject` (for `getpeercert`; the application's transport keeps it as its
    /// `ssl_object`) and the C-level object behind it, which the hot calls go to.
    sslobj: Py<PyAny>,
    ssl: Py<PyAny>,
    incoming: Py<PyAny>,
    outgoing: Py<PyAny>,
}

pub(super) struct Rustls {
    conn: rustls::ServerConnection,
    /// Decrypted, not yet given to the application (its reading is paused, or the handshake
    /// is not over).
    plain: Vec<u8>,
    /// The first failure rustls reported; every later step reports it.
    failure: Option<rustls::Error>,
    /// Records taken from rustls while the socket transport asked to wait, counted for flow
    /// control (rustls does not say how much it holds).
    waiting: Vec<u8>,
    /// The peer's close_notify was received.
    peer_closed: bool,
    close_sent: bool,
}

/// Application data decrypted in one read.
pub(super) enum Plain<'py> {
    Object(Bound<'py, PyAny>),
    Owned(Vec<u8>),
}

impl Plain<'_> {
    pub fn with_slice<R>(&self, f: impl FnOnce(&[u8]) -> PyResult<R>) -> PyResult<R> {
        match self {
            Plain::Object(o) => crate::transport::pybuf::with_bytes(o, f),
            Plain::Owned(v) => f(v),
        }
    }
}

impl Engine {
    pub fn openssl(py: Python<'_>, sslobj: Py<PyAny>, incoming: Py<PyAny>, outgoing: Py<PyAny>) -> PyResult<Engine> {
        let ssl = sslobj.bind(py).getattr("_sslobj")?.unbind();
        Ok(Engine::OpenSsl(OpenSsl { sslobj, ssl, incoming, outgoing }))
    }

    pub fn rustls(config: Arc<rustls::ServerConfig>) -> PyResult<Engine> {
        let conn = super::records::server(config)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("TLS server configuration: {e}")))?;
        Ok(Engine::Rustls(Box::new(GilCell::new(Rustls {
            conn,
            plain: Vec::new(),
            waiting: Vec::new(),
            failure: None,
            peer_closed: false,
            close_sent: false,
        }))))
    }

    /// The `ssl.SSLObject`, if OpenSSL runs.
    pub fn sslobj(&self) -> Option<&Py<PyAny>> {
        match self {
            Engine::OpenSsl(o) => Some(&o.sslobj),
            Engine::Rustls(_) => None,
        }
    }

    /// The C-level object behind the `ssl.SSLObject`, if OpenSSL runs.
    pub fn c_ssl(&self) -> Option<&Py<PyAny>> {
        match self {
            Engine::OpenSsl(o) => Some(&o.ssl),
            Engine::Rustls(_) => None,
        }
    }

    /// Bytes from the socket. rustls decrypts them at once (what it cannot take yet, it
    /// reports as a failure on the next step); the memory BIO keeps them.
    pub fn feed(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        match self {
            Engine::OpenSsl(o) => {
                o.incoming.bind(py).call_method1(intern!(py, "write"), (data,))?;
                Ok(())
            }
            Engine::Rustls(_) => crate::transport::pybuf::with_bytes(data, |s| self.feed_slice(py, s)),
        }
    }

    /// `feed` from the socket transport's native read path (rustls's; an OpenSSL core is not
    /// offered it, but takes it as a bytes object would be).
    pub fn feed_slice(&self, py: Python<'_>, data: &[u8]) -> PyResult<()> {
        match self {
            Engine::OpenSsl(o) => {
                o.incoming.bind(py).call_method1(intern!(py, "write"), (PyBytes::new(py, data),))?;
                Ok(())
            }
            Engine::Rustls(r) => {
                r.lock(py)?.feed(data);
                Ok(())
            }
        }
    }

    pub fn handshake(&self, py: Python<'_>, errors: &SslErrors) -> PyResult<Step> {
        match self {
            Engine::OpenSsl(o) => o.step(py, intern!(py, "do_handshake"), errors),
            Engine::Rustls(r) => {
                let r = r.lock(py)?;
                if let Some(f) = &r.failure {
                    return Err(errors.rustls_error(py, f));
                }
                Ok(if r.conn.is_handshaking() { Step::Again } else { Step::Done })
            }
        }
    }

    /// The peer's certificate as `getpeercert()` gives it (rustls: None; the server does
    /// not show client certificates to applications).
    pub fn peercert<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Engine::OpenSsl(o) => o.sslobj.bind(py).call_method0(intern!(py, "getpeercert")),
            Engine::Rustls(_) => Ok(py.None().into_bound(py)),
        }
    }

    /// The ALPN protocol chosen in the handshake.
    pub fn alpn(&self, py: Python<'_>) -> PyResult<Option<String>> {
        match self {
            Engine::OpenSsl(o) => {
                let chosen = o.sslobj.bind(py).call_method0(intern!(py, "selected_alpn_protocol"))?;
                chosen.extract()
            }
            Engine::Rustls(r) => Ok(r.lock(py)?.conn.alpn_protocol().map(|p| String::from_utf8_lossy(p).into_owned())),
        }
    }

    /// `(cipher name, protocol version, secret bits)`, as `SSLObject.cipher()`.
    pub fn cipher<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Engine::OpenSsl(o) => o.sslobj.bind(py).call_method0(intern!(py, "cipher")),
            Engine::Rustls(r) => {
                let r = r.lock(py)?;
                let (Some(suite), Some(version)) = (r.conn.negotiated_cipher_suite(), r.conn.protocol_version()) else {
                    return Ok(py.None().into_bound(py));
                };
                let name = openssl_name(suite.suite());
                let version = match version {
                    rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3".to_string(),
                    rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2".to_string(),
                    other => format!("{other:?}"),
                };
                let bits = if name.contains("128") { 128 } else { 256 };
                Ok((name, version, bits).into_pyobject(py)?.into_any())
            }
        }
    }

    /// Everything decrypted so far, and whether the peer's close_notify came after it.
    pub fn read<'py>(&self, py: Python<'py>, errors: &SslErrors) -> PyResult<(Option<Plain<'py>>, bool)> {
        match self {
            Engine::OpenSsl(o) => {
                let mut chunks: Vec<Bound<'py, PyAny>> = Vec::new();
                let mut close_notify = false;
                loop {
                    match o.ssl.bind(py).call_method1(intern!(py, "read"), (MAX_READ,)) {
                        Ok(chunk) => {
                            if chunk.len()? == 0 {
                                close_notify = true;
                                break;
                            }
                            chunks.push(chunk);
                        }
                        Err(e) if errors.is_again(py, &e) => break,
                        Err(e) => return Err(e),
                    }
                }
                let data = match chunks.len() {
                    0 | 1 => chunks.pop(),
                    _ => Some(PyBytes::new(py, b"").call_method1(intern!(py, "join"), (chunks,))?),
                };
                Ok((data.map(Plain::Object), close_notify))
            }
            Engine::Rustls(r) => {
                let mut r = r.lock(py)?;
                if let Some(f) = &r.failure {
                    return Err(errors.rustls_error(py, f));
                }
                let plain = std::mem::take(&mut r.plain);
                Ok(((!plain.is_empty()).then_some(Plain::Owned(plain)), r.peer_closed))
            }
        }
    }

    /// Give application data to the record layer: how much it took (None: it must wait for
    /// the peer; a memory BIO takes everything, and rustls always does).
    pub fn write(&self, py: Python<'_>, data: &mut Held<'_>, errors: &SslErrors) -> PyResult<Option<usize>> {
        match self {
            Engine::OpenSsl(o) => {
                let written = match data {
                    Held::Shared(b) => o.ssl.bind(py).call_method1(intern!(py, "write"), (&*b,)),
                    Held::Owned(v) => o.write_owned(py, v)?,
                };
                match written {
                    Ok(n) => n.extract::<usize>().map(Some),
                    Err(e) if errors.is_again(py, &e) => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Engine::Rustls(r) => r.lock(py)?.write(py, data.as_bytes(), errors).map(Some),
        }
    }

    /// The records waiting for the socket, taken.
    pub fn take_outgoing<'py>(&self, py: Python<'py>) -> PyResult<Option<Held<'py>>> {
        match self {
            Engine::OpenSsl(o) => {
                let data = o.outgoing.bind(py).call_method0(intern!(py, "read"))?.cast_into::<PyBytes>()?;
                Ok((!data.as_bytes().is_empty()).then_some(Held::Shared(data)))
            }
            Engine::Rustls(r) => {
                let mut r = r.lock(py)?;
                let mut out = std::mem::take(&mut r.waiting);
                r.drain_records(&mut out)?;
                Ok((!out.is_empty()).then_some(Held::Owned(out)))
            }
        }
    }

    /// Bytes of records not yet taken.
    pub fn outgoing_pending(&self, py: Python<'_>) -> PyResult<usize> {
        match self {
            Engine::OpenSsl(o) => o.outgoing.bind(py).getattr(intern!(py, "pending"))?.extract(),
            Engine::Rustls(r) => {
                let mut r = r.lock(py)?;
                let mut waiting = std::mem::take(&mut r.waiting);
                r.drain_records(&mut waiting)?;
                r.waiting = waiting;
                Ok(r.waiting.len())
            }
        }
    }

    /// Bytes read from the socket that the application has not been given.
    pub fn incoming_pending(&self, py: Python<'_>) -> PyResult<usize> {
        match self {
            Engine::OpenSsl(o) => o.incoming.bind(py).getattr(intern!(py, "pending"))?.extract(),
            Engine::Rustls(r) => Ok(r.lock(py)?.plain.len()),
        }
    }

    /// Send close_notify; Done once the peer's has come too.
    pub fn shutdown(&self, py: Python<'_>, errors: &SslErrors) -> PyResult<Step> {
        match self {
            Engine::OpenSsl(o) => o.step(py, intern!(py, "shutdown"), errors),
            Engine::Rustls(r) => {
                let mut r = r.lock(py)?;
                if let Some(f) = &r.failure {
                    return Err(errors.rustls_error(py, f));
                }
                if !r.close_sent {
                    r.close_sent = true;
                    r.conn.send_close_notify();
                }
                // Data after our close_notify is not the application's any more.
                r.plain.clear();
                Ok(if r.peer_closed { Step::Done } else { Step::Again })
            }
        }
    }

    /// The connection is gone: what was not sent never will be.
    pub fn discard_outgoing(&self, py: Python<'_>) {
        match self {
            Engine::OpenSsl(o) => {
                let _ = o.outgoing.bind(py).call_method0(intern!(py, "read"));
            }
            Engine::Rustls(r) => {
                if let Ok(mut r) = r.lock(py) {
                    r.waiting = Vec::new();
                    let _ = r.drain_records(&mut std::io::sink());
                }
            }
        }
    }

    pub fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Engine::OpenSsl(o) = self {
            visit.call(&o.sslobj)?;
            visit.call(&o.ssl)?;
            visit.call(&o.incoming)?;
            visit.call(&o.outgoing)?;
        }
        Ok(())
    }
}

/// A cipher suite by the name OpenSSL (and so `SSLObject.cipher()`) gives it: TLS 1.3's by
/// their IANA names, TLS 1.2's ECDHE suites as `ECDHE-RSA-AES128-GCM-SHA256`.
fn openssl_name(suite: rustls::CipherSuite) -> String {
    let iana = format!("{suite:?}");
    if let Some(rest) = iana.strip_prefix("TLS13_") {
        return format!("TLS_{rest}");
    }
    let Some((kx, cipher)) = iana.strip_prefix("TLS_").and_then(|s| s.split_once("_WITH_")) else { return iana };
    let cipher = match cipher {
        "AES_128_GCM_SHA256" => "AES128-GCM-SHA256",
        "AES_256_GCM_SHA384" => "AES256-GCM-SHA384",
        "CHACHA20_POLY1305_SHA256" => "CHACHA20-POLY1305",
        _ => return iana,
    };
    format!("{}-{cipher}", kx.replace('_', "-"))
}

impl OpenSsl {
    /// A handshake or shutdown call: done, or waiting for the peer.
    fn step(&self, py: Python<'_>, method: &Bound<'_, pyo3::types::PyString>, errors: &SslErrors) -> PyResult<Step> {
        match self.ssl.bind(py).call_method0(method) {
            Ok(_) => Ok(Step::Done),
            Err(e) if errors.is_again(py, &e) => Ok(Step::Again),
            Err(e) => Err(e),
        }
    }

    /// An owned buffer through a read-only view of it, rather than a bytes object made from
    /// it (an HTTP/2 connection's frames): `SSLObject.write`'s outcome, once the view is
    /// released (the outer error: it could not be).
    fn write_owned<'py>(&self, py: Python<'py>, v: &mut Vec<u8>) -> PyResult<PyResult<Bound<'py, PyAny>>> {
        let len = isize::try_from(v.len()).map_err(|_| pyo3::exceptions::PyOverflowError::new_err("data too large"))?;
        // SAFETY: the view is read-only and released before this returns, while `v` is
        // borrowed; if it cannot be (something still holds its buffer), `v`'s memory is
        // leaked rather than freed under the view.
        let view = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                pyo3::ffi::PyMemoryView_FromMemory(v.as_ptr() as *mut _, len, pyo3::ffi::PyBUF_READ),
            )?
        };
        let written = self.ssl.bind(py).call_method1(intern!(py, "write"), (&view,));
        if let Err(e) = view.call_method0(intern!(py, "release")) {
            std::mem::forget(std::mem::take(v));
            return Err(e);
        }
        Ok(written)
    }
}

impl Rustls {
    /// Decrypt what came; a failure is kept for the next step to report.
    fn feed(&mut self, data: &[u8]) {
        if self.failure.is_some() {
            return;
        }
        match super::records::open(&mut self.conn, data, &mut self.plain) {
            Ok(closed) => self.peer_closed |= closed,
            Err(e) => self.failure = Some(e),
        }
    }

    fn write(&mut self, py: Python<'_>, data: &[u8], errors: &SslErrors) -> PyResult<usize> {
        if let Some(f) = &self.failure {
            return Err(errors.rustls_error(py, f));
        }
        self.conn.writer().write_all(data)?;
        Ok(data.len())
    }

    fn drain_records(&mut self, out: &mut dyn Write) -> PyResult<()> {
        while self.conn.wants_write() {
            self.conn.write_tls(out)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::openssl_name;
    use rustls::CipherSuite as C;

    #[test]
    fn cipher_suites_are_named_as_openssl_names_them() {
        assert_eq!(openssl_name(C::TLS13_AES_128_GCM_SHA256), "TLS_AES_128_GCM_SHA256");
        assert_eq!(openssl_name(C::TLS13_CHACHA20_POLY1305_SHA256), "TLS_CHACHA20_POLY1305_SHA256");
        assert_eq!(openssl_name(C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384), "ECDHE-RSA-AES256-GCM-SHA384");
        assert_eq!(openssl_name(C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256), "ECDHE-ECDSA-AES128-GCM-SHA256");
        assert_eq!(openssl_name(C::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256), "ECDHE-ECDSA-CHACHA20-POLY1305");
    }
}
