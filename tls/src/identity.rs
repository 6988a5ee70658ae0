//! The client's own certificate and private key, for servers that ask for one (mutual TLS:
//! OTLP collectors and inference gateways of platforms that authenticate their clients so).
//!
//! The key is a secret: nothing here quotes its file's contents, in an error or a log (its
//! path is named). A PEM parser's complaint about the key file is said without the line or
//! bytes it quotes.

use crate::TlsError;
use canary_files::read_small_file;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A client certificate chain and its private key, both PEM files: given, canaryd presents
/// them to a server that asks for a client certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The certificate chain, the client's own certificate first (intermediates may follow).
    pub cert: PathBuf,
    /// Its private key: PKCS#8 (`BEGIN PRIVATE KEY`), PKCS#1 RSA (`BEGIN RSA PRIVATE KEY`)
    /// or SEC1 EC (`BEGIN EC PRIVATE KEY`), unencrypted. Named in errors; its contents never.
    pub key: PathBuf,
}

/// The largest client certificate chain or key file read (a chain of a few certificates is a
/// few KiB).
pub const MAX_IDENTITY_FILE_BYTES: u64 = 1 << 20;

/// The identity's files, read and parsed (not yet matched: rustls does that).
pub(crate) struct Loaded {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl ClientIdentity {
    /// Reads and parses both files; an error names the file and what is wrong with it.
    pub(crate) fn load(&self) -> Result<Loaded, TlsError> {
        let chain = certificates(&self.cert)?;
        let key = private_key(&self.key)?;
        warn_if_readable_by_others(&self.key);
        Ok(Loaded { chain, key })
    }

    /// The error for a key rustls refused beside this certificate (a key that is not the
    /// certificate's, or of a kind it cannot sign with).
    pub(crate) fn refused(&self, e: &rustls::Error) -> TlsError {
        use rustls::{Error, InconsistentKeys};
        match e {
            Error::InconsistentKeys(InconsistentKeys::KeyMismatch) => TlsError::ClientKeyMismatch {
                cert: self.cert.clone(),
                key: self.key.clone(),
            },
            // ring cannot load it: an algorithm or curve it does not sign with. rustls' text
            // names the kinds it tried, never the key; its "unexpected error: " read as a bug
            // (TLS audit L4), and an EC key's curve is said by name.
            other => {
                let curve = read_small_file(&self.key, MAX_IDENTITY_FILE_BYTES)
                    .ok()
                    .and_then(|pem| PrivateKeyDer::from_pem_slice(&pem).ok())
                    .and_then(|key| unsupported_curve(key.secret_der()));
                let why = match (curve, other) {
                    (Some(curve), _) => format!(
                        "an ECDSA key on {curve}, a curve canaryd cannot sign with: make a P-256 \
                         or P-384 key (`openssl ecparam -genkey -name prime256v1`)"
                    ),
                    (None, rustls::Error::General(why)) => why.clone(),
                    (None, other) => other.to_string(),
                };
                TlsError::ClientKey {
                    path: self.key.clone(),
                    reason: format!(
                        "not a key canaryd can sign with (RSA, ECDSA P-256 or P-384, Ed25519): \
                         {why}"
                    ),
                }
            }
        }
    }
}

/// The curve of an EC key (PKCS#8 or SEC1 DER) that ring cannot sign with, by its OID's
/// DER bytes, where it is a common one.
fn unsupported_curve(der: &[u8]) -> Option<&'static str> {
    const CURVES: [(&[u8], &str); 2] = [
        // 1.3.132.0.35
        (
            &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23],
            "P-521 (secp521r1)",
        ),
        // 1.3.132.0.10
        (&[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x0a], "secp256k1"),
    ];
    CURVES
        .iter()
        .find(|(oid, _)| der.windows(oid.len()).any(|w| w == *oid))
        .map(|&(_, name)| name)
}

/// The certificates of the chain file, at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |reason: String| TlsError::ClientCert {
        path: path.to_path_buf(),
        reason,
    };
    let pem = read_small_file(path, MAX_IDENTITY_FILE_BYTES).map_err(|e| err(e.to_string()))?;
    let chain: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        // The certificate file may be the key file given twice: its complaint is said as
        // for a key, quoting nothing.
        .map_err(|e| err(secret_pem(&e)))?;
    if chain.is_empty() {
        return Err(err(match PrivateKeyDer::from_pem_slice(&pem).is_ok() {
            true => "holds a private key and no certificate (the key goes in the key file: \
                     --client-key or client_key)"
                .into(),
            false => "no PEM certificate found".into(),
        }));
    }
    Ok(chain)
}

/// The first private key of the key file.
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let err = |reason: String| TlsError::ClientKey {
        path: path.to_path_buf(),
        reason,
    };
    let pem = read_small_file(path, MAX_IDENTITY_FILE_BYTES).map_err(|e| err(e.to_string()))?;
    match PrivateKeyDer::from_pem_slice(&pem) {
        Ok(key) => Ok(key),
        // Encrypted before anything else: a legacy encrypted PKCS#1 or SEC1 key (`openssl
        // genrsa -aes256`) has `Proc-Type:` and `DEK-Info:` lines inside its section, which
        // fail as base64 first (TLS audit M3).
        Err(_) if encrypted(&pem) => Err(err(ENCRYPTED.into())),
        Err(pem::Error::NoItemsFound) => Err(err(no_key(&pem))),
        Err(e) => Err(err(secret_pem(&e))),
    }
}

/// What is said of an encrypted key.
const ENCRYPTED: &str = "holds an encrypted private key, which canaryd cannot use: decrypt it \
                         (`openssl pkey -in KEY -out KEY.plain`) and keep the result readable \
                         by canaryd only";

/// True when `pem` holds an encrypted private key: PKCS#8's `ENCRYPTED PRIVATE KEY`, or a
/// legacy PEM key's `Proc-Type: 4,ENCRYPTED` header.
fn encrypted(pem: &[u8]) -> bool {
    let has = |label: &[u8]| pem.windows(label.len()).any(|w| w == label);
    has(b"-----BEGIN ENCRYPTED PRIVATE KEY-----") || has(b"Proc-Type: 4,ENCRYPTED")
}

/// Why a PEM file holding no usable private key has none, from its section labels only.
fn no_key(pem: &[u8]) -> String {
    let has = |label: &[u8]| pem.windows(label.len()).any(|w| w == label);
    if encrypted(pem) {
        ENCRYPTED.into()
    } else if has(b"-----BEGIN CERTIFICATE-----") {
        "holds a certificate and no private key (the certificate goes in the certificate file: \
         --client-cert or client_cert)"
            .into()
    } else {
        "no PEM private key found (expected BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE \
         KEY)"
            .into()
    }
}

/// A PEM parser's complaint about a file that may hold a key, quoting none of it (where
/// [`crate::explain`]'s, for certificates, quotes the line or label it stopped at).
fn secret_pem(e: &pem::Error) -> String {
    match e {
        pem::Error::MissingSectionEnd { .. } => {
            "a PEM section has no END line: the file is cut short, or not PEM".into()
        }
        pem::Error::IllegalSectionStart { .. } => "a PEM BEGIN line is malformed".into(),
        pem::Error::Base64Decode(_) => "a PEM section is not valid base64".into(),
        pem::Error::Io(io) => io.to_string(),
        _ => "not a PEM file canaryd can read".into(),
    }
}

/// The key files already warned about: a daemon builds its TLS setup every run, and says so
/// once.
static WARNED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// Warns once per process and file when the key file can be read by its group or others, as
/// ssh does; a warning, not a refusal (a key readable by a service group is a choice).
fn warn_if_readable_by_others(path: &Path) {
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let Some(warning) = loose_permissions(path, meta.permissions().mode()) else {
        return;
    };
    let mut warned = WARNED.lock().unwrap_or_else(|p| p.into_inner());
    if warned
        .get_or_insert_with(HashSet::new)
        .insert(path.to_path_buf())
    {
        tracing::warn!("{warning}");
    }
}

/// What is said of a key file of `mode` that its group or others may read, if they may.
pub(crate) fn loose_permissions(path: &Path, mode: u32) -> Option<String> {
    (mode & 0o077 != 0).then(|| {
        format!(
            "client key {}: readable by its group or others (mode {:04o}); it is a private \
             key: `chmod 600` it",
            path.display(),
            mode & 0o7777
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_readable_by_group_or_others_is_warned_about_not_refused() {
        let path = Path::new("/etc/canaryd/client.key");
        assert_eq!(loose_permissions(path, 0o100600), None);
        assert_eq!(loose_permissions(path, 0o100400), None);
        assert_eq!(
            loose_permissions(path, 0o100640).as_deref(),
            Some(
                "client key /etc/canaryd/client.key: readable by its group or others (mode \
                 0640); it is a private key: `chmod 600` it"
            )
        );
        assert!(loose_permissions(path, 0o100604).is_some());
    }
}
