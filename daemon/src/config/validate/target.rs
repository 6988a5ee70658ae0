//! `[targets.NAME]`: the URL (no user info), where the key is, headers, `/metrics`, and
//! what one response may hold.

use super::Source;
use crate::config::{raw, redact_url, refuse_user_info, ApiKeySource, ConfigError, Target};
use canary_replay::{Endpoint, HeaderError};
use http::header::{HeaderName, HeaderValue};

/// One target, checked now so a bad URL is a config error, not a failed run every 15 minutes.
pub(super) fn target(
    name: String,
    at: Option<usize>,
    t: raw::Target,
    src: &Source,
    warnings: &mut Vec<String>,
) -> Result<Target, ConfigError> {
    let err = |at, message| src.err(at, message);
    // The name goes into log fields, the status API, check-config's lines and OTLP labels;
    // the model into every request: neither may be empty or break a line.
    if name.is_empty() || name.len() > MAX_NAME_BYTES || name.chars().any(char::is_control) {
        return Err(err(
            at,
            format!(
                "targets.{}: a target name is 1 to {MAX_NAME_BYTES} bytes without control \
                 characters",
                canary_core::printable(canary_core::prefix_within(&name, MAX_NAME_BYTES))
            ),
        ));
    }
    let model_at = Some(t.model.span().start);
    let model = t.model.into_inner();
    if model.trim().is_empty() || model.chars().any(char::is_control) {
        return Err(err(
            model_at,
            format!(
                "targets.{name}.model: {}; expected the model name the server serves, without \
                 control characters",
                match model.trim().is_empty() {
                    true => "empty",
                    false => "holds a control character",
                }
            ),
        ));
    }
    let api_key_set = t.api_key_env.is_some() || t.api_key_file.is_some();
    let api_key = api_key(&name, t.api_key_env, t.api_key_file, src)?;
    let endpoint = match t.endpoint {
        Some(raw::EndpointName::Completions) => Endpoint::Completions,
        _ => Endpoint::Chat,
    };
    // The URL is shown without user info or query: either may hold a secret.
    let url_at = Some(t.url.span().start);
    let mut urls = t.url.into_inner().0.into_iter();
    let url = urls.next().expect("a non-empty list");
    // More URLs of the same service (`url = [..]`), checked as the first is.
    let replica_urls: Vec<String> = urls.collect();
    for (i, u) in replica_urls.iter().enumerate() {
        let key = format!("targets.{name}.url[{}]", i + 1);
        if *u == url || replica_urls[..i].contains(u) {
            // One replica listed twice gets twice the share of requests, without a word.
            return Err(err(
                url_at,
                format!("{key}: listed before; give each replica once"),
            ));
        }
        canary_replay::Target::new(u, endpoint, &model).map_err(|e| {
            err(
                url_at,
                format!("{key}: {} (got {})", e.reason, redact_url(u)),
            )
        })?;
        no_user_info(u).map_err(|m| err(url_at, format!("{key}: {m}")))?;
    }
    let url_strategy = match t.url_strategy {
        None => canary_replay::Balance::default(),
        Some(s) => {
            let strategy: canary_replay::Balance = s.get_ref().parse().map_err(|e| {
                err(
                    Some(s.span().start),
                    format!("targets.{name}.url_strategy: {e}"),
                )
            })?;
            // It chooses among replicas: with one URL every request goes there, whatever it
            // says (a list meant and not written, or a strategy left from one).
            if replica_urls.is_empty() {
                warnings.push(src.warning(
                    Some(s.span().start),
                    format!(
                        "targets.{name}.url_strategy: {:?} has no effect with one url (every \
                         request goes to it); list the replicas (url = [\"http://a:8000\", \
                         \"http://b:8000\"]) or remove it",
                        strategy.name()
                    ),
                ));
            }
            strategy
        }
    };
    let probe = canary_replay::Target::new(&url, endpoint, &model).map_err(|e| {
        err(
            url_at,
            format!(
                "targets.{name}.url: {} (got {})",
                e.reason,
                redact_url(&url)
            ),
        )
    })?;
    no_user_info(&url).map_err(|m| err(url_at, format!("targets.{name}.url: {m}")))?;
    let metrics_url = match t.metrics_url {
        Some(u) if u.get_ref().is_empty() => None,
        Some(u) => {
            let at = Some(u.span().start);
            let u = u.into_inner();
            scrape_url(&u).map_err(|m| err(at, format!("targets.{name}.metrics_url: {m}")))?;
            Some(u)
        }
        None => Some(probe.metrics_url()),
    };
    let headers = headers(&name, t.headers, api_key_set, src)?;
    let d = canary_replay::ResponseLimits::default();
    let limits = canary_replay::ResponseLimits {
        header_bytes: t.max_header_bytes.map_or(d.header_bytes, |b| b.0),
        event_bytes: t.max_event_bytes.map_or(d.event_bytes, |b| b.0),
        body_bytes: t.max_body_bytes.map_or(d.body_bytes, |b| b.0),
        output_ratio: t.max_output_ratio.map_or(d.output_ratio, |r| r.0),
        held_bytes: t.max_held_bytes.map_or(d.held_bytes, |b| b.0),
    };
    limits.validate().map_err(|e| {
        let key = e.setting.name();
        err(url_at, format!("targets.{name}.{key}: {}", e.reason))
    })?;
    let ca_bundle = ca_bundle(&name, t.ca_bundle, src)?;
    let client_identity = client_identity(
        &format!("targets.{name}"),
        ("client_cert", t.client_cert),
        ("client_key", t.client_key),
        src,
    )?;
    Ok(Target {
        name,
        url,
        replica_urls,
        url_strategy,
        model,
        endpoint,
        api_key,
        headers,
        metrics_url,
        server_pid: t.server_pid,
        request_timeout: t
            .request_timeout
            .map_or(canary_replay::DEFAULT_REQUEST_TIMEOUT, |d| d.0),
        ca_bundle,
        client_identity,
        allow_concurrent_runs: t.allow_concurrent_runs.unwrap_or(false),
        limits,
        kernel_timestamps: t.kernel_timestamps.unwrap_or(true),
    })
}

/// The CA bundle, loaded now as a run would load it: a missing file, a key where the
/// certificate belongs, or no usable certificate is a config error naming the key and line,
/// not a failed run every cycle.
fn ca_bundle(
    name: &str,
    bundle: Option<toml::Spanned<std::path::PathBuf>>,
    src: &Source,
) -> Result<Option<std::path::PathBuf>, ConfigError> {
    let Some(b) = bundle else { return Ok(None) };
    let at = Some(b.span().start);
    let path = src.rel(b.into_inner());
    canary_tls::check_bundle(&path)
        .map_err(|e| src.err(at, format!("targets.{name}.ca_bundle: {e}")))?;
    Ok(Some(path))
}

/// A client certificate and its key (`table.cert_key`, `table.key_key`), loaded now as a run
/// would load them: one without the other, a missing file, a key that is not the
/// certificate's is a config error naming the key and line. The key file's contents are never
/// quoted.
pub(in crate::config) fn client_identity(
    table: &str,
    (cert_key, cert): (&str, Option<toml::Spanned<std::path::PathBuf>>),
    (key_key, key): (&str, Option<toml::Spanned<std::path::PathBuf>>),
    src: &Source,
) -> Result<Option<canary_replay::ClientIdentity>, ConfigError> {
    use canary_tls::TlsError;
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(c), None) => {
            return Err(src.err(
                Some(c.span().start),
                format!("{table}.{cert_key}: set without {key_key}: a client certificate needs its key (set both, or neither)"),
            ))
        }
        (None, Some(k)) => {
            return Err(src.err(
                Some(k.span().start),
                format!("{table}.{key_key}: set without {cert_key}: a client key needs its certificate (set both, or neither)"),
            ))
        }
        (Some(c), Some(k)) => (c, k),
    };
    let (cert_at, key_at) = (Some(cert.span().start), Some(key.span().start));
    let identity = canary_replay::ClientIdentity {
        cert: src.rel(cert.into_inner()),
        key: src.rel(key.into_inner()),
    };
    canary_tls::check_identity(&identity).map_err(|e| match e {
        TlsError::ClientCert { .. } => src.err(cert_at, format!("{table}.{cert_key}: {e}")),
        _ => src.err(key_at, format!("{table}.{key_key}: {e}")),
    })?;
    Ok(Some(identity))
}

/// Where the key is: a variable or a file, never both (the key itself is read per run).
fn api_key(
    name: &str,
    env: Option<toml::Spanned<String>>,
    file: Option<toml::Spanned<std::path::PathBuf>>,
    src: &Source,
) -> Result<Option<ApiKeySource>, ConfigError> {
    Ok(match (env, file) {
        (Some(_), Some(f)) => {
            return Err(src.err(
                Some(f.span().start),
                format!("targets.{name}: set api_key_env or api_key_file, not both"),
            ))
        }
        (Some(v), None) if v.get_ref().trim().is_empty() => {
            return Err(src.err(
                Some(v.span().start),
                format!("targets.{name}.api_key_env: expected a variable name"),
            ))
        }
        // A key pasted where its variable's name is due would be quoted by every message
        // about that variable (logs, verdicts, history): refused without a word of it.
        (Some(v), None) if !canary_replay::is_variable_name(v.get_ref().trim()) => {
            return Err(src.err(
                Some(v.span().start),
                format!(
                    "targets.{name}.api_key_env: {}",
                    canary_replay::NOT_A_VARIABLE_NAME
                ),
            ))
        }
        (Some(v), None) => Some(ApiKeySource::Env(v.get_ref().trim().to_string())),
        (None, Some(f)) => Some(ApiKeySource::File(src.rel(f.into_inner()))),
        (None, None) => None,
    })
}

/// Extra request headers. Errors name the header, never its value: it may be a key.
fn headers(
    name: &str,
    raw: std::collections::BTreeMap<String, toml::Spanned<raw::HeaderText>>,
    api_key_set: bool,
    src: &Source,
) -> Result<Vec<(HeaderName, HeaderValue)>, ConfigError> {
    let mut headers: Vec<(HeaderName, HeaderValue)> = Vec::new();
    let mut seen: std::collections::HashMap<String, (String, usize)> = Default::default();
    for (key, value) in raw {
        let at = Some(value.span().start);
        // Header names are compared without case: `X-Tenant` and `x-tenant` are one header,
        // and only one of them would be sent.
        if let Some((first, first_line)) = seen.get(&key.to_ascii_lowercase()) {
            return Err(src.err(
                at,
                format!(
                    "targets.{name}.headers.{key}: given twice (as {first} on line \
                     {first_line}); header names are the same whatever their case"
                ),
            ));
        }
        seen.insert(
            key.to_ascii_lowercase(),
            (
                key.clone(),
                crate::config::line_of(src.text, value.span().start),
            ),
        );
        if api_key_set && key.eq_ignore_ascii_case("authorization") {
            // It would replace the key's `Authorization: Bearer …`: the key named would never
            // be sent, without a word.
            return Err(src.err(
                at,
                format!(
                    "targets.{name}.headers.{key}: the api key (api_key_env or api_key_file) \
                     is sent as the Authorization header; give one of them, not both"
                ),
            ));
        }
        let header = canary_replay::header(&key, &value.get_ref().0).map_err(|e| {
            let why = match e {
                HeaderError::InvalidName => {
                    let why = super::invalid_header_name(&key)
                        .unwrap_or_else(|| "not a valid HTTP header name".into());
                    return src.err(at, format!("targets.{name}.headers: {why}"));
                }
                HeaderError::Reserved { why, .. } => format!("set by canaryd itself: {why}"),
                HeaderError::InvalidValue { .. } => "the value is not a valid HTTP header \
                     value (visible ASCII, spaces and tabs only; not shown here)"
                    .to_string(),
            };
            src.err(at, format!("targets.{name}.headers.{key}: {why}"))
        })?;
        headers.push(header);
    }
    Ok(headers)
}

/// The longest target name (bytes), as a workload's.
const MAX_NAME_BYTES: usize = 100;

/// Refuses `user:password@` in a URL: neither the replay nor the scrapers send it, so it
/// would only be a secret sitting in the config, quoted by whatever shows the URL.
fn no_user_info(url: &str) -> Result<(), String> {
    refuse_user_info(url, "api_key_env, api_key_file or headers")
}

/// Checks a Prometheus endpoint the scrapers can use: `http(s)://host[:port][/path]`. Shown
/// redacted on error.
pub(in crate::config) fn scrape_url(url: &str) -> Result<(), String> {
    let shown = || redact_url(url);
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return Err(format!(
            "expected an http:// or https:// URL (got {})",
            shown()
        ));
    };
    no_user_info(url)?;
    let uri: Result<http::Uri, _> = url.parse();
    match uri {
        Ok(u) if u.host().is_some_and(|h| !h.is_empty()) => canary_replay::uri_port(&u, 80)
            .map(|_| ())
            .map_err(|m| format!("{m} (got {})", shown())),
        _ if rest.is_empty() || rest.starts_with('/') => Err(format!("no host (got {})", shown())),
        _ => Err(format!("not a valid URL (got {})", shown())),
    }
}
