//! OTLP export of a `canaryd replay` (or `demo`) run: flags over the standard
//! `OTEL_EXPORTER_OTLP_*` variables, one exporter for the run, flushed with a deadline.

use crate::config::duration;
use anyhow::{Context, Result};
use canary_exporters::{Config, OtlpExporter, RunLabels};
use clap::Args;
use std::time::Duration;

/// Where the run's spans, metrics and run event go.
#[derive(Debug, Clone, Default, Args)]
pub struct ExportArgs {
    /// OTLP/HTTP base URL (`/v1/traces`, `/v1/metrics`, `/v1/logs` are appended); default
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`. Per-signal `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT`
    /// variables are honoured too. Nothing is exported when none is set.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Header sent with every export, `name=value` (repeatable; adds to
    /// `OTEL_EXPORTER_OTLP_HEADERS`). Values are never logged.
    #[arg(long = "otlp-header", value_name = "NAME=VALUE")]
    pub otlp_headers: Vec<String>,
    /// Per-export timeout (default `OTEL_EXPORTER_OTLP_TIMEOUT`, else 10 s; above zero).
    #[arg(long, value_name = "D", value_parser = duration::parse_positive)]
    pub otlp_timeout: Option<Duration>,
    /// Fraction of requests whose span is exported, decided on the trace id (default 1, or
    /// `OTEL_TRACES_SAMPLER_ARG` with `OTEL_TRACES_SAMPLER=traceidratio`).
    #[arg(long, value_name = "RATIO")]
    pub otlp_sample_ratio: Option<String>,
    /// How often metrics are pushed during the run (default 10 s; above zero).
    #[arg(long, value_name = "D", value_parser = duration::parse_positive)]
    pub otlp_metrics_interval: Option<Duration>,
    /// How long the final flush may take after the run (default 10s; above zero: zero
    /// would drop the last batch).
    #[arg(long, value_name = "D", value_parser = duration::parse_positive)]
    pub otlp_flush_timeout: Option<Duration>,
    /// CA bundle (PEM) trusted for an https endpoint besides the system's store: the
    /// collector's private CA (default `OTEL_EXPORTER_OTLP_CERTIFICATE`). Checked at start.
    #[arg(long, value_name = "FILE")]
    pub otlp_certificate: Option<std::path::PathBuf>,
    /// Client certificate (PEM chain) presented to an https endpoint that asks for one
    /// (mutual TLS; default `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`); needs
    /// --otlp-client-key.
    #[arg(
        long,
        visible_alias = "otlp-client-certificate",
        value_name = "FILE",
        requires = "otlp_client_key"
    )]
    pub otlp_client_cert: Option<std::path::PathBuf>,
    /// Its private key (PEM; default `OTEL_EXPORTER_OTLP_CLIENT_KEY`); needs
    /// --otlp-client-cert. Its contents are never shown.
    #[arg(long, value_name = "FILE", requires = "otlp_client_cert")]
    pub otlp_client_key: Option<std::path::PathBuf>,
    /// Workload name on every exported series and span (default: the trace file's stem).
    #[arg(long, value_name = "NAME")]
    pub workload: Option<String>,
}

impl ExportArgs {
    /// No flags: the standard `OTEL_*` variables alone decide (`canaryd demo`).
    pub fn from_env_only() -> ExportArgs {
        ExportArgs::default()
    }

    /// How long the final flush may take.
    pub fn flush_timeout(&self) -> Duration {
        self.otlp_flush_timeout
            .unwrap_or(canary_exporters::Config::FLUSH_TIMEOUT)
    }

    /// The exporter configuration: environment first, then flags.
    pub fn config(&self) -> Result<Config> {
        self.config_over(Config::env_var)
    }

    /// [`ExportArgs::config`] over the variables `var` gives. A variable whose setting a
    /// flag gives is not read: a bad inherited value of it is no error.
    fn config_over(&self, var: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let overridden: Vec<&str> = [
            (self.otlp_timeout.is_some(), "OTEL_EXPORTER_OTLP_TIMEOUT"),
            (
                self.otlp_metrics_interval.is_some(),
                "OTEL_METRIC_EXPORT_INTERVAL",
            ),
            (self.otlp_sample_ratio.is_some(), "OTEL_TRACES_SAMPLER"),
            (self.otlp_sample_ratio.is_some(), "OTEL_TRACES_SAMPLER_ARG"),
            (
                self.otlp_certificate.is_some(),
                canary_exporters::CERTIFICATE,
            ),
            // The pair replaces the variables' pair whole.
            (
                self.otlp_client_cert.is_some(),
                canary_exporters::CLIENT_CERTIFICATE,
            ),
            (
                self.otlp_client_cert.is_some(),
                canary_exporters::CLIENT_KEY,
            ),
        ]
        .into_iter()
        .filter_map(|(set, name)| set.then_some(name))
        .collect();
        let mut c = Config::from_vars_except(var, &overridden)
            .context("OTLP settings from the environment")?;
        if let Some(e) = &self.otlp_endpoint {
            c.endpoint = Some(e.clone());
        }
        for h in &self.otlp_headers {
            let parsed = canary_exporters::parse_headers("--otlp-header", h)?;
            for (k, v) in parsed {
                c.headers.retain(|(name, _)| *name != k);
                c.headers.push((k, v));
            }
        }
        if let Some(t) = self.otlp_timeout {
            c.timeout = t;
        }
        if let Some(r) = &self.otlp_sample_ratio {
            c.sample_ratio = canary_exporters::ratio("--otlp-sample-ratio", r)?;
        }
        if let Some(i) = self.otlp_metrics_interval {
            c.metrics_interval = i;
        }
        if let Some(bundle) = &self.otlp_certificate {
            c.certificate = Some(bundle.clone());
        }
        if let Some(identity) = crate::cli::replay::client_identity(
            self.otlp_client_cert.as_ref(),
            self.otlp_client_key.as_ref(),
        ) {
            c.client_identity = Some(identity);
        }
        // Read now, as the exporter will: a bad file is an error at start naming its flag
        // (or variable), where it used to be a failed export after the run had started.
        let flag = |given: bool, flag: &'static str, var: &'static str| match given {
            true => flag,
            false => var,
        };
        let from = canary_exporters::TlsSources {
            certificate: flag(
                self.otlp_certificate.is_some(),
                "--otlp-certificate",
                canary_exporters::CERTIFICATE,
            ),
            client_certificate: flag(
                self.otlp_client_cert.is_some(),
                "--otlp-client-cert",
                canary_exporters::CLIENT_CERTIFICATE,
            ),
            client_key: flag(
                self.otlp_client_cert.is_some(),
                "--otlp-client-key",
                canary_exporters::CLIENT_KEY,
            ),
        };
        if c.is_enabled() {
            c.check_tls_files(&from)?;
        }
        Ok(c)
    }

    /// Starts the exporter when an endpoint is configured.
    pub fn start(&self) -> Result<Option<OtlpExporter>> {
        let c = self.config()?;
        if !c.is_enabled() {
            return Ok(None);
        }
        Ok(Some(
            OtlpExporter::start(c).context("starting OTLP export")?,
        ))
    }
}

/// Exports the finished run with its verdict (`None`: unjudged) and flushes everything within
/// the flush timeout, off the async workers (the flush blocks).
pub async fn finish(
    exporter: OtlpExporter,
    labels: RunLabels,
    outcome: &canary_core::RunOutcome,
    verdict: Option<&crate::judge::verdict::Verdict>,
    flush_timeout: Duration,
) {
    // The verdict the exit status gives: a run that exits 3 is `fail` in Grafana too.
    let judgement = canary_exporters::RunJudgement {
        verdict: verdict.map_or("unjudged", |v| v.kind.as_str()).to_string(),
        reasons: verdict.map(|v| v.reasons.clone()).unwrap_or_default(),
        trend: None,
        ..Default::default()
    };
    exporter.export_judged_run(&labels, Some(outcome), &judgement);
    let report = tokio::task::spawn_blocking(move || exporter.shutdown(flush_timeout)).await;
    if let Ok(r) = report {
        if r.is_clean() {
            tracing::info!(
                "OTLP: {} spans, {} metric exports, {} run events sent",
                r.spans_exported,
                r.metric_exports,
                r.logs_exported
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_inherited_otel_variable_is_no_error_where_a_flag_overrides_it() {
        let env = |k: &str| match k {
            "OTEL_METRIC_EXPORT_INTERVAL" | "OTEL_EXPORTER_OTLP_TIMEOUT" => Some("0".into()),
            "OTEL_TRACES_SAMPLER" => Some("traceidratio".into()),
            "OTEL_TRACES_SAMPLER_ARG" => Some("7".into()),
            _ => None,
        };
        let mut args = ExportArgs {
            otlp_timeout: Some(Duration::from_secs(2)),
            otlp_metrics_interval: Some(Duration::from_secs(5)),
            otlp_sample_ratio: Some("0.5".into()),
            ..ExportArgs::default()
        };
        let c = args.config_over(env).unwrap();
        assert_eq!(c.timeout, Duration::from_secs(2));
        assert_eq!(c.metrics_interval, Duration::from_secs(5));
        assert_eq!(c.sample_ratio, 0.5);
        // Without the flag the variable is read, and its error names it.
        args.otlp_timeout = None;
        let e = format!("{:#}", args.config_over(env).unwrap_err());
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_TIMEOUT: expected a positive"),
            "{e}"
        );
    }
}
