//! The daemon's own metrics: run counts by verdict, skips, reloads, export drops, and each
//! workload's last run (verdict, baseline trend, figures, telemetry source states), rendered
//! as Prometheus text for `/metrics` and summarized for `/api/runs`.

use super::brief::{Figures, RunBrief};
use crate::judge::verdict::VerdictKind;
use crate::service::history::{ListedRow, RunRow};
use crate::service::run_result::RunResult;
use crate::service::sinks::SkipReason;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The daemon's live state, as the status endpoint shows it.
#[derive(Default)]
pub struct StatusMetrics {
    ready: AtomicBool,
    /// Why the daemon is not healthy (`/healthz` 503): schedulers that ended unasked.
    unhealthy: Mutex<Vec<String>>,
    /// Why the last write to the history failed; cleared by the next that succeeds. Kept
    /// apart from `unhealthy`: a reload does not make the history writable again.
    history_failing: Mutex<Option<String>>,
    /// Why each lock file (by its path) is not held: another process took it after its file
    /// was removed or replaced. Kept apart from `unhealthy` too: a reload does not give the
    /// lock back; holding it again does.
    locks_lost: Mutex<BTreeMap<String, String>>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    runs: BTreeMap<(String, VerdictKind), u64>,
    skips: BTreeMap<(String, SkipReason), u64>,
    running: BTreeMap<String, bool>,
    /// Since when each running workload has been running (Unix s; its wait for its turn
    /// included): shown only while it runs.
    running_since: BTreeMap<String, f64>,
    /// When each workload's next run is due (Unix s; before jitter).
    next_run: BTreeMap<String, f64>,
    /// How long each workload's last run waited for its turn on its servers (seconds).
    turn_wait: BTreeMap<String, f64>,
    /// How long after its tick each workload's last started run started because its previous
    /// run was still going (`on_overrun = "start_when_free"`; seconds, 0 at its tick).
    start_late: BTreeMap<String, f64>,
    last: BTreeMap<String, RunBrief>,
    reloads: BTreeMap<&'static str, u64>,
    /// Items exporters dropped, by signal: spans, metric exports, log events (units differ,
    /// so they are never added up).
    export_drops: [u64; 3],
    /// Whether OTLP export runs: no endpoint, or settings it could not use at start, is 0.
    export_enabled: bool,
    history_write_errors: u64,
    /// The workloads of the running config, once known: others' runs (one still in flight
    /// when a reload took its workload out, a recovered run of a removed one) are not shown.
    configured: Option<BTreeSet<String>>,
}

impl State {
    fn shows(&self, workload: &str) -> bool {
        self.configured
            .as_ref()
            .is_none_or(|c| c.contains(workload))
    }
}

impl StatusMetrics {
    /// Seeds last-run figures from each workload's last stored run (`latest`, see
    /// [`crate::service::sinks::last_run::stored`]), so a restart does not blank them.
    pub fn seed(&self, latest: &[ListedRow]) {
        let mut s = self.state.lock().unwrap();
        for row in latest {
            if s.shows(&row.run.workload) {
                s.last.insert(row.run.workload.clone(), RunBrief::from(row));
            }
        }
    }

    /// Shows the workloads of the running config alone, from now on: a SIGHUP that took one
    /// out ends its series (runs, skips, running, last run) and its part of the status line.
    pub fn retain_workloads<'a>(&self, configured: impl IntoIterator<Item = &'a String>) {
        let mut s = self.state.lock().unwrap();
        let keep: BTreeSet<String> = configured.into_iter().cloned().collect();
        s.runs.retain(|(w, _), _| keep.contains(w));
        s.skips.retain(|(w, _), _| keep.contains(w));
        // Each configured workload's skips show from the start, at 0 for every reason: an
        // `increase(…) > 0` alert needs the series before the first skip.
        for w in &keep {
            for r in SkipReason::ALL {
                s.skips.entry((w.clone(), r)).or_default();
            }
        }
        // A run still going when its workload was taken out shows until it ends.
        s.running.retain(|w, r| keep.contains(w) || *r);
        let running = s.running.clone();
        s.running_since
            .retain(|w, _| running.get(w).copied().unwrap_or(false));
        s.next_run.retain(|w, _| keep.contains(w));
        s.turn_wait.retain(|w, _| keep.contains(w));
        s.start_late.retain(|w, _| keep.contains(w));
        s.last.retain(|w, _| keep.contains(w));
        s.configured = Some(keep);
    }

    /// Sets readiness (`/readyz` is 503 until then, and again while stopping).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether `/readyz` says ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The daemon is no longer healthy, and why (`/healthz` says so until a restart or a
    /// reload that schedules every workload anew).
    pub fn set_unhealthy(&self, why: String) {
        self.unhealthy.lock().unwrap().push(why);
    }

    /// A reload scheduled every workload anew.
    pub fn clear_unhealthy(&self) {
        self.unhealthy.lock().unwrap().clear();
    }

    /// Why the daemon is not healthy; empty when it is.
    pub fn unhealthy(&self) -> Vec<String> {
        let mut why = self.restart_cures();
        why.extend(self.history_failing.lock().unwrap().clone());
        why
    }

    /// The reasons of [`Self::unhealthy`] a restart cures (a scheduler that died, a lock
    /// another process holds): systemd's watchdog is withheld for these alone. A history
    /// that cannot be written stays unhealthy after a restart too, and a restart would kill
    /// the runs in flight, which still write their `verdict.json`.
    pub fn restart_cures(&self) -> Vec<String> {
        let mut why = self.unhealthy.lock().unwrap().clone();
        why.extend(self.locks_lost.lock().unwrap().values().cloned());
        why
    }

    /// The lock file at `path` is held by another process (`why`): unhealthy until it is
    /// held again. True when this begins a loss (it was held until now): the one to tell.
    pub fn lock_lost(&self, path: &str, why: String) -> bool {
        self.locks_lost
            .lock()
            .unwrap()
            .insert(path.to_string(), why)
            .is_none()
    }

    /// The lock file at `path` is held again. True when this ends a loss.
    pub fn lock_held(&self, path: &str) -> bool {
        self.locks_lost.lock().unwrap().remove(path).is_some()
    }

    /// A run could not be written to the history (`why`): counted, and `/healthz` says so
    /// until a write succeeds. True for the first failure of a spell (since start, or since
    /// the last write that succeeded): the one to tell loudly.
    pub fn history_write_failed(&self, why: String) -> bool {
        self.state.lock().unwrap().history_write_errors += 1;
        self.history_failing.lock().unwrap().replace(why).is_none()
    }

    /// Why the history cannot be written now, when a run's row failed and none was written
    /// since (one of [`Self::unhealthy`]'s reasons).
    pub fn history_failing(&self) -> Option<String> {
        self.history_failing.lock().unwrap().clone()
    }

    /// A run was written to the history. True when this ends a spell of failures.
    pub fn history_written(&self) -> bool {
        self.history_failing.lock().unwrap().take().is_some()
    }

    /// A run of `workload` starts or ends.
    pub fn set_running(&self, workload: &str, running: bool) {
        let mut s = self.state.lock().unwrap();
        match running {
            true if s.shows(workload) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                s.running_since.entry(workload.to_string()).or_insert(now);
            }
            true => {}
            false => {
                s.running_since.remove(workload);
            }
        }
        if s.shows(workload) {
            s.running.insert(workload.to_string(), running);
        } else if !running {
            // A run of a workload a reload took out ended: its series goes now.
            s.running.remove(workload);
        }
    }

    /// When `workload`'s next run is due (before jitter).
    pub fn set_next_run(&self, workload: &str, due: std::time::SystemTime) {
        let mut s = self.state.lock().unwrap();
        if s.shows(workload) {
            let secs = due
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            s.next_run.insert(workload.to_string(), secs);
        }
    }

    /// When each workload's next run is due, Unix ms (before jitter).
    pub fn next_runs(&self) -> BTreeMap<String, i64> {
        let s = self.state.lock().unwrap();
        s.next_run
            .iter()
            .map(|(w, t)| (w.clone(), (t * 1000.0).round() as i64))
            .collect()
    }

    /// How long `workload`'s run that just got its turn waited for it.
    pub fn set_turn_wait(&self, workload: &str, waited: std::time::Duration) {
        let mut s = self.state.lock().unwrap();
        if s.shows(workload) {
            s.turn_wait
                .insert(workload.to_string(), waited.as_secs_f64());
        }
    }

    /// How long after its tick `workload`'s run that just got its turn started because its
    /// previous run was still going (`on_overrun = "start_when_free"`; its `verdict.json`'s
    /// `start_late_ms`); zero when it started at its tick.
    pub fn set_start_late(&self, workload: &str, late: std::time::Duration) {
        let mut s = self.state.lock().unwrap();
        if s.shows(workload) {
            s.start_late
                .insert(workload.to_string(), late.as_secs_f64());
        }
    }

    /// Workloads now running.
    pub fn running(&self) -> Vec<String> {
        let s = self.state.lock().unwrap();
        s.running
            .iter()
            .filter(|(_, r)| **r)
            .map(|(w, _)| w.clone())
            .collect()
    }

    /// Each workload's last verdict kind and trend, `chat pass (steady)`, by workload.
    pub fn last_verdicts(&self) -> Vec<String> {
        let s = self.state.lock().unwrap();
        s.last
            .iter()
            .map(|(w, v)| {
                let kind = v.verdict_kind.as_str();
                match v.trend {
                    Some(t) => format!("{w} {kind} ({})", t.as_str()),
                    None => format!("{w} {kind}"),
                }
            })
            .collect()
    }

    /// A SIGHUP reload was applied (`ok`) or rejected.
    pub fn reloaded(&self, ok: bool) {
        let key = RELOAD_RESULTS[usize::from(!ok)];
        *self.state.lock().unwrap().reloads.entry(key).or_default() += 1;
    }

    /// Exporters dropped `n` items of `signal` (queue full, endpoint down, rejected).
    pub fn export_dropped(&self, signal: canary_exporters::Signal, n: u64) {
        self.state.lock().unwrap().export_drops[signal_index(signal)] += n;
    }

    /// OTLP export started (`canaryd_export_enabled` 1).
    pub fn export_enabled(&self) {
        self.state.lock().unwrap().export_enabled = true;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let s = self.state.lock().unwrap();
        let mut out = String::new();
        s.render_counters(&mut out);
        s.render_last_runs(&mut out);
        out
    }
}

impl State {
    /// What happened since start: runs by verdict, skips, reloads, export drops.
    fn render_counters(&self, out: &mut String) {
        write_family(
            out,
            "canaryd_runs_total",
            "counter",
            "Finished runs by workload and verdict, since start.",
            self.runs.iter().map(|((w, v), c)| {
                (
                    format!("workload=\"{}\",verdict=\"{}\"", esc(w), v.as_str()),
                    *c as f64,
                )
            }),
        );
        write_family(
            out,
            "canaryd_skips_total",
            "counter",
            "Scheduled runs skipped, by reason: overrun (the workload's previous run was still going), turn (its previous run was still waiting for its turn on a server another workload's run held), stopping (the daemon stopped before the run's first measured request).",
            self.skips.iter().map(|((w, r), c)| {
                (
                    format!("workload=\"{}\",reason=\"{}\"", esc(w), r.as_str()),
                    *c as f64,
                )
            }),
        );
        write_family(
            out,
            "canaryd_running",
            "gauge",
            "1 while a run of the workload is going (or waiting for its target).",
            self.running
                .iter()
                .map(|(w, r)| (format!("workload=\"{}\"", esc(w)), f64::from(u8::from(*r)))),
        );
        write_family(
            out,
            "canaryd_run_started_timestamp_seconds",
            "gauge",
            "When the workload's run now going started (Unix time; its wait for its turn on its servers included); absent while none runs. time() minus it is how long the run has gone on.",
            self.running_since
                .iter()
                .map(|(w, t)| (format!("workload=\"{}\"", esc(w)), *t)),
        );
        write_family(
            out,
            "canaryd_next_run_timestamp_seconds",
            "gauge",
            "When the workload's next run is due (Unix time; before its jitter, and it may wait for its turn on its servers).",
            self.next_run
                .iter()
                .map(|(w, t)| (format!("workload=\"{}\"", esc(w)), *t)),
        );
        write_family(
            out,
            "canaryd_last_run_turn_wait_seconds",
            "gauge",
            "How long the workload's last started run waited for its turn on its servers (another workload's run held one), measured; 0 when it waited for none.",
            self.turn_wait
                .iter()
                .map(|(w, t)| (format!("workload=\"{}\"", esc(w)), *t)),
        );
        write_family(
            out,
            "canaryd_last_run_start_late_seconds",
            "gauge",
            "How long after its tick the workload's last started run started because its previous run was still going then (on_overrun = \"start_when_free\"), measured; 0 when it started at its tick (its turn wait is canaryd_last_run_turn_wait_seconds). Absent until the workload's first run since start.",
            self.start_late
                .iter()
                .map(|(w, t)| (format!("workload=\"{}\"", esc(w)), *t)),
        );
        write_family(
            out,
            "canaryd_config_reloads_total",
            "counter",
            "SIGHUP reloads, applied (ok) or rejected (bad config; the old one kept running).",
            // Both results show from the start, at 0 until they count.
            RELOAD_RESULTS.iter().map(|k| {
                let c = self.reloads.get(k).copied().unwrap_or(0);
                (format!("result=\"{k}\""), c as f64)
            }),
        );
        write_family(
            out,
            "canaryd_export_enabled",
            "gauge",
            "1 when OTLP export runs; 0 when no endpoint is set or its settings could not be used at start (logged).",
            [(String::new(), f64::from(u8::from(self.export_enabled)))].into_iter(),
        );
        write_family(
            out,
            "canaryd_export_drops_total",
            "counter",
            "Items OTLP export dropped, by signal: spans, metric exports (metrics), log events (logs).",
            SIGNALS.iter().map(|s| {
                (
                    format!("signal=\"{}\"", signal_label(*s)),
                    self.export_drops[signal_index(*s)] as f64,
                )
            }),
        );
        write_family(
            out,
            "canaryd_history_write_errors_total",
            "counter",
            "Finished runs that could not be written to the history database (their verdict.json is written all the same).",
            [(String::new(), self.history_write_errors as f64)].into_iter(),
        );
    }

    /// Each workload's last run: when, its verdict and trend, figures, telemetry sources.
    fn render_last_runs(&self, out: &mut String) {
        self.render_last_verdicts(out);
        self.render_last_figures(out);
        self.render_telemetry_sources(out);
    }

    /// When each workload's last run finished, its verdict and its baseline trend.
    fn render_last_verdicts(&self, out: &mut String) {
        write_family(
            out,
            "canaryd_last_run_timestamp_seconds",
            "gauge",
            "When the workload's last run finished (Unix time).",
            self.last_values(|r| Some(r.finished_unix_ms as f64 / 1000.0)),
        );
        write_family(
            out,
            "canaryd_last_run_verdict",
            "gauge",
            "1 for the verdict of the workload's last run.",
            self.last.iter().flat_map(|(w, v)| {
                VerdictKind::ALL.into_iter().map(move |k| {
                    (
                        format!("workload=\"{}\",verdict=\"{}\"", esc(w), k.as_str()),
                        f64::from(u8::from(k == v.verdict_kind)),
                    )
                })
            }),
        );
        write_family(
            out,
            "canaryd_last_run_baseline",
            "gauge",
            "1 for the baseline trend of the workload's last run.",
            self.last.iter().flat_map(|(w, v)| {
                crate::judge::baseline::Trend::ALL
                    .into_iter()
                    .map(move |t| {
                        (
                            format!("workload=\"{}\",trend=\"{}\"", esc(w), t.as_str()),
                            f64::from(u8::from(Some(t) == v.trend)),
                        )
                    })
            }),
        );
        // A trend of `insufficient` whose comparison found a direction it could not confirm
        // (too few baseline runs to measure their spread), as the status page shows it: 1 for
        // that direction, 0 for the other; two series a workload.
        write_family(
            out,
            "canaryd_last_run_baseline_unconfirmed",
            "gauge",
            "1 for the direction the baseline comparison of the workload's last run found but \
             did not confirm (its trend then reads insufficient).",
            self.last.iter().flat_map(|(w, v)| {
                use crate::judge::baseline::Trend;
                [Trend::Regressed, Trend::Improved]
                    .into_iter()
                    .map(move |t| {
                        (
                            format!("workload=\"{}\",direction=\"{}\"", esc(w), t.as_str()),
                            f64::from(u8::from(Some(t) == v.unconfirmed)),
                        )
                    })
            }),
        );
    }

    /// The headline figures and latency percentiles of each workload's last run.
    fn render_last_figures(&self, out: &mut String) {
        type Figure = fn(&Figures) -> Option<f64>;
        let figures: [(&str, Figure, &str); 4] = [
            (
                "requests",
                |f| f.requests.map(|v| v as f64),
                "Measured requests",
            ),
            ("errors", |f| f.errors.map(|v| v as f64), "Failed requests"),
            (
                "good_request_fraction",
                |f| f.good_request_fraction,
                "Share of requests meeting every SLO",
            ),
            ("duration_seconds", |f| f.duration_s, "Run duration"),
        ];
        for (name, figure, help) in figures {
            write_family(
                out,
                &format!("canaryd_last_run_{name}"),
                "gauge",
                &format!("{help} in the workload's last run."),
                self.last_values(|r| r.figures.as_ref().and_then(figure)),
            );
        }
        write_family(
            out,
            "canaryd_last_run_latency_ms",
            "gauge",
            "Client-side latency percentiles of the workload's last run, ms.",
            self.last.iter().flat_map(|(w, v)| latency_samples(w, v)),
        );
        self.render_last_capacity(out);
    }

    /// A capacity workload's last search: its bracket's ends, and whether each rests on
    /// bounds (its probe's pass or fail on goodput judgements made on bounds; the
    /// `not_established` of `/api/runs`).
    fn render_last_capacity(&self, out: &mut String) {
        write_family(
            out,
            "canaryd_last_run_capacity_rate",
            "gauge",
            "The bracket of the capacity workload's last search, requests/s, by end: passed (the \
             capacity is at least it), failed (below it).",
            self.last.iter().flat_map(|(w, v)| {
                capacity_ends(v).into_iter().map(move |(end, rate, _)| {
                    (format!("workload=\"{}\",end=\"{end}\"", esc(w)), rate)
                })
            }),
        );
        write_family(
            out,
            "canaryd_last_run_capacity_not_established",
            "gauge",
            "1 for an end of the capacity workload's last bracket whose probe's pass or fail \
             rests on goodput judgements made on bounds (the truth could decide it the other \
             way), else 0.",
            self.last.iter().flat_map(|(w, v)| {
                capacity_ends(v).into_iter().map(move |(end, _, gauge)| {
                    (format!("workload=\"{}\",end=\"{end}\"", esc(w)), gauge)
                })
            }),
        );
    }

    /// Which telemetry sources each workload's last run had, and why not: 1 available, 0
    /// not, with the state and a reason class from a fixed set ([`SOURCE_REASONS`]), never the
    /// reason's text (its URLs and error chains would make a series per wording).
    fn render_telemetry_sources(&self, out: &mut String) {
        write_family(
            out,
            "canaryd_telemetry_source_up",
            "gauge",
            "Telemetry sources in the workload's last run: 1 available, 0 not; state says which \
             (pending, unavailable, disabled), reason a class of why (empty when available; \
             the run's summary.json has the words).",
            self.last.iter().flat_map(|(w, v)| {
                let w = esc(w);
                v.telemetry_sources.iter().flatten().map(move |(src, st)| {
                    (
                        format!(
                            "workload=\"{w}\",source=\"{}\",state=\"{}\",reason=\"{}\"",
                            esc(src.as_str()),
                            st.name(),
                            source_reason(st)
                        ),
                        f64::from(u8::from(st.is_available())),
                    )
                })
            }),
        );
    }

    /// `(workload label, figure)` for each workload's last run that has the figure.
    fn last_values<'a>(
        &'a self,
        figure: impl Fn(&RunBrief) -> Option<f64> + 'a,
    ) -> impl Iterator<Item = (String, f64)> + 'a {
        self.last
            .iter()
            .filter_map(move |(w, v)| figure(v).map(|x| (format!("workload=\"{}\"", esc(w)), x)))
    }
}

/// `(end, rate, not established)` for each end of the bracket of a capacity workload's last
/// run `v`: `passed`, `failed`, its rate, and the gauge OTLP exports for it
/// ([`crate::capacity::Capacity::not_established_gauge`]: 1 when its probe's decision rests
/// on bounds).
fn capacity_ends(v: &RunBrief) -> Vec<(&'static str, f64, f64)> {
    let Some(c) = v.capacity.as_ref().map(|c| &c.found) else {
        return Vec::new();
    };
    canary_core::BracketEnd::ALL
        .into_iter()
        .zip(c.not_established_gauge())
        .filter_map(|(end, (name, gauge))| Some((name, c.rate_of(end)?, gauge?)))
        .collect()
}

/// The `reason` classes of `canaryd_telemetry_source_up`: a fixed set, so that a source down
/// for weeks, its error's wording changing, keeps one series. Each with the phrases of the
/// reasons it takes (the telemetry and eBPF crates' words, an earlier run's short reason
/// included); `other` takes any reason none of them matches.
pub const SOURCE_REASONS: [(&str, &[&str]); 13] = [
    ("disabled", &[]),
    ("not_tried", &[]),
    ("not_permitted", &["not permitted to load eBPF programs"]),
    (
        "not_supported",
        &[
            "eBPF programs not built into this binary",
            "no kernel BTF (",
        ],
    ),
    ("load_failed", &["could not load the eBPF socket programs"]),
    (
        "saw_nothing",
        &[
            "attached but saw none of the run",
            ": no page within the run",
        ],
    ),
    (
        "not_answering",
        &[
            "NVML did not answer within",
            "NVML is still not answering",
            "NVML's thread ended without an answer",
            ": no complete response within",
        ],
    ),
    (
        "no_gpu",
        &[
            "but reports no GPU",
            "but cannot count GPUs",
            "no GPU reported its name",
            "none of a GPU",
            "but no GPU sample",
        ],
    ),
    ("init_failed", &["cannot initialize NVML from"]),
    (
        "unreachable",
        &[
            ": cannot connect",
            ": TLS handshake failed",
            ": HTTP exchange failed",
        ],
    ),
    ("http_status", &[": HTTP status "]),
    (
        "bad_response",
        &[
            ": not a dcgm-exporter page",
            "interim (1xx) responses",
            ": the response body is over",
            ": reading the response body failed",
            "which canaryd does not decode",
            ", not a metrics page",
            "the page is over the parser's caps",
        ],
    ),
    ("other", &[]),
];

/// The `reason` class of a source's state (one of [`SOURCE_REASONS`]); empty when available.
fn source_reason(state: &canary_core::SourceState) -> &'static str {
    use canary_core::SourceState;
    let reason = match state {
        SourceState::Available { .. } => return "",
        SourceState::Disabled => return "disabled",
        SourceState::Pending => return "not_tried",
        SourceState::Unavailable { reason } => reason,
    };
    SOURCE_REASONS
        .iter()
        .find(|(_, phrases)| phrases.iter().any(|p| reason.contains(p)))
        .map_or("other", |(class, _)| *class)
}

/// The client-side p50 and p99 of TTFT, ITL and request latency of workload `w`'s last run.
fn latency_samples(w: &str, v: &RunBrief) -> Vec<(String, f64)> {
    let w = esc(w);
    let Some(f) = &v.figures else {
        return Vec::new();
    };
    let metrics = [
        ("time_to_first_token", f.time_to_first_token),
        ("inter_token_latency", f.inter_token_latency),
        ("request_latency", f.request_latency),
    ];
    let mut out = Vec::new();
    for (m, q) in metrics {
        let Some(q) = q else { continue };
        for (name, x) in [("p50", q.p50), ("p99", q.p99)] {
            if let Some(x) = x {
                out.push((
                    format!(
                        "workload=\"{w}\",metric=\"{m}\",quantile=\"0.{}\"",
                        &name[1..]
                    ),
                    x,
                ));
            }
        }
    }
    out
}

const SIGNALS: [canary_exporters::Signal; 3] = [
    canary_exporters::Signal::Traces,
    canary_exporters::Signal::Metrics,
    canary_exporters::Signal::Logs,
];

fn signal_index(s: canary_exporters::Signal) -> usize {
    match s {
        canary_exporters::Signal::Traces => 0,
        canary_exporters::Signal::Metrics => 1,
        canary_exporters::Signal::Logs => 2,
    }
}

/// The `signal` label: what is counted (`spans`, not the signal's name `traces`).
fn signal_label(s: canary_exporters::Signal) -> &'static str {
    match s {
        canary_exporters::Signal::Traces => "spans",
        canary_exporters::Signal::Metrics => "metrics",
        canary_exporters::Signal::Logs => "logs",
    }
}

fn write_family(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    samples: impl Iterator<Item = (String, f64)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, v) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {v}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    }
}

/// The `result` labels of `canaryd_config_reloads_total`: applied, rejected.
const RELOAD_RESULTS: [&str; 2] = ["ok", "rejected"];

/// Escapes a Prometheus label value.
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Counting runs and skips: what the status metrics do as a sink (see `sinks`).
impl StatusMetrics {
    /// Counts a finished run and keeps it as its workload's last.
    pub fn record_run(&self, workload: &str, run: &RunResult) {
        let mut s = self.state.lock().unwrap();
        if !s.shows(workload) {
            return;
        }
        *s.runs
            .entry((workload.to_string(), run.run.verdict.kind))
            .or_default() += 1;
        let last_started = s.last.get(workload).map(|last| last.started_unix_ms);
        if crate::service::sinks::last_run::replaces_last(run, last_started) {
            s.last
                .insert(workload.to_string(), RunBrief::from(&RunRow::from(run)));
        }
    }

    /// Counts a skipped schedule.
    pub fn record_skip(&self, workload: &str, reason: SkipReason) {
        let mut s = self.state.lock().unwrap();
        if s.shows(workload) {
            *s.skips.entry((workload.to_string(), reason)).or_default() += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_exporters::Signal;

    #[test]
    fn export_drops_are_counted_by_signal_and_export_shows_whether_it_runs() {
        let m = StatusMetrics::default();
        let text = m.render();
        assert!(text.contains("\ncanaryd_export_enabled 0\n"), "{text}");
        m.export_enabled();
        // Spans, metric exports and log events are different units: never one sum.
        m.export_dropped(Signal::Traces, 40);
        m.export_dropped(Signal::Metrics, 1);
        m.export_dropped(Signal::Traces, 2);
        let text = m.render();
        assert!(text.contains("\ncanaryd_export_enabled 1\n"), "{text}");
        for line in [
            "canaryd_export_drops_total{signal=\"spans\"} 42",
            "canaryd_export_drops_total{signal=\"metrics\"} 1",
            "canaryd_export_drops_total{signal=\"logs\"} 0",
        ] {
            assert!(text.contains(&format!("\n{line}\n")), "{line}: {text}");
        }
    }

    /// `canaryd_last_run_start_late_seconds`: absent until the workload's first run since
    /// start, then how late the last one started (0 at its tick), beside its turn wait.
    #[test]
    fn the_start_late_gauge_is_absent_until_a_run_then_the_last_runs() {
        let m = StatusMetrics::default();
        let name = "canaryd_last_run_start_late_seconds";
        assert!(!m.render().contains(&format!("{name}{{")));
        m.set_start_late("w", std::time::Duration::from_millis(1500));
        assert!(
            m.render()
                .contains(&format!("\n{name}{{workload=\"w\"}} 1.5\n")),
            "{}",
            m.render()
        );
        m.set_start_late("w", std::time::Duration::ZERO);
        let text = m.render();
        assert!(
            text.contains(&format!("\n{name}{{workload=\"w\"}} 0\n")),
            "{text}"
        );
        assert!(text.contains(&format!("# TYPE {name} gauge\n")), "{text}");
        // A reload that takes the workload out ends its series.
        m.retain_workloads(&["v".to_string()]);
        assert!(!m.render().contains(&format!("{name}{{")));
    }

    /// Each source state reads as its class of [`SOURCE_REASONS`], from the real reasons'
    /// words (NVML's opener, eBPF's refusals, the scrapers'), an earlier run's short reason
    /// (as the daemon and a `--runs N` command say it) as the reason it repeats; any other
    /// text is `other`, so the label takes a fixed set of values whatever the wording.
    #[tokio::test]
    async fn source_reasons_are_a_fixed_set_of_classes() {
        use canary_core::SourceState;
        let opener = canary_telemetry::NvmlOpener::default();
        let nvml = |lib: &str| {
            let config = canary_telemetry::NvmlConfig {
                lib_path: Some(lib.into()),
                ..Default::default()
            };
            let opener = opener.clone();
            async move { opener.open(config, Default::default()).await.1 }
        };
        let not_nvml = nvml("libc.so.6").await;
        let no_lib = nvml("/nonexistent/libnvidia-ml.so.1").await;
        let short = |s: &SourceState, told: &str| match s {
            SourceState::Unavailable { reason } => SourceState::unavailable(format!(
                "{} ({told})",
                crate::execute::short_reason(canary_core::Source::Nvml, reason)
            )),
            other => panic!("{other:?}"),
        };
        let told = "found at an earlier run; not tried again until 2026-11-24T11:10:00Z";
        let url = "http://127.0.0.1:9/metrics";
        use canary_ebpf::Unavailable;
        let cases = [
            (SourceState::available("2 GPU(s)"), ""),
            (SourceState::Disabled, "disabled"),
            (SourceState::Pending, "not_tried"),
            (not_nvml.clone(), "init_failed"),
            (short(&not_nvml, told), "init_failed"),
            (no_lib.clone(), "init_failed"),
            (
                short(
                    &no_lib,
                    "found at an earlier run of this command; not tried again",
                ),
                "init_failed",
            ),
            (
                SourceState::unavailable(
                    Unavailable::NotPermitted("Operation not permitted (os error 1)".into())
                        .to_string(),
                ),
                "not_permitted",
            ),
            (
                SourceState::unavailable(Unavailable::NotBuilt("no object").to_string()),
                "not_supported",
            ),
            (
                SourceState::unavailable(Unavailable::NoBtf("os error 2".into()).to_string()),
                "not_supported",
            ),
            (
                SourceState::unavailable(Unavailable::Load("EAGAIN".into()).to_string()),
                "load_failed",
            ),
            (
                SourceState::unavailable(format!("{url}: cannot connect: Connection refused")),
                "unreachable",
            ),
            (
                SourceState::unavailable(format!("{url}: HTTP status 404 Not Found")),
                "http_status",
            ),
            (
                SourceState::unavailable("the Moon is in the way: of http://x/metrics"),
                "other",
            ),
        ];
        for (state, class) in &cases {
            assert_eq!(source_reason(state), *class, "{state:?}");
            assert!(
                class.is_empty() || SOURCE_REASONS.iter().any(|(c, _)| c == class),
                "{class}"
            );
        }
    }

    /// No series before a workload's first run.
    #[test]
    fn source_up_is_absent_before_the_first_run() {
        let m = StatusMetrics::default();
        m.retain_workloads(&["w".to_owned()]);
        let text = m.render();
        assert!(
            text.contains("# TYPE canaryd_telemetry_source_up gauge"),
            "{text}"
        );
        assert!(!text.contains("canaryd_telemetry_source_up{"), "{text}");
    }
}
