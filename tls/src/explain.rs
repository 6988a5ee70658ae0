//! TLS failures in plain words.
//!
//! rustls names its errors for programmers: `invalid peer certificate: Other(OtherError(
//! CaUsedAsEndEntity))`, an expiry in UNIX seconds, `received fatal alert:
//! NoApplicationProtocol`. The commonest ones a user meets are said here as a sentence of what
//! happened and what to do, the rustls name kept in it (to search for, and to tell two cases
//! apart); any other error reads as rustls says it.

use rustls::pki_types::UnixTime;
use rustls::{AlertDescription, CertificateError, Error};

/// The most names of a certificate said when it does not cover the target's (a certificate may
/// hold thousands, the server's text).
const NAMES_SHOWN: usize = 3;

/// `e` in plain words (see the module's docs).
pub fn explain(e: &Error) -> String {
    match e {
        Error::InvalidCertificate(c) => certificate(c).unwrap_or_else(|| e.to_string()),
        Error::AlertReceived(AlertDescription::NoApplicationProtocol) => {
            "the server accepts none of the protocols canaryd offered \
             (NoApplicationProtocol alert): canaryd speaks HTTP/1.1 only (one request per \
             connection, so that a socket is a request), and this server, or a proxy in front \
             of it, takes only HTTP/2 over TLS"
                .into()
        }
        Error::AlertReceived(AlertDescription::CertificateRequired) => format!(
            "the server requires a client certificate and canaryd presented none \
             (CertificateRequired alert): {GIVE_IDENTITY}"
        ),
        // TLS 1.2 servers (OpenSSL's among them) refuse a missing client certificate so.
        Error::AlertReceived(AlertDescription::HandshakeFailure) => format!(
            "the server ended the handshake (HandshakeFailure alert): it may require a client \
             certificate ({GIVE_IDENTITY}), or accept none of the TLS versions and cipher \
             suites canaryd offers"
        ),
        // Sent by a server only about the client's certificate.
        Error::AlertReceived(
            a @ (AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA),
        ) => format!(
            "the server refused the client certificate canaryd presented ({a:?} alert): is \
             it signed by a CA the server trusts, still valid, and issued for client \
             authentication?"
        ),
        Error::AlertReceived(AlertDescription::DecryptError) => {
            "the server could not verify a signature of the handshake (DecryptError alert): \
             if it checks the client certificate canaryd presented, is that signed by the CA \
             the server trusts? (one of the same name with another key reads so)"
                .into()
        }
        // The first bytes back are not a TLS record: the server speaks plain HTTP there (an
        // answer of `HTTP/1.1 400`, say), or another protocol.
        Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => {
            "the server answered in plain text, not TLS (InvalidContentType): it speaks plain \
             HTTP on that port, so is the URL http://, not https://?"
                .into()
        }
        other => other.to_string(),
    }
}

/// Where a CA certificate is given, said when a server's issuer is unknown. The OTLP
/// exporter, whose collector it was, puts its own settings first in its place.
pub const GIVE_CA: &str = "give its CA's certificate with --ca-bundle (ca_bundle in the \
     daemon's config; --otlp-certificate, OTEL_EXPORTER_OTLP_CERTIFICATE or [otlp] certificate \
     for the OTLP exporter), or add it to the system's store";

/// Where a client certificate is given, said when a server asks for one.
const GIVE_IDENTITY: &str = "give one with --client-cert and --client-key (client_cert and \
     client_key of the daemon's target; --otlp-client-cert and --otlp-client-key, or [otlp] \
     client_certificate and client_key, for the OTLP exporter)";

/// [`explain`] for an error in a chain of sources (a hyper or reqwest error's): `e` when it
/// is rustls' error, or an `io::Error` holding one (within other `io::Error`s: reqwest's
/// connector wraps the handshake's), in plain words; `None` for any other.
/// (An `io::Error`'s own `source` skips the error it holds, so a chain walked by `source`
/// alone never reaches rustls' error: it is looked for here at each link.)
pub fn explain_error(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut held: &(dyn std::error::Error + 'static) = e;
    // A few levels at most: an `io::Error` holds what its maker put in it.
    for _ in 0..8 {
        if let Some(tls) = held.downcast_ref::<Error>() {
            return Some(explain(tls));
        }
        held = held.downcast_ref::<std::io::Error>()?.get_ref()?;
    }
    None
}

/// [`explain_error`] at the first link of `e`'s chain of sources (`e` included) that is, or
/// holds, rustls' error: a hyper or reqwest error's TLS cause sits a few links down.
pub fn explain_chain(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut link = Some(e);
    while let Some(l) = link {
        if let Some(said) = explain_error(l) {
            return Some(said);
        }
        link = l.source();
    }
    None
}

/// [`explain`] for what tokio-rustls returns: an `io::Error` holding rustls' error, or the
/// socket's own.
pub fn explain_io(e: &std::io::Error) -> String {
    match e.get_ref().and_then(|i| i.downcast_ref::<Error>()) {
        Some(tls) => explain(tls),
        None => e.to_string(),
    }
}

/// A PEM parser's complaint in plain words (a missing END line printed its bytes).
pub(crate) fn pem(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error as Pem;
    let text = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .chars()
            .take(80)
            .collect::<String>()
    };
    match e {
        // The marker is the section's label (`CERTIFICATE`).
        Pem::MissingSectionEnd { end_marker } => format!(
            "a PEM section has no END line (expected \"-----END {}-----\"): the file is cut \
             short, or not PEM",
            text(end_marker).escape_debug()
        ),
        Pem::IllegalSectionStart { line } => {
            format!("a PEM BEGIN line is malformed: {:?}", text(line))
        }
        Pem::Base64Decode(why) => match invalid_character(why) {
            Some(c) => format!(
                "a PEM section is not valid base64: it holds {:?}, which base64 does not",
                char::from(c)
            ),
            None => format!("a PEM section is not valid base64 ({why})"),
        },
        other => other.to_string(),
    }
}

/// The byte a base64 complaint (`InvalidCharacter(33)`, the parser's words) names.
fn invalid_character(why: &str) -> Option<u8> {
    why.strip_prefix("InvalidCharacter(")?
        .strip_suffix(')')?
        .parse()
        .ok()
}

/// Where in `section` (a PEM text from its BEGIN line) the parser's complaint `e` is, as lines
/// after the BEGIN line: the first line holding the character base64 does not have.
pub(crate) fn pem_line(e: &rustls::pki_types::pem::Error, section: &[u8]) -> Option<usize> {
    let rustls::pki_types::pem::Error::Base64Decode(why) = e else {
        return None;
    };
    let c = invalid_character(why)?;
    section
        .split(|&b| b == b'\n')
        .skip(1)
        .position(|line| !line.starts_with(b"-----") && line.contains(&c))
        .map(|i| i + 1)
}

/// Why a certificate of a CA bundle is no trust anchor, in plain words where they are known.
pub(crate) fn unusable_anchor(e: &Error) -> String {
    match e {
        Error::InvalidCertificate(CertificateError::BadEncoding) => {
            "its DER encoding is broken or cut short (BadEncoding)".into()
        }
        Error::InvalidCertificate(CertificateError::Other(o)) => format!("{:?}", o.0),
        Error::InvalidCertificate(c) => format!("{c:?}"),
        other => other.to_string(),
    }
}

fn certificate(c: &CertificateError) -> Option<String> {
    Some(match c {
        CertificateError::UnknownIssuer => {
            format!("the server's certificate is not signed by a CA canaryd trusts (UnknownIssuer): {GIVE_CA}")
        }
        CertificateError::ExpiredContext { time, not_after } => format!(
            "the server's certificate expired at {}, {} ago by this host's clock (Expired)",
            utc(*not_after),
            span(time.as_secs().saturating_sub(not_after.as_secs()))
        ),
        CertificateError::Expired => "the server's certificate has expired (Expired)".into(),
        CertificateError::NotValidYetContext { time, not_before } => format!(
            "the server's certificate is valid only from {}, {} from now by this host's clock: \
             is the clock right? (NotValidYet)",
            utc(*not_before),
            span(not_before.as_secs().saturating_sub(time.as_secs()))
        ),
        CertificateError::NotValidForNameContext {
            expected,
            presented,
        } => {
            let mut names: Vec<&str> = presented
                .iter()
                .take(NAMES_SHOWN)
                .map(|n| bare_name(n))
                .collect();
            let more = presented.len().saturating_sub(NAMES_SHOWN);
            let more = format!("and {more} more");
            if presented.len() > NAMES_SHOWN {
                names.push(&more);
            }
            format!(
                "the server's certificate is not valid for {:?} (NotValidForName): it names {}",
                expected.to_str(),
                match names.is_empty() {
                    true => "no name (no subjectAltName)".to_string(),
                    false => names.join(", "),
                }
            )
        }
        // webpki's error, which rustls passes on as `Other`: matched by its name, so no
        // second copy of webpki's types is needed (a test serves such a certificate).
        CertificateError::Other(o) if format!("{:?}", o.0) == "CaUsedAsEndEntity" => {
            "the server's certificate is a CA certificate (basicConstraints CA:TRUE, which \
             `openssl req -x509` gives a self-signed one by default since OpenSSL 3), and a CA \
             certificate cannot be the server's own (CaUsedAsEndEntity): make it with \
             `-addext basicConstraints=critical,CA:FALSE`, or sign the server's certificate \
             with that CA and give the CA with --ca-bundle"
                .into()
        }
        _ => return None,
    })
}

/// A name a certificate presents, as webpki writes it (`DnsName("a.example")`,
/// `IpAddress(10.0.0.1)`), bare: `a.example`, `10.0.0.1`. Another kind keeps its wrapper.
fn bare_name(presented: &str) -> &str {
    let inner = |prefix: &str, suffix: &str| {
        presented
            .strip_prefix(prefix)
            .and_then(|n| n.strip_suffix(suffix))
    };
    inner("DnsName(\"", "\")")
        .or_else(|| inner("IpAddress(", ")"))
        .unwrap_or(presented)
}

/// `t` as `2024-01-31 12:00:00 UTC`.
fn utc(t: UnixTime) -> String {
    let secs = t.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `secs` in the largest unit that keeps it above one: `45 s`, `3 min`, `5 h`, `12 days`.
fn span(secs: u64) -> String {
    match secs {
        0..120 => format!("{secs} s"),
        120..7_200 => format!("{} min", secs / 60),
        7_200..172_800 => format!("{} h", secs / 3600),
        _ => format!("{} days", secs / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn plain_http_is_found_within_nested_io_errors() {
        // As reqwest's connector gives it: an io error holding the handshake's io error.
        let tls = Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let outer = std::io::Error::other(inner);
        let said = explain_error(&outer).unwrap();
        assert!(said.contains("is the URL http://, not https://?"), "{said}");
        assert_eq!(explain_error(&std::io::Error::other("refused")), None);
    }

    #[test]
    fn dates_and_spans() {
        let at = |s| UnixTime::since_unix_epoch(Duration::from_secs(s));
        assert_eq!(utc(at(0)), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(at(951_782_400)), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(at(1_704_067_199)), "2023-12-31 23:59:59 UTC");
        assert_eq!(span(59), "59 s");
        assert_eq!(span(600), "10 min");
        assert_eq!(span(3 * 86_400), "3 days");
    }
}
