//! The OTLP metric and log exporters, wrapped to count what they export and lose and to
//! report the first failure once (see [`Health`]).

use crate::config::Signal;
use crate::health::Health;
use opentelemetry_otlp::{LogExporter, MetricExporter};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::Resource;
use std::sync::Arc;
use std::time::Duration;

/// Counts failed metric exports and reports the first one; otherwise the OTLP exporter.
pub(crate) struct CountingMetricExporter {
    pub inner: MetricExporter,
    pub health: Arc<Health>,
}

impl PushMetricExporter for CountingMetricExporter {
    async fn export(
        &self,
        metrics: &opentelemetry_sdk::metrics::data::ResourceMetrics,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        // An export still in flight at the shutdown deadline counts as failed.
        self.health.accepted(Signal::Metrics, 1);
        let r = self.inner.export(metrics).await;
        match &r {
            Ok(()) => self.health.exported(Signal::Metrics, 1),
            Err(e) => self.health.dropped(Signal::Metrics, 1, Some(e)),
        }
        r
    }
    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }
    fn shutdown_with_timeout(&self, t: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(t)
    }
    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// Counts log events exported and lost (they are counted as accepted when emitted, so one
/// the batch processor drops unexported still shows at the shutdown deadline).
#[derive(Debug)]
pub(crate) struct CountingLogExporter {
    pub inner: LogExporter,
    pub health: Arc<Health>,
}

impl opentelemetry_sdk::logs::LogExporter for CountingLogExporter {
    async fn export(
        &self,
        batch: opentelemetry_sdk::logs::LogBatch<'_>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let n = batch.iter().count() as u64;
        let r = self.inner.export(batch).await;
        match &r {
            Ok(()) => self.health.exported(Signal::Logs, n),
            Err(e) => self.health.dropped(Signal::Logs, n, Some(e)),
        }
        r
    }
    fn shutdown_with_timeout(&self, t: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(t)
    }
    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
