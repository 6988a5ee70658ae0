//! What the TLS audit of 2026-11-30 found said badly, or not at all, about the files a user
//! gives: a CA bundle with a broken certificate (dropped without a word, M4), a bundle's PEM
//! error (no line, `InvalidCharacter(33)`, L2), a certificate's names (`DnsName("…")`, L3), a
//! legacy encrypted key (called "not valid base64", M3) and a P-521 key ("unexpected error",
//! L4). Certificates are made here; keys rcgen cannot make are made by `openssl`.

use canary_testkit::ClientPki;
use canary_tls::{check_bundle, check_identity, client_config, ClientIdentity};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ServerConfig};
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A CA (PEM) and a server certificate it signed for `names`, with its key.
fn server_pki(names: &[&str]) -> (String, CertificateDer<'static>, PrivateKeyDer<'static>) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let cert = CertificateParams::new(names)
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let der = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    (ca.pem(), cert.der().clone(), der)
}

/// A TLS server on loopback answering `ok` to each connection: its port.
async fn server(cert: CertificateDer<'static>, key: PrivateKeyDer<'static>) -> u16 {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    let _ = tls.write_all(b"ok").await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    port
}

/// What a client with `config` reads from `port` as `localhost`, or its handshake's error
/// explained.
async fn answer(port: u16, config: Arc<ClientConfig>) -> Result<String, String> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| canary_tls::explain_io(&e))?;
    let mut said = String::new();
    tls.read_to_string(&mut said)
        .await
        .map_err(|e| canary_tls::explain_io(&e))?;
    Ok(said)
}

/// `der` as a PEM certificate, 64 base64 characters a line.
fn pem(der: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::new();
    for chunk in der.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, &b| n << 8 | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            b64.push(match i <= chunk.len() {
                true => char::from(A[(n >> (18 - 6 * i)) as usize & 63]),
                false => '=',
            });
        }
    }
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|l| std::str::from_utf8(l).unwrap())
        .collect();
    format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    )
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

// M4: the CA the server needs, cut to half its DER (its base64 still valid), after another
// CA: the bundle loaded with one certificate, the cut one dropped without a word, and the
// handshake failed on an unknown issuer, the hint pointing back to this bundle.
#[tokio::test]
async fn a_broken_certificate_in_a_ca_bundle_is_an_error_naming_it() {
    let (ca, cert, key) = server_pki(&["localhost"]);
    let port = server(cert, key).await;
    let (other_ca, _) = canary_testkit::ca_pem();
    let dir = tempfile::tempdir().unwrap();
    // Whole, the bundle serves: the server and the client are sound.
    let whole = write(dir.path(), "whole.pem", &format!("{other_ca}{ca}"));
    let config = client_config(Some(&whole), None).unwrap();
    assert_eq!(answer(port, config).await, Ok("ok".to_string()));
    assert_eq!(check_bundle(&whole).unwrap(), 2);

    let der = CertificateDer::from_pem_slice(ca.as_bytes()).unwrap();
    let cut = pem(&der[..der.len() / 2]);
    let bundle = write(dir.path(), "cut.pem", &format!("{other_ca}{cut}"));
    let line = other_ca.lines().count() + 1;
    let want = format!(
        "CA bundle {}: certificate 2 of 2 (line {line}) is not usable as a trust anchor: its \
         DER encoding is broken or cut short (BadEncoding); remove it, or give it whole",
        bundle.display()
    );
    let e = client_config(Some(&bundle), None).unwrap_err();
    assert_eq!(e.to_string(), want);
    assert_eq!(check_bundle(&bundle).unwrap_err().to_string(), want);
    // A good CA and a broken one: refused too, not served with the good one alone.
    let bundle = write(dir.path(), "good-and-cut.pem", &format!("{ca}{cut}"));
    let e = check_bundle(&bundle).unwrap_err().to_string();
    assert!(e.contains("certificate 2 of 2 (line "), "{e}");
}

// L2: a bundle's PEM error named neither its line nor the character (`InvalidCharacter(33)`).
#[test]
fn a_bundles_pem_error_names_its_line_and_character() {
    let (ca, _, _) = server_pki(&["localhost"]);
    let (other_ca, _) = canary_testkit::ca_pem();
    let mut lines: Vec<String> = ca.lines().map(String::from).collect();
    lines[3].replace_range(10..11, "!");
    let dir = tempfile::tempdir().unwrap();
    let bundle = write(
        dir.path(),
        "bang.pem",
        &format!("{other_ca}{}\n", lines.join("\n")),
    );
    let line = other_ca.lines().count() + 4;
    assert_eq!(
        check_bundle(&bundle).unwrap_err().to_string(),
        format!(
            "CA bundle {}: line {line}: a PEM section is not valid base64: it holds '!', which \
             base64 does not",
            bundle.display()
        )
    );
}

// L3: a certificate not valid for the target's name listed its names as webpki's Debug
// values (`DnsName("other.example")`), not as the names the README promises.
#[tokio::test]
async fn a_certificate_for_other_names_lists_them_bare() {
    let (ca, cert, key) = server_pki(&["other.example", "10.1.2.3"]);
    let port = server(cert, key).await;
    let dir = tempfile::tempdir().unwrap();
    let bundle = write(dir.path(), "ca.pem", &ca);
    let config = client_config(Some(&bundle), None).unwrap();
    let e = answer(port, config).await.unwrap_err();
    assert_eq!(
        e,
        "the server's certificate is not valid for \"localhost\" (NotValidForName): it names \
         other.example, 10.1.2.3"
    );
}

/// `openssl ARGS`' output, or `None` (skipped, said) where there is no openssl.
fn openssl(args: &[&str]) -> Option<Vec<u8>> {
    let out = match std::process::Command::new("openssl").args(args).output() {
        Ok(out) => out,
        Err(e) => {
            canary_testkit::skip("openssl", &format!("no openssl to make the key: {e}"));
            return None;
        }
    };
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(out.stdout)
}

/// A client identity of the test PKI's certificate and the key `key_pem`.
fn identity(dir: &Path, key_pem: &[u8]) -> ClientIdentity {
    let pki = ClientPki::new();
    let identity = ClientIdentity {
        cert: write(dir, "client.pem", &pki.cert_pem),
        key: dir.join("client.key"),
    };
    std::fs::write(&identity.key, key_pem).unwrap();
    identity
}

// M3: a legacy encrypted key (`Proc-Type: 4,ENCRYPTED`, as `openssl genrsa -aes256` wrote it
// before OpenSSL 3, and `-traditional` still does) was "a PEM section is not valid base64".
#[test]
fn a_legacy_encrypted_key_is_said_to_be_encrypted() {
    let Some(key) = openssl(&[
        "genrsa",
        "-traditional",
        "-aes256",
        "-passout",
        "pass:canary-test",
        "2048",
    ]) else {
        return;
    };
    assert!(String::from_utf8_lossy(&key).contains("Proc-Type: 4,ENCRYPTED"));
    let dir = tempfile::tempdir().unwrap();
    let id = identity(dir.path(), &key);
    let e = check_identity(&id).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "client key {}: holds an encrypted private key, which canaryd cannot use: decrypt \
             it (`openssl pkey -in KEY -out KEY.plain`) and keep the result readable by canaryd \
             only",
            id.key.display()
        )
    );
    assert_eq!(client_config(None, Some(&id)).unwrap_err().to_string(), e);
}

// L4: a P-521 key got rustls' "unexpected error: failed to parse private key as RSA, ECDSA,
// or EdDSA", which reads like a bug in canaryd.
#[test]
fn a_p521_key_is_said_to_be_on_a_curve_canaryd_cannot_sign_with() {
    let sec1 = ["ecparam", "-name", "secp521r1", "-genkey", "-noout"];
    let pkcs8 = [
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-521",
    ];
    for args in [&sec1[..], &pkcs8[..]] {
        let Some(key) = openssl(args) else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let id = identity(dir.path(), &key);
        let e = check_identity(&id).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "client key {}: not a key canaryd can sign with (RSA, ECDSA P-256 or P-384, \
                 Ed25519): an ECDSA key on P-521 (secp521r1), a curve canaryd cannot sign \
                 with: make a P-256 or P-384 key (`openssl ecparam -genkey -name prime256v1`)",
                id.key.display()
            ),
            "{args:?}"
        );
    }
}
