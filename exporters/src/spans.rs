//! One CLIENT span per request, built from its finished record, and the bounded queue that
//! ships spans to the collector from a thread of its own.
//!
//! The span's trace and span ids are the ones sent in the request's `traceparent`, so the
//! server's own spans (vLLM `--otlp-traces-endpoint`) are children of canaryd's. Spans are
//! built after the fact from the record (its times are on the monotonic clock, labelled
//! with wall time through one anchor per run), which is why the SDK's tracer, which would
//! pick its own ids and clock, is not used.

use crate::config::Signal;
use crate::health::Health;
use crate::labels::{attr, RunLabels};
use canary_core::{MonoTime, RequestRecord, RxSource, WallAnchor};
use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Spans per export request at most.
const MAX_BATCH: usize = 512;
/// A partial batch waits at most this long.
const BATCH_DELAY: Duration = Duration::from_millis(500);

/// Wall-clock time of a record time (ms after the run's `t0`).
fn wall(anchor: &WallAnchor, t0: MonoTime, ms: f64) -> SystemTime {
    let mono = MonoTime((t0.as_nanos() as f64 + ms.max(0.0) * 1e6) as u64);
    UNIX_EPOCH + Duration::from_nanos(anchor.unix_nanos_at(mono))
}

/// The span of one finished request, or `None` when its ids are not valid W3C ids or it was
/// never sent.
pub(crate) fn span_for(
    rec: &RequestRecord,
    labels: &RunLabels,
    anchor: &WallAnchor,
    t0: MonoTime,
    scope: &InstrumentationScope,
) -> Option<SpanData> {
    let trace_id = TraceId::from_hex(&rec.trace_id).ok()?;
    let span_id = SpanId::from_hex(&rec.span_id).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID || !rec.sent_at_ms.is_finite() {
        return None;
    }
    let start = wall(anchor, t0, rec.sent_at_ms);
    // The span lasts the request's e2e (on the kernel's receive clock where it stamped the
    // end, as TTFT is); `ended_at_ms` is canaryd's read, later by its read delay.
    let end_ms = rec.e2e_ms.map_or(rec.ended_at_ms, |e| rec.sent_at_ms + e);
    let end = wall(anchor, t0, end_ms.max(rec.sent_at_ms));
    let mut a = labels.attributes();
    a.push(KeyValue::new(
        attr::GEN_AI_REQUEST_MAX_TOKENS,
        rec.output_tokens as i64,
    ));
    a.push(KeyValue::new("canary.request.index", rec.id as i64));
    a.push(KeyValue::new("canary.trace.line", rec.trace_line as i64));
    if let Some(s) = rec.session {
        a.push(KeyValue::new("canary.session", s.to_string()));
    }
    a.push(KeyValue::new("canary.turn", rec.turn as i64));
    if let Some(u) = &rec.usage {
        if let Some(n) = u.prompt_tokens {
            a.push(KeyValue::new(attr::GEN_AI_USAGE_INPUT_TOKENS, n as i64));
        }
        if let Some(n) = u.completion_tokens {
            a.push(KeyValue::new(attr::GEN_AI_USAGE_OUTPUT_TOKENS, n as i64));
        }
        if let Some(n) = u.cached_tokens {
            a.push(KeyValue::new("canary.usage.cached_tokens", n as i64));
        }
    }
    let ms = |k: &'static str, v: Option<f64>, a: &mut Vec<KeyValue>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            a.push(KeyValue::new(k, v));
        }
    };
    ms("canary.schedule_lag_ms", Some(rec.schedule_lag_ms), &mut a);
    ms("canary.hold_ms", Some(rec.hold_ms), &mut a);
    ms("canary.connect_wait_ms", Some(rec.connect_wait_ms), &mut a);
    let dispatch = rec.schedule_lag_ms - rec.hold_ms - rec.connect_wait_ms;
    ms("canary.dispatch_lag_ms", Some(dispatch), &mut a);
    ms("canary.connect_ms", rec.connect_ms, &mut a);
    ms("canary.ttfb_ms", rec.ttfb_ms, &mut a);
    ms("canary.ttft_ms", rec.ttft_ms, &mut a);
    ms("canary.ttfo_ms", rec.ttfo_ms, &mut a);
    ms("canary.itl_ms", rec.itl_ms, &mut a);
    ms("canary.e2e_ms", rec.e2e_ms, &mut a);
    // Where the first token's and the end's times came from, as the record's `rx`: only
    // `kernel` is exact; without receive timestamps both are canaryd's read.
    let source = |s: Option<RxSource>| s.unwrap_or(RxSource::Userspace).as_str();
    if rec.ttfb_ms.is_some() {
        let s = rec.rx.as_ref().and_then(|rx| rx.head);
        a.push(KeyValue::new("canary.rx.head", source(s)));
    }
    if rec.ttft_ms.is_some() {
        let s = rec.rx.as_ref().and_then(|rx| rx.first_token);
        a.push(KeyValue::new("canary.rx.first_token", source(s)));
    }
    if rec.e2e_ms.is_some() {
        let s = rec.rx.as_ref().and_then(|rx| rx.end);
        a.push(KeyValue::new("canary.rx.end", source(s)));
    }
    if let Some(k) = &rec.kernel {
        ms("canary.ttft.connect_ms", k.connect_ms, &mut a);
        ms("canary.ttft.request_write_ms", k.request_write_ms, &mut a);
        ms("canary.ttft.server_wait_ms", k.server_wait_ms, &mut a);
        ms(
            "canary.ttft.client_overhead_ms",
            k.client_overhead_ms,
            &mut a,
        );
        ms("canary.ttft.remainder_ms", k.remainder_ms, &mut a);
    }
    let status = match &rec.error {
        Some(e) => {
            a.push(KeyValue::new(attr::ERROR_TYPE, e.kind.as_str()));
            if let Some(code) = e.http_status {
                a.push(KeyValue::new(attr::HTTP_RESPONSE_STATUS_CODE, code as i64));
            }
            Status::error(e.kind.as_str())
        }
        None => Status::Unset,
    };
    a.push(KeyValue::new(attr::REQUEST_STATUS, rec.status.as_str()));
    let mut events = Vec::new();
    if let Some(t) = rec.ttft_ms {
        events.push(Event::new(
            "gen_ai.first_token",
            wall(anchor, t0, rec.sent_at_ms + t),
            Vec::new(),
            0,
        ));
    }
    if let Some(t) = rec.ttfo_ms {
        events.push(Event::new(
            "gen_ai.first_output_token",
            wall(anchor, t0, rec.sent_at_ms + t),
            Vec::new(),
            0,
        ));
    }
    let mut span_events = SpanEvents::default();
    span_events.events = events;
    Some(SpanData {
        span_context: SpanContext::new(
            trace_id,
            span_id,
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: SpanId::INVALID,
        parent_span_is_remote: false,
        span_kind: SpanKind::Client,
        name: format!("{} {}", labels.operation, labels.model).into(),
        start_time: start,
        end_time: end,
        attributes: a,
        dropped_attributes_count: 0,
        events: span_events,
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope.clone(),
    })
}

/// A bounded queue in front of an OTLP span exporter running on its own thread. Pushing
/// never blocks: a full queue drops the span and counts it.
pub(crate) struct SpanQueue {
    // Taken out at shutdown, which closes the channel even while observers still hold the
    // queue.
    tx: Mutex<Option<SyncSender<SpanData>>>,
    done: Mutex<Receiver<()>>,
    health: Arc<Health>,
}

impl SpanQueue {
    pub fn start<E: SpanExporter + 'static>(
        exporter: E,
        capacity: usize,
        health: Arc<Health>,
    ) -> std::io::Result<SpanQueue> {
        let (tx, rx) = sync_channel(capacity.max(1));
        let (done_tx, done) = sync_channel(1);
        let h = health.clone();
        std::thread::Builder::new()
            .name("otlp-spans".into())
            .spawn(move || {
                export_loop(exporter, rx, &h);
                let _ = done_tx.send(());
            })?;
        Ok(SpanQueue {
            tx: Mutex::new(Some(tx)),
            done: Mutex::new(done),
            health,
        })
    }

    pub fn push(&self, span: SpanData) {
        // Counted first: from here the span is exported, dropped, or pending at the deadline.
        self.health.accepted(Signal::Traces, 1);
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = tx.as_ref() else {
            self.health.dropped(Signal::Traces, 1, None);
            return;
        };
        match tx.try_send(span) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.health.dropped(
                Signal::Traces,
                1,
                Some(&"the span queue is full (the collector is slower than the run)"),
            ),
            Err(TrySendError::Disconnected(_)) => self.health.dropped(Signal::Traces, 1, None),
        }
    }

    /// Closes the queue: the thread exports what is queued, then stops. Returns at once.
    pub fn close(&self) {
        // The worker drains every queued span before it sees the channel closed.
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// Waits, at most until `deadline`, for the thread to stop after [`close`](Self::close);
    /// true when everything queued was dealt with (exported or counted as dropped) in time.
    /// Past the deadline the thread is left to finish on its own; what it still held is
    /// the caller's to count (`Health::settle`).
    pub fn wait(&self, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        done.recv_timeout(left).is_ok()
    }
}

fn export_loop<E: SpanExporter>(mut exporter: E, rx: Receiver<SpanData>, health: &Health) {
    let mut batch: Vec<SpanData> = Vec::new();
    let mut oldest: Option<Instant> = None;
    let send = |batch: &mut Vec<SpanData>, exporter: &mut E| {
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        match futures_executor::block_on(exporter.export(std::mem::take(batch))) {
            Ok(()) => health.exported(Signal::Traces, n),
            Err(e) => health.dropped(Signal::Traces, n, Some(&e)),
        }
    };
    loop {
        let wait = oldest.map_or(Duration::from_secs(3600), |t| {
            BATCH_DELAY.saturating_sub(t.elapsed())
        });
        match rx.recv_timeout(wait) {
            Ok(s) => {
                batch.push(s);
                oldest.get_or_insert_with(Instant::now);
                if batch.len() >= MAX_BATCH {
                    send(&mut batch, &mut exporter);
                    oldest = None;
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                send(&mut batch, &mut exporter);
                oldest = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                send(&mut batch, &mut exporter);
                let _ = exporter.shutdown();
                return;
            }
        }
    }
}
