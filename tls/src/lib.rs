//! canary-tls: the one TLS client setup every canaryd connection uses — the replay's target,
//! the telemetry scrapers' `https://` endpoints and the OTLP exporter.
//!
//! rustls with the ring provider (no cmake or nasm on a fresh machine), trusting the system's
//! roots plus, when given, every certificate of a PEM bundle for internal PKIs. ALPN asks for
//! HTTP/1.1: canaryd maps one request to one socket. Given a [`ClientIdentity`] (a PEM
//! certificate chain and its private key), it presents that to a server asking for a client
//! certificate (mutual TLS); its key's contents are never quoted, its path may be.
//!
//! The bundle, and the trust store `SSL_CERT_FILE` and `SSL_CERT_DIR` name when set, are read
//! through [`canary_files::read_small_file`]: a FIFO or `/dev/zero` named by mistake is
//! refused, not waited on or read into memory, and a store that cannot be read is an error
//! naming the variable, never an empty store.
//!
//! Its errors, and rustls' handshake errors through [`explain`], are said in plain words.
//!
//! ```no_run
//! let identity = canary_tls::ClientIdentity {
//!     cert: "client.pem".into(),
//!     key: "client.key".into(),
//! };
//! let config = canary_tls::client_config(Some(std::path::Path::new("ca.pem")), Some(&identity))?;
//! # Ok::<(), canary_tls::TlsError>(())
//! ```
#![deny(missing_docs)]

mod explain;
mod identity;
mod last_words;
pub use explain::{explain, explain_chain, explain_error, explain_io, GIVE_CA};
pub use identity::{ClientIdentity, MAX_IDENTITY_FILE_BYTES};
pub use last_words::last_words;

use canary_files::read_small_file;
use rustls::pki_types::{pem::PemObject, CertificateDer};
use rustls::{ClientConfig, RootCertStore};
use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
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
    /// The trust store `SSL_CERT_FILE` or `SSL_CERT_DIR` names could not be read.
    #[error("{var}={}: {reason}", path.display())]
    SystemStore {
        /// `SSL_CERT_FILE` or `SSL_CERT_DIR`.
        var: &'static str,
        /// The file, or the directory, it names.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The client certificate file could not be read or holds no certificate.
    #[error("client certificate {path}: {reason}")]
    ClientCert {
        /// The file's path.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The client key file could not be read, holds no key, or one rustls cannot use. The
    /// reason never quotes the file.
    #[error("client key {path}: {reason}")]
    ClientKey {
        /// The file's path.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The client key is not the client certificate's (rustls compared their public keys).
    #[error(
        "client key {key} does not match client certificate {cert} (its public key is not the \
         certificate's: KeyMismatch): give the key the certificate was issued for"
    )]
    ClientKeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// No root certificate at all: neither system roots nor a bundle.
    #[error("no trusted root certificates: {source_name} holds none{problems} and no --ca-bundle was given")]
    NoRoots {
        /// Where the system's roots were looked for: `the system store`, or the variables.
        source_name: String,
        /// What the platform's loader could not read, as `" (…)"`, or empty.
        problems: String,
    },
}

/// The largest CA bundle read (a system's whole store is about 200 KB), and the largest file
/// of `SSL_CERT_FILE` or `SSL_CERT_DIR` read.
pub const MAX_CA_BUNDLE_BYTES: u64 = 16 << 20;

/// The most read from the files of `SSL_CERT_DIR`'s directories together (a whole store, one
/// file per certificate, is under 1 MB).
pub const MAX_CERT_DIR_BYTES: u64 = 64 << 20;

const CERT_FILE: &str = "SSL_CERT_FILE";
const CERT_DIR: &str = "SSL_CERT_DIR";

/// Builds a client config trusting the system roots ([`system_roots`]) and, if given, every
/// certificate in `ca_bundle` (PEM), presenting `identity` to a server that asks for a
/// client certificate.
pub fn client_config(
    ca_bundle: Option<&Path>,
    identity: Option<&ClientIdentity>,
) -> Result<Arc<ClientConfig>, TlsError> {
    // The identity first: its errors are the user's to fix whatever the store holds.
    let identity = identity.map(|i| i.load().map(|l| (i, l))).transpose()?;
    let system = system_roots()?;
    let mut roots = system.store;
    let mut total = roots.len();
    if let Some(path) = ca_bundle {
        total += add_bundle(&mut roots, path)?;
    }
    if total == 0 {
        return Err(TlsError::NoRoots {
            source_name: system.source_name,
            problems: system.problems,
        });
    }
    match identity {
        None => Ok(with_roots(roots)),
        Some((id, loaded)) => with_identity(roots, loaded).map_err(|e| id.refused(&e)),
    }
}

/// Checks that `identity` is one [`client_config`] takes: both files readable, a certificate
/// in the first, an unencrypted key in the second, and the key the certificate's. For config
/// checks, which name the setting in their own words. A key file its group or others may read
/// is warned about (once), not refused.
pub fn check_identity(identity: &ClientIdentity) -> Result<(), TlsError> {
    let loaded = identity.load()?;
    with_identity(RootCertStore::empty(), loaded)
        .map(|_| ())
        .map_err(|e| identity.refused(&e))
}

/// Checks that `path` is a CA bundle [`client_config`] takes: a regular file of at most
/// [`MAX_CA_BUNDLE_BYTES`] holding PEM certificates, at least one usable as a trust anchor.
/// Returns how many are. For config checks, which name the setting in their own words.
pub fn check_bundle(path: &Path) -> Result<usize, TlsError> {
    add_bundle(&mut RootCertStore::empty(), path)
}

/// Adds the certificates of the bundle at `path` to `roots`: how many were usable.
fn add_bundle(roots: &mut RootCertStore, path: &Path) -> Result<usize, TlsError> {
    let err = |reason: String| TlsError::CaBundle {
        path: path.to_path_buf(),
        reason,
    };
    let pem = read_small_file(path, MAX_CA_BUNDLE_BYTES).map_err(|e| err(e.to_string()))?;
    let certs = certificates_at(&pem).map_err(err)?;
    if certs.is_empty() {
        // A key file given for the certificate beside it: say so, never quoting the key.
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&pem).is_ok();
        return Err(err(match key {
            true => "holds a private key and no certificate (give the CA's certificate)".into(),
            false => "no PEM certificate found".into(),
        }));
    }
    // Every certificate the user gave must be usable: one dropped without a word left its
    // server's handshake failing on an unknown issuer, the hint pointing back to this bundle
    // (TLS audit M4).
    let n = certs.len();
    for (i, (cert, line)) in certs.into_iter().enumerate() {
        if let Err(e) = roots.add(cert) {
            let at = line.map_or(String::new(), |l| format!(" (line {l})"));
            return Err(err(format!(
                "certificate {} of {n}{at} is not usable as a trust anchor: {}; remove it, or \
                 give it whole",
                i + 1,
                explain::unusable_anchor(&e)
            )));
        }
    }
    Ok(n)
}

/// The system's trust anchors and where they came from.
#[derive(Debug)]
pub struct SystemRoots {
    /// The certificates.
    pub store: RootCertStore,
    /// `the system store`, or `SSL_CERT_FILE=…` and `SSL_CERT_DIR=…` as set.
    pub source_name: String,
    /// What the platform's loader could not read, as `" (…)"`, or empty: not fatal, the rest
    /// of its store may do, but said when the store turns out empty.
    pub problems: String,
}

/// The system's trust anchors. `SSL_CERT_FILE` (a PEM file) and `SSL_CERT_DIR` (directories,
/// `:`-separated, of PEM files), when set (an empty `SSL_CERT_DIR` is not), replace the
/// platform's store, as
/// OpenSSL and rustls-native-certs read them; they are read here, each file bounded
/// ([`MAX_CA_BUNDLE_BYTES`], [`MAX_CERT_DIR_BYTES`] for a directory's files together), and
/// one that cannot be read, or holds a broken PEM section, is an error naming the variable.
/// In a directory only regular files are read (a FIFO or device there is skipped, as
/// OpenSSL does), each once however many links name it.
pub fn system_roots() -> Result<SystemRoots, TlsError> {
    roots_from(std::env::var_os(CERT_FILE), std::env::var_os(CERT_DIR))
}

/// [`system_roots`] with the variables' values given.
fn roots_from(file: Option<OsString>, dirs: Option<OsString>) -> Result<SystemRoots, TlsError> {
    if file.as_ref().is_some_and(|f| f.is_empty()) {
        // rustls-native-certs would take it as a file to read, find none, and trust nothing.
        return Err(TlsError::SystemStore {
            var: CERT_FILE,
            path: PathBuf::new(),
            reason: "set but empty: unset it, or name a PEM file".into(),
        });
    }
    let file = file.map(PathBuf::from);
    let dirs = dirs.filter(|d| !d.is_empty());
    let dir_list: Vec<PathBuf> = dirs
        .iter()
        .flat_map(std::env::split_paths)
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    if file.is_none() && dir_list.is_empty() {
        return Ok(platform_roots());
    }
    let mut certs = Vec::new();
    let mut seen = HashSet::new();
    if let Some(path) = &file {
        let err = |reason: String| TlsError::SystemStore {
            var: CERT_FILE,
            path: path.clone(),
            reason,
        };
        let pem = read_small_file(path, MAX_CA_BUNDLE_BYTES).map_err(|e| err(e.to_string()))?;
        certs.extend(pem_certificates(&pem).map_err(err)?);
        if let Ok(m) = std::fs::metadata(path) {
            seen.insert((m.dev(), m.ino()));
        }
    }
    let mut budget = MAX_CERT_DIR_BYTES;
    for dir in &dir_list {
        certs.extend(dir_certificates(dir, &mut seen, &mut budget)?);
    }
    certs.sort_unstable_by(|a, b| a.as_ref().cmp(b.as_ref()));
    certs.dedup();
    let mut store = RootCertStore::empty();
    store.add_parsable_certificates(certs);
    let mut named = Vec::new();
    if let Some(f) = &file {
        named.push(format!("{CERT_FILE}={}", f.display()));
    }
    if let Some(d) = &dirs {
        named.push(format!("{CERT_DIR}={}", Path::new(d).display()));
    }
    Ok(SystemRoots {
        store,
        source_name: named.join(" with "),
        problems: String::new(),
    })
}

/// The certificates of `dir`'s regular files not `seen` yet, within `budget` bytes in all.
fn dir_certificates(
    dir: &Path,
    seen: &mut HashSet<(u64, u64)>,
    budget: &mut u64,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |reason: String| TlsError::SystemStore {
        var: CERT_DIR,
        path: dir.to_path_buf(),
        reason,
    };
    let mut certs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| err(e.to_string()))? {
        let path = entry.map_err(|e| err(e.to_string()))?.path();
        let at = |e: String| err(format!("{}: {e}", path.display()));
        // Followed through links, as `openssl rehash` makes them; a dangling one is skipped.
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(at(e.to_string())),
        };
        if !meta.is_file() || !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        let pem = read_small_file(&path, MAX_CA_BUNDLE_BYTES).map_err(|e| at(e.to_string()))?;
        if pem.len() as u64 > *budget {
            return Err(err(format!(
                "its files hold more than {MAX_CERT_DIR_BYTES} bytes in all"
            )));
        }
        *budget -= pem.len() as u64;
        certs.extend(pem_certificates(&pem).map_err(at)?);
    }
    Ok(certs)
}

/// The platform's store, as rustls-native-certs finds it (no variable set): the
/// distribution's own files, read by that crate; what it could not read is kept to be said.
fn platform_roots() -> SystemRoots {
    let loaded = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    store.add_parsable_certificates(loaded.certs);
    let mut problems: Vec<String> = loaded
        .errors
        .iter()
        .take(3)
        .map(|e| e.to_string())
        .collect();
    if loaded.errors.len() > 3 {
        problems.push(format!("and {} more", loaded.errors.len() - 3));
    }
    SystemRoots {
        store,
        source_name: "the system store".into(),
        problems: match problems.is_empty() {
            true => String::new(),
            false => format!(" ({})", problems.join("; ")),
        },
    }
}

/// Every certificate of a PEM text (other sections skipped); a broken section is an error,
/// in plain words, naming its line.
fn pem_certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    Ok(certificates_at(pem)?.into_iter().map(|(c, _)| c).collect())
}

/// [`pem_certificates`], each with the line (from 1) of its BEGIN line where that is known.
fn certificates_at(pem: &[u8]) -> Result<Vec<(CertificateDer<'static>, Option<usize>)>, String> {
    let parse = |text: &[u8]| {
        CertificateDer::pem_slice_iter(text).collect::<Result<Vec<CertificateDer<'static>>, _>>()
    };
    // The parser starts a section at each BEGIN line: the text from one to the next holds
    // at most one, parsed alone as it is within the whole.
    let sections = sections(pem);
    match parse(pem) {
        Ok(certs) => {
            let lines: Vec<usize> = sections
                .iter()
                .filter(|(_, text)| parse(text).is_ok_and(|c| c.len() == 1))
                .map(|&(line, _)| line)
                .collect();
            let lines = match lines.len() == certs.len() {
                true => lines.into_iter().map(Some).collect(),
                false => vec![None; certs.len()],
            };
            Ok(certs.into_iter().zip(lines).collect())
        }
        Err(e) => Err(sections
            .iter()
            .find_map(|&(line, text)| {
                let e = parse(text).err()?;
                let line = explain::pem_line(&e, text).map_or(line, |l| line + l);
                Some(format!("line {line}: {}", explain::pem(&e)))
            })
            .unwrap_or_else(|| explain::pem(&e))),
    }
}

/// The pieces of a PEM text that start at a BEGIN line (to the next one, or the end), each
/// with its line's number (from 1).
fn sections(pem: &[u8]) -> Vec<(usize, &[u8])> {
    let mut starts = Vec::new();
    let mut at = 0;
    for (i, line) in pem.split(|&b| b == b'\n').enumerate() {
        if line.starts_with(b"-----BEGIN ") {
            starts.push((i + 1, at));
        }
        at += line.len() + 1;
    }
    let ends = starts.iter().skip(1).map(|&(_, at)| at).chain([pem.len()]);
    starts
        .iter()
        .zip(ends)
        .map(|(&(line, from), to)| (line, &pem[from..to]))
        .collect()
}

/// A client config trusting exactly `roots`, presenting no client certificate.
pub fn with_roots(roots: RootCertStore) -> Arc<ClientConfig> {
    let config = builder(roots).with_no_client_auth();
    finish(config)
}

/// A client config trusting exactly `roots` and presenting `identity`: rustls refuses a key
/// of a kind ring cannot sign with, or one that is not the certificate's.
fn with_identity(
    roots: RootCertStore,
    identity: identity::Loaded,
) -> Result<Arc<ClientConfig>, rustls::Error> {
    let config = builder(roots).with_client_auth_cert(identity.chain, identity.key)?;
    Ok(finish(config))
}

fn builder(
    roots: RootCertStore,
) -> rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
}

/// ALPN: HTTP/1.1 only (one request per connection).
fn finish(mut config: ClientConfig) -> Arc<ClientConfig> {
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::io::Read;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    #[test]
    fn a_bundle_that_is_a_device_is_refused_by_name() {
        // It used to be read line by line until memory ran out.
        let e = client_config(Some(Path::new("/dev/zero")), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "CA bundle /dev/zero: not a regular file",
            "{e}"
        );
    }

    // Audit f5, item 5: a PEM section without its END line printed the marker as a byte
    // array (`missing section end marker: [45, 45, …]`).
    #[test]
    fn a_pem_cut_short_is_said_in_words() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("cut.pem");
        std::fs::write(
            &bundle,
            "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n",
        )
        .unwrap();
        let e = client_config(Some(&bundle), None).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "CA bundle {}: line 1: a PEM section has no END line (expected \
                 \"-----END CERTIFICATE-----\"): the file is cut short, or not PEM",
                bundle.display()
            )
        );
    }

    /// Set in a child process [`in_child`] starts.
    const CHILD: &str = "CANARY_TLS_TEST_CHILD";
    /// What the child prints before [`client_config`]'s answer.
    const ANSWER: &str = "client_config says: ";

    /// In the child process: builds a client config without a bundle, prints what it says,
    /// and returns true (the test then ends). Its address space is capped at 1 GiB first, so
    /// a loader that reads without a bound fails there at once instead of taking the host's
    /// memory.
    fn child_runs() -> bool {
        if std::env::var_os(CHILD).is_none() {
            return false;
        }
        let cap = libc::rlimit {
            rlim_cur: 1 << 30,
            rlim_max: 1 << 30,
        };
        // SAFETY: setrlimit reads one valid rlimit struct.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &cap) }, 0);
        let said = match client_config(None, None) {
            Ok(_) => "ok".to_string(),
            Err(e) => e.to_string(),
        };
        println!("{ANSWER}{said}");
        true
    }

    /// What [`client_config`] says in a child process running `test` with the trust-store
    /// variables set to `vars` (the variables are the process's: no test sets them in its
    /// own). A child still running after 30 s (a FIFO read waits for a writer) is killed, and
    /// its answer is that it hung.
    fn in_child(test: &str, vars: &[(&str, &OsStr)]) -> String {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([test, "--exact", "--nocapture", "--test-threads", "1"])
            .env(CHILD, "1")
            .env_remove(CERT_FILE)
            .env_remove(CERT_DIR)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                child.kill().unwrap();
                child.wait().unwrap();
                return "hung".into();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        // The harness prints the test's name on the line the answer starts.
        match out.split_once(ANSWER).and_then(|(_, a)| a.lines().next()) {
            Some(said) => said.to_string(),
            None => {
                let mut err = String::new();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                format!("no answer: {out}{err}")
            }
        }
    }

    /// A CA certificate in PEM.
    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    // Audit f5, item 2: `SSL_CERT_FILE=/dev/zero` aborted canaryd (an allocation failure),
    // and a FIFO there blocked it for good, the daemon skipping every later run.
    #[test]
    fn a_cert_file_that_is_a_device_or_a_fifo_is_refused_by_name() {
        if child_runs() {
            return;
        }
        let test = "tests::a_cert_file_that_is_a_device_or_a_fifo_is_refused_by_name";
        let said = in_child(test, &[(CERT_FILE, OsStr::new("/dev/zero"))]);
        assert_eq!(said, "SSL_CERT_FILE=/dev/zero: not a regular file");
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        let said = in_child(test, &[(CERT_FILE, fifo.as_os_str())]);
        assert_eq!(
            said,
            format!("SSL_CERT_FILE={}: not a regular file", fifo.display())
        );
    }

    // Audit f5, item 2 (and 8): a missing `SSL_CERT_FILE` read as "the system store is empty",
    // or, beside a usable `SSL_CERT_DIR`, went unsaid.
    #[test]
    fn a_cert_file_that_is_missing_or_empty_is_said_so() {
        if child_runs() {
            return;
        }
        let test = "tests::a_cert_file_that_is_missing_or_empty_is_said_so";
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("typo.pem");
        let store = dir.path().join("certs");
        std::fs::create_dir(&store).unwrap();
        std::fs::write(store.join("ca.pem"), ca_pem()).unwrap();
        let want = format!(
            "SSL_CERT_FILE={}: No such file or directory (os error 2)",
            missing.display()
        );
        assert_eq!(in_child(test, &[(CERT_FILE, missing.as_os_str())]), want);
        let both = [
            (CERT_FILE, missing.as_os_str()),
            (CERT_DIR, store.as_os_str()),
        ];
        assert_eq!(in_child(test, &both), want);
        // Read, and empty: the message says which store holds nothing.
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        assert_eq!(
            in_child(test, &[(CERT_FILE, empty.as_os_str())]),
            format!(
                "no trusted root certificates: SSL_CERT_FILE={} holds none and no \
                 --ca-bundle was given",
                empty.display()
            )
        );
        assert_eq!(in_child(test, &[(CERT_DIR, store.as_os_str())]), "ok");
        assert_eq!(
            in_child(test, &[(CERT_FILE, OsStr::new(""))]),
            "SSL_CERT_FILE=: set but empty: unset it, or name a PEM file"
        );
    }

    // Audit f5, item 2: `SSL_CERT_DIR`'s files were read whole, however large (a sparse file
    // of 8 GiB without a line break took all the memory it could).
    #[test]
    fn a_cert_dir_is_read_bounded_and_skips_what_is_not_a_file() {
        if child_runs() {
            return;
        }
        let test = "tests::a_cert_dir_is_read_bounded_and_skips_what_is_not_a_file";
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca_pem()).unwrap();
        mkfifo(&dir.path().join("fifo"));
        let huge = dir.path().join("huge.pem");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(8 << 30)
            .unwrap();
        assert_eq!(
            in_child(test, &[(CERT_DIR, dir.path().as_os_str())]),
            format!(
                "SSL_CERT_DIR={}: {}: larger than {MAX_CA_BUNDLE_BYTES} bytes",
                dir.path().display(),
                huge.display()
            )
        );
        // Without it: the FIFO is skipped, not waited on, and the certificate trusted.
        std::fs::remove_file(&huge).unwrap();
        assert_eq!(in_child(test, &[(CERT_DIR, dir.path().as_os_str())]), "ok");
    }
}
