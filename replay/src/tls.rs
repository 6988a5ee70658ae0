//! TLS client configuration: the system's roots plus an optional CA bundle for internal PKIs.

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

/// Builds a client config trusting the system roots and, if given, every certificate in
/// `ca_bundle` (PEM). `SSL_CERT_FILE` is honoured by the system-root loader as well.
pub fn client_config(ca_bundle: Option<&Path>) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    // A broken system store is not fatal when a bundle is given; errors here are per file.
    let native = rustls_native_certs::load_native_certs();
    let (added, _ignored) = roots.add_parsable_certificates(native.certs);
    let mut total = added;
    if let Some(path) = ca_bundle {
        let err = |reason: String| TlsError::CaBundle {
            path: path.to_path_buf(),
            reason,
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| err(e.to_string()))?
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
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
