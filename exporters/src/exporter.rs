//! [`OtlpExporter`]: the process-lived OTLP pipelines (spans, metrics, logs), started once,
//! fed by a [`RunObserver`] per run, flushed with a deadline.

use crate::config::{host_name, redact_url, resource_has, Config, ConfigError, Signal};
use crate::counting::{CountingLogExporter, CountingMetricExporter};
use crate::exemplars::{ExemplarClient, Exemplars};
use crate::health::Health;
use crate::labels::{attr, RunLabels};
use crate::metrics::Instruments;
use crate::observer::RunObserver;
use crate::spans::SpanQueue;
use crate::transport::ExportClient;
use canary_core::error_chain;
use canary_core::RunOutcome;
use canary_core::{Bottleneck, Confidence, RunSummary, WallAnchor};
use opentelemetry::logs::{AnyValue, LogRecord, Logger, LoggerProvider, Severity};
use opentelemetry::metrics::MeterProvider;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{
    LogExporter, MetricExporter, RetryPolicy, SpanExporter, WithExportConfig, WithHttpConfig,
};
use opentelemetry_sdk::logs::{
    BatchConfigBuilder, BatchLogProcessor, SdkLogger, SdkLoggerProvider,
};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::SpanExporter as _;
use opentelemetry_sdk::Resource;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The most of a telemetry source's reason the run event carries.
const MAX_REASON_BYTES: usize = 256;

/// A pipeline that could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A setting is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The TLS setup or HTTP client could not be built (an unreadable CA bundle, say).
    #[error("OTLP client: {0}")]
    Tls(String),
    /// The OTLP exporter for a signal could not be built.
    #[error("building the OTLP {signal} exporter: {reason}")]
    Build {
        /// `traces`, `metrics` or `logs`.
        signal: &'static str,
        /// Why.
        reason: String,
    },
}

/// What an exporter did over its life, returned by [`OtlpExporter::shutdown`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ExportReport {
    /// Spans exported.
    pub spans_exported: u64,
    /// Spans lost: queue full, export failed, or still queued or in flight at the deadline.
    pub spans_dropped: u64,
    /// Metric exports that succeeded. Metrics are cumulative, so a later success carries
    /// what a failed export missed.
    pub metric_exports: u64,
    /// Metric exports that failed, or were still under way at the deadline.
    pub metric_exports_failed: u64,
    /// Log events exported.
    pub logs_exported: u64,
    /// Log events lost: export failed, or still queued or in flight at the deadline.
    pub logs_dropped: u64,
    /// True when everything was flushed before the deadline.
    pub flushed_in_time: bool,
}

impl ExportReport {
    /// True when nothing was lost.
    pub fn is_clean(&self) -> bool {
        self.spans_dropped == 0
            && self.metric_exports_failed == 0
            && self.logs_dropped == 0
            && self.flushed_in_time
    }
}

/// How a finished run was judged, for [`OtlpExporter::export_judged_run`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunJudgement {
    /// `pass`, `fail`, `error`, `interrupted` (or `unjudged`).
    pub verdict: String,
    /// Why it failed or errored, each naming what was missed.
    pub reasons: Vec<String>,
    /// Against the rolling baseline: `regressed`, `improved`, `steady` or `insufficient`;
    /// `None` when the run was not compared.
    pub trend: Option<String>,
    /// With a trend of `insufficient`: the direction seen against a reference of one or two
    /// runs, not confirmed (`regressed`, `improved`), as the log's `insufficient
    /// (unconfirmed: regressed; …)`.
    pub trend_unconfirmed: Option<String>,
}

/// The OTLP pipelines of one canaryd process: a bounded span queue, a periodic metric
/// reader and a batch log processor, each on its own thread, so a slow or absent collector
/// never slows a replay. Start it once; create a [`RunObserver`] per run; call
/// [`export_run`](OtlpExporter::export_run) when a run ends and
/// [`shutdown`](OtlpExporter::shutdown) before the process exits.
pub struct OtlpExporter {
    spans: Option<Arc<SpanQueue>>,
    meters: SdkMeterProvider,
    instruments: Arc<Instruments>,
    logs: Option<(SdkLoggerProvider, SdkLogger)>,
    health: Arc<Health>,
    scope: InstrumentationScope,
    sample_ratio: f64,
    resource: Resource,
    /// Each export's own timeout, said when the flush deadline comes first.
    export_timeout: Duration,
}

impl std::fmt::Debug for OtlpExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpExporter")
            .field("traces", &self.health.traces.endpoint)
            .field("metrics", &self.health.metrics.endpoint)
            .field("logs", &self.health.logs.endpoint)
            .finish()
    }
}

fn build_err<'a>(signal: &'static str, config: &'a Config) -> impl Fn(String) -> ExportError + 'a {
    move |reason| ExportError::Build {
        signal,
        reason: config.scrub(&reason),
    }
}

/// What every signal's OTLP/HTTP exporter is built with: the endpoint, headers and
/// timeout, our HTTP client, and one retry (a collector that is down costs one short
/// backoff per export, not many). The retry comes after a network error, a 502, 503, 504 or
/// 429, when the export timeout has room for the wait: a 429's or 503's `Retry-After`, cut
/// to [`MAX_RETRY_AFTER`](crate::transport::MAX_RETRY_AFTER) by our client, or a backoff of
/// 0.1-0.2 s.
fn http_settings<B: WithExportConfig + WithHttpConfig>(
    builder: B,
    url: &str,
    config: &Config,
    client: ExportClient,
) -> B {
    builder
        .with_endpoint(url)
        .with_headers(config.header_map())
        .with_timeout(config.timeout)
        .with_http_client(client)
        .with_retry_policy(
            RetryPolicy::recommended()
                .with_max_retries(1)
                .with_max_delay(Duration::from_millis(500)),
        )
}

/// The blocking client every signal shares: rustls with ring, trusting the system store
/// plus [`Config::certificate`], presenting [`Config::client_identity`] to an endpoint that
/// asks for a client certificate (the replay's own TLS setup), and the export timeout. With no
/// `https` endpoint no trust store is needed, so a host without CA certificates still
/// exports over plain http.
fn http_client(config: &Config, https: bool) -> Result<reqwest::blocking::Client, ExportError> {
    let tls = if https {
        canary_tls::client_config(
            config.certificate.as_deref(),
            config.client_identity.as_ref(),
        )
        .map_err(|e| ExportError::Tls(e.to_string()))?
    } else {
        canary_tls::with_roots(rustls::RootCertStore::empty())
    };
    let tls = rustls::ClientConfig::clone(&tls);
    let timeout = config.timeout;
    // A blocking client owns a runtime, which must not be built (or dropped) on an async
    // one: callers may be inside tokio.
    std::thread::spawn(move || {
        reqwest::blocking::Client::builder()
            .use_preconfigured_tls(tls)
            .timeout(timeout)
            // A redirect to another host would carry the configured headers (API keys)
            // there: reqwest strips only `Authorization` and cookies. An export answered
            // with one fails, and says so.
            .redirect(reqwest::redirect::Policy::none())
            // Straight to the collector, as the target and the scrapers connect: reqwest
            // would otherwise follow HTTP(S)_PROXY and ALL_PROXY silently, sending the
            // headers to the proxy and blaming the collector for its answers (TLS audit M2).
            .no_proxy()
            .build()
    })
    .join()
    .map_err(|_| ExportError::Tls("building the HTTP client panicked".into()))?
    .map_err(|e| ExportError::Tls(error_chain(&e)))
}

impl OtlpExporter {
    /// Builds the pipelines for every signal that has an endpoint. Nothing is sent yet and
    /// nothing fails when the collector is down: that shows up, once, at the first export.
    pub fn start(config: Config) -> Result<OtlpExporter, ExportError> {
        let urls = [
            config.signal_url(Signal::Traces)?,
            config.signal_url(Signal::Metrics)?,
            config.signal_url(Signal::Logs)?,
        ];
        let health = Arc::new(Health::new(&config, urls.clone()));
        let https = urls.iter().flatten().any(|u| u.starts_with("https://"));
        let [traces_url, metrics_url, logs_url] = urls;
        let mut attrs: Vec<KeyValue> = config
            .resource
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
            .collect();
        // A `host.name` given (the DaemonSet passes the node's name in
        // OTEL_RESOURCE_ATTRIBUTES: a pod's own host name changes when it is replaced) wins
        // over the kernel's.
        let given = config.resource.iter().any(|(k, _)| k == attr::HOST_NAME)
            || std::env::var("OTEL_RESOURCE_ATTRIBUTES")
                .is_ok_and(|v| resource_has(&v, attr::HOST_NAME));
        if !given {
            attrs.push(KeyValue::new(attr::HOST_NAME, host_name()));
        }
        attrs.push(KeyValue::new(
            attr::SERVICE_VERSION,
            env!("CARGO_PKG_VERSION"),
        ));
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .with_attributes(attrs)
            .build();
        let scope = InstrumentationScope::builder("canaryd")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let shared = http_client(&config, https)?;
        for s in [Signal::Traces, Signal::Metrics, Signal::Logs] {
            let var = crate::transport::sdk_headers_var(s);
            if health.of(s).endpoint.is_some() && Config::env_var(&var).is_some() {
                tracing::warn!(
                    "{var} is not read: every signal is sent the same headers \
                     (OTEL_EXPORTER_OTLP_HEADERS, --otlp-header, [otlp.headers])"
                );
            }
            // Likewise the TLS files: one client serves every signal.
            let signal = s.as_str().to_ascii_uppercase();
            for (what, general) in [
                ("CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE, --otlp-certificate, [otlp] certificate"),
                ("CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE, --otlp-client-cert, [otlp] client_certificate"),
                ("CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY, --otlp-client-key, [otlp] client_key"),
            ] {
                let var = format!("OTEL_EXPORTER_OTLP_{signal}_{what}");
                if health.of(s).endpoint.is_some() && Config::env_var(&var).is_some() {
                    tracing::warn!(
                        "{var} is not read: every signal uses the same TLS files ({general})"
                    );
                }
            }
        }
        // Each signal's own, so its warning names its own last failure. A header it cannot
        // send is an error here, before any pipeline starts.
        let client = |s: Signal| {
            ExportClient::new(
                shared.clone(),
                &config,
                s,
                health.of(s).last_failure.clone(),
                health.of(s).reply.clone(),
            )
        };
        let spans = match &traces_url {
            None => None,
            Some(url) => {
                let mut exporter = http_settings(
                    SpanExporter::builder().with_http(),
                    url,
                    &config,
                    client(Signal::Traces)?,
                )
                .build()
                .map_err(|e| build_err("traces", &config)(e.to_string()))?;
                exporter.set_resource(&resource);
                Some(Arc::new(
                    SpanQueue::start(exporter, config.max_queued_spans, health.clone())
                        .map_err(|e| build_err("traces", &config)(e.to_string()))?,
                ))
            }
        };

        let mut meters =
            crate::metrics::with_views(SdkMeterProvider::builder()).with_resource(resource.clone());
        let exemplars = Arc::new(Exemplars::default());
        if let Some(url) = &metrics_url {
            let metrics_client = client(Signal::Metrics)?;
            let inner = http_settings(
                MetricExporter::builder().with_http(),
                url,
                &config,
                metrics_client.clone(),
            )
            // The SDK samples no exemplars: this client adds them to each export.
            .with_http_client(ExemplarClient {
                inner: metrics_client,
                exemplars: exemplars.clone(),
            })
            // Cumulative: what a failed export missed arrives with the next one, and
            // Prometheus-style stores (VictoriaMetrics, Mimir) take it as is.
            .with_temporality(Temporality::Cumulative)
            .build()
            .map_err(|e| build_err("metrics", &config)(e.to_string()))?;
            let reader = PeriodicReader::builder(CountingMetricExporter {
                inner,
                health: health.clone(),
            })
            .with_interval(config.metrics_interval)
            .build();
            meters = meters.with_reader(reader);
        }
        let meters = meters.build();
        let meter = meters.meter_with_scope(scope.clone());
        let instruments = Arc::new(Instruments::new(&meter, exemplars));
        {
            // Drops are themselves a metric, exported as soon as the backend takes metrics.
            let h = health.clone();
            meter
                .u64_observable_counter("canary.exporter.dropped")
                .with_unit("{item}")
                .with_description("Spans and log events lost, and metric exports that failed")
                .with_callback(move |o| {
                    for s in [Signal::Traces, Signal::Metrics, Signal::Logs] {
                        let sh = h.of(s);
                        if sh.endpoint.is_some() {
                            o.observe(
                                sh.dropped.load(Ordering::Relaxed),
                                &[KeyValue::new(attr::SIGNAL, s.as_str())],
                            );
                        }
                    }
                })
                .build();
        }

        let logs = match &logs_url {
            None => None,
            Some(url) => {
                let inner = http_settings(
                    LogExporter::builder().with_http(),
                    url,
                    &config,
                    client(Signal::Logs)?,
                )
                .build()
                .map_err(|e| build_err("logs", &config)(e.to_string()))?;
                let processor = BatchLogProcessor::builder(CountingLogExporter {
                    inner,
                    health: health.clone(),
                })
                .with_batch_config(
                    BatchConfigBuilder::default()
                        .with_max_queue_size(256)
                        .with_scheduled_delay(Duration::from_secs(1))
                        .build(),
                )
                .build();
                let provider = SdkLoggerProvider::builder()
                    .with_resource(resource.clone())
                    .with_log_processor(processor)
                    .build();
                let logger = provider.logger_with_scope(scope.clone());
                Some((provider, logger))
            }
        };
        tracing::info!(
            traces = traces_url.as_deref().map(redact_url).unwrap_or_default(),
            metrics = metrics_url.as_deref().map(redact_url).unwrap_or_default(),
            logs = logs_url.as_deref().map(redact_url).unwrap_or_default(),
            "OTLP export on"
        );
        Ok(OtlpExporter {
            spans,
            meters,
            instruments,
            logs,
            health,
            scope,
            sample_ratio: config.sample_ratio,
            resource,
            export_timeout: config.timeout,
        })
    }

    /// The span sampling ratio: set it as the replay's `trace_sample_ratio` so the
    /// `traceparent` flag agrees with what is exported.
    pub fn sample_ratio(&self) -> f64 {
        self.sample_ratio
    }

    /// The resource every signal carries.
    pub fn resource(&self) -> &Resource {
        &self.resource
    }

    /// An observer for one run: a span and metric points per record, as records are
    /// written. Add it to the replay's `Config::observer`.
    pub fn run_observer(&self, labels: RunLabels) -> RunObserver {
        self.instruments
            .record_slos(&labels.goodput, &labels.attributes());
        RunObserver {
            base: labels.attributes(),
            labels,
            anchor: WallAnchor::now(),
            spans: self.spans.clone(),
            instruments: self.instruments.clone(),
            scope: self.scope.clone(),
            sample_ratio: self.sample_ratio,
        }
    }

    /// Exports a finished run: its verdict (`None`: `unjudged`), run-level gauges, and one
    /// `canary.run` log event.
    pub fn export_run(&self, labels: &RunLabels, outcome: &RunOutcome, verdict: Option<&str>) {
        let judgement = RunJudgement {
            verdict: verdict.unwrap_or("unjudged").to_string(),
            ..RunJudgement::default()
        };
        self.export_judged_run(labels, Some(outcome), &judgement);
    }

    /// Exports a capacity search's figures as `canary.capacity.rate`, one point per
    /// `(bound, requests/s)`: `passed`, `failed`, `baseline`. They replace the workload's
    /// earlier figures: one that is `None` (not known, or not found by this search) is not
    /// exported from now on, so no earlier run's value goes on showing.
    pub fn export_capacity(&self, labels: &RunLabels, figures: &[(&'static str, Option<f64>)]) {
        self.instruments
            .record_capacity(&labels.attributes(), figures);
    }

    /// Exports whether each end of a capacity bracket is not established as
    /// `canary.capacity.not_established`, one point per `(bound, 1 or 0)`: `passed`, `failed`;
    /// as [`OtlpExporter::export_capacity`], a `None` ends its series.
    pub fn export_capacity_not_established(
        &self,
        labels: &RunLabels,
        ends: &[(&'static str, Option<f64>)],
    ) {
        self.instruments
            .record_capacity_not_established(&labels.attributes(), ends);
    }

    /// Stops exporting the last-run gauges of workloads `keep` says no to (taken out of the
    /// daemon's config by a reload), so their series end.
    pub fn retain_workloads(&self, keep: &dyn Fn(&str) -> bool) {
        self.instruments.retain_workloads(keep);
    }

    /// Exports a sweep's knee as `canary.sweep.knee`, one point per `(figure, requests/s)`:
    /// `knee`, `baseline`; as [`OtlpExporter::export_capacity`], a `None` ends its series.
    pub fn export_knee(&self, labels: &RunLabels, figures: &[(&'static str, Option<f64>)]) {
        self.instruments.record_knee(&labels.attributes(), figures);
    }

    /// Exports a run the daemon judged: `canary.runs` with its verdict (and baseline trend,
    /// when compared), the run-level gauges when the replay ran at all (`outcome`), and one
    /// `canary.run` log event carrying the verdict, its reasons and the trend.
    pub fn export_judged_run(
        &self,
        labels: &RunLabels,
        outcome: Option<&RunOutcome>,
        judgement: &RunJudgement,
    ) {
        self.export_judged(labels, outcome, judgement, true);
    }

    /// Exports a run that is not its workload's last: one recovered after its process died
    /// that started before the last run exported. It is counted in `canary.runs` and sends
    /// its `canary.run` event, but the last-run gauges (figures and state sets) stay those of
    /// the newer run.
    pub fn export_earlier_run(
        &self,
        labels: &RunLabels,
        outcome: Option<&RunOutcome>,
        judgement: &RunJudgement,
    ) {
        self.export_judged(labels, outcome, judgement, false);
    }

    /// Sets the verdict and trend state sets of `labels`' workload, and its diagnosis's when
    /// known, to those of its last run as stored before this process started, so they do
    /// not go blank until the workload runs again. A stored run is not a new one: nothing is
    /// counted (`canary.runs` is untouched) and no `canary.run` event is sent.
    pub fn seed_last_run(
        &self,
        labels: &RunLabels,
        judgement: &RunJudgement,
        diagnosis: Option<(Bottleneck, Confidence)>,
    ) {
        let base = labels.attributes();
        self.instruments.record_states(
            &base,
            &judgement.verdict,
            judgement.trend.as_deref(),
            judgement.trend_unconfirmed.as_deref(),
        );
        if let Some((class, confidence)) = diagnosis {
            self.instruments
                .record_diagnosis_of(&base, class, confidence);
        }
    }

    /// [`OtlpExporter::export_judged_run`]; the last-run gauges only when `last`.
    fn export_judged(
        &self,
        labels: &RunLabels,
        outcome: Option<&RunOutcome>,
        judgement: &RunJudgement,
        last: bool,
    ) {
        let verdict = judgement.verdict.as_str();
        let base = labels.attributes();
        let mut run_attrs = vec![KeyValue::new(attr::VERDICT, verdict.to_string())];
        if let Some(t) = &judgement.trend {
            run_attrs.push(KeyValue::new(attr::TREND, t.clone()));
        }
        if let Some(u) = &judgement.trend_unconfirmed {
            run_attrs.push(KeyValue::new(attr::TREND_UNCONFIRMED, u.clone()));
        }
        if let Some(o) = outcome {
            run_attrs.push(KeyValue::new(attr::BOTTLENECK, o.diagnosis.class.as_str()));
        }
        self.instruments.count_run(&base, &run_attrs);
        if last {
            self.instruments.end_request_gauges(&base);
            self.instruments.record_states(
                &base,
                verdict,
                judgement.trend.as_deref(),
                judgement.trend_unconfirmed.as_deref(),
            );
            if let Some(o) = outcome {
                self.instruments.record_run(&o.summary, &o.telemetry, &base);
                self.instruments.record_sources(&base, &o.telemetry.sources);
                // A run that never replayed has no diagnosis: the last diagnosed one stays.
                self.instruments.record_diagnosis(&base, &o.diagnosis);
            }
        }
        if let Some((_, logger)) = &self.logs {
            let mut r = logger.create_log_record();
            r.set_event_name("canary.run");
            r.set_timestamp(SystemTime::now());
            r.set_observed_timestamp(SystemTime::now());
            let interrupted = outcome.is_some_and(|o| o.interrupted);
            let bad = verdict != "pass" && verdict != "unjudged" || interrupted;
            r.set_severity_number(if bad { Severity::Warn } else { Severity::Info });
            r.set_severity_text(if bad { "WARN" } else { "INFO" });
            let figures = outcome.map_or(String::new(), |o| {
                format!(
                    "{} requests, {} errors, ",
                    o.summary.requests, o.summary.errors
                )
            });
            r.set_body(AnyValue::String(
                format!("canary run {}: {figures}verdict {verdict}", labels.workload).into(),
            ));
            r.add_attribute(attr::WORKLOAD, labels.workload.clone());
            r.add_attribute(attr::GEN_AI_OPERATION_NAME, labels.operation.clone());
            r.add_attribute(attr::GEN_AI_PROVIDER_NAME, labels.provider.clone());
            r.add_attribute(attr::GEN_AI_REQUEST_MODEL, labels.model.clone());
            r.add_attribute(attr::SERVER_ADDRESS, labels.server_address.clone());
            r.add_attribute(attr::SERVER_PORT, labels.server_port as i64);
            r.add_attribute(attr::VERDICT, verdict.to_string());
            if !judgement.reasons.is_empty() {
                r.add_attribute(attr::VERDICT_REASONS, judgement.reasons.join("; "));
            }
            if let Some(t) = &judgement.trend {
                r.add_attribute(attr::TREND, t.clone());
            }
            if let Some(u) = &judgement.trend_unconfirmed {
                r.add_attribute(attr::TREND_UNCONFIRMED, u.clone());
            }
            if let Some(id) = &labels.run_id {
                r.add_attribute("canary.run.id", id.clone());
            }
            if let Some(o) = outcome {
                let s: &RunSummary = &o.summary;
                r.add_attribute("canary.run.requests", s.requests as i64);
                r.add_attribute("canary.run.errors", s.errors as i64);
                r.add_attribute("canary.run.duration_s", s.duration_s);
                // A signal's interruption; a run its own limits stopped (a run deadline, a
                // target that answered nothing) says so as `canary.run.cut` (its verdict is
                // that error), not as interrupted.
                r.add_attribute("canary.run.interrupted", o.signalled);
                if let Some(why) = &o.cut {
                    r.add_attribute("canary.run.cut", why.clone());
                }
                if o.interrupted {
                    // How much of the run the stop left out (an estimate when the run says so).
                    // Unknown (a closed loop bounded by time): no count, the reason instead.
                    match (o.unsent, &o.unsent_unknown) {
                        (Some(n), _) => {
                            r.add_attribute("canary.run.unsent", n as i64);
                            r.add_attribute("canary.run.unsent_estimated", o.unsent_estimated);
                        }
                        (None, why) => r.add_attribute(
                            "canary.run.unsent_unknown",
                            why.clone().unwrap_or_default(),
                        ),
                    }
                }
                if let Some(g) = &s.goodput {
                    if let Some(v) = g.goodput {
                        r.add_attribute("canary.run.goodput", v);
                    }
                    r.add_attribute("canary.run.good_requests", g.good_requests as i64);
                    // The truth lies between the two when a judgement rested on a bound.
                    if let (Some(lo), Some(hi)) =
                        (g.good_requests_at_least, g.good_requests_at_most)
                    {
                        r.add_attribute("canary.run.good_requests.at_least", lo as i64);
                        r.add_attribute("canary.run.good_requests.at_most", hi as i64);
                        // The rate's kind: exact counts over the duration (an upper bound)
                        // make a lower bound.
                        let exact = lo == hi && lo == g.good_requests;
                        r.add_attribute(
                            "canary.run.goodput.value_kind",
                            if exact {
                                crate::metrics::RATE_KIND
                            } else {
                                "estimate"
                            },
                        );
                    }
                    for (name, counts) in [
                        ("uncertain_meets", &g.uncertain_meets),
                        ("uncertain_misses", &g.uncertain_misses),
                    ] {
                        let n: u64 = counts.values().sum();
                        if n > 0 {
                            r.add_attribute(format!("canary.run.goodput.{name}"), n as i64);
                        }
                    }
                }
                // Each telemetry source's state, and why one is not available (cut: a
                // reason quotes an endpoint or an error chain).
                for (source, state) in &o.telemetry.sources {
                    let key = format!("canary.telemetry.{}", source.as_str());
                    r.add_attribute(format!("{key}.state"), state.name());
                    if !state.is_available() {
                        let said = state.to_string();
                        let cut = canary_core::prefix_within(&said, MAX_REASON_BYTES);
                        r.add_attribute(format!("{key}.reason"), cut.to_string());
                    }
                }
                let d = &o.diagnosis;
                r.add_attribute(attr::BOTTLENECK, d.class.as_str());
                r.add_attribute(attr::BOTTLENECK_CONFIDENCE, d.confidence.as_str());
                r.add_attribute(attr::BOTTLENECK_WHY, d.why.clone());
            }
            self.health.accepted(Signal::Logs, 1);
            logger.emit(r);
        }
    }

    /// Scrubs `secrets` too from every collector's text a warning quotes (its partial
    /// success, its reason for a refusal, a transport error), beside the OTLP headers: the
    /// replay target's API key and headers, which a collector could quote back. They replace
    /// those given before under `key` (a target's name), so a reload does not pile them up.
    pub fn scrub_also(&self, key: &str, secrets: canary_core::Secrets) {
        self.health.scrub_also(key, secrets);
    }

    /// Export counters so far.
    pub fn report(&self) -> serde_json::Value {
        self.health.report()
    }

    /// Items of `signal` lost so far: spans, metric exports or log events.
    pub fn dropped_of(&self, signal: Signal) -> u64 {
        self.health
            .of(signal)
            .dropped
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Items lost so far, every signal together.
    pub fn dropped(&self) -> u64 {
        let h = &self.health;
        [&h.traces, &h.metrics, &h.logs]
            .iter()
            .map(|s| s.dropped.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// Flushes every pipeline and stops it, giving up at `deadline` from now; what was not
    /// exported by then (still queued, or in flight) is counted as dropped.
    ///
    /// The three pipelines stop at once, each on a thread of its own, against the one
    /// deadline; this returns by the deadline whatever they do. (The SDK's metric reader
    /// ignores the timeout it is given and waits up to 5 s, and an export to a collector
    /// that accepts but never answers blocks for the export timeout: such a thread is left
    /// to end on its own, and what it held is already counted as dropped.)
    pub fn shutdown(self, deadline: Duration) -> ExportReport {
        let until = Instant::now() + deadline;
        let left = || until.saturating_duration_since(Instant::now());
        if let Some(q) = &self.spans {
            q.close();
        }
        // A failed final export is already counted; only running out of time matters here.
        let timed_out = |r: &opentelemetry_sdk::error::OTelSdkResult| {
            matches!(r, Err(opentelemetry_sdk::error::OTelSdkError::Timeout(_)))
        };
        let (done_tx, done) = std::sync::mpsc::channel::<bool>();
        let mut stopping = 0;
        let mut stop = |name: &str, f: Box<dyn FnOnce() -> bool + Send>| {
            let tx = done_tx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("otlp-{name}-stop"))
                .spawn(move || {
                    let _ = tx.send(f());
                });
            // No thread, no wait: what the pipeline holds is counted as dropped below.
            if spawned.is_ok() {
                stopping += 1;
            }
            spawned.is_ok()
        };
        let mut in_time = true;
        if let Some((provider, _)) = &self.logs {
            let (p, t) = (provider.clone(), left());
            in_time &= stop(
                "logs",
                Box::new(move || !timed_out(&p.shutdown_with_timeout(t))),
            );
        }
        if self.health.metrics.endpoint.is_some() {
            let (m, t) = (self.meters.clone(), left());
            in_time &= stop(
                "metrics",
                Box::new(move || !timed_out(&m.shutdown_with_timeout(t))),
            );
        }
        drop(done_tx);
        if let Some(q) = &self.spans {
            in_time &= q.wait(until);
        }
        for _ in 0..stopping {
            match done.recv_timeout(left()) {
                Ok(ok) => in_time &= ok,
                Err(_) => {
                    in_time = false;
                    break;
                }
            }
        }
        let pending =
            [Signal::Traces, Signal::Metrics, Signal::Logs].map(|s| self.health.settle(s));
        let written_off: u64 = pending.iter().sum();
        let h = &self.health;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let report = ExportReport {
            spans_exported: load(&h.traces.exported),
            spans_dropped: load(&h.traces.dropped),
            metric_exports: load(&h.metrics.exported),
            metric_exports_failed: load(&h.metrics.dropped),
            logs_exported: load(&h.logs.exported),
            logs_dropped: load(&h.logs.dropped),
            flushed_in_time: in_time,
        };
        if !report.is_clean() {
            // Exact counts of what the collector did not acknowledge; an item in flight at
            // the deadline may still have reached it.
            tracing::warn!(
                "OTLP export lost data: {} spans dropped, {} metric exports failed, {} log events dropped (exact counts of what the collector did not accept: failed, unanswered or rejected in a partial success){}",
                report.spans_dropped,
                report.metric_exports_failed,
                report.logs_dropped,
                match (in_time, written_off) {
                    (true, _) => String::new(),
                    (false, 0) => format!("; the flush stopped at its {deadline:?} deadline"),
                    (false, n) => format!(
                        "; the flush stopped at its {deadline:?} deadline with {n} of them still queued or in flight, unanswered: {}",
                        self.unanswered(pending, deadline)
                    ),
                }
            );
        }
        report
    }

    /// What each signal still held at the flush deadline, and where it was going; and why
    /// no export's own error came first, when its timeout is not shorter than the deadline
    /// (a collector that accepts and never answers is told only so).
    fn unanswered(&self, pending: [u64; 3], deadline: Duration) -> String {
        let what = ["spans", "metric exports", "log events"];
        let held: Vec<String> = [Signal::Traces, Signal::Metrics, Signal::Logs]
            .into_iter()
            .zip(pending)
            .zip(what)
            .filter(|((_, n), _)| *n > 0)
            .map(|((s, n), what)| {
                let to = self.health.of(s).endpoint.as_deref().unwrap_or("?");
                format!("{n} {what} to {to}")
            })
            .collect();
        let mut said = held.join(", ");
        if self.export_timeout >= deadline {
            said.push_str(&format!(
                "; no answer came (the export timeout, {:?}, is not shorter than the deadline: \
                 a shorter --otlp-timeout or [otlp] timeout gets each export's own error told)",
                self.export_timeout
            ));
        }
        said
    }
}
