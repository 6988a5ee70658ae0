//! canary-testkit: what several crates' integration tests need alike, kept in one place.
//! A dev-dependency only; nothing here ships in `canaryd`.
//!
//! - [`skip`]: a test that cannot run here says why, and the suite counts it as skipped (or
//!   fails it, when its tier is required).
//! - [`fuzz`](mod@fuzz): a mutation fuzzer for parsers, seeded with real captures, bounded for
//!   CI and longer by hand (`CANARYD_FUZZ_SECS`).
//! - [`tls_terminator`]: TLS with a CA made on the spot in front of a plain loopback server
//!   ([`tls_terminator_with`]: a certificate of other names, expired, or a CA's; slow
//!   handshakes; HTTP/2 only; client certificates required, [`ClientPki`]).
//! - [`HostileServer`]: an HTTP server that misbehaves in one of the [`Hostile`] ways,
//!   bounded in time and bytes.
//! - [`browser`]: headless Chromium over the DevTools protocol, for tests of HTML pages.
//! - [`json::compact`]: JSON without its layout, for tests that a file is written back as read.

pub mod browser;
pub mod fuzz;
mod hostile;
pub mod json;
mod skip;

pub use hostile::{Hostile, HostileServer, DEFAULT_CONNECTION_LIMIT};
pub use skip::{skip, REQUIRE, SKIP_LOG};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};

/// TLS for `localhost` in front of the plain TCP server at `backend`, with its own CA made
/// here. Returns the listening port and the CA certificate in PEM. Runs until the runtime ends.
pub async fn tls_terminator(backend: SocketAddr) -> (u16, String) {
    tls_terminator_with(backend, TlsOptions::default()).await
}

/// A CA certificate made on the spot and its private key, both PEM: for tests of what is
/// made of a bundle (and of a key given in its place).
pub fn ca_pem() -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A CA made on the spot and a client certificate it signed, with the certificate's key, all
/// PEM: for tests of mutual TLS (a server requiring client certificates, [`TlsOptions`]'
/// `client_ca`).
#[derive(Debug, Clone)]
pub struct ClientPki {
    /// The CA's certificate: what a server trusts client certificates by.
    pub ca_pem: String,
    /// The client's certificate (CN `canaryd test client`), signed by the CA.
    pub cert_pem: String,
    /// Its private key, PKCS#8.
    pub key_pem: String,
}

impl ClientPki {
    /// A new CA and a client certificate it signed.
    pub fn new() -> ClientPki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "canaryd test client CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "canaryd test client");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        ClientPki {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

impl Default for ClientPki {
    fn default() -> ClientPki {
        ClientPki::new()
    }
}

/// How [`tls_terminator_with`] answers.
#[derive(Debug, Clone)]
pub struct TlsOptions {
    /// The DNS names of the server's certificate (any ASCII, control characters included:
    /// tests of what a client makes of a hostile certificate).
    pub names: Vec<String>,
    /// How long the server waits after accepting a connection before it reads the
    /// ClientHello: every handshake takes at least this long.
    pub handshake_delay: std::time::Duration,
    /// One self-signed certificate marked CA:TRUE, as `openssl req -x509` makes by default
    /// since OpenSSL 3, is the server's; the PEM returned is that certificate.
    pub self_signed_ca: bool,
    /// The server's certificate was valid only in 2000.
    pub expired: bool,
    /// The protocols the server accepts by ALPN (none: it takes whatever is offered).
    pub alpn: Vec<Vec<u8>>,
    /// A CA certificate (PEM, e.g. [`ClientPki::ca_pem`]): the server then requires a client
    /// certificate it signed, and forwards nothing of a connection without one.
    pub client_ca: Option<String>,
}

impl Default for TlsOptions {
    fn default() -> TlsOptions {
        TlsOptions {
            names: vec!["localhost".to_string()],
            handshake_delay: std::time::Duration::ZERO,
            self_signed_ca: false,
            expired: false,
            alpn: Vec::new(),
            client_ca: None,
        }
    }
}

/// [`tls_terminator`] answering as `options` say.
pub async fn tls_terminator_with(backend: SocketAddr, options: TlsOptions) -> (u16, String) {
    let leaf_key = KeyPair::generate().unwrap();
    let mut leaf_params = CertificateParams::new(options.names).unwrap();
    if options.expired {
        leaf_params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        leaf_params.not_after = rcgen::date_time_ymd(2001, 1, 1);
    }
    let (leaf, ca_pem) = if options.self_signed_ca {
        leaf_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let leaf = leaf_params.self_signed(&leaf_key).unwrap();
        let pem = leaf.pem();
        (leaf, pem)
    } else {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "canaryd test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let leaf = leaf_params.signed_by(&leaf_key, &ca, &ca_key).unwrap();
        (leaf, ca.pem())
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match &options.client_ca {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            use rustls::pki_types::pem::PemObject;
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from_pem_slice(pem.as_bytes()).unwrap())
                .unwrap();
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(
            vec![CertificateDer::from(leaf.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
    config.alpn_protocols = options.alpn;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let delay = options.handshake_delay;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                let (Ok(mut tls), Ok(mut up)) = (
                    acceptor.accept(tcp).await,
                    TcpStream::connect(backend).await,
                ) else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            });
        }
    });
    (port, ca_pem)
}
