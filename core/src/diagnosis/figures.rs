//! The figures the rules read, each with its kind (exact, bound, estimate) and source, and
//! why a source is missing when it is.

use super::{Evidence, FigureKind};
use crate::summary::RunSummary;
use crate::telemetry::{RunTelemetry, Source, SourceState};

/// One figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Fig {
    pub value: f64,
    pub kind: FigureKind,
    pub source: &'static str,
    /// True when it stands in for the figure the rule prefers (a coarser route).
    pub fallback: bool,
}

impl Fig {
    fn new(value: f64, kind: FigureKind, source: &'static str) -> Fig {
        Fig {
            value,
            kind,
            source,
            fallback: false,
        }
    }

    fn fallback(mut self) -> Fig {
        self.fallback = true;
        self
    }

    /// As evidence named `name` in `unit`.
    pub fn evidence(&self, name: &str, unit: &str) -> Evidence {
        Evidence {
            name: name.to_string(),
            value: self.value,
            unit: unit.to_string(),
            kind: self.kind,
            source: self.source.to_string(),
        }
    }
}

/// Everything the rules read, derived once from the run's summary and telemetry.
#[derive(Debug, Clone, Default)]
pub(super) struct Figures {
    pub requests: u64,
    pub client_errors: u64,
    /// `None` when no request was judged against the target (all cancelled on purpose or
    /// canaryd's own failures): no rate to compare with the threshold.
    pub error_rate: Option<f64>,
    pub target_errors: u64,
    /// `http_status` errors by status, as `summary.json`'s `errors_by_http_status`.
    pub http_statuses: std::collections::BTreeMap<u16, u64>,
    pub throughput: f64,
    /// Requests the server counted over its scrape window (its e2e, else TTFT, histogram),
    /// and that window (s): the server's own request count and rate, every client's.
    pub server_requests: Option<f64>,
    pub server_window_s: Option<f64>,
    pub client_ttft_ms: Option<Fig>,
    pub client_e2e_ms: Option<Fig>,
    pub server_ttft_ms: Option<Fig>,
    pub server_queue_ms: Option<Fig>,
    pub server_prefill_ms: Option<Fig>,
    pub server_decode_ms: Option<Fig>,
    /// Client TTFT minus the server's own (from its histogram, else llama.cpp's per-request
    /// prompt time), ms.
    pub ttft_gap_ms: Option<Fig>,
    /// Why the server's TTFT was not compared with canaryd's, when its histogram was there
    /// but counted other requests.
    pub ttft_withheld: Option<String>,
    /// When the server counted more requests over the window than canaryd sent there
    /// (completed, failed or cancelled; the comparison was withheld): the server's count,
    /// canaryd's completed ones, and those it did not complete. The server's figures are over
    /// other requests too (another client's, or a warm-up that finished late).
    pub other_requests: Option<(u64, u64, u64)>,
    pub queue_depth_mean: Option<Fig>,
    pub kv_mean: Option<Fig>,
    pub kv_max: Option<Fig>,
    pub preemptions: Option<Fig>,
    pub swapped_max: Option<Fig>,
    pub gpu_util_pct: Option<Fig>,
    pub read_delay_ms: Option<Fig>,
    /// The share (0–1) of completed requests whose first token the kernel stamped on
    /// arrival: their client TTFT ends there, so canaryd's read delay is not in their part
    /// of [`Figures::ttft_gap_ms`].
    pub first_tokens_stamped: f64,
    pub cpu_wait_per_wakeup_ms: Option<Fig>,
    pub cpu_utilization: Option<Fig>,
    /// Seconds canaryd's cgroup was throttled by its CPU quota per second of the run.
    pub cpu_throttled_share: Option<Fig>,
    /// canaryd's own p99 lateness, ms: the schedule lag less what was held on purpose and
    /// the wait for a connection to open.
    pub dispatch_lag_p99_ms: Option<Fig>,
    /// Why each source is not usable, when it is not (`None`: usable).
    pub server_missing: Option<String>,
    pub gpu_missing: Option<String>,
    pub kernel_missing: Option<String>,
    pub client_cpu_missing: Option<String>,
    pub engine: Option<String>,
}

const EXACT: FigureKind = FigureKind::Exact;
const ESTIMATE: FigureKind = FigureKind::Estimate;

/// Why `source` gave nothing: its state, or that nothing reported it.
fn why(t: &RunTelemetry, source: Source) -> String {
    match t.source(source) {
        Some(SourceState::Available { .. }) => format!("{source}: available but reported nothing"),
        Some(state) => format!("{source}: {state}"),
        None => format!("{source}: not attached to this run"),
    }
}

impl Figures {
    pub fn of(s: &RunSummary, t: &RunTelemetry) -> Figures {
        let mut f = Figures {
            requests: s.requests,
            client_errors: s.client_errors,
            error_rate: s.error_rate,
            target_errors: s.errors - s.client_errors,
            http_statuses: s.errors_by_http_status.clone(),
            // Not given for under 2 requests or 100 ms: no rate, no wait derived from it.
            throughput: s.request_throughput.unwrap_or(0.0),
            ..Default::default()
        };
        let client = |name: &str| {
            s.metrics
                .get(name)
                .filter(|st| st.count > 0)
                .map(|st| Fig::new(st.avg, EXACT, "client"))
        };
        f.client_ttft_ms = client("time_to_first_token");
        // Over the first tokens the client TTFT mean is over: a completed request without
        // a kernel stamp (no `rx`, or none on its first token) was timed at canaryd's read.
        let rx = &s.receive_timestamps;
        let stamped: u64 = ["kernel", "kernel_bound"]
            .iter()
            .filter_map(|k| rx.first_token.get(*k))
            .sum();
        if let Some(ttfts) = s.metrics.get("time_to_first_token").filter(|t| t.count > 0) {
            f.first_tokens_stamped = (stamped as f64 / ttfts.count as f64).min(1.0);
            // Exact only on positive evidence: every first token stamped `kernel`. A
            // `kernel_bound` or `userspace` one, or one timed without receive timestamps, is
            // an upper bound, and so is a mean over it.
            let exact = rx.first_token.get("kernel").copied().unwrap_or(0);
            if exact < ttfts.count {
                f.client_ttft_ms = f.client_ttft_ms.map(|t| Fig {
                    kind: FigureKind::Bound,
                    ..t
                });
            }
        }
        f.client_e2e_ms = client("request_latency");
        // The ends likewise: exact only when every end was stamped `kernel`.
        if let Some(e2es) = s.metrics.get("request_latency").filter(|t| t.count > 0) {
            let exact = rx.end.get("kernel").copied().unwrap_or(0);
            if exact < e2es.count {
                f.client_e2e_ms = f.client_e2e_ms.map(|t| Fig {
                    kind: FigureKind::Bound,
                    ..t
                });
            }
        }
        // Not the schedule lag itself: a session's turn held for its previous turn, or a
        // request waiting for a slow handshake, is late on purpose or by the network, and
        // neither is canaryd falling behind.
        f.dispatch_lag_p99_ms = s
            .metrics
            .get("dispatch_lag")
            .filter(|st| st.count > 0)
            // A percentile of the histogram (within 0.1 %), not the value itself.
            .map(|st| Fig::new(st.p99, ESTIMATE, "client"));
        f.server_figures(s, t);
        f.gpu_figures(t);
        f.client_figures(t);
        f
    }

    fn server_figures(&mut self, s: &RunSummary, t: &RunTelemetry) {
        let server = t.server.as_ref().filter(|sv| sv.scrapes > 0);
        let Some(sv) = server else {
            self.server_missing = Some(why(t, Source::ServerMetrics));
            self.llama_timings(s);
            return;
        };
        self.engine = sv
            .engine
            .and_then(|e| serde_json::to_value(e).ok())
            .and_then(|v| v.as_str().map(str::to_string));
        if let Some(note) = &sv.note {
            self.server_missing = Some(format!("server_metrics: {note}"));
        }
        let src = "server_metrics";
        let ms = |e: &Option<crate::LatencyEstimate>| {
            e.as_ref()
                .and_then(|e| e.mean)
                .map(|m| Fig::new(m * 1e3, EXACT, src))
        };
        self.server_ttft_ms = ms(&sv.ttft_s);
        self.server_queue_ms = ms(&sv.queue_time_s);
        self.server_prefill_ms = ms(&sv.prefill_time_s).or_else(|| {
            let (ttft, queue) = (self.server_ttft_ms?, self.server_queue_ms?);
            Some(Fig::new((ttft.value - queue.value).max(0.0), ESTIMATE, src).fallback())
        });
        self.server_decode_ms = ms(&sv.decode_time_s);
        // Only over the same requests (counts matched): otherwise no gap is read.
        self.ttft_gap_ms = match &sv.comparison {
            Some(crate::Comparison::Matched {
                ttft_ms: Some(g), ..
            }) => {
                // Exact only when every compared first token was stamped `kernel`: over
                // upper bounds the gap is one too.
                let kind = match g.mean_kind {
                    crate::GapKind::Exact => EXACT,
                    crate::GapKind::UpperBound => FigureKind::Bound,
                };
                Some(Fig::new(g.mean, kind, "client and server_metrics"))
            }
            _ => None,
        };
        if let (Some(crate::Comparison::Withheld { reason, .. }), Some(_)) =
            (&sv.comparison, &sv.ttft_s)
        {
            self.ttft_withheld = Some(reason.clone());
        }
        if let Some(crate::Comparison::Withheld {
            server_n, client_n, ..
        }) = &sv.comparison
        {
            // canaryd's own failed and cancelled requests may be on the server's count.
            let own = s.errors + s.cancelled;
            if *server_n > client_n + own {
                self.other_requests = Some((*server_n, *client_n, own));
            }
        }
        // A sampled gauge's mean is an estimate; its largest sample is a lower bound on its
        // largest value (a peak between two scrapes is not seen).
        let gauge = |g: &Option<crate::GaugeStats>, max: bool| {
            g.map(|g| match max {
                true => Fig::new(g.max, FigureKind::Bound, src),
                false => Fig::new(g.mean, ESTIMATE, src),
            })
        };
        self.queue_depth_mean = gauge(&sv.queue_depth, false);
        self.kv_mean = gauge(&sv.kv_cache_usage, false);
        self.kv_max = gauge(&sv.kv_cache_usage, true);
        self.swapped_max = gauge(&sv.requests_swapped, true);
        self.preemptions = sv.preemptions.map(|p| Fig::new(p, EXACT, src));
        self.server_requests = sv
            .e2e_s
            .as_ref()
            .or(sv.ttft_s.as_ref())
            .map(|e| e.count)
            .filter(|&c| c > 0.0);
        self.server_window_s = (sv.window_s > 0.0).then_some(sv.window_s);
        if self.server_ttft_ms.is_none() {
            self.llama_timings(s);
        }
        if self.server_decode_ms.is_none() {
            self.decode_from_client();
        }
    }

    /// llama.cpp reports each request's prompt time in its stream (`timings.prompt_ms`):
    /// the server's prefill, and the client's TTFT beyond it.
    fn llama_timings(&mut self, s: &RunSummary) {
        let Some(gap) = s
            .metrics
            .get("ttft_minus_server_prompt_time")
            .filter(|g| g.count > 0)
        else {
            self.decode_from_client();
            return;
        };
        let src = "server_timings";
        self.ttft_gap_ms = Some(Fig::new(gap.avg, FigureKind::Bound, src).fallback());
        if let (None, Some(ttft)) = (self.server_prefill_ms, self.client_ttft_ms) {
            let prompt = (ttft.value - gap.avg).max(0.0);
            self.server_prefill_ms = Some(Fig::new(prompt, ESTIMATE, src).fallback());
        }
        self.decode_from_client();
    }

    /// Decode time as the client saw it: e2e minus TTFT (network and canaryd included).
    fn decode_from_client(&mut self) {
        if self.server_decode_ms.is_none() {
            if let (Some(e2e), Some(ttft)) = (self.client_e2e_ms, self.client_ttft_ms) {
                let d = (e2e.value - ttft.value).max(0.0);
                self.server_decode_ms = Some(Fig::new(d, FigureKind::Bound, "client").fallback());
            }
        }
    }

    fn gpu_figures(&mut self, t: &RunTelemetry) {
        match t.gpu.as_ref().and_then(|g| g.util_avg_pct) {
            Some(u) => {
                let src = match t.gpu.as_ref().and_then(|g| g.sources.first()) {
                    Some(crate::GpuSource::Dcgm) => "dcgm",
                    _ => "nvml",
                };
                self.gpu_util_pct = Some(Fig::new(u, ESTIMATE, src));
            }
            None => {
                self.gpu_missing = Some(format!(
                    "{}; {}",
                    why(t, Source::Nvml),
                    why(t, Source::Dcgm)
                ))
            }
        }
    }

    fn client_figures(&mut self, t: &RunTelemetry) {
        match t.kernel.as_ref().and_then(|k| k.client_overhead.as_ref()) {
            Some(st) if st.count > 0 => {
                // From the last segment in before canaryd's read: when more than one came,
                // the first token's own came earlier, so canaryd was at least this late.
                self.read_delay_ms = Some(Fig::new(st.avg, FigureKind::Bound, "ebpf"));
            }
            _ => self.kernel_missing = Some(why(t, Source::Ebpf)),
        }
        match &t.client_cpu {
            Some(c) => {
                // Differences of the kernel's ns counters: exact, but threads that exited
                // during the run are missing from the per-thread sums (lower bounds then).
                let src = "client_cpu";
                let kind = if c.exited_threads > 0 {
                    FigureKind::Bound
                } else {
                    EXACT
                };
                self.cpu_wait_per_wakeup_ms = c.wait_per_wakeup_ms.map(|w| Fig::new(w, kind, src));
                self.cpu_utilization = Some(Fig::new(c.utilization, kind, src));
                self.cpu_throttled_share = c
                    .throttled_s
                    .filter(|_| c.wall_s > 0.0)
                    .map(|t| Fig::new(t / c.wall_s, EXACT, src));
            }
            None => {
                self.client_cpu_missing = Some(
                    "client_cpu: canaryd's own CPU was not measured (no per-thread schedstat in \
                     /proc)"
                        .into(),
                )
            }
        }
    }
}
