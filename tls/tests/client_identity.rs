//! Client certificates (mutual TLS) against a real rustls server on loopback that requires
//! them, signed by a CA made here: the client presents its identity and the server sees it;
//! without one, or with one the server does not trust, the failure is said in plain words;
//! a bad identity file is an error naming it, never quoting a key.

use canary_testkit::ClientPki;
use canary_tls::{client_config, ClientIdentity, TlsError};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedProtocolVersion};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The server's own certificate for `localhost`, and the CA (PEM) that signed it.
fn server_identity() -> (CertificateDer<'static>, PrivateKeyDer<'static>, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let der = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    (cert.der().clone(), der, ca.pem())
}

/// What the server saw of one connection: the client's certificate chain (DER), or why the
/// handshake failed.
type Seen = Result<Vec<Vec<u8>>, String>;

/// A TLS server on loopback speaking only `version`, requiring a client certificate signed
/// by `client_ca` (PEM). It answers `ok` to whatever a client with one sends, and reports
/// each connection. Returns its port, the CA the client must trust (PEM), and the reports.
async fn mtls_server(
    client_ca: &str,
    version: &'static SupportedProtocolVersion,
) -> (u16, String, mpsc::UnboundedReceiver<Seen>) {
    let (cert, key, server_ca) = server_identity();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(client_ca.as_bytes()).unwrap())
        .unwrap();
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider.clone())
            .build()
            .unwrap();
    let config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                match acceptor.accept(tcp).await {
                    Ok(mut tls) => {
                        let chain = tls
                            .get_ref()
                            .1
                            .peer_certificates()
                            .map(|c| c.iter().map(|d| d.as_ref().to_vec()).collect::<Vec<_>>());
                        let mut buf = [0u8; 64];
                        let _ = tls.read(&mut buf).await;
                        let _ = tls.write_all(b"ok").await;
                        let _ = tls.shutdown().await;
                        let _ = tx.send(Ok(chain.unwrap_or_default()));
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                    }
                }
            });
        }
    });
    (port, server_ca, rx)
}

/// Opens a TLS connection to `port` with `config`, sends a line and reads the answer: the
/// answer, or the first error (of the handshake, or, in TLS 1.3, where a client's
/// handshake ends before the server has checked its certificate, of the read) explained.
async fn exchange(port: u16, config: Arc<ClientConfig>) -> Result<String, String> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let connector = tokio_rustls::TlsConnector::from(config);
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {}", canary_tls::explain_io(&e)))?;
    tls.write_all(b"hello\n")
        .await
        .map_err(|e| format!("write: {}", canary_tls::explain_io(&e)))?;
    let mut answer = String::new();
    tls.read_to_string(&mut answer)
        .await
        .map_err(|e| format!("read: {}", canary_tls::explain_io(&e)))?;
    Ok(answer)
}

/// The test PKI's files in `dir`: the server's CA, the client's certificate and its key.
struct Files {
    server_ca: PathBuf,
    identity: ClientIdentity,
}

fn files(dir: &Path, server_ca: &str, pki: &ClientPki) -> Files {
    let server_ca_path = dir.join("server-ca.pem");
    std::fs::write(&server_ca_path, server_ca).unwrap();
    let identity = ClientIdentity {
        cert: dir.join("client.pem"),
        key: dir.join("client.key"),
    };
    std::fs::write(&identity.cert, &pki.cert_pem).unwrap();
    std::fs::write(&identity.key, &pki.key_pem).unwrap();
    Files {
        server_ca: server_ca_path,
        identity,
    }
}

const VERSIONS: [(&str, &SupportedProtocolVersion); 2] = [
    ("TLS 1.3", &rustls::version::TLS13),
    ("TLS 1.2", &rustls::version::TLS12),
];

#[tokio::test]
async fn the_client_certificate_is_presented_and_seen_by_the_server() {
    for (version_name, version) in VERSIONS {
        let pki = ClientPki::new();
        let (port, server_ca, mut seen) = mtls_server(&pki.ca_pem, version).await;
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path(), &server_ca, &pki);
        let config = client_config(Some(&f.server_ca), Some(&f.identity)).unwrap();
        assert_eq!(
            exchange(port, config).await.as_deref(),
            Ok("ok"),
            "{version_name}"
        );
        let chain = seen.recv().await.unwrap().unwrap();
        let presented = CertificateDer::from_pem_slice(pki.cert_pem.as_bytes()).unwrap();
        assert_eq!(chain, vec![presented.as_ref().to_vec()], "{version_name}");
    }
}

#[tokio::test]
async fn without_a_client_certificate_the_error_says_the_server_requires_one() {
    for (version_name, version) in VERSIONS {
        let pki = ClientPki::new();
        let (port, server_ca, mut seen) = mtls_server(&pki.ca_pem, version).await;
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path(), &server_ca, &pki);
        let config = client_config(Some(&f.server_ca), None).unwrap();
        let said = exchange(port, config).await.unwrap_err();
        assert!(
            said.contains(
                "the server requires a client certificate and canaryd presented none \
                 (CertificateRequired alert): give one with --client-cert and --client-key"
            ),
            "{version_name}: {said}"
        );
        assert!(said.contains("--otlp-client-cert"), "{said}");
        assert!(seen.recv().await.unwrap().is_err(), "{version_name}");
    }
}

#[tokio::test]
async fn a_client_certificate_the_server_does_not_trust_is_said_so() {
    let pki = ClientPki::new();
    let dir = tempfile::tempdir().unwrap();
    // The server trusts another CA than the one that signed the client's certificate: one of
    // another name, then one of the same name with another key.
    let cases = [
        (canary_testkit::ca_pem().0, "UnknownCA alert"),
        (ClientPki::new().ca_pem, "DecryptError alert"),
    ];
    for (trusted, alert) in cases {
        let (port, server_ca, _seen) = mtls_server(&trusted, &rustls::version::TLS13).await;
        let f = files(dir.path(), &server_ca, &pki);
        let config = client_config(Some(&f.server_ca), Some(&f.identity)).unwrap();
        let said = exchange(port, config).await.unwrap_err();
        assert!(
            said.contains("the client certificate canaryd presented") && said.contains(alert),
            "{said}"
        );
    }
}

/// A certificate file and a key file that do not belong together, or are not what their
/// place asks for: each an error naming the file and what is wrong.
#[test]
fn a_bad_identity_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let pki = ClientPki::new();
    let other = ClientPki::new();
    let (_, _, server_ca) = server_identity();
    let f = files(dir.path(), &server_ca, &pki);
    let other_key = dir.path().join("other.key");
    std::fs::write(&other_key, &other.key_pem).unwrap();
    let said = |cert: &Path, key: &Path| {
        let id = ClientIdentity {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
        };
        let built = client_config(Some(&f.server_ca), Some(&id)).map(|_| ());
        let checked = canary_tls::check_identity(&id);
        // The run's setup and the config check say the same.
        assert_eq!(
            built.as_ref().map_err(|e| e.to_string()),
            checked.as_ref().map_err(|e| e.to_string())
        );
        checked.map_err(|e| e.to_string())
    };
    let (cert, key) = (&f.identity.cert, &f.identity.key);
    assert_eq!(said(cert, key), Ok(()));
    assert_eq!(
        said(cert, &other_key),
        Err(format!(
            "client key {} does not match client certificate {} (its public key is not the \
             certificate's: KeyMismatch): give the key the certificate was issued for",
            other_key.display(),
            cert.display()
        ))
    );
    // The two swapped.
    assert_eq!(
        said(key, cert),
        Err(format!(
            "client certificate {}: holds a private key and no certificate (the key goes in \
             the key file: --client-key or client_key)",
            key.display()
        ))
    );
    let missing = dir.path().join("typo.key");
    assert_eq!(
        said(cert, &missing),
        Err(format!(
            "client key {}: No such file or directory (os error 2)",
            missing.display()
        ))
    );
    assert_eq!(
        said(cert, cert),
        Err(format!(
            "client key {}: holds a certificate and no private key (the certificate goes in \
             the certificate file: --client-cert or client_cert)",
            cert.display()
        ))
    );
    assert_eq!(
        said(cert, Path::new("/dev/zero")),
        Err("client key /dev/zero: not a regular file".into())
    );
    let encrypted = dir.path().join("encrypted.key");
    std::fs::write(
        &encrypted,
        pki.key_pem
            .replace("BEGIN PRIVATE KEY", "BEGIN ENCRYPTED PRIVATE KEY")
            .replace("END PRIVATE KEY", "END ENCRYPTED PRIVATE KEY"),
    )
    .unwrap();
    let e = said(cert, &encrypted).unwrap_err();
    assert!(
        e.starts_with(&format!(
            "client key {}: holds an encrypted private key, which canaryd cannot use",
            encrypted.display()
        )),
        "{e}"
    );
}

/// A key file the PEM parser stops in: the error names the file and never quotes a line or
/// a byte of it (the parser's own message quotes the line it stopped at).
#[test]
fn a_broken_key_file_is_not_quoted() {
    let dir = tempfile::tempdir().unwrap();
    let pki = ClientPki::new();
    let (_, _, server_ca) = server_identity();
    let f = files(dir.path(), &server_ca, &pki);
    let body: Vec<&str> = pki
        .key_pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let cases = [
        // Cut short: no END line.
        format!("-----BEGIN PRIVATE KEY-----\n{}\n", body.join("\n")),
        // Not base64: a line of the key with a character base64 does not have.
        format!(
            "-----BEGIN PRIVATE KEY-----\n{}*\n-----END PRIVATE KEY-----\n",
            body.join("\n")
        ),
        // A BEGIN line cut off, holding the key's text.
        format!("-----BEGIN PRIVATE KEY {}\n", body[0]),
    ];
    for (i, text) in cases.iter().enumerate() {
        std::fs::write(&f.identity.key, text).unwrap();
        let e = canary_tls::check_identity(&f.identity)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("client key {}: ", f.identity.key.display())),
            "case {i}: {e}"
        );
        for line in &body {
            let piece = &line[..line.len().min(12)];
            assert!(!e.contains(piece), "case {i} quotes the key: {e}");
        }
        assert!(matches!(
            canary_tls::check_identity(&f.identity),
            Err(TlsError::ClientKey { .. })
        ));
    }
}
