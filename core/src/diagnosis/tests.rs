//! The rules on hand-made figures. The simulator tests (daemon/tests/diagnosis.rs) produce
//! each class from a server that really behaves that way; these pin the rules' edges.

use super::*;
use crate::record::{KernelTiming, RequestError, RequestRecord, Status};
use crate::stats::Stats;
use crate::summary::Aggregator;
use crate::telemetry::{
    ClientCpu, GaugeStats, GpuPoint, KernelRunSummary, LatencyEstimate, RunGpuSummary,
    RunServerSummary, ServerPoint, Source, SourceState, Window,
};
use crate::{ErrorKind, Goodput};

struct Run {
    agg: Aggregator,
    telemetry: RunTelemetry,
    /// Stands in for the summary's receive-timestamp counts when it has requests.
    rx: crate::summary::RxSummary,
}

/// `n` requests, one every 100 ms, with this TTFT and e2e; every `fail_every`-th a 503.
fn run(n: u32, ttft: f64, e2e: f64, fail_every: Option<u32>) -> Run {
    run_late(n, ttft, e2e, fail_every, 0.0)
}

/// [`run`], each request sent `lag` ms after its schedule.
fn run_late(n: u32, ttft: f64, e2e: f64, fail_every: Option<u32>, lag: f64) -> Run {
    let mut agg = Aggregator::new(Goodput::default());
    for i in 0..n {
        let mut r = RequestRecord {
            id: i,
            sent_at_ms: i as f64 * 100.0,
            ended_at_ms: i as f64 * 100.0 + e2e,
            ttft_ms: Some(ttft),
            e2e_ms: Some(e2e),
            schedule_lag_ms: lag,
            ..Default::default()
        };
        if fail_every.is_some_and(|k| i % k == 0) {
            r.status = Status::Error;
            r.error = Some(RequestError {
                kind: ErrorKind::HttpStatus,
                http_status: Some(503),
                message: String::new(),
            });
        }
        agg.add(&r, &Default::default());
    }
    let mut telemetry = RunTelemetry::default();
    for s in Source::ALL {
        telemetry.sources.insert(s, SourceState::available("test"));
    }
    Run {
        agg,
        telemetry,
        rx: Default::default(),
    }
}

fn est(mean_ms: f64) -> Option<LatencyEstimate> {
    let s = mean_ms / 1e3;
    Some(LatencyEstimate {
        count: 100.0,
        mean: Some(s),
        p50: Some(bucket(s)),
        p90: Some(bucket(s)),
        p95: Some(bucket(s)),
        p99: Some(bucket(s)),
    })
}

/// A bucket holding `s` seconds.
fn bucket(s: f64) -> crate::BucketQuantile {
    crate::BucketQuantile {
        lower_bound: s * 0.9,
        upper_bound: Some(s * 1.1),
        estimate: s,
    }
}

fn gauge(mean: f64, max: f64) -> Option<GaugeStats> {
    Some(GaugeStats {
        mean,
        max,
        samples: 10,
    })
}

/// A vLLM-like server summary: TTFT `ttft`, of which `queue` queued and `prefill` in prefill;
/// decode `decode` (all ms); nothing waiting, KV at 20 %.
fn server(ttft: f64, queue: f64, prefill: f64, decode: f64, client_ttft: f64) -> RunServerSummary {
    RunServerSummary {
        engine: Some(crate::Engine::VllmV1),
        scrapes: 10,
        ttft_s: est(ttft),
        queue_time_s: est(queue),
        prefill_time_s: est(prefill),
        decode_time_s: est(decode),
        queue_depth: gauge(0.0, 0.0),
        kv_cache_usage: gauge(0.2, 0.25),
        preemptions: Some(0.0),
        comparison: Some(crate::Comparison::Matched {
            requests: 100,
            ttft_ms: Some(crate::ClientMinusServer {
                mean: client_ttft - ttft,
                mean_kind: crate::GapKind::Exact,
                client_times: None,
                p50: None,
                p99: None,
            }),
            e2e_ms: None,
        }),
        ..Default::default()
    }
}

fn gpu(util: f64) -> RunGpuSummary {
    RunGpuSummary {
        util_avg_pct: Some(util),
        util_max_pct: Some(util),
        power_avg_w: None,
        power_max_w: None,
        energy: None,
        energy_per_output_token_j: None,
        gpus: 1,
        sources: vec![crate::GpuSource::Nvml],
        mem_used_max_bytes: None,
        mem_used_max_pct: None,
        temp_max_c: None,
        throttle_reasons: None,
        process_sm_util_avg_pct: None,
        process_sm_util_max_pct: None,
        process_mem_util_avg_pct: None,
        sm_clock_min_mhz: None,
        sm_clock_avg_mhz: None,
        mem_clock_avg_mhz: None,
        util_mem_avg_pct: None,
        util_mem_max_pct: None,
        per_gpu: Vec::new(),
    }
}

fn stats(avg: f64) -> Option<Stats> {
    Some(Stats {
        count: 10,
        avg,
        min: avg,
        max: avg,
        std: 0.0,
        p1: avg,
        p5: avg,
        p10: avg,
        p25: avg,
        p50: avg,
        p75: avg,
        p90: avg,
        p95: avg,
        p99: avg,
        p99_9: avg,
        unit: "ms".into(),
    })
}

fn quiet_client() -> ClientCpu {
    ClientCpu {
        wall_s: 10.0,
        cpu_s: 0.5,
        cpus_allowed: 2,
        utilization: 0.025,
        run_delay_s: 0.01,
        timeslices: 1000,
        wait_per_wakeup_ms: Some(0.01),
        ..Default::default()
    }
}

impl Run {
    fn diagnose(&self) -> Diagnosis {
        let mut summary = self.agg.summary();
        if self.rx.requests > 0 {
            summary.receive_timestamps = self.rx.clone();
        }
        diagnose(&DiagnosisInput {
            summary: &summary,
            telemetry: &self.telemetry,
            timeline: Some(self.agg.timeline()),
        })
    }
}

/// The diagnosis's `network_mean` evidence.
fn network_mean(d: &Diagnosis) -> &Evidence {
    d.evidence
        .iter()
        .find(|e| e.name == "network_mean")
        .unwrap()
}

fn finding(d: &Diagnosis, c: Bottleneck) -> &Finding {
    d.findings.iter().find(|f| f.class == c).unwrap()
}

#[test]
fn a_run_with_no_stress_is_healthy_and_says_what_it_could_not_judge() {
    let mut r = run(100, 22.0, 230.0, None);
    r.telemetry.server = Some(server(20.0, 0.1, 5.0, 200.0, 22.0));
    r.telemetry.client_cpu = Some(quiet_client());
    r.telemetry
        .sources
        .insert(Source::Nvml, SourceState::unavailable("no libnvidia-ml.so"));
    r.telemetry
        .sources
        .insert(Source::Dcgm, SourceState::Disabled);
    let d = r.diagnose();
    assert_eq!(d.class, Bottleneck::Healthy, "{d:#?}");
    assert_eq!(d.confidence, Confidence::Medium);
    assert_eq!(
        finding(&d, Bottleneck::ComputeBound).state,
        RuleState::Unknown
    );
    assert!(d.why.contains("no libnvidia-ml.so"), "{}", d.why);
    assert!(d.also.is_empty());
    // The same figures, the same answer.
    assert_eq!(r.diagnose(), d);
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["class"], "healthy");
    let back: Diagnosis = serde_json::from_value(json).unwrap();
    assert_eq!(back, d);
}

#[test]
fn queue_time_dominating_ttft_is_queueing() {
    let mut r = run(100, 460.0, 700.0, None);
    r.telemetry.server = Some(server(450.0, 400.0, 40.0, 230.0, 460.0));
    let d = r.diagnose();
    assert_eq!(d.class, Bottleneck::Queueing, "{d:#?}");
    let share = d
        .thresholds
        .iter()
        .find(|t| t.figure == "queue_share_of_ttft")
        .unwrap();
    assert!((share.observed - 400.0 / 450.0).abs() < 1e-9);
    // Each figure and its limit with their unit, as the evidence line gives them.
    assert!(
        d.why
            .contains("server_queue_time_mean 400 ms ≥ 10.0 ms; queue_share_of_ttft 0.889 ratio ≥ 0.500 ratio"),
        "{}",
        d.why
    );
    let json = serde_json::to_value(&d.thresholds[0]).unwrap();
    assert_eq!(json["unit"], "ms", "{json}");
    // Decode (230 ms) is not half of the queue (400 ms) and 400 is far over 10 ms.
    assert_eq!(d.confidence, Confidence::High);
}

#[test]
fn a_twenty_second_kv_burst_is_not_averaged_away() {
    // 600 s at 1 s scrapes; KV at 0.2 except 0.97 from 300 s to 320 s: the mean is 0.23.
    let mut r = run(6000, 30.0, 400.0, None);
    let mut s = server(25.0, 2.0, 20.0, 360.0, 30.0);
    s.kv_cache_usage = gauge(0.225, 0.97);
    r.telemetry.server = Some(s);
    r.telemetry.series.server = (0..=600)
        .map(|t| ServerPoint {
            t_s: t as f64,
            kv_usage: Some(if (301..=320).contains(&t) { 0.97 } else { 0.2 }),
            queue_depth: Some(0.0),
            ..Default::default()
        })
        .collect();
    let d = r.diagnose();
    assert_eq!(d.class, Bottleneck::KvMemoryBound, "{d:#?}");
    let i = d.interval.as_ref().unwrap();
    assert_eq!((i.start_s, i.end_s, i.held_s), (300.0, 320.0, 20.0));
    assert!((i.peak - 0.97).abs() < 1e-12);
    let t = &d.thresholds[0];
    assert_eq!(
        (t.figure.as_str(), t.observed),
        ("kv_high_consecutive_scrapes", 20.0)
    );
}

#[test]
fn preemptions_are_memory_pressure() {
    let mut r = run(100, 30.0, 400.0, None);
    let mut s = server(25.0, 2.0, 20.0, 360.0, 30.0);
    s.preemptions = Some(12.0);
    r.telemetry.server = Some(s);
    let d = r.diagnose();
    assert_eq!(d.class, Bottleneck::KvMemoryBound, "{d:#?}");
    assert_eq!(d.thresholds[0].figure, "preemptions_per_request");
    assert!((d.thresholds[0].observed - 0.12).abs() < 1e-12);
}

// The server also served other clients (400 requests in its histograms, canaryd's 100): its
// preemptions are counted over its own requests, not over canaryd's (which made 3 of them
// read as 0.03 a request, memory pressure).
#[test]
fn preemptions_are_counted_per_request_the_server_served() {
    let mut r = run(100, 30.0, 400.0, None);
    let mut s = server(25.0, 2.0, 20.0, 360.0, 30.0);
    s.preemptions = Some(3.0);
    s.ttft_s.as_mut().unwrap().count = 400.0;
    r.telemetry.server = Some(s);
    let d = r.diagnose();
    let kv = d
        .findings
        .iter()
        .find(|f| f.class == Bottleneck::KvMemoryBound)
        .unwrap();
    let t = kv
        .thresholds
        .iter()
        .find(|t| t.figure == "preemptions_per_request")
        .unwrap();
    assert!((t.observed - 0.0075).abs() < 1e-12, "{t:?}");
    assert!(!t.met);
}

#[test]
fn a_gap_the_server_does_not_see_is_network() {
    let mut r = run(100, 130.0, 330.0, None);
    r.telemetry.server = Some(server(25.0, 0.5, 20.0, 200.0, 130.0));
    r.telemetry.client_cpu = Some(quiet_client());
    let d = r.diagnose();
    assert_eq!(d.class, Bottleneck::Network, "{d:#?}");
    let net = network_mean(&d);
    assert_eq!(net.value, 105.0);
    // Without the kernel's read delay the gap also holds canaryd's own: a bound.
    assert_eq!(net.kind, FigureKind::Bound);
    assert_eq!(d.confidence, Confidence::Medium);
    // With it, the read delay is taken out.
    r.telemetry.kernel = Some(KernelRunSummary {
        client_overhead: stats(0.4),
        ..Default::default()
    });
    let d = r.diagnose();
    let net = network_mean(&d);
    assert!((net.value - 104.6).abs() < 1e-9);
    assert_eq!(d.confidence, Confidence::High);
    // First tokens the kernel stamped on arrival: their TTFT ends before canaryd's read,
    // so the read delay is not in the gap, and is not taken out again. A quarter at read.
    r.rx.requests = 100;
    r.rx.first_token
        .extend([("kernel".to_string(), 75), ("userspace".to_string(), 25)]);
    let net_of = |r: &Run| network_mean(&r.diagnose()).value;
    assert!((net_of(&r) - 104.9).abs() < 1e-9, "{}", net_of(&r));
    r.rx.first_token.clear();
    r.rx.first_token.insert("kernel".to_string(), 100);
    assert_eq!(net_of(&r), 105.0);
    // Stamped and without eBPF: nothing to take out, and the figure is not a bound.
    r.telemetry.kernel = None;
    let d = r.diagnose();
    let net = network_mean(&d);
    assert_eq!((net.value, net.kind), (105.0, FigureKind::Estimate));
}

// The audit: `client_minus_server_ttft_mean … (exact…)` over first tokens that were all
// kernel_bound, upper bounds. Exact only on positive evidence: every one stamped `kernel`.
#[test]
fn a_gap_over_first_tokens_that_are_bounds_is_bound_evidence() {
    for (stamp, kind, network) in [
        ("kernel_bound", FigureKind::Bound, FigureKind::Bound),
        ("userspace", FigureKind::Bound, FigureKind::Bound),
        ("kernel", FigureKind::Exact, FigureKind::Estimate),
    ] {
        let mut r = run(100, 130.0, 330.0, None);
        r.telemetry.client_cpu = Some(quiet_client());
        r.rx.requests = 100;
        r.rx.first_token.insert(stamp.to_string(), 100);
        let mut summary = r.agg.summary();
        summary.receive_timestamps = r.rx.clone();
        let mut s = server(25.0, 0.5, 20.0, 200.0, 130.0);
        s.comparison = crate::Comparison::of(&summary, &s);
        r.telemetry.server = Some(s);
        let d = r.diagnose();
        assert_eq!(d.class, Bottleneck::Network, "{d:#?}");
        let of = |name: &str| d.evidence.iter().find(|e| e.name == name).unwrap().kind;
        assert_eq!(of("client_minus_server_ttft_mean"), kind, "{stamp}");
        assert_eq!(of("client_ttft_mean"), kind, "{stamp}");
        // The network's share is the gap: no closer than it.
        assert_eq!(of("network_mean"), network, "{stamp}");
    }
}

// The audit: `client_e2e_mean` was always exact, though an end timed at canaryd's read or by
// a later segment's stamp is an upper bound, and a mean over it too.
#[test]
fn the_client_e2e_mean_is_exact_only_when_every_end_was_stamped() {
    for (stamp, kind) in [
        ("kernel_bound", FigureKind::Bound),
        ("userspace", FigureKind::Bound),
        ("kernel", FigureKind::Exact),
    ] {
        let r = run(100, 130.0, 330.0, None);
        let mut summary = r.agg.summary();
        summary.receive_timestamps.requests = 100;
        summary
            .receive_timestamps
            .end
            .insert(stamp.to_string(), 100);
        let f = Figures::of(&summary, &r.telemetry);
        assert_eq!(f.client_e2e_ms.unwrap().kind, kind, "{stamp}");
    }
    // Receive timestamps off: no end counted, every one canaryd's read.
    let r = run(100, 130.0, 330.0, None);
    let f = Figures::of(&r.agg.summary(), &r.telemetry);
    assert_eq!(f.client_e2e_ms.unwrap().kind, FigureKind::Bound);
}

#[test]
fn failing_requests_are_the_targets_errors_before_anything_else() {
    let mut r = run(100, 460.0, 700.0, Some(5));
    r.telemetry.server = Some(server(450.0, 400.0, 40.0, 230.0, 460.0));
    let d = r.diagnose();
    assert_eq!(d.class, Bottleneck::TargetErrors, "{d:#?}");
    assert_eq!(d.also, [Bottleneck::Queueing]);
    assert!((d.thresholds[0].observed - 0.2).abs() < 1e-12);
    let i = d.interval.as_ref().unwrap();
    assert_eq!((i.start_s, i.end_s), (0.0, 10.0));
    // Which status the target failed with, in the evidence and the printed lines.
    let e = d.evidence.iter().find(|e| e.name == "http_status_503");
    assert_eq!(e.map(|e| e.value), Some(20.0), "{:#?}", d.evidence);
    assert!(d.why.contains("; http_status 503 ×20; held "), "{}", d.why);
    let lines = d.lines().join("\n");
    assert!(
        lines.contains("http_status_503 20.0 requests (exact, client)"),
        "{lines}"
    );
}

// Every request cancelled on purpose: no error rate, so the target's errors are not judged
// (an error rate of 0 used to clear them, as if the target had answered every request).
#[test]
fn a_run_with_nothing_judged_leaves_the_targets_errors_unknown() {
    let mut r = run(10, 50.0, 100.0, None);
    r.agg = Aggregator::new(Goodput::default());
    for i in 0..10 {
        let cut = RequestRecord {
            id: i,
            sent_at_ms: i as f64 * 100.0,
            ended_at_ms: i as f64 * 100.0 + 50.0,
            status: Status::Cancelled,
            ..Default::default()
        };
        r.agg.add(&cut, &Default::default());
    }
    r.telemetry.server = Some(server(20.0, 0.1, 5.0, 200.0, 22.0));
    let d = r.diagnose();
    let f = finding(&d, Bottleneck::TargetErrors);
    assert_eq!(f.state, RuleState::Unknown, "{d:#?}");
    assert!(f.thresholds.is_empty() && f.evidence.is_empty(), "{f:#?}");
    assert!(f.missing[0].contains("no request was judged"), "{f:#?}");
    assert_ne!(d.class, Bottleneck::TargetErrors);
}

#[test]
fn a_client_whose_cpu_wait_made_it_late_is_client_bound_before_the_servers_queue() {
    let mut r = run_late(100, 460.0, 700.0, None, 80.0);
    r.telemetry.server = Some(server(400.0, 350.0, 40.0, 230.0, 460.0));
    r.telemetry.client_cpu = Some(ClientCpu {
        wait_per_wakeup_ms: Some(55.0),
        utilization: 0.1,
        ..quiet_client()
    });
    let d = r.diagnose();
    assert_eq!(d.class, Bottleneck::ClientBound, "{d:#?}");
    let t = &d.thresholds[0];
    // 10 % of a 460 ms TTFT; the smaller of the wait (55) and the p99 lag (80).
    assert_eq!(
        (t.figure.as_str(), t.limit, t.observed),
        ("cpu_wait_per_wakeup_and_dispatch_lag_p99", 46.0, 55.0)
    );
    assert!(d.also.contains(&Bottleneck::Queueing));
    // A wait of 1 ms per wake-up is no bottleneck.
    r.telemetry.client_cpu = Some(ClientCpu {
        wait_per_wakeup_ms: Some(1.0),
        ..quiet_client()
    });
    assert_eq!(r.diagnose().class, Bottleneck::Queueing);
}

#[test]
fn a_session_held_on_purpose_is_not_canaryd_late() {
    // Each turn waited 80 ms for its previous turn (hold) and connected in time: late against
    // the trace's schedule, yet canaryd sent every request the moment it could.
    let mut agg = Aggregator::new(Goodput::default());
    for i in 0..100u32 {
        agg.add(
            &RequestRecord {
                id: i,
                sent_at_ms: i as f64 * 100.0,
                ended_at_ms: i as f64 * 100.0 + 700.0,
                ttft_ms: Some(460.0),
                e2e_ms: Some(700.0),
                schedule_lag_ms: 80.0,
                hold_ms: 79.9,
                ..Default::default()
            },
            &Default::default(),
        );
    }
    let mut r = Run {
        agg,
        ..run(0, 0.0, 0.0, None)
    };
    r.telemetry.server = Some(server(400.0, 350.0, 40.0, 230.0, 460.0));
    r.telemetry.client_cpu = Some(ClientCpu {
        wait_per_wakeup_ms: Some(55.0),
        utilization: 0.1,
        ..quiet_client()
    });
    let d = r.diagnose();
    assert_eq!(d.class, Bottleneck::Queueing, "{d:#?}");
    let cb = finding(&d, Bottleneck::ClientBound);
    assert_eq!(cb.state, RuleState::Clear, "{cb:#?}");
    let t = cb
        .thresholds
        .iter()
        .find(|t| t.figure == "cpu_wait_per_wakeup_and_dispatch_lag_p99")
        .unwrap();
    assert!(t.observed < 1.0 && !t.met, "{t:#?}");
}

#[test]
fn a_cpu_wait_that_made_nothing_late_is_not_client_bound() {
    // A loaded host: canaryd's threads wait for a CPU, yet every request left on time.
    let mut r = run(100, 460.0, 700.0, None);
    r.telemetry.server = Some(server(400.0, 350.0, 40.0, 230.0, 460.0));
    r.telemetry.client_cpu = Some(ClientCpu {
        wait_per_wakeup_ms: Some(55.0),
        utilization: 0.1,
        ..quiet_client()
    });
    let d = r.diagnose();
    assert_eq!(d.class, Bottleneck::Queueing, "{d:#?}");
    let cb = finding(&d, Bottleneck::ClientBound);
    assert_eq!(cb.state, RuleState::Clear);
    let t = cb
        .thresholds
        .iter()
        .find(|t| t.figure == "cpu_wait_per_wakeup_and_dispatch_lag_p99")
        .unwrap();
    assert_eq!((t.observed, t.met), (0.0, false));
    // Under 10 ms per wake-up does not count, however late the requests.
    let mut r = run_late(100, 30.0, 400.0, None, 50.0);
    r.telemetry.server = Some(server(25.0, 0.5, 20.0, 360.0, 30.0));
    r.telemetry.client_cpu = Some(ClientCpu {
        wait_per_wakeup_ms: Some(8.0),
        ..quiet_client()
    });
    assert_eq!(
        finding(&r.diagnose(), Bottleneck::ClientBound).state,
        RuleState::Clear
    );
}

#[test]
fn a_client_throttled_by_its_cpu_quota_is_client_bound() {
    let mut r = run_late(100, 30.0, 400.0, None, 40.0);
    r.telemetry.server = Some(server(25.0, 0.5, 20.0, 360.0, 30.0));
    let throttled = |s: f64| ClientCpu {
        cpu_quota_cores: Some(0.05),
        throttled_s: Some(s),
        throttled_periods: Some(40),
        utilization: 0.5,
        ..quiet_client()
    };
    // 4 s of a 10 s run throttled.
    r.telemetry.client_cpu = Some(throttled(4.0));
    let d = r.diagnose();
    assert_eq!(d.class, Bottleneck::ClientBound, "{d:#?}");
    assert_eq!(d.thresholds.len(), 2, "{d:#?}");
    let t = &d.thresholds[0];
    assert_eq!(
        (t.figure.as_str(), t.observed, t.limit),
        ("cpu_throttled_s_per_run_s", 0.4, 0.1)
    );
    let t = &d.thresholds[1];
    assert_eq!(
        (t.figure.as_str(), t.observed, t.limit),
        ("dispatch_lag_p99", 40.0, 10.0)
    );
    let e = d
        .evidence
        .iter()
        .find(|e| e.name == "cpu_throttled_s_per_run_s")
        .unwrap();
    assert_eq!(
        (e.kind, e.source.as_str()),
        (FigureKind::Exact, "client_cpu")
    );
    let lags = d.evidence.iter().filter(|e| e.name == "dispatch_lag_p99");
    assert_eq!(lags.count(), 1, "{d:#?}");
    assert_eq!(d.confidence, Confidence::High);
    assert!(
        d.why
            .contains("cpu_throttled_s_per_run_s 0.400 ratio ≥ 0.100 ratio"),
        "{}",
        d.why
    );
    // Under a tenth of the run throttled: not canaryd's bottleneck.
    r.telemetry.client_cpu = Some(throttled(0.5));
    assert_eq!(
        finding(&r.diagnose(), Bottleneck::ClientBound).state,
        RuleState::Clear
    );
    // Throttled (its container's quota, say) but every request left on time: not either.
    let mut r = run(100, 30.0, 400.0, None);
    r.telemetry.server = Some(server(25.0, 0.5, 20.0, 360.0, 30.0));
    r.telemetry.client_cpu = Some(throttled(4.0));
    assert_eq!(
        finding(&r.diagnose(), Bottleneck::ClientBound).state,
        RuleState::Clear
    );
}

#[test]
fn a_busy_gpu_with_nothing_waiting_is_compute_bound() {
    let mut r = run(100, 30.0, 900.0, None);
    r.telemetry.server = Some(server(25.0, 0.5, 20.0, 860.0, 30.0));
    r.telemetry.gpu = Some(gpu(97.0));
    r.telemetry.series.gpu = (0..20)
        .map(|t| GpuPoint {
            t_s: t as f64 * 0.5,
            util_pct: 97.0,
            gpus: 1,
        })
        .collect();
    let d = r.diagnose();
    assert_eq!(d.class, Bottleneck::ComputeBound, "{d:#?}");
    assert_eq!(d.interval.as_ref().unwrap().start_s, 0.0);
    // At 73 % it is not.
    r.telemetry.gpu = Some(gpu(73.0));
    assert_eq!(r.diagnose().class, Bottleneck::Healthy);
}

#[test]
fn a_first_token_waiting_on_prefill_is_prefill_bound() {
    let mut r = run(100, 215.0, 260.0, None);
    r.telemetry.server = Some(server(210.0, 1.0, 205.0, 45.0, 215.0));
    let d = r.diagnose();
    assert_eq!(d.class, Bottleneck::PrefillBound, "{d:#?}");
    assert_eq!(d.thresholds.len(), 3);
}

#[test]
fn without_the_servers_figures_the_class_is_unknown_and_says_why() {
    let mut r = run(100, 215.0, 260.0, None);
    r.telemetry.sources.insert(
        Source::ServerMetrics,
        SourceState::unavailable("http://h:1/metrics: cannot connect"),
    );
    let d = r.diagnose();
    assert_eq!(d.class, Bottleneck::Unknown, "{d:#?}");
    assert_eq!(d.confidence, Confidence::Low);
    assert!(
        d.why
            .contains("server_metrics: unavailable: http://h:1/metrics"),
        "{}",
        d.why
    );
    // The kernel joined to records still lets the client rule judge.
    assert_eq!(
        finding(&d, Bottleneck::TargetErrors).state,
        RuleState::Clear
    );
}

#[test]
fn llama_cpp_prompt_timings_stand_in_for_missing_histograms() {
    let mut agg = Aggregator::new(Goodput::default());
    for i in 0..20 {
        let r = RequestRecord {
            sent_at_ms: i as f64 * 100.0,
            ended_at_ms: i as f64 * 100.0 + 300.0,
            ttft_ms: Some(250.0),
            e2e_ms: Some(300.0),
            server_timings: Some(crate::ServerTimings {
                prompt_ms: Some(240.0),
                ..Default::default()
            }),
            kernel: Some(KernelTiming::default()),
            ..Default::default()
        };
        agg.add(&r, &Default::default());
    }
    let t = RunTelemetry {
        server: Some(RunServerSummary {
            engine: Some(crate::Engine::LlamaCpp),
            scrapes: 5,
            queue_depth: gauge(0.0, 0.0),
            ..Default::default()
        }),
        ..Default::default()
    };
    let summary = agg.summary();
    let d = diagnose(&DiagnosisInput {
        summary: &summary,
        telemetry: &t,
        timeline: Some(agg.timeline()),
    });
    assert_eq!(d.class, Bottleneck::PrefillBound, "{d:#?}");
    assert!(finding(&d, Bottleneck::PrefillBound).fallback);
    assert_eq!(finding(&d, Bottleneck::Network).state, RuleState::Clear);
    assert_eq!(
        finding(&d, Bottleneck::KvMemoryBound).state,
        RuleState::Unknown
    );
}

#[test]
fn the_windows_of_a_series_point_to_where_the_gap_held() {
    // Client TTFT 20 ms, then 220 ms from 5 s on; the server's stays at 15 ms.
    let mut agg = Aggregator::new(Goodput::default());
    for i in 0..100 {
        let ttft = if i >= 50 { 220.0 } else { 20.0 };
        let r = RequestRecord {
            sent_at_ms: i as f64 * 100.0,
            ended_at_ms: i as f64 * 100.0 + 400.0,
            ttft_ms: Some(ttft),
            e2e_ms: Some(400.0),
            ..Default::default()
        };
        agg.add(&r, &Default::default());
    }
    let mut t = RunTelemetry {
        server: Some(server(15.0, 0.1, 10.0, 300.0, 120.0)),
        ..Default::default()
    };
    t.series.server = (0..=10)
        .map(|s| ServerPoint {
            t_s: s as f64,
            ttft: Some(Window {
                count: 10.0,
                sum: 0.15,
            }),
            ..Default::default()
        })
        .collect();
    let summary = agg.summary();
    let d = diagnose(&DiagnosisInput {
        summary: &summary,
        telemetry: &t,
        timeline: Some(agg.timeline()),
    });
    assert_eq!(d.class, Bottleneck::Network, "{d:#?}");
    let i = d.interval.unwrap();
    assert_eq!((i.start_s, i.end_s), (5.0, 10.0));
}

#[test]
fn a_ttft_histogram_over_other_requests_is_said_withheld_not_missing() {
    let mut r = run(100, 30.0, 400.0, None);
    let mut sv = server(25.0, 0.5, 20.0, 360.0, 30.0);
    sv.comparison = Some(crate::Comparison::Withheld {
        reason: "the server counted 130 requests, canaryd completed 100".into(),
        client_n: 100,
        server_n: 130,
    });
    r.telemetry.server = Some(sv);
    let d = r.diagnose();
    let net = finding(&d, Bottleneck::Network);
    assert_eq!(net.state, RuleState::Unknown, "{net:#?}");
    let why = net.missing.join("; ");
    assert!(
        why.contains("not compared with canaryd's (the server counted 130 requests"),
        "{why}"
    );
    assert!(!why.contains("exposes no TTFT histogram"), "{why}");
}

#[test]
fn a_sampled_maximum_is_a_lower_bound() {
    let mut r = run(100, 30.0, 400.0, None);
    r.telemetry.server = Some(server(25.0, 0.5, 20.0, 360.0, 30.0));
    let d = r.diagnose();
    let kv = d
        .findings
        .iter()
        .flat_map(|f| &f.evidence)
        .find(|e| e.name == "kv_cache_usage_max")
        .expect("kv evidence");
    assert_eq!(kv.kind, FigureKind::Bound, "{kv:#?}");
}

/// `n` requests sent `every` ms apart from the run's start, each with this TTFT and e2e (ms),
/// every one a 503 when `fail`: a run `(n - 1) × every + e2e` ms long.
fn short_run(n: u32, every: f64, ttft: f64, e2e: f64, fail: bool) -> Aggregator {
    let mut agg = Aggregator::new(Goodput::default());
    for i in 0..n {
        let sent = i as f64 * every;
        let mut r = RequestRecord {
            id: i,
            sent_at_ms: sent,
            ended_at_ms: sent + e2e,
            ttft_ms: (!fail).then_some(ttft),
            e2e_ms: Some(e2e),
            ..Default::default()
        };
        if fail {
            r.status = Status::Error;
            r.error = Some(RequestError {
                kind: ErrorKind::HttpStatus,
                http_status: Some(503),
                message: String::new(),
            });
        }
        agg.add(&r, &Default::default());
    }
    agg
}

fn diagnose_with(agg: &Aggregator, telemetry: &RunTelemetry) -> Diagnosis {
    diagnose(&DiagnosisInput {
        summary: &agg.summary(),
        telemetry,
        timeline: Some(agg.timeline()),
    })
}

// The README's `--speedup 10 --scale-lengths 0.05` replay: 20 requests in 0.497 s, prefill
// held throughout, scraped every second (one scrape before the run, the last one 18 ms after
// it). It printed `held 0.0–0.5 s (52% of the run)`: the share was of the client's 1 s time
// bucket and the stretch ran to the last scrape, past the run.
#[test]
fn a_half_second_run_held_throughout_is_all_of_the_run() {
    let agg = short_run(20, 15.0, 150.0, 212.0, false);
    assert!((agg.summary().duration_s - 0.497).abs() < 1e-12);
    let mut t = RunTelemetry {
        server: Some(server(145.0, 0.5, 140.0, 60.0, 150.0)),
        ..Default::default()
    };
    let w = |ms: f64| Window {
        count: 20.0,
        sum: 20.0 * ms / 1e3,
    };
    t.series.server = [-0.485, 0.515]
        .map(|t_s| ServerPoint {
            t_s,
            ttft: Some(w(145.0)),
            prefill_time: Some(w(140.0)),
            ..Default::default()
        })
        .to_vec();
    let d = diagnose_with(&agg, &t);
    assert_eq!(d.class, Bottleneck::PrefillBound, "{d:#?}");
    let i = d.interval.as_ref().unwrap();
    assert!((i.start_s, i.end_s) == (0.0, 0.497), "{i:?}");
    assert!((i.held_s - 0.497).abs() < 1e-12, "{i:?}");
    assert!((i.share_of_run - 1.0).abs() < 1e-12, "{i:?}");
    assert!(
        d.why.ends_with("held 0.000–0.497 s (100% of the run)"),
        "{}",
        d.why
    );
}

// `profile … -H "x-sim-fault: status=503"` finished in 27 ms: every request failed, the
// server's histograms counted none, and the target's errors were said to hold 0.0–1.0 s (the
// client's time bucket), and the network rule blamed a TTFT histogram the server does export.
#[test]
fn an_all_errors_run_of_27_ms_holds_its_errors_for_27_ms_and_lacks_a_client_ttft() {
    let agg = short_run(10, 2.0, 0.0, 9.0, true);
    assert!((agg.summary().duration_s - 0.027).abs() < 1e-12);
    let mut t = RunTelemetry::default();
    for s in Source::ALL {
        t.sources.insert(s, SourceState::available("test"));
    }
    // What the simulator's /metrics gave over that window: gauges, no observation in any
    // histogram, no comparison.
    t.server = Some(RunServerSummary {
        engine: Some(crate::Engine::VllmV1),
        scrapes: 4,
        window_s: 0.1,
        queue_depth: gauge(0.0, 0.0),
        kv_cache_usage: gauge(0.0, 0.0),
        preemptions: Some(0.0),
        ..Default::default()
    });
    let d = diagnose_with(&agg, &t);
    assert_eq!(d.class, Bottleneck::TargetErrors, "{d:#?}");
    let i = d.interval.as_ref().unwrap();
    assert!((i.start_s, i.end_s) == (0.0, 0.027), "{i:?}");
    assert!((i.share_of_run - 1.0).abs() < 1e-12, "{i:?}");
    assert!(
        d.why.ends_with("held 0.000–0.027 s (100% of the run)"),
        "{}",
        d.why
    );
    for class in [Bottleneck::Network, Bottleneck::PrefillBound] {
        let x = finding(&d, class);
        assert_eq!(x.state, RuleState::Unknown, "{x:#?}");
        let why = x.missing.join("; ");
        assert!(
            why.starts_with("no client TTFT: no request completed with a first token"),
            "{why}"
        );
        assert!(!why.contains("exposes no TTFT histogram"), "{why}");
    }
    // The printed line says the same.
    let lines = d.lines().join("\n");
    assert!(
        lines.contains("network: no client TTFT: no request completed with a first token"),
        "{lines}"
    );
}

// A long run's last time bucket and last scrape reach past its last response: the stretch
// ends with the run and the share stays at most 100 %.
#[test]
fn a_long_runs_stretch_ends_with_the_run() {
    // 100 requests 100 ms apart, each failing after 50 ms: 9.95 s, ten 1 s buckets.
    let agg = short_run(100, 100.0, 0.0, 50.0, true);
    assert!((agg.summary().duration_s - 9.95).abs() < 1e-9);
    let mut t = RunTelemetry::default();
    for s in Source::ALL {
        t.sources.insert(s, SourceState::available("test"));
    }
    let d = diagnose_with(&agg, &t);
    assert_eq!(d.class, Bottleneck::TargetErrors, "{d:#?}");
    let i = d.interval.as_ref().unwrap();
    assert!((i.start_s, i.end_s) == (0.0, 9.95), "{i:?}");
    assert!((i.held_s - 9.95).abs() < 1e-9, "{i:?}");
    assert!((i.share_of_run - 1.0).abs() < 1e-12, "{i:?}");
    assert!(
        d.why.ends_with("held 0.0–9.9 s (100% of the run)"),
        "{}",
        d.why
    );

    // Scraped every second from before the start to past the end, the KV cache full on
    // every scrape: all of the run, not more.
    let mut r = run(100, 30.0, 400.0, None);
    let run_s = r.agg.summary().duration_s;
    r.telemetry.server = Some(server(25.0, 2.0, 20.0, 360.0, 30.0));
    r.telemetry.series.server = (0..=12)
        .map(|k| ServerPoint {
            t_s: k as f64 - 0.5,
            kv_usage: Some(0.97),
            queue_depth: Some(0.0),
            ..Default::default()
        })
        .collect();
    let d = r.diagnose();
    assert_eq!(d.class, Bottleneck::KvMemoryBound, "{d:#?}");
    let i = d.interval.as_ref().unwrap();
    assert!((i.start_s, i.end_s) == (0.0, run_s), "{i:?} of {run_s} s");
    assert!((i.share_of_run - 1.0).abs() < 1e-12, "{i:?}");
}

// Audit of the server telemetry, F1: `queueing (high confidence)` was stated from a server's
// figures that the run had found to be over more requests than canaryd's (the comparison
// withheld for the count). That is a doubt, said in the why; a server that counted fewer
// (a request not yet counted at the last scrape) is not one.
#[test]
fn server_figures_over_other_requests_are_a_doubt() {
    let withheld = |server_n: u64| {
        let mut r = run(100, 460.0, 700.0, None);
        let mut sv = server(450.0, 400.0, 40.0, 230.0, 460.0);
        sv.comparison = Some(crate::Comparison::Withheld {
            reason: format!("the server counted {server_n} requests, canaryd completed 100"),
            client_n: 100,
            server_n,
        });
        r.telemetry.server = Some(sv);
        r.diagnose()
    };
    let d = withheld(130);
    assert_eq!(d.class, Bottleneck::Queueing, "{d:#?}");
    assert_eq!(d.confidence, Confidence::Medium);
    assert!(
        d.why.contains(
            "the server counted 130 requests in the window, canaryd completed 100: its \
             figures include other requests than canaryd's"
        ),
        "{}",
        d.why
    );
    let d = withheld(99);
    assert_eq!(
        (d.class, d.confidence),
        (Bottleneck::Queueing, Confidence::High)
    );
    assert!(!d.why.contains("other requests"), "{}", d.why);
}
