//! canary-tls: the one TLS client setup every canaryd connection uses — the replay's target,
//! the telemetry scrapers' `https://` endpoints and the OTLP exporter.
//!
//! rustls with the ring provider (no cmake or nasm on a fresh machine), trusting the system's
//! roots (`SSL_CERT_FILE` honoured by the loader) plus, when given, every certificate of a PEM
//! bundle for internal PKIs. ALPN asks for HTTP/1.1: canaryd maps one request to one socket.
//!
//! The bundle is read through [`canary_files::read_small_file`]: a FIFO or `/dev/zero` named
//! by mistake is refused, not waited on or read into memory.
//!
//! ```no_run
//! let config = canary_tls::client_config(Some(std::path::Path::new("ca.pem")))?;
//! # Ok::<(), canary_tls::TlsError>(())
//! ```
#![deny(missing_docs)]

use canary_files::read_small_file;
use rustls::pki_types::{pem::PemObject, CertificateDer};
use rustls::{ClientConfig, RootCertStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Errors building the TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The CA bundle could not be read or holds no usable certificate.
    #[error("CA bundle {path}: {reason}")]
    CaBundle {
        /// The bundle's path.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// No root certificate at all: neither system roots nor a bundle.
    #[error(
        "no trusted root certificates: the system store is empty and no --ca-bundle was given"
    )]
    NoRoots,
}

/// The largest CA bundle read (a system's whole store is about 200 KB).
pub const MAX_CA_BUNDLE_BYTES: u64 = 16 << 20;

/// Builds a client config trusting the system roots and, if given, every certificate in
/// `ca_bundle` (PEM). `SSL_CERT_FILE` is honoured by the system-root loader as well.
pub fn client_config(ca_bundle: Option<&Path>) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = system_roots();
    let mut total = roots.len();
    if let Some(path) = ca_bundle {
        let err = |reason: String| TlsError::CaBundle {
            path: path.to_path_buf(),
            reason,
        };
        let pem = read_small_file(path, MAX_CA_BUNDLE_BYTES).map_err(|e| err(e.to_string()))?;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .map_err(|e| err(e.to_string()))?;
        if certs.is_empty() {
            return Err(err("no PEM certificate found".into()));
        }
        let (added, ignored) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(err(format!(
                "{ignored} certificate(s), none usable as a trust anchor"
            )));
        }
        total += added;
    }
    if total == 0 {
        return Err(TlsError::NoRoots);
    }
    Ok(with_roots(roots))
}

/// The system's trust anchors; a broken store is not fatal (errors are per file), it is
/// just empty.
pub fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    roots
}

/// A client config trusting exactly `roots`.
pub fn with_roots(roots: RootCertStore) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_that_is_a_device_is_refused_by_name() {
        // It used to be read line by line until memory ran out.
        let e = client_config(Some(Path::new("/dev/zero"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "CA bundle /dev/zero: not a regular file",
            "{e}"
        );
    }
}
