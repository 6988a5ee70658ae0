//! Where and how to export: the standard `OTEL_EXPORTER_OTLP_*` variables, which flags or a
//! config file override field by field.
//!
//! Headers often carry credentials (`Authorization`, `x-api-key`), so [`Config`]'s `Debug`
//! shows header names only, errors never quote a header value, and endpoints are shown
//! without user info or query.

use canary_core::percent_decode;
use canary_core::Secrets;
use std::path::PathBuf;
use std::time::Duration;

/// Settings of an [`OtlpExporter`](crate::OtlpExporter).
#[derive(Clone)]
pub struct Config {
    /// Base URL; `/v1/traces`, `/v1/metrics` and `/v1/logs` are appended
    /// (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub endpoint: Option<String>,
    /// Full traces URL, used as is (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`).
    pub traces_endpoint: Option<String>,
    /// Full metrics URL, used as is (`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`).
    pub metrics_endpoint: Option<String>,
    /// Full logs URL, used as is (`OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`).
    pub logs_endpoint: Option<String>,
    /// Headers sent with every export (`OTEL_EXPORTER_OTLP_HEADERS`). May hold secrets.
    pub headers: Vec<(String, String)>,
    /// Per-export timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`, ms; default 10 s).
    pub timeout: Duration,
    /// PEM CA bundle trusted for https endpoints besides the system store
    /// (`OTEL_EXPORTER_OTLP_CERTIFICATE`).
    pub certificate: Option<PathBuf>,
    /// The client certificate and key presented to an endpoint that asks for one (mutual
    /// TLS; `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE` with `OTEL_EXPORTER_OTLP_CLIENT_KEY`).
    pub client_identity: Option<canary_tls::ClientIdentity>,
    /// How often metrics are pushed (`OTEL_METRIC_EXPORT_INTERVAL`, ms; default 10 s).
    pub metrics_interval: Duration,
    /// Fraction of requests whose span is exported, decided on the trace id (0..=1;
    /// `OTEL_TRACES_SAMPLER=traceidratio` with `OTEL_TRACES_SAMPLER_ARG`).
    pub sample_ratio: f64,
    /// `service.name` (`OTEL_SERVICE_NAME`, default `canaryd`).
    pub service_name: String,
    /// Extra resource attributes (`OTEL_RESOURCE_ATTRIBUTES` is read by the SDK as well).
    pub resource: Vec<(String, String)>,
    /// Spans waiting for export at most; more are dropped and counted.
    pub max_queued_spans: usize,
}

impl Config {
    /// How long the final flush after a run (or at the daemon's stop) may take unless told
    /// otherwise (`--otlp-flush-timeout`, `[otlp] flush_timeout`).
    pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);
}

impl Default for Config {
    fn default() -> Self {
        Config {
            endpoint: None,
            traces_endpoint: None,
            metrics_endpoint: None,
            logs_endpoint: None,
            headers: Vec::new(),
            timeout: Duration::from_secs(10),
            certificate: None,
            client_identity: None,
            metrics_interval: Duration::from_secs(10),
            sample_ratio: 1.0,
            service_name: "canaryd".into(),
            resource: Vec::new(),
            max_queued_spans: 4096,
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("Config")
            .field("endpoint", &self.endpoint.as_deref().map(redact_url))
            .field(
                "traces_endpoint",
                &self.traces_endpoint.as_deref().map(redact_url),
            )
            .field(
                "metrics_endpoint",
                &self.metrics_endpoint.as_deref().map(redact_url),
            )
            .field(
                "logs_endpoint",
                &self.logs_endpoint.as_deref().map(redact_url),
            )
            .field("header_names", &names)
            .field("timeout", &self.timeout)
            .field("certificate", &self.certificate)
            .field("client_identity", &self.client_identity)
            .field("metrics_interval", &self.metrics_interval)
            .field("sample_ratio", &self.sample_ratio)
            .field("service_name", &self.service_name)
            .field("resource", &self.resource)
            .finish()
    }
}

/// A setting that cannot be used. Never quotes a header value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An endpoint is not an `http(s)://host[:port][/path]` URL.
    #[error("{source_name}: {reason} (got {shown})")]
    Endpoint {
        /// Which flag or variable.
        source_name: String,
        /// What is wrong.
        reason: String,
        /// The URL without user info or query.
        shown: String,
    },
    /// A header entry is not `name=value`, or the name is not a valid header name.
    #[error("{source_name}: entry {index} is not name=value with a valid header name")]
    Header {
        /// Which flag or variable.
        source_name: String,
        /// 1-based position of the entry.
        index: usize,
    },
    /// A header's value is one the exporter would drop (a control character): export would
    /// run without it. The value is never shown: it is usually a credential.
    #[error(
        "{source_name}: {name}: the value is not a valid HTTP header value (visible ASCII, \
         spaces and tabs only; not shown here)"
    )]
    HeaderValue {
        /// Which flag or variable.
        source_name: String,
        /// The header's name.
        name: String,
    },
    /// A number could not be read.
    #[error("{source_name}: {reason}")]
    Value {
        /// Which flag or variable.
        source_name: String,
        /// What is wrong.
        reason: String,
    },
    /// A protocol other than OTLP/HTTP protobuf was asked for.
    #[error("{source_name}: protocol {protocol:?} is not built in; use http/protobuf")]
    Protocol {
        /// Which flag or variable.
        source_name: String,
        /// The protocol asked for.
        protocol: String,
    },
}

/// The variable naming the client certificate (PEM chain), as OpenTelemetry's spec names it.
pub const CLIENT_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE";
/// The variable naming its private key (PEM).
pub const CLIENT_KEY: &str = "OTEL_EXPORTER_OTLP_CLIENT_KEY";

/// The variable naming the CA bundle (PEM) trusted for an https endpoint.
pub const CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CERTIFICATE";

/// The settings that gave a [`Config`]'s TLS files, to name them in errors: a flag
/// (`--otlp-certificate`), a config key (`otlp.certificate`) or a variable.
#[derive(Debug, Clone, Copy)]
pub struct TlsSources<'a> {
    /// Where [`Config::certificate`] came from.
    pub certificate: &'a str,
    /// Where the client identity's certificate came from.
    pub client_certificate: &'a str,
    /// Where its key came from.
    pub client_key: &'a str,
}

impl TlsSources<'static> {
    /// All three from OpenTelemetry's variables.
    pub const ENV: TlsSources<'static> = TlsSources {
        certificate: CERTIFICATE,
        client_certificate: CLIENT_CERTIFICATE,
        client_key: CLIENT_KEY,
    };
}

/// The client identity the two variables name: both or neither.
fn client_identity(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<canary_tls::ClientIdentity>, ConfigError> {
    let alone = |set: &str, missing: &str| ConfigError::Value {
        source_name: set.into(),
        reason: format!(
            "set without {missing}: a client certificate needs its key (set both, or neither)"
        ),
    };
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(canary_tls::ClientIdentity { cert, key })),
        (Some(_), None) => Err(alone(CLIENT_CERTIFICATE, CLIENT_KEY)),
        (None, Some(_)) => Err(alone(CLIENT_KEY, CLIENT_CERTIFICATE)),
        (None, None) => Ok(None),
    }
}

/// The signals, in the order their endpoints are resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Signal {
    /// Spans.
    Traces,
    /// Metric points.
    Metrics,
    /// Log events.
    Logs,
}

impl Signal {
    /// `traces`, `metrics` or `logs`.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
            Signal::Logs => "logs",
        }
    }
}

impl Config {
    /// Defaults overlaid with the standard `OTEL_*` environment variables.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_vars(Config::env_var)
    }

    /// A variable of the environment as [`Config::from_env`] reads it: unset when blank.
    pub fn env_var(name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.trim().is_empty())
    }

    /// Like [`Config::from_vars`], not reading the variables in `overridden`: settings a flag
    /// or the daemon's `[otlp]` gives instead, so a bad inherited value of one is no error.
    pub fn from_vars_except(
        var: impl Fn(&str) -> Option<String>,
        overridden: &[&str],
    ) -> Result<Config, ConfigError> {
        Config::from_vars(|k| match overridden.contains(&k) {
            true => None,
            false => var(k),
        })
    }

    /// Like [`Config::from_env`], reading variables through `var` (tests pass a map).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut c = Config {
            endpoint: var("OTEL_EXPORTER_OTLP_ENDPOINT"),
            traces_endpoint: var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            metrics_endpoint: var("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
            logs_endpoint: var("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"),
            ..Config::default()
        };
        if let Some(h) = var("OTEL_EXPORTER_OTLP_HEADERS") {
            c.headers = parse_headers("OTEL_EXPORTER_OTLP_HEADERS", &h)?;
        }
        if let Some(t) = var("OTEL_EXPORTER_OTLP_TIMEOUT") {
            c.timeout = millis("OTEL_EXPORTER_OTLP_TIMEOUT", &t)?;
        }
        c.certificate = var(CERTIFICATE).map(PathBuf::from);
        c.client_identity = client_identity(
            var(CLIENT_CERTIFICATE).map(PathBuf::from),
            var(CLIENT_KEY).map(PathBuf::from),
        )?;
        if let Some(t) = var("OTEL_METRIC_EXPORT_INTERVAL") {
            c.metrics_interval = millis("OTEL_METRIC_EXPORT_INTERVAL", &t)?;
        }
        for name in [
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
            "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
        ] {
            if let Some(p) = var(name) {
                if p.trim() != "http/protobuf" {
                    return Err(ConfigError::Protocol {
                        source_name: name.into(),
                        protocol: p,
                    });
                }
            }
        }
        if let Some(s) = var("OTEL_SERVICE_NAME") {
            c.service_name = s;
        }
        let sampler = var("OTEL_TRACES_SAMPLER").unwrap_or_default();
        match sampler.as_str() {
            "always_off" | "parentbased_always_off" => c.sample_ratio = 0.0,
            "traceidratio" | "parentbased_traceidratio" => {
                if let Some(arg) = var("OTEL_TRACES_SAMPLER_ARG") {
                    c.sample_ratio = ratio("OTEL_TRACES_SAMPLER_ARG", &arg)?;
                }
            }
            _ => {}
        }
        Ok(c)
    }

    /// The URL a signal goes to, if any: its own endpoint, else the base endpoint plus
    /// `/v1/<signal>`.
    pub fn signal_url(&self, signal: Signal) -> Result<Option<String>, ConfigError> {
        let own = match signal {
            Signal::Traces => &self.traces_endpoint,
            Signal::Metrics => &self.metrics_endpoint,
            Signal::Logs => &self.logs_endpoint,
        };
        let (name, url) = match (own, &self.endpoint) {
            (Some(u), _) => (format!("{} endpoint", signal.as_str()), u.clone()),
            (None, Some(base)) => {
                validate_url("OTLP endpoint", base)?;
                if base.contains(['?', '#']) {
                    // The signal's path would follow the query: `…?t=x/v1/traces`.
                    return Err(ConfigError::Endpoint {
                        source_name: "OTLP endpoint".into(),
                        reason: "a base endpoint takes no query or fragment (each signal's \
                                 path is added to it): give each signal's endpoint instead"
                            .into(),
                        shown: redact_url(base),
                    });
                }
                (
                    "OTLP endpoint".to_string(),
                    format!("{}/v1/{}", base.trim_end_matches('/'), signal.as_str()),
                )
            }
            (None, None) => return Ok(None),
        };
        validate_url(&name, &url)?;
        Ok(Some(url))
    }

    /// True when a signal goes to an `https://` URL: only then are the TLS files read.
    pub fn uses_https(&self) -> bool {
        [Signal::Traces, Signal::Metrics, Signal::Logs]
            .into_iter()
            .any(|s| matches!(self.signal_url(s), Ok(Some(u)) if u.starts_with("https://")))
    }

    /// Loads the CA bundle and the client identity as the exporter will (the replay's
    /// loader, `canary_tls`), so that a missing, unreadable or broken file, or a key that is
    /// not the certificate's, is an error when canaryd starts, naming the setting `from`
    /// gives and the file, where it used to surface as a failed export. A file an `OTEL_*`
    /// variable names is read only for an `https://` endpoint, as the exporter reads it: an
    /// inherited variable does not stop a plain-http export. A key's contents are never
    /// shown.
    pub fn check_tls_files(&self, from: &TlsSources<'_>) -> Result<(), ConfigError> {
        let https = self.uses_https();
        let read = |name: &str| https || !name.starts_with("OTEL_");
        let value = |name: &str, path: &std::path::Path, reason: String| ConfigError::Value {
            // `--otlp-certificate F`, `otlp.certificate F`, `OTEL_EXPORTER_OTLP_CERTIFICATE=F`.
            source_name: match name.starts_with("OTEL_") {
                true => format!("{name}={}", path.display()),
                false => format!("{name} {}", path.display()),
            },
            reason,
        };
        if let Some(path) = self
            .certificate
            .as_deref()
            .filter(|_| read(from.certificate))
        {
            canary_tls::check_bundle(path).map_err(|e| match e {
                canary_tls::TlsError::CaBundle { reason, .. } => {
                    value(from.certificate, path, reason)
                }
                other => value(from.certificate, path, other.to_string()),
            })?;
        }
        if let Some(id) = self
            .client_identity
            .as_ref()
            .filter(|_| read(from.client_certificate))
        {
            // The loader's hints name the target's settings ("the key goes in the key file:
            // --client-key or client_key"): here they are the exporter's.
            let ours = |reason: String| {
                reason
                    .replace("--client-key or client_key", from.client_key)
                    .replace("--client-cert or client_cert", from.client_certificate)
            };
            canary_tls::check_identity(id).map_err(|e| match e {
                canary_tls::TlsError::ClientCert { path, reason } => {
                    value(from.client_certificate, &path, ours(reason))
                }
                canary_tls::TlsError::ClientKey { path, reason } => {
                    value(from.client_key, &path, ours(reason))
                }
                other => ConfigError::Value {
                    source_name: format!("{} and {}", from.client_certificate, from.client_key),
                    reason: other.to_string(),
                },
            })?;
        }
        Ok(())
    }

    /// True when at least one signal has somewhere to go.
    pub fn is_enabled(&self) -> bool {
        self.endpoint.is_some()
            || self.traces_endpoint.is_some()
            || self.metrics_endpoint.is_some()
            || self.logs_endpoint.is_some()
    }

    /// Header values as a map, for the exporters.
    pub(crate) fn header_map(&self) -> std::collections::HashMap<String, String> {
        self.headers.iter().cloned().collect()
    }

    /// Replaces every header value and configured URL in `text` by a redacted form, so an
    /// error message from a transport, or a collector's own text, can be logged safely.
    /// A collector quoting a credential back ("invalid token T") quotes its own cut of it, in
    /// its own spelling: each value is scrubbed in every cut and form [`Secrets`] takes of it.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut secrets = Secrets::default();
        // A credential's words are each a secret here; a header that is none (a tenant's
        // `x-scope-orgid`) is no secret, and its words stay in canaryd's and the collector's
        // text (`/v1/logs` for `tenant logs`, TLS audit M1).
        for (name, value) in &self.headers {
            secrets.add_header(name, value.as_bytes(), canary_core::Words::All);
        }
        let mut out = secrets.clean(text).into_owned();
        for url in [
            &self.endpoint,
            &self.traces_endpoint,
            &self.metrics_endpoint,
            &self.logs_endpoint,
        ]
        .into_iter()
        .flatten()
        {
            let shown = redact_url(url);
            if shown != *url {
                out = out.replace(url.as_str(), &shown);
            }
        }
        out
    }
}

/// Parses `k=v,k2=v2` (the `OTEL_EXPORTER_OTLP_HEADERS` syntax; values may be
/// percent-encoded) or a single `k=v` from a flag.
pub fn parse_headers(source_name: &str, text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out = Vec::new();
    for (i, entry) in text.split(',').enumerate() {
        if entry.trim().is_empty() {
            continue;
        }
        let bad = || ConfigError::Header {
            source_name: source_name.into(),
            index: i + 1,
        };
        let (k, v) = entry.split_once('=').ok_or_else(bad)?;
        let k = k.trim();
        let valid_name = !k.is_empty()
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !valid_name {
            return Err(bad());
        }
        let (name, value) = (k.to_ascii_lowercase(), percent_decode(v.trim()));
        if !valid_header_value(&value) {
            return Err(ConfigError::HeaderValue {
                source_name: source_name.into(),
                name,
            });
        }
        out.push((name, value));
    }
    Ok(out)
}

/// Whether the exporter sends `value` as a header value: the HTTP client it uses drops one
/// it cannot parse (a control character, `%0A` decoded) without a word.
pub fn valid_header_value(value: &str) -> bool {
    http::HeaderValue::from_str(value).is_ok()
}

/// A positive number of milliseconds: 0 would time every export out at once, or (for the
/// interval) be replaced by the SDK's 60 s without a word.
fn millis(source_name: &str, text: &str) -> Result<Duration, ConfigError> {
    match text.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(ConfigError::Value {
            source_name: source_name.into(),
            reason: format!("expected a positive number of milliseconds, got {text:?}"),
        }),
    }
}

/// A sampling ratio in `0..=1`.
pub fn ratio(source_name: &str, text: &str) -> Result<f64, ConfigError> {
    match text.trim().parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(ConfigError::Value {
            source_name: source_name.into(),
            reason: format!("expected a ratio between 0 and 1, got {text:?}"),
        }),
    }
}

/// `url` for messages: see [`canary_core::redact_url`].
pub use canary_core::redact_url;

fn validate_url(source_name: &str, url: &str) -> Result<(), ConfigError> {
    let err = |reason: &str| ConfigError::Endpoint {
        source_name: source_name.into(),
        reason: reason.into(),
        shown: redact_url(url),
    };
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return Err(err("expected an http:// or https:// URL"));
    };
    // Any `@`: a password may hold `/`, `?` or `#`, so where the authority ends is not known.
    // The HTTP client's own logs (hyper's pool, at debug) quote a URL's user info.
    if rest.contains('@') {
        return Err(err(
            "user info (user:password@) is not taken: remove it and give credentials as a \
             header (--otlp-header, OTEL_EXPORTER_OTLP_HEADERS, [otlp.headers])",
        ));
    }
    if rest.split(['/', '?', '#']).next().unwrap_or("").is_empty() {
        return Err(err("no host"));
    }
    Ok(())
}

/// Whether `OTEL_RESOURCE_ATTRIBUTES`-style `k=v,k2=v2` text gives `key` a value.
pub(crate) fn resource_has(text: &str, key: &str) -> bool {
    text.split(',')
        .filter_map(|kv| kv.split_once('='))
        .any(|(k, v)| k.trim() == key && !v.trim().is_empty())
}

/// The host name, for `host.name`.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::resource_has;

    #[test]
    fn a_host_name_in_the_resource_attributes_is_seen() {
        assert!(resource_has(
            "deployment.environment=prod, host.name=node-7",
            "host.name"
        ));
        assert!(!resource_has("host.name=,k=v", "host.name"));
        assert!(!resource_has("host.namespace=x", "host.name"));
    }

    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn standard_variables_resolve_per_signal() {
        let c = Config::from_vars(vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://vm:8428/opentelemetry/v1/metrics",
            ),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "Authorization=Bearer%20s3cret,x-org=a",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ]))
        .unwrap();
        assert_eq!(
            c.signal_url(Signal::Traces).unwrap().unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            c.signal_url(Signal::Metrics).unwrap().unwrap(),
            "http://vm:8428/opentelemetry/v1/metrics"
        );
        assert_eq!(
            c.headers,
            vec![
                ("authorization".to_string(), "Bearer s3cret".to_string()),
                ("x-org".to_string(), "a".to_string())
            ]
        );
        assert_eq!(c.timeout, Duration::from_millis(2500));
        assert_eq!(c.sample_ratio, 0.25);
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("authorization"), "{shown}");
    }

    #[test]
    fn bad_settings_are_clear_and_never_quote_header_values() {
        let e = Config::from_vars(vars(&[("OTEL_EXPORTER_OTLP_HEADERS", "a=1,s3cret")]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "OTEL_EXPORTER_OTLP_HEADERS: entry 2 is not name=value with a valid header name"
        );
        let e = Config::from_vars(vars(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"grpc\" is not built in"), "{e}");
        // 0 ms: the SDK would push every 60 s instead, or time every export out at once.
        for var in ["OTEL_METRIC_EXPORT_INTERVAL", "OTEL_EXPORTER_OTLP_TIMEOUT"] {
            let e = Config::from_vars(vars(&[(var, "0")]))
                .unwrap_err()
                .to_string();
            assert_eq!(
                e,
                format!("{var}: expected a positive number of milliseconds, got \"0\"")
            );
        }
        let c = Config {
            endpoint: Some("ftp://user:pw@h/x?token=1".into()),
            ..Config::default()
        };
        let e = c.signal_url(Signal::Logs).unwrap_err().to_string();
        assert!(e.contains("expected an http:// or https:// URL"), "{e}");
        assert!(!e.contains("pw") && !e.contains("token"), "{e}");
    }

    /// The exporter drops a header whose value `http` refuses, without a word: export then
    /// ran without `Authorization`. Refused here instead, naming the header, never the value.
    #[test]
    fn a_header_value_the_exporter_would_drop_is_refused_unquoted() {
        for text in [
            "authorization=Bearer OTLPSECRET\u{1}x",
            "authorization=Bearer%20OTLPSECRET%0Ax",
            "x-a=ok,authorization=OTLPSECRET%01",
            "authorization=OTLPSECRET\u{7f}",
        ] {
            let e = parse_headers("--otlp-header", text)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("--otlp-header: authorization: the value is not a valid HTTP"),
                "{e}"
            );
            assert!(!e.contains("SECRET"), "{e}");
            let e = Config::from_vars(vars(&[("OTEL_EXPORTER_OTLP_HEADERS", text)]))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("OTEL_EXPORTER_OTLP_HEADERS: authorization:"),
                "{e}"
            );
        }
        let ok = parse_headers("h", "authorization=Bearer%20tok\tx, x-b = caf\u{e9}").unwrap();
        assert_eq!(ok[0], ("authorization".into(), "Bearer tok\tx".into()));
    }

    // TLS audit M1: `--otlp-header 'x-scope-orgid=tenant logs'` made every word of it a
    // secret, and a failure's `path /v1/logs` read `path /v1/<redacted>`.
    #[test]
    fn a_header_that_is_no_credential_keeps_its_words_in_what_is_said() {
        let c = Config {
            headers: vec![
                ("x-scope-orgid".into(), "tenant logs".into()),
                ("authorization".into(), "Bearer ZQ5xOTLP-TOKEN".into()),
            ],
            ..Config::default()
        };
        let said = c.scrub(
            "export to http://127.0.0.1:4318/v1/logs failed: path /v1/logs of tenant logs: \
             bad token ZQ5xOTLP-TOKEN",
        );
        assert_eq!(
            said,
            "export to http://127.0.0.1:4318/v1/logs failed: path /v1/logs of tenant logs: \
             bad token <redacted>"
        );
    }

    #[test]
    fn a_credential_is_scrubbed_in_the_cuts_a_collector_quotes() {
        // `[otlp.headers]`' `{ env = "T", prefix = "Bearer " }` arrives as one value.
        let c = Config {
            headers: vec![
                ("authorization".into(), "Bearer tok/9 x".into()),
                ("x-org".into(), "ab".into()),
            ],
            ..Config::default()
        };
        let said = c.scrub("bad tok/9 x; tok%2F9; tok%2f9%20x; Bearer+tok%2F9+x; ab Bearer");
        assert_eq!(
            said,
            "bad <redacted>; <redacted>; <redacted>; <redacted>; ab Bearer"
        );
    }

    #[test]
    fn redacts_user_info_and_query() {
        assert_eq!(
            redact_url("http://u:p@h:4318/v1/traces?k=v"),
            "http://h:4318/v1/traces"
        );
        assert_eq!(redact_url("http://h:4318"), "http://h:4318");
        for url in [
            "http://u:ab/cd@h:9400/metrics",
            "http://u:ab?cd@h:9400/metrics",
            "http://u:ab#cd@h:9400/metrics",
        ] {
            assert_eq!(redact_url(url), "http://h:9400/metrics", "{url}");
        }
        assert_eq!(percent_decode("a%2Cb%"), "a,b%");
    }
}
