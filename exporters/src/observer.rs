//! [`RunObserver`]: one run's records as spans and metric points, fed to an
//! [`OtlpExporter`](crate::OtlpExporter) as the replay writes them.

use crate::labels::RunLabels;
use crate::metrics::Instruments;
use crate::spans::{span_for, SpanQueue};
use canary_core::{MonoTime, Observer, RequestRecord, WallAnchor};
use opentelemetry::{InstrumentationScope, KeyValue};
use std::sync::Arc;

/// Feeds one run's records to an [`OtlpExporter`](crate::OtlpExporter); an [`Observer`] of the run.
pub struct RunObserver {
    pub(crate) labels: RunLabels,
    pub(crate) base: Vec<KeyValue>,
    pub(crate) anchor: WallAnchor,
    pub(crate) spans: Option<Arc<SpanQueue>>,
    pub(crate) instruments: Arc<Instruments>,
    pub(crate) scope: InstrumentationScope,
    pub(crate) sample_ratio: f64,
}

impl RunObserver {
    /// The run's labels.
    pub fn labels(&self) -> &RunLabels {
        &self.labels
    }
}

impl Observer for RunObserver {
    fn annotate(&self, rec: &mut RequestRecord, t0: MonoTime) {
        if rec.warmup {
            return;
        }
        // The same rule the replay used for the traceparent's sampled flag; without a traces
        // endpoint there is no span for an exemplar to point at.
        let sampled =
            self.spans.is_some() && canary_core::trace_sampled(&rec.trace_id, self.sample_ratio);
        self.instruments
            .record_request(rec, &self.labels, &self.base, sampled);
        let Some(q) = &self.spans else { return };
        if !sampled {
            return;
        }
        // None: never sent (the run stopped first), so there is no span to show.
        if let Some(span) = span_for(rec, &self.labels, &self.anchor, t0, &self.scope) {
            q.push(span);
        }
    }
}
