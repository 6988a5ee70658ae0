//! `[otlp]`: the daemon's OTLP export settings, validated from the file and turned into the
//! exporter's settings over the standard `OTEL_*` variables when the daemon starts.

use super::validate::Source;
use super::{raw, redact_url, ConfigError};
use std::path::PathBuf;
use std::time::Duration;

/// OTLP export settings from `[otlp]`; each one set overrides the matching standard
/// `OTEL_*` variable of the daemon's environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Otlp {
    /// Base URL.
    pub endpoint: Option<String>,
    /// Full traces URL.
    pub traces_endpoint: Option<String>,
    /// Full metrics URL.
    pub metrics_endpoint: Option<String>,
    /// Full logs URL.
    pub logs_endpoint: Option<String>,
    /// Headers (lower-case names) and where their values are.
    pub headers: Vec<(String, OtlpHeader)>,
    /// Per-export timeout.
    pub timeout: Option<Duration>,
    /// Fraction of requests whose span is exported.
    pub sample_ratio: Option<f64>,
    /// Metrics push interval.
    pub metrics_interval: Option<Duration>,
    /// How long the final flush may take.
    pub flush_timeout: Duration,
    /// CA bundle for https endpoints.
    pub certificate: Option<PathBuf>,
    /// Client certificate and key for endpoints that ask for one (mutual TLS).
    pub client_identity: Option<canary_replay::ClientIdentity>,
}

impl Default for Otlp {
    fn default() -> Self {
        Otlp {
            endpoint: None,
            traces_endpoint: None,
            metrics_endpoint: None,
            logs_endpoint: None,
            headers: Vec::new(),
            timeout: None,
            sample_ratio: None,
            metrics_interval: None,
            flush_timeout: canary_exporters::Config::FLUSH_TIMEOUT,
            certificate: None,
            client_identity: None,
        }
    }
}

/// Where an OTLP header's value is. Values may be secrets: `Debug` never shows them, and
/// those from a variable or file are read only when the exporter starts.
#[derive(Clone, PartialEq)]
pub enum OtlpHeader {
    /// Written in the file.
    Plain(String),
    /// In an environment variable, with a prefix (`"Bearer "`).
    Env(String, String),
    /// In a file (trailing newline dropped), with a prefix.
    File(PathBuf, String),
}

impl std::fmt::Debug for OtlpHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OtlpHeader::Plain(_) => f.write_str("Plain(<redacted>)"),
            OtlpHeader::Env(v, _) if canary_replay::looks_like_a_key(v) => {
                f.write_str("Env(<named like a key>)")
            }
            OtlpHeader::Env(v, _) => write!(f, "Env({v:?})"),
            OtlpHeader::File(p, _) => match canary_replay::key_path_shown(p) {
                Some(_) => write!(f, "File({p:?})"),
                None => f.write_str("File(<named like a key>)"),
            },
        }
    }
}

impl Otlp {
    /// What `check-config` says about export: endpoints without user info or query, and
    /// header names (never values). `None` when the file sets no endpoint.
    pub fn describe(&self) -> Option<String> {
        let urls: Vec<String> = [
            ("", &self.endpoint),
            ("traces ", &self.traces_endpoint),
            ("metrics ", &self.metrics_endpoint),
            ("logs ", &self.logs_endpoint),
        ]
        .into_iter()
        .filter_map(|(what, u)| u.as_deref().map(|u| format!("{what}{}", redact_url(u))))
        .collect();
        if urls.is_empty() {
            return None;
        }
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        Some(format!(
            "OTLP export to {}{}",
            urls.join(", "),
            match names.is_empty() {
                true => String::new(),
                false => format!(" with headers {}", names.join(", ")),
            }
        ))
    }

    /// The exporter's settings: the standard `OTEL_*` variables, overridden by `[otlp]`.
    /// Header values are read here; an error names the key, never a value.
    pub fn exporter_config(&self) -> Result<canary_exporters::Config, String> {
        self.exporter_config_over(canary_exporters::Config::env_var)
    }

    /// [`Otlp::exporter_config`] over the variables `var` gives. A variable whose setting
    /// `[otlp]` gives is not read: a bad inherited value of it is no error.
    pub(super) fn exporter_config_over(
        &self,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<canary_exporters::Config, String> {
        let overridden: Vec<&str> = [
            (self.timeout.is_some(), "OTEL_EXPORTER_OTLP_TIMEOUT"),
            (
                self.metrics_interval.is_some(),
                "OTEL_METRIC_EXPORT_INTERVAL",
            ),
            (self.sample_ratio.is_some(), "OTEL_TRACES_SAMPLER"),
            (self.sample_ratio.is_some(), "OTEL_TRACES_SAMPLER_ARG"),
            (self.certificate.is_some(), "OTEL_EXPORTER_OTLP_CERTIFICATE"),
            // Both or neither: `[otlp]`'s pair replaces the variables' pair whole.
            (
                self.client_identity.is_some(),
                canary_exporters::CLIENT_CERTIFICATE,
            ),
            (self.client_identity.is_some(), canary_exporters::CLIENT_KEY),
        ]
        .into_iter()
        .filter_map(|(set, name)| set.then_some(name))
        .collect();
        let mut c = canary_exporters::Config::from_vars_except(var, &overridden)
            .map_err(|e| format!("OTLP settings from the environment: {e}"))?;
        let set = |dst: &mut Option<String>, src: &Option<String>| {
            if src.is_some() {
                dst.clone_from(src);
            }
        };
        set(&mut c.endpoint, &self.endpoint);
        set(&mut c.traces_endpoint, &self.traces_endpoint);
        set(&mut c.metrics_endpoint, &self.metrics_endpoint);
        set(&mut c.logs_endpoint, &self.logs_endpoint);
        for (name, h) in &self.headers {
            let value = match h {
                OtlpHeader::Plain(v) => v.clone(),
                OtlpHeader::Env(var, prefix) => match std::env::var(var) {
                    Ok(v) if !v.trim().is_empty() => format!("{prefix}{}", v.trim()),
                    _ => {
                        let var = super::variable(var);
                        return Err(format!("otlp.headers.{name}: {var} is not set"));
                    }
                },
                OtlpHeader::File(path, prefix) => {
                    let shown = canary_replay::key_path_shown(path)
                        .unwrap_or_else(|| format!("the file {}", canary_replay::NAME_NOT_SHOWN));
                    match read_secret(path) {
                        Ok(v) if !v.trim().is_empty() => format!("{prefix}{}", v.trim()),
                        Ok(_) => return Err(format!("otlp.headers.{name}: {shown} is empty")),
                        Err(e) => return Err(format!("otlp.headers.{name}: reading {shown}: {e}")),
                    }
                }
            };
            if !canary_exporters::valid_header_value(&value) {
                let from = match h {
                    OtlpHeader::Plain(_) => "given".to_string(),
                    OtlpHeader::Env(var, _) => format!("read from {}", super::variable(var)),
                    OtlpHeader::File(path, _) => format!(
                        "read from {}",
                        canary_replay::key_path_shown(path).unwrap_or_else(|| format!(
                            "the file {}",
                            canary_replay::NAME_NOT_SHOWN
                        ))
                    ),
                };
                return Err(format!(
                    "otlp.headers.{name}: the value {from} {NOT_A_HEADER_VALUE}"
                ));
            }
            c.headers.retain(|(k, _)| k != name);
            c.headers.push((name.clone(), value));
        }
        if let Some(t) = self.timeout {
            c.timeout = t;
        }
        if let Some(r) = self.sample_ratio {
            c.sample_ratio = r;
        }
        if self.certificate.is_some() {
            c.certificate.clone_from(&self.certificate);
        }
        if self.client_identity.is_some() {
            c.client_identity.clone_from(&self.client_identity);
        }
        if let Some(i) = self.metrics_interval {
            c.metrics_interval = i;
        }
        // Read as the exporter will. `[otlp]`'s files were checked when the file was read
        // (with their line); the variables' are checked here, naming the variable.
        let from = canary_exporters::TlsSources {
            certificate: match self.certificate.is_some() {
                true => "otlp.certificate",
                false => canary_exporters::CERTIFICATE,
            },
            client_certificate: match self.client_identity.is_some() {
                true => "otlp.client_certificate",
                false => canary_exporters::CLIENT_CERTIFICATE,
            },
            client_key: match self.client_identity.is_some() {
                true => "otlp.client_key",
                false => canary_exporters::CLIENT_KEY,
            },
        };
        if c.is_enabled() {
            c.check_tls_files(&from).map_err(|e| e.to_string())?;
        }
        Ok(c)
    }
}

/// Validates `[otlp]`: endpoints are `http://` URLs, header names are valid and each value
/// comes from exactly one place, durations are above zero.
pub(super) fn validate(o: raw::Otlp, src: &Source) -> Result<Otlp, ConfigError> {
    let err = |at, message| src.err(at, message);
    let rel = |p| src.rel(p);
    let url = |key: &str, v: Option<toml::Spanned<String>>| -> Result<_, ConfigError> {
        let Some(v) = v else { return Ok(None) };
        // The base endpoint as a base (a signal's path is added to it), the others as is.
        let probe = match key {
            "endpoint" => canary_exporters::Config {
                endpoint: Some(v.get_ref().clone()),
                ..Default::default()
            },
            _ => canary_exporters::Config {
                traces_endpoint: Some(v.get_ref().clone()),
                ..Default::default()
            },
        };
        match probe.signal_url(canary_exporters::Signal::Traces) {
            Ok(_) => Ok(Some(v.into_inner())),
            Err(canary_exporters::ConfigError::Endpoint { reason, shown, .. }) => Err(err(
                Some(v.span().start),
                format!("otlp.{key}: {reason} (got {shown})"),
            )),
            Err(e) => Err(err(Some(v.span().start), format!("otlp.{key}: {e}"))),
        }
    };
    // At the key's own line (the table's header was said, far from the key).
    let positive = |key: &str, d: Option<toml::Spanned<raw::Period>>| match d {
        Some(d) if d.get_ref().0.is_zero() => Err(err(
            Some(d.span().start),
            format!("otlp.{key}: must be above zero"),
        )),
        d => Ok(d.map(|d| d.into_inner().0)),
    };
    let mut headers = Vec::new();
    let mut seen: std::collections::HashMap<String, (String, usize)> = Default::default();
    for (name, v) in o.headers {
        let at = Some(v.span().start);
        if let Some(why) = super::validate::invalid_header_name(&name) {
            return Err(err(at, format!("otlp.headers: {why}")));
        }
        // One header whatever the case of its name: only one of two would be sent.
        if let Some((first, first_line)) = seen.get(&name.to_ascii_lowercase()) {
            return Err(err(
                at,
                format!(
                    "otlp.headers.{name}: given twice (as {first} on line {first_line}); header \
                     names are the same whatever their case"
                ),
            ));
        }
        seen.insert(
            name.to_ascii_lowercase(),
            (name.clone(), super::line_of(src.text, v.span().start)),
        );
        let value = match v.into_inner() {
            // The exporter would drop it without a word, and export run without it.
            raw::HeaderValue::Plain(s) if !canary_exporters::valid_header_value(&s) => {
                return Err(err(
                    at,
                    format!("otlp.headers.{name}: the value {NOT_A_HEADER_VALUE}"),
                ));
            }
            raw::HeaderValue::Plain(s) => OtlpHeader::Plain(s),
            raw::HeaderValue::From(src) => {
                let prefix = src.prefix.unwrap_or_default();
                // The prefix is the file's: checked here, with a stand-in for the secret, where
                // it used to pass and then blame the variable, turning export off at start.
                if !canary_exporters::valid_header_value(&format!("{prefix}x")) {
                    return Err(err(
                        at,
                        format!("otlp.headers.{name}.prefix: {NOT_A_HEADER_VALUE}"),
                    ));
                }
                match (src.env, src.file) {
                    // A value pasted where its variable's name is due: refused unquoted.
                    (Some(var), None) if !canary_replay::is_variable_name(&var) => {
                        return Err(err(
                            at,
                            format!(
                                "otlp.headers.{name}.env: {}",
                                canary_replay::NOT_A_VARIABLE_NAME
                            ),
                        ))
                    }
                    (Some(var), None) => OtlpHeader::Env(var, prefix),
                    (None, Some(f)) => OtlpHeader::File(rel(f), prefix),
                    _ => {
                        return Err(err(
                            at,
                            format!("otlp.headers.{name}: expected exactly one of env = \"VAR\" or file = \"PATH\""),
                        ))
                    }
                }
            }
        };
        headers.push((name.to_ascii_lowercase(), value));
    }
    Ok(Otlp {
        endpoint: url("endpoint", o.endpoint)?,
        traces_endpoint: url("traces_endpoint", o.traces_endpoint)?,
        metrics_endpoint: url("metrics_endpoint", o.metrics_endpoint)?,
        logs_endpoint: url("logs_endpoint", o.logs_endpoint)?,
        headers,
        timeout: positive("timeout", o.timeout)?,
        sample_ratio: o.sample_ratio.map(|r| r.0),
        metrics_interval: positive("metrics_interval", o.metrics_interval)?,
        // Zero would drop the last batch: refused like the other durations.
        flush_timeout: positive("flush_timeout", o.flush_timeout)?
            .unwrap_or(canary_exporters::Config::FLUSH_TIMEOUT),
        certificate: match o.certificate {
            None => None,
            // Loaded now, as the exporter would load it: a bad one is a config error, where
            // the daemon used to start with export off.
            Some(c) => {
                let at = Some(c.span().start);
                let path = rel(c.into_inner());
                canary_tls::check_bundle(&path)
                    .map_err(|e| err(at, format!("otlp.certificate: {e}")))?;
                Some(path)
            }
        },
        client_identity: super::validate::client_identity(
            "otlp",
            ("client_certificate", o.client_certificate),
            ("client_key", o.client_key),
            src,
        )?,
    })
}

/// Why a header value is refused; the value itself is never shown (it is usually a key).
const NOT_A_HEADER_VALUE: &str =
    "is not a valid HTTP header value (visible ASCII, spaces and tabs only; not shown here)";

/// A header's secret from its file: a small regular file of UTF-8 (not a FIFO, not a device).
fn read_secret(path: &std::path::Path) -> std::io::Result<String> {
    let bytes = canary_files::read_small_file(path, canary_replay::MAX_KEY_FILE_BYTES)?;
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"))
}
