//! `RustlsServerConfig`: a server's TLS settings for the rustls engine, read once from the
//! same PEM files and settings as its `ssl.SSLContext` (certificate chain, key, client
//! certificate CAs and requirement, ALPN offer), and shared by every connection.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;

#[pyclass(module = "swordfish._native", frozen)]
pub struct RustlsServerConfig {
    pub(super) config: Arc<rustls::ServerConfig>,
}

impl RustlsServerConfig {
    /// The configuration, shared.
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        self.config.clone()
    }
}

/// A PEM file that cannot be used, as `SSLContext.load_cert_chain` reports one: a missing
/// file as its `OSError`, bad content as an `ssl.SSLError`.
fn pem_error(py: Python<'_>, path: &Path, what: &str, err: rustls::pki_types::pem::Error) -> PyErr {
    use rustls::pki_types::pem::Error as E;
    if let E::Io(io) = err {
        return pyo3::exceptions::PyOSError::new_err((
            io.raw_os_error().unwrap_or(0),
            io.to_string(),
            path.display().to_string(),
        ));
    }
    let message = match err {
        E::NoItemsFound => format!("{}: no {what} found", path.display()),
        other => format!("{}: {what}: {other:?}", path.display()),
    };
    ssl_error(py, message)
}

fn ssl_error(py: Python<'_>, message: String) -> PyErr {
    match py.import("ssl").and_then(|m| m.getattr("SSLError")).and_then(|c| c.call1((message,))) {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

fn certificates(py: Python<'_>, path: &Path) -> PyResult<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| pem_error(py, path, "certificate", e))?;
    if certs.is_empty() {
        return Err(ssl_error(py, format!("{}: no certificate found", path.display())));
    }
    Ok(certs)
}

#[pymethods]
impl RustlsServerConfig {
    /// `certfile`: the chain, leaf first (the key may follow it there); `keyfile`: the key
    /// (PKCS#8, PKCS#1 or SEC1, not encrypted); `ca_certs` and `cert_reqs` ("none",
    /// "optional", "required"): client certificates; `alpn`: the protocols offered, in the
    /// server's order of preference.
    #[new]
    #[pyo3(signature = (certfile, keyfile, ca_certs, cert_reqs, alpn))]
    fn py_new(
        py: Python<'_>,
        certfile: std::path::PathBuf,
        keyfile: Option<std::path::PathBuf>,
        ca_certs: Option<std::path::PathBuf>,
        cert_reqs: &str,
        alpn: Vec<Vec<u8>>,
    ) -> PyResult<Self> {
        let chain = certificates(py, &certfile)?;
        let key_path = keyfile.as_deref().unwrap_or(&certfile);
        let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| pem_error(py, key_path, "private key", e))?;
        // ring, which rustls deprecates for its lack of post-quantum key exchange (clients
        // that offer X25519MLKEM768 offer X25519 beside it), over aws-lc-rs: the smaller
        // build, and the one the zig-linked manylinux wheels are checked with.
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| ssl_error(py, e.to_string()))?;
        let builder = match (cert_reqs, ca_certs) {
            ("none", _) => builder.with_no_client_auth(),
            (reqs @ ("optional" | "required"), Some(ca)) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in certificates(py, &ca)? {
                    roots.add(cert).map_err(|e| ssl_error(py, format!("{}: {e}", ca.display())))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = if reqs == "optional" { verifier.allow_unauthenticated() } else { verifier };
                builder.with_client_cert_verifier(verifier.build().map_err(|e| ssl_error(py, e.to_string()))?)
            }
            ("optional" | "required", None) => {
                return Err(PyValueError::new_err("client certificates are verified with CA certificates: none given"));
            }
            (other, _) => {
                return Err(PyValueError::new_err(format!("cert_reqs: none, optional or required, not {other:?}")))
            }
        };
        let mut config =
            builder.with_single_cert(chain, key).map_err(|e| ssl_error(py, format!("{}: {e}", certfile.display())))?;
        config.alpn_protocols = alpn;
        Ok(RustlsServerConfig { config: Arc::new(config) })
    }
}
