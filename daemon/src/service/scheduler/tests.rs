use super::*;
use std::path::Path;
use std::time::Duration;

/// A daemon over a history in `dir`, with one workload `w` on target `t`, whose runs
/// are carried out by `runner`.
fn daemon(dir: &Path, runner: Runner) -> (Arc<Daemon>, Arc<Config>) {
    daemon_on(dir, runner, "every = \"1h\"", SystemTime::now)
}

/// [`daemon`], its workload scheduled by `schedule` (its TOML lines), on the wall clock `wall`.
fn daemon_on(
    dir: &Path,
    runner: Runner,
    schedule: &str,
    wall: WallClock,
) -> (Arc<Daemon>, Arc<Config>) {
    let text = format!(
        "state_dir = {:?}\n[targets.t]\nurl = \"http://127.0.0.1:9\"\nmodel = \"m\"\n\
         [workloads.w]\ntarget = \"t\"\ntrace = \"bundled\"\n{schedule}\n",
        dir.display().to_string()
    );
    let config = Config::parse(&text, Path::new("test.toml"), dir).unwrap();
    let metrics = Arc::new(StatusMetrics::default());
    let d = Arc::new(Daemon {
        history: Arc::new(History::open(&dir.join("history.sqlite")).unwrap()),
        metrics: metrics.clone(),
        sinks: Arc::new(Sinks(vec![metrics as Arc<dyn RunSink>])),
        ctx: RunContext::default(),
        shutdown: CancellationToken::new(),
        target_locks: Mutex::default(),
        tasks: Mutex::default(),
        running: Mutex::default(),
        freed: tokio::sync::Notify::new(),
        turns: Mutex::default(),
        waiting: Mutex::default(),
        previous_due: Mutex::default(),
        progress: Mutex::default(),
        runner,
        wall,
    });
    (d, Arc::new(config))
}

fn panicking(
    _: Arc<Daemon>,
    _: Arc<Config>,
    _: Workload,
    _: String,
    _: Arc<Progress>,
) -> RunFuture {
    Box::pin(async { panic!("replay blew up: index 3 of 2") })
}

fn unreachable_run(
    _: Arc<Daemon>,
    _: Arc<Config>,
    _: Workload,
    _: String,
    _: Arc<Progress>,
) -> RunFuture {
    Box::pin(async { unreachable!("the run must not start") })
}

#[tokio::test]
async fn a_panicking_run_is_an_error_verdict_and_the_workload_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let (d, c) = daemon(dir.path(), panicking);
    let w = c.workloads[0].clone();
    for _ in 0..2 {
        d.start_run(c.clone(), w.clone()).unwrap().await.unwrap();
        // Not left "running": the next due time runs it instead of skipping it.
        assert!(d.metrics.running().is_empty(), "{:?}", d.metrics.running());
        assert!(d.progress.lock().unwrap().is_empty());
    }
    let runs = d.history.recent(Some("w"), 10).unwrap();
    assert_eq!(runs.len(), 2);
    for r in &runs {
        assert_eq!(
            r.run.verdict.to_string(),
            "error: the run panicked: replay blew up: index 3 of 2"
        );
        assert!(r.run.artifacts.join("verdict.json").exists());
    }
}

#[tokio::test]
async fn a_stop_while_waiting_for_the_target_is_a_skip_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let (d, c) = daemon(dir.path(), unreachable_run);
    // Another workload's run holds the target (its server: any target with its URL).
    let lock = Arc::new(tokio::sync::Mutex::new(()));
    d.target_locks
        .lock()
        .unwrap()
        .insert("http://127.0.0.1:9".into(), lock.clone());
    let _turn = lock.lock().await;
    let task = d.start_run(c.clone(), c.workloads[0].clone()).unwrap();
    // Waiting for its turn is running: a second run of the workload is not started.
    assert!(d.start_run(c.clone(), c.workloads[0].clone()).is_none());
    d.shutdown.cancel();
    task.await.unwrap();
    assert!(d.metrics.running().is_empty());
    assert!(d.history.recent(Some("w"), 10).unwrap().is_empty());
    assert!(
        d.metrics
            .render()
            .contains("canaryd_skips_total{workload=\"w\",reason=\"stopping\"} 1"),
        "{}",
        d.metrics.render()
    );
}

#[test]
fn retention_deletes_only_a_runs_own_folder_whatever_the_history_says() {
    let tree = Path::new("/var/lib/canaryd/artifacts");
    assert!(is_run_folder(tree, &tree.join("chat/20261128T2100-ab12")));
    for damaged in [
        "/var/lib/canaryd/artifacts",
        "/var/lib/canaryd/artifacts/chat",
        "/var/lib/canaryd/artifacts/chat/..",
        "/var/lib/canaryd/artifacts/chat/../..",
        "/var/lib/canaryd/artifacts/../state/x",
        "/var/lib/canaryd/artifacts/chat/run/probe-01",
        "/var/lib/canaryd/history.sqlite",
        "/tmp/chat/run",
    ] {
        assert!(!is_run_folder(tree, Path::new(damaged)), "{damaged}");
    }
}

/// A scheduler whose loop panics (here on a lock another thread poisoned) is found and named,
/// once, with its panic: the daemon then says it is unhealthy rather than never running the
/// workload again unseen.
#[tokio::test]
async fn a_scheduler_that_dies_is_named_with_its_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (d, c) = daemon(dir.path(), panicking);
    let poisoner = d.clone();
    std::thread::spawn(move || {
        let _held = poisoner.tasks.lock().unwrap();
        panic!("poisoning the run list");
    })
    .join()
    .unwrap_err();
    let mut schedulers = d.schedule(c);
    let why = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            if let Some(why) = schedulers.ended().await {
                return why;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the dead scheduler is found");
    assert!(
        why.starts_with("the scheduler of workload w ended (panicked: ")
            && why.contains("PoisonError"),
        "{why}"
    );
    assert_eq!(schedulers.ended().await, None, "told once");
    schedulers.cancel();
}

/// Stopped schedulers are not dead ones.
#[tokio::test]
async fn cancelled_schedulers_are_not_reported_as_ended() {
    let dir = tempfile::tempdir().unwrap();
    let (d, c) = daemon(dir.path(), unreachable_run);
    // Cancelled before the loops first run (one test thread): they end at their first tick.
    let mut schedulers = d.schedule(c);
    schedulers.cancel();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(schedulers.ended().await, None);
}

/// A schedule that has no more runs (a calendar that ends) returns: not a failure.
#[tokio::test]
async fn a_schedule_that_runs_out_is_not_reported_as_ended() {
    let mut schedulers = Schedulers {
        stop: CancellationToken::new(),
        tasks: vec![("w".to_string(), tokio::spawn(async {}))],
    };
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert_eq!(schedulers.ended().await, None);
    assert!(schedulers.tasks.is_empty(), "looked at once, then let go");
}

/// Runs take turns per server however its URL is written, replicas included.
#[test]
fn a_targets_servers_are_keyed_by_scheme_host_and_port() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "state_dir = {:?}\n[targets.t]\nurl = [\"http://127.0.0.1:9/v1/\", \"https://GPU:8443\", \
         \"http://127.0.0.1:9\", \"https://gpu:8443/v1\"]\nmodel = \"m\"\n\
         [workloads.w]\ntarget = \"t\"\ntrace = \"bundled\"\nevery = \"1h\"\n",
        dir.path().display().to_string()
    );
    let config = Config::parse(&text, Path::new("test.toml"), dir.path()).unwrap();
    let keys: Vec<String> = servers(&config.targets["t"]).into_iter().collect();
    assert_eq!(keys, ["http://127.0.0.1:9", "https://gpu:8443"]);
}

/// Waits (20 s at most) until `seen` holds an instant over 50 minutes before `before`: a run
/// on the far side of an hour's step back of the clock.
async fn a_run_before(seen: &Mutex<Vec<i64>>, before: i64) -> bool {
    let limit = before - 3000 * 1_000_000_000;
    tokio::time::timeout(Duration::from_secs(20), async {
        while !seen.lock().unwrap().iter().any(|t| *t < limit) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .is_ok()
}

/// NTP steps a clock that ran an hour ahead back: a cron schedule goes on at its next firing
/// from now, where it used to wait an hour for the one after the last it ran.
#[tokio::test]
async fn a_cron_goes_on_from_now_after_the_clock_steps_back() {
    static BACK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static TIMES: Mutex<Vec<i64>> = Mutex::new(Vec::new());
    fn wall() -> SystemTime {
        SystemTime::now() - Duration::from_secs(BACK.load(Ordering::Relaxed))
    }
    fn timed(
        _: Arc<Daemon>,
        c: Arc<Config>,
        w: Workload,
        id: String,
        _: Arc<Progress>,
    ) -> RunFuture {
        TIMES.lock().unwrap().push(crate::instant::unix_ns(wall()));
        Box::pin(async move { Ran::Finished(RunResult::new(&c, &w, id)) })
    }
    let dir = tempfile::tempdir().unwrap();
    let (d, c) = daemon_on(dir.path(), timed, "cron = \"*/2 * * * * *\"", wall);
    let schedulers = d.schedule(c);
    assert!(a_run_before(&TIMES, i64::MAX).await, "a first run");
    let before = *TIMES.lock().unwrap().iter().max().unwrap();
    BACK.store(3600, Ordering::Relaxed);
    assert!(
        a_run_before(&TIMES, before).await,
        "no run within 20 s of the step: {:?}",
        TIMES.lock().unwrap()
    );
    schedulers.cancel();
}

/// The same for a `start_at` grid, which used to wait an hour for the instant after the last
/// it took.
#[tokio::test]
async fn a_grid_goes_on_from_now_after_the_clock_steps_back() {
    static BACK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static INSTANTS: Mutex<Vec<i64>> = Mutex::new(Vec::new());
    fn wall() -> SystemTime {
        SystemTime::now() - Duration::from_secs(BACK.load(Ordering::Relaxed))
    }
    fn on_grid(
        _: Arc<Daemon>,
        c: Arc<Config>,
        w: Workload,
        id: String,
        _: Arc<Progress>,
    ) -> RunFuture {
        INSTANTS
            .lock()
            .unwrap()
            .push(w.start_at.as_ref().unwrap().unix_ns);
        Box::pin(async move { Ran::Finished(RunResult::new(&c, &w, id)) })
    }
    let dir = tempfile::tempdir().unwrap();
    let schedule = "every = \"2s\"\nstart_at = \"2026-01-01T00:00:00Z\"";
    let (d, c) = daemon_on(dir.path(), on_grid, schedule, wall);
    let schedulers = d.schedule(c);
    assert!(a_run_before(&INSTANTS, i64::MAX).await, "a first run");
    let before = *INSTANTS.lock().unwrap().iter().max().unwrap();
    BACK.store(3600, Ordering::Relaxed);
    assert!(
        a_run_before(&INSTANTS, before).await,
        "no run within 20 s of the step: {:?}",
        INSTANTS.lock().unwrap()
    );
    schedulers.cancel();
}

/// A run that passes, leaving its records in its folder as a replay does.
fn passing(
    _: Arc<Daemon>,
    config: Arc<Config>,
    w: Workload,
    id: String,
    _: Arc<Progress>,
) -> RunFuture {
    Box::pin(async move {
        let mut result = RunResult::new(&config, &w, id);
        std::fs::create_dir_all(&result.run.artifacts).unwrap();
        std::fs::write(result.run.artifacts.join("records.jsonl"), "").unwrap();
        result.run.verdict = Verdict {
            kind: crate::judge::verdict::VerdictKind::Pass,
            reasons: Vec::new(),
        };
        result.run.load = Some(serde_json::json!({"load": {"osl": 8}}));
        Ran::Finished(result)
    })
}

/// A history that cannot take a run (here another connection holds its write lock, so the
/// insert fails with SQLITE_BUSY, as a full, read-only or damaged one fails): the run keeps
/// its verdict.json, the failure is counted and makes `/healthz` unhealthy until a write
/// succeeds, and the next start records the run as it was, never as one whose process died.
#[tokio::test]
async fn a_run_the_history_cannot_take_keeps_its_verdict_and_is_recorded_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let (d, c) = daemon(dir.path(), passing);
    let w = c.workloads[0].clone();
    let blocker = rusqlite::Connection::open(dir.path().join("history.sqlite")).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    d.start_run(c.clone(), w.clone()).unwrap().await.unwrap();
    let runs: Vec<_> = std::fs::read_dir(c.artifacts_dir.join("w"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let verdict = std::fs::read_to_string(runs[0].join("verdict.json")).unwrap();
    assert!(verdict.contains("\"verdict\": \"pass\""), "{verdict}");
    let text = d.metrics.render();
    assert!(
        text.contains("canaryd_history_write_errors_total 1"),
        "{text}"
    );
    let why = d.metrics.unhealthy().join("; ");
    assert!(
        why.contains("history") && why.contains("history.sqlite"),
        "{why}"
    );
    blocker.execute_batch("ROLLBACK").unwrap();
    drop(blocker);
    assert!(crate::service::recovery::find(&c.artifacts_dir, &d.history).is_empty());
    // The next start: a new process, its /metrics seeded from the history (which has no row
    // yet), then the late run recorded, which is the workload's last.
    let (next, _) = daemon(dir.path(), passing);
    next.metrics
        .seed(&crate::service::sinks::last_run::stored(&next.history));
    next.recover_orphans(&c);
    let text = next.metrics.render();
    assert!(
        text.contains("canaryd_last_run_verdict{workload=\"w\",verdict=\"pass\"} 1"),
        "the run recorded late is not the last on /metrics: {text}"
    );
    let rows = d.history.recent(Some("w"), 10).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].run.verdict.to_string(), "pass");
    assert_eq!(rows[0].run.artifacts, runs[0]);
    // With its load, so it joins the baseline of that load.
    let stored: Option<i64> = rusqlite::Connection::open(dir.path().join("history.sqlite"))
        .unwrap()
        .query_row("SELECT load_hash FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        stored,
        Some(crate::judge::load::hash(
            &serde_json::json!({"load": {"osl": 8}})
        )),
        "{verdict}"
    );
    // A write that succeeds ends the spell.
    d.start_run(c.clone(), w).unwrap().await.unwrap();
    assert!(
        d.metrics.unhealthy().is_empty(),
        "{:?}",
        d.metrics.unhealthy()
    );
    assert_eq!(d.history.recent(Some("w"), 10).unwrap().len(), 2);
}

/// A run folder left with records but no verdict.json (its process died, or a full disk
/// failed its results: the same folder either way) is recovered at the next start with a
/// reason that says both, and takes its place by start among the runs recorded since it,
/// not the newest.
#[tokio::test]
async fn a_run_left_without_a_verdict_is_recovered_in_its_place_by_start() {
    let dir = tempfile::tempdir().unwrap();
    let (d, c) = daemon(dir.path(), passing);
    let w = c.workloads[0].clone();
    for _ in 0..2 {
        d.start_run(c.clone(), w.clone()).unwrap().await.unwrap();
    }
    let left = c.artifacts_dir.join("w").join("20200101T000000Z-0a6a616f");
    std::fs::create_dir_all(&left).unwrap();
    std::fs::write(left.join("records.jsonl"), "").unwrap();
    // The next start.
    d.recover_orphans(&c);
    let rows = d.history.recent(Some("w"), 10).unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[2].run.id, "20200101T000000Z-0a6a616f");
    assert_eq!(
        rows[2].run.verdict.to_string(),
        "error: no verdict.json: the process died or its results could not be written"
    );
    assert!(left.join("verdict.json").is_file());
    assert_ne!(
        d.history.latest_per_workload().unwrap()[0].run.id,
        rows[2].run.id
    );
    // /metrics agrees: the newest run (a pass) stays the workload's last; the recovered
    // one is counted.
    let text = d.metrics.render();
    for line in [
        "canaryd_last_run_verdict{workload=\"w\",verdict=\"pass\"} 1",
        "canaryd_last_run_verdict{workload=\"w\",verdict=\"error\"} 0",
        "canaryd_runs_total{workload=\"w\",verdict=\"error\"} 1",
    ] {
        assert!(text.contains(line), "{line}: {text}");
    }
}

/// Knees an older knee rule found (passing sweep runs stored before the rule was recorded,
/// their JSON as that version wrote it) are no baseline for this rule's: the first run after
/// the upgrade starts a new knee baseline and says why, instead of failing on a knee that
/// moved because the rule did; the next runs are judged against its knee alone.
#[test]
fn knees_an_older_rule_found_are_no_baseline_for_the_current_rules() {
    use crate::judge::knee::{new_rule_note, SweepKnee, SweepPointRow, SweepRun, KNEE_RULE};
    use crate::judge::verdict::VerdictKind;
    let dir = tempfile::tempdir().unwrap();
    let (d, config) = daemon_on(
        dir.path(),
        unreachable_run,
        "every = \"1h\"\nkind = \"sweep\"\nsweep_concurrency = [2, 8, 32]\n\
         [baseline]\nmin_runs = 1",
        SystemTime::now,
    );
    let w = config.workloads.iter().find(|w| w.name == "w").unwrap();
    let sweep = |knee: f64| SweepRun {
        axis: crate::cli::sweep::point::Axis::Concurrency,
        knee: Some(SweepKnee {
            label: "c8".into(),
            value: 8.0,
            request_throughput: knee,
        }),
        knee_rule: KNEE_RULE,
        left_out: Vec::new(),
        interrupted: false,
        not_run: Vec::new(),
        capacity: None,
        points: [2.0, 8.0, 32.0]
            .iter()
            .map(|&v| SweepPointRow {
                label: format!("c{v}"),
                value: v,
                verdict: "pass".into(),
                request_throughput: None,
                ttft_p99_ms: None,
            })
            .collect(),
        baseline: None,
        new_load: None,
    };
    let passed = |id: &str, knee: f64| {
        let mut r = RunResult::new(&config, w, id.into());
        std::fs::create_dir_all(&r.run.artifacts).unwrap();
        r.run.verdict = Verdict {
            kind: VerdictKind::Pass,
            reasons: Vec::new(),
        };
        r.run.load = Some(serde_json::json!({"load": {"osl": 8}}));
        r.run.sweep = Some(sweep(knee));
        r
    };
    for i in 0..3 {
        let old = passed(&format!("old{i}"), 100.0);
        d.history.insert(&RunRow::from(&old)).unwrap();
    }
    // As the version before the rule was recorded wrote them: the same JSON, no `knee_rule`.
    let conn = rusqlite::Connection::open(dir.path().join("history.sqlite")).unwrap();
    let stored: Vec<(String, String)> = conn
        .prepare("SELECT id, sweep FROM runs")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(stored.len(), 3);
    for (id, text) in stored {
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(v.as_object_mut().unwrap().remove("knee_rule").is_some());
        conn.execute(
            "UPDATE runs SET sweep = ?1 WHERE id = ?2",
            rusqlite::params![v.to_string(), id],
        )
        .unwrap();
    }
    drop(conn);

    // The first run of this rule says the baseline starts again, knee or not; the next
    // ones do not say it again (they follow a run of this rule).
    let mut quiet = passed("quiet", 40.0);
    quiet.run.sweep.as_mut().unwrap().knee = None;
    d.record(&config, "w", &mut quiet, None).unwrap();
    let s = quiet.run.sweep.as_ref().unwrap();
    assert_eq!(s.new_load.as_deref(), Some(&*new_rule_note(1, KNEE_RULE)));
    assert!(
        s.new_load
            .as_ref()
            .unwrap()
            .starts_with("new knee rule: baseline starts again (rule 1 → 3"),
        "{:?}",
        s.new_load
    );

    // 40 req/s against the old knees (100 ± 0) would fail; by this rule it starts anew.
    let mut first = passed("new0", 40.0);
    d.record(&config, "w", &mut first, None).unwrap();
    assert_eq!(
        first.run.verdict.kind,
        VerdictKind::Pass,
        "{}",
        first.run.verdict
    );
    let s = first.run.sweep.as_ref().unwrap();
    assert_eq!(s.baseline, None);
    assert_eq!(s.new_load, None, "the rule change was said once");

    // The next runs are judged against this rule's knee alone.
    let mut second = passed("new1", 39.0);
    d.record(&config, "w", &mut second, None).unwrap();
    assert_eq!(
        second.run.verdict.kind,
        VerdictKind::Pass,
        "{}",
        second.run.verdict
    );
    let s = second.run.sweep.as_ref().unwrap();
    assert_eq!(
        s.baseline.as_ref().map(|b| (b.runs, b.knee)),
        Some((1, 40.0))
    );
    assert_eq!(s.new_load, None);
    let mut third = passed("new2", 20.0);
    d.record(&config, "w", &mut third, None).unwrap();
    assert_eq!(third.run.verdict.kind, VerdictKind::Fail);
    assert!(
        third.run.verdict.reasons[0].starts_with("knee at 20 req/s, baseline 39.5 ± 0.5"),
        "{}",
        third.run.verdict
    );
}

/// The previous due time a restart resumes `w`'s cadence from, as Unix ms.
fn resumed_from(d: &Daemon) -> Option<i64> {
    let due = d.previous_due.lock().unwrap().get("w").copied()?;
    Some(crate::instant::unix_ns(due) / 1_000_000)
}

/// A restart resumes each cadence from the last run's start: a run not due yet waits for its
/// time (every restart used to run every workload at once, so a crash loop under systemd was a
/// load loop on the target); an overdue one runs once, at start.
#[tokio::test]
async fn a_restart_resumes_the_cadence_from_the_last_runs_start() {
    let dir = tempfile::tempdir().unwrap();
    let (d, c) = daemon(dir.path(), passing);
    let w = c.workloads[0].clone();
    d.start_run(c.clone(), w.clone()).unwrap().await.unwrap();
    let started = d.history.recent(Some("w"), 1).unwrap()[0]
        .run
        .started_unix_ms;
    // The next start, a new process.
    let (next, _) = daemon(dir.path(), unreachable_run);
    next.recover_orphans(&c);
    next.resume_cadences();
    assert_eq!(resumed_from(&next), Some(started));
    let now = SystemTime::now();
    let previous = next.previous_due.lock().unwrap().get("w").copied();
    let due = w.cadence.next_due(now, previous);
    assert!(
        due > now + Duration::from_secs(3000),
        "every 1h, the last run a moment ago: due in {:?}",
        due.duration_since(now)
    );
}

/// A run left without a verdict counts as the workload's last run even when the history
/// cannot take it; one that started long ago leaves the workload overdue: it runs at start.
#[tokio::test]
async fn a_recovered_runs_start_seeds_the_cadence_even_unrecorded() {
    let dir = tempfile::tempdir().unwrap();
    let (d, c) = daemon(dir.path(), unreachable_run);
    let left = c.artifacts_dir.join("w").join("20200101T000000Z-0a6a616f");
    std::fs::create_dir_all(&left).unwrap();
    std::fs::write(left.join("records.jsonl"), "").unwrap();
    let blocker = rusqlite::Connection::open(dir.path().join("history.sqlite")).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    d.recover_orphans(&c);
    d.resume_cadences();
    blocker.execute_batch("ROLLBACK").unwrap();
    assert!(d.history.recent(Some("w"), 10).unwrap().is_empty());
    // 2020-01-01T00:00:00Z
    assert_eq!(resumed_from(&d), Some(1_577_836_800_000));
    let now = SystemTime::now();
    let previous = d.previous_due.lock().unwrap().get("w").copied();
    assert_eq!(c.workloads[0].cadence.next_due(now, previous), now);
}

/// A run a stop caught before its first measured request (in its warm-up here, which left
/// records in its folder): a skip, counted, with no history row and no folder left for the
/// next start to take for a run whose process died.
#[tokio::test]
async fn a_run_stopped_before_its_first_measured_request_is_a_skip() {
    fn warming_up(
        _: Arc<Daemon>,
        config: Arc<Config>,
        w: Workload,
        id: String,
        _: Arc<Progress>,
    ) -> RunFuture {
        Box::pin(async move {
            let result = RunResult::new(&config, &w, id);
            std::fs::create_dir_all(&result.run.artifacts).unwrap();
            std::fs::write(result.run.artifacts.join("records.jsonl"), "").unwrap();
            Ran::NotStarted {
                result,
                why: "during its warm-up",
            }
        })
    }
    let dir = tempfile::tempdir().unwrap();
    let (d, c) = daemon(dir.path(), warming_up);
    d.start_run(c.clone(), c.workloads[0].clone())
        .unwrap()
        .await
        .unwrap();
    assert!(d.history.recent(Some("w"), 10).unwrap().is_empty());
    let left: Vec<_> = std::fs::read_dir(c.artifacts_dir.join("w"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let text = d.metrics.render();
    assert!(
        text.contains("canaryd_skips_total{workload=\"w\",reason=\"stopping\"} 1"),
        "{text}"
    );
    assert!(
        !text.contains("canaryd_runs_total{workload=\"w\""),
        "{text}"
    );
}

/// The first warning of a history spell promises each run's verdict.json only as far as the
/// disk allows: on a full disk the same ENOSPC fails it too.
#[test]
fn the_history_failing_warning_promises_the_verdict_only_when_the_disk_allows() {
    let e = anyhow::anyhow!("database or disk is full");
    let w = history_failing_warning(Path::new("/s/history.sqlite"), &e);
    assert!(
        w.starts_with(
            "history /s/history.sqlite: runs cannot be recorded (database or disk is full)"
        ) && w.contains("verdict.json is still written when the disk allows"),
        "{w}"
    );
}

/// What a removal cut short left of a run folder retention had moved out of the way (a
/// dot-name) is never taken by the start for a run whose process died, and the next
/// retention pass removes it; the pruned run's folder goes that way too.
#[tokio::test]
async fn a_removal_cut_short_is_not_recovered_and_is_removed_by_the_next_pass() {
    let dir = tempfile::tempdir().unwrap();
    let (d, c) = daemon(dir.path(), passing);
    let w = c.workloads[0].clone();
    let left = c
        .artifacts_dir
        .join("w")
        .join(".removing-20200101T000000Z-0a6a616f");
    std::fs::create_dir_all(&left).unwrap();
    std::fs::write(left.join("records.jsonl"), "").unwrap();
    d.recover_orphans(&c);
    assert!(d.history.recent(Some("w"), 10).unwrap().is_empty());
    assert!(!left.join("verdict.json").exists());
    d.start_run(c.clone(), w).unwrap().await.unwrap();
    assert!(!left.exists(), "left behind: {}", left.display());
    assert_eq!(d.history.recent(Some("w"), 10).unwrap().len(), 1);
}

/// A run folder whose verdict.json is torn (the process died writing it) is recovered saying
/// its verdict.json was unreadable, not that it had none.
#[tokio::test]
async fn a_torn_verdict_is_recovered_as_unreadable_not_missing() {
    let dir = tempfile::tempdir().unwrap();
    let (d, c) = daemon(dir.path(), passing);
    let left = c.artifacts_dir.join("w").join("20200101T000000Z-0a6a616f");
    std::fs::create_dir_all(&left).unwrap();
    std::fs::write(left.join("records.jsonl"), "").unwrap();
    std::fs::write(left.join("verdict.json"), "{\"verdict\": \"pa").unwrap();
    d.recover_orphans(&c);
    let rows = d.history.recent(Some("w"), 10).unwrap();
    assert_eq!(rows.len(), 1);
    let verdict = rows[0].run.verdict.to_string();
    assert!(
        verdict.starts_with("error: unreadable verdict.json (EOF while parsing")
            && verdict.ends_with("the process died writing it or its results could not be written"),
        "{verdict}"
    );
}

/// The `verdict.json` of the run `id` of workload `w`.
fn verdict_of(c: &Config, id: &str) -> serde_json::Value {
    let path = c.artifacts_dir.join("w").join(id).join("verdict.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Waits (30 s at most, else fails naming `what`) until `f` holds.
async fn until(what: &str, f: impl Fn() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(30), async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert!(waited.await.is_ok(), "not within 30 s: {what}");
}

/// `on_overrun = "start_when_free"` (audit finding 4): a run due while the previous one still
/// goes starts as soon as that one ends, late, not skipped; it records its due time and how
/// late it started. The clock is moved an hour on to make the second run due; the test waits
/// on what the scheduler did, not on time.
#[tokio::test]
async fn with_start_when_free_a_run_due_during_the_previous_starts_when_it_ends() {
    static AHEAD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    static RELEASED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    fn wall() -> SystemTime {
        SystemTime::now() + Duration::from_secs(AHEAD.load(Ordering::SeqCst))
    }
    /// The first run goes on until released; the others pass at once.
    fn first_held(
        d: Arc<Daemon>,
        c: Arc<Config>,
        w: Workload,
        id: String,
        p: Arc<Progress>,
    ) -> RunFuture {
        Box::pin(async move {
            if RUNS.fetch_add(1, Ordering::SeqCst) == 0 {
                while !RELEASED.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            passing(d, c, w, id, p).await
        })
    }
    let dir = tempfile::tempdir().unwrap();
    let schedule = "every = \"1h\"\non_overrun = \"start_when_free\"";
    let (d, c) = daemon_on(dir.path(), first_held, schedule, wall);
    assert_eq!(c.workloads[0].on_overrun, OnOverrun::StartWhenFree);
    let due = |d: &Daemon| d.previous_due.lock().unwrap().get("w").copied();
    let schedulers = d.schedule(c.clone());
    until("the first run", || RUNS.load(Ordering::SeqCst) == 1).await;
    let first_due = due(&d).unwrap();
    // An hour on: the next run is due while the first still goes.
    AHEAD.store(3600, Ordering::SeqCst);
    // The tick taken (its due time noted); on this one test thread the scheduler has gone on
    // to wait for the first run before this task runs again.
    until("the second tick", || due(&d) > Some(first_due)).await;
    let second_due = due(&d).unwrap();
    assert_eq!(RUNS.load(Ordering::SeqCst), 1, "never beside the first");
    RELEASED.store(true, Ordering::SeqCst);
    until("two runs recorded", || {
        d.history.recent(Some("w"), 10).unwrap().len() == 2
    })
    .await;
    schedulers.cancel();
    let rows = d.history.recent(Some("w"), 10).unwrap();
    let (second, first) = (&rows[0].run, &rows[1].run);
    assert_eq!(first.due_unix_ms, Some(unix_ms(first_due)));
    assert_eq!(second.due_unix_ms, Some(unix_ms(second_due)));
    let late = verdict_of(&c, &second.id);
    assert!(late["start_late_ms"].as_f64().is_some(), "{late:#}");
    assert_eq!(late["due_unix_ms"], unix_ms(second_due), "{late:#}");
    assert_eq!(
        verdict_of(&c, &first.id)["start_late_ms"],
        serde_json::Value::Null
    );
    // A late start is not a skip.
    let text = d.metrics.render();
    // /metrics says how late the last run started, the same measure as its verdict.json.
    let gauge = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("canaryd_last_run_start_late_seconds{workload=\"w\"} "))
            .and_then(|v| v.parse::<f64>().ok())
    };
    let said = late["start_late_ms"].as_f64().unwrap() / 1000.0;
    assert!(
        gauge(&text).is_some_and(|g| (g - said).abs() < 1e-9 && g > 0.0),
        "{said}: {text}"
    );
    for reason in ["overrun", "turn", "stopping"] {
        let none = format!("canaryd_skips_total{{workload=\"w\",reason=\"{reason}\"}} 0\n");
        assert!(text.contains(&none), "{text}");
    }
}

/// A stop (a shutdown, or a reload's) while a run waits to start late is a `stopping` skip,
/// not an `overrun` one (review 3, finding 3): the old code counted `overrun`.
#[tokio::test]
async fn a_stop_while_a_run_waits_to_start_late_is_a_stopping_skip() {
    static AHEAD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    static RELEASED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    fn wall() -> SystemTime {
        SystemTime::now() + Duration::from_secs(AHEAD.load(Ordering::SeqCst))
    }
    fn held(
        d: Arc<Daemon>,
        c: Arc<Config>,
        w: Workload,
        id: String,
        p: Arc<Progress>,
    ) -> RunFuture {
        Box::pin(async move {
            RUNS.fetch_add(1, Ordering::SeqCst);
            while !RELEASED.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            passing(d, c, w, id, p).await
        })
    }
    let dir = tempfile::tempdir().unwrap();
    let schedule = "every = \"1h\"\non_overrun = \"start_when_free\"";
    let (d, c) = daemon_on(dir.path(), held, schedule, wall);
    let due = |d: &Daemon| d.previous_due.lock().unwrap().get("w").copied();
    let schedulers = d.schedule(c.clone());
    until("the first run", || RUNS.load(Ordering::SeqCst) == 1).await;
    let first_due = due(&d).unwrap();
    AHEAD.store(3600, Ordering::SeqCst);
    until("the second tick", || due(&d) > Some(first_due)).await;
    // The second run now waits for the first; the schedule is stopped meanwhile.
    schedulers.cancel();
    let skip = |reason: &str| format!("canaryd_skips_total{{workload=\"w\",reason=\"{reason}\"}} ");
    until("the skip counted", || {
        d.metrics
            .render()
            .contains(&format!("{}1\n", skip("stopping")))
    })
    .await;
    let text = d.metrics.render();
    assert!(text.contains(&format!("{}0\n", skip("overrun"))), "{text}");
    RELEASED.store(true, Ordering::SeqCst);
    assert_eq!(
        RUNS.load(Ordering::SeqCst),
        1,
        "the waiting run never started"
    );
}

/// A late start waits no longer than the next due time: a previous run still going then
/// makes it a skip, as without the option (and one already past is not waited for).
#[tokio::test]
async fn a_late_start_waits_no_longer_than_the_next_due_time() {
    let dir = tempfile::tempdir().unwrap();
    let schedule = "every = \"1h\"\non_overrun = \"start_when_free\"";
    let (d, c) = daemon_on(dir.path(), unreachable_run, schedule, SystemTime::now);
    let w = c.workloads[0].clone();
    let _going = RunningGuard::take(&d, "w").unwrap();
    let stop = CancellationToken::new();
    let hour = Duration::from_secs(3600);
    for due in [
        SystemTime::now() - hour + Duration::from_millis(200),
        SystemTime::now() - hour - hour,
    ] {
        let started = tokio::time::timeout(
            Duration::from_secs(30),
            d.start_when_free(&c, &w, Some(due), &stop),
        )
        .await
        .expect("given up at the next due time");
        assert!(started.is_none());
    }
}

/// A restart resumes the cadence from the last run's due time (audit finding 5), not its
/// start, which comes after its jitter and any wait: the phase no longer moves by those at
/// each restart. A row from a history written before due times were kept resumes from its
/// start, as before.
#[tokio::test]
async fn a_restart_resumes_from_the_last_runs_due_time_or_an_older_rows_start() {
    let dir = tempfile::tempdir().unwrap();
    {
        // The file as the previous version created it.
        let conn = rusqlite::Connection::open(dir.path().join("history.sqlite")).unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (id TEXT PRIMARY KEY, workload TEXT NOT NULL, target TEXT NOT \
             NULL, started_unix_ms INTEGER NOT NULL, finished_unix_ms INTEGER NOT NULL, verdict \
             TEXT NOT NULL, reasons TEXT NOT NULL, trend TEXT, comparison TEXT, summary TEXT, \
             samples TEXT, artifacts TEXT NOT NULL, capacity TEXT, sweep TEXT, load TEXT, \
             load_hash INTEGER);
             INSERT INTO runs (id, workload, target, started_unix_ms, finished_unix_ms, verdict, \
             reasons, artifacts) VALUES ('20200101T000000Z-00000000', 'w', 't', \
             1577836800123, 1577836801000, 'pass', '[]', '/nowhere');",
        )
        .unwrap();
    }
    let (d, c) = daemon(dir.path(), passing);
    d.resume_cadences();
    assert_eq!(resumed_from(&d), Some(1_577_836_800_123));
    // A run due 90 s before it started (a turn, the previous run, a jitter).
    let due = SystemTime::now() - Duration::from_secs(90);
    let start = Start {
        due: Some(due),
        late: None,
    };
    d.start_run_for(c.clone(), c.workloads[0].clone(), start)
        .unwrap()
        .await
        .unwrap();
    let row = &d.history.recent(Some("w"), 1).unwrap()[0].run;
    assert_eq!(row.due_unix_ms, Some(unix_ms(due)));
    assert!(row.started_unix_ms > unix_ms(due) + 60_000);
    // The next start, a new process.
    let (next, _) = daemon(dir.path(), unreachable_run);
    next.recover_orphans(&c);
    next.resume_cadences();
    assert_eq!(resumed_from(&next), Some(unix_ms(due)));
}
