use super::*;

fn run(id: &str, workload: &str, started: i64, kind: VerdictKind, ttft: f64) -> RunRow {
    RunRow {
        run: RunFacts {
            id: id.into(),
            workload: workload.into(),
            target: "t".into(),
            started_unix_ms: started,
            due_unix_ms: None,
            finished_unix_ms: started + 1000,
            verdict: Verdict {
                kind,
                reasons: vec![],
            },
            comparison: None,
            artifacts: PathBuf::from(format!("/a/{workload}/{id}")),
            samples: Some(Samples {
                ttft_ms: vec![ttft],
                ..Default::default()
            }),
            capacity: None,
            sweep: None,
            load: Some(serde_json::json!({})),
        },
        trend: Some(Trend::Steady),
        summary: Some(serde_json::json!({"requests": 3})),
    }
}

#[test]
fn runs_and_baselines_survive_reopening_and_retention_prunes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    // Runs an hour apart and age limits half an hour from any of them: the test may take
    // as long as it likes between taking `now` and pruning.
    let now = now_unix_ms();
    let hours = |h: i64| now - h * 3_600_000;
    {
        let h = History::open(&path).unwrap();
        h.insert(&run("r1", "w", hours(4), VerdictKind::Pass, 1.0))
            .unwrap();
        h.insert(&run("r2", "w", hours(3), VerdictKind::Fail, 2.0))
            .unwrap();
        h.insert(&run("r3", "w", hours(2), VerdictKind::Pass, 3.0))
            .unwrap();
        h.insert(&run("x1", "other", hours(1), VerdictKind::Error, 9.0))
            .unwrap();
    }
    let h = History::open(&path).unwrap();
    let b = h.baseline("w", 10, Some(&serde_json::json!({}))).unwrap();
    assert_eq!(
        b.iter().map(|s| s.ttft_ms[0]).collect::<Vec<_>>(),
        vec![3.0, 1.0],
        "passing runs only, newest first"
    );
    assert_eq!(h.recent(None, 10).unwrap().len(), 4);
    let w = h.recent(Some("w"), 2).unwrap();
    assert_eq!(
        w.iter().map(|r| r.run.id.as_str()).collect::<Vec<_>>(),
        ["r3", "r2"]
    );
    let r2 = h.get("r2").unwrap().unwrap();
    assert_eq!(r2.run.verdict.kind, VerdictKind::Fail);
    assert_eq!(r2.summary.unwrap()["requests"], 3);
    assert!(h.get("nope").unwrap().is_none());
    let latest = h.latest_per_workload().unwrap();
    assert_eq!(
        latest.iter().map(|r| r.run.id.as_str()).collect::<Vec<_>>(),
        ["x1", "r3"]
    );

    // Keep 2 per workload: r1 goes. Then an age limit of 2.5 h: r2 goes too.
    let gone = h
        .prune("w", 2, Duration::from_secs(10 * 3600), 0, "", &mut |_| true)
        .unwrap();
    assert_eq!(gone, [PathBuf::from("/a/w/r1")]);
    let gone = h
        .prune("w", 10, Duration::from_secs(9000), 0, "", &mut |_| true)
        .unwrap();
    assert_eq!(gone, [PathBuf::from("/a/w/r2")]);
    assert_eq!(h.recent(Some("w"), 10).unwrap().len(), 1);
    assert_eq!(h.recent(Some("other"), 10).unwrap().len(), 1);
    assert_eq!(h.workloads().unwrap(), ["other", "w"]);

    // Age alone (a workload no longer configured): no count limit, old runs go.
    assert!(h
        .prune(
            "w",
            usize::MAX,
            Duration::from_secs(10 * 3600),
            0,
            "",
            &mut |_| true
        )
        .unwrap()
        .is_empty());
    let gone = h
        .prune(
            "other",
            usize::MAX,
            Duration::from_secs(1800),
            0,
            "",
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(gone, [PathBuf::from("/a/other/x1")]);
    assert_eq!(h.workloads().unwrap(), ["w"]);
}

/// Age spares the baseline's passing runs: after a clock far ahead at boot, every stored
/// run is "older" than the limit, and the baseline emptied.
#[test]
fn age_never_takes_the_baselines_runs() {
    let dir = tempfile::tempdir().unwrap();
    let h = History::open(&dir.path().join("h.sqlite")).unwrap();
    let days = |d: i64| now_unix_ms() - d * 86_400_000;
    for (id, d, kind) in [
        ("r1", 40, VerdictKind::Pass),
        ("r2", 39, VerdictKind::Pass),
        ("r3", 38, VerdictKind::Fail),
        ("r4", 37, VerdictKind::Pass),
    ] {
        h.insert(&run(id, "w", days(d), kind, 1.0)).unwrap();
    }
    // All older than 30 days; a baseline of 2 keeps the two newest passing runs.
    let gone = h
        .prune(
            "w",
            500,
            Duration::from_secs(30 * 86_400),
            2,
            "",
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(gone, [PathBuf::from("/a/w/r1"), PathBuf::from("/a/w/r3")]);
    assert_eq!(
        h.baseline("w", 10, Some(&serde_json::json!({})))
            .unwrap()
            .len(),
        2
    );
    // The count limit still applies to them.
    let gone = h
        .prune("w", 1, Duration::from_secs(30 * 86_400), 2, "", &mut |_| {
            true
        })
        .unwrap();
    assert_eq!(gone, [PathBuf::from("/a/w/r2")]);
    // A failed run longer than the age limit is older than it as it finishes: the run just
    // recorded is kept.
    h.insert(&run("r5", "w", days(31), VerdictKind::Fail, 1.0))
        .unwrap();
    let gone = h
        .prune(
            "w",
            500,
            Duration::from_secs(30 * 86_400),
            2,
            "r5",
            &mut |_| true,
        )
        .unwrap();
    assert!(gone.is_empty(), "{gone:?}");
}

/// A database as canaryd wrote it before a run's facts were declared once (and before a
/// comparison said what changed in the run's context): the table and JSON of that
/// version, written here by hand in that version's words, still reads.
#[test]
fn a_database_written_by_an_earlier_version_still_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (id TEXT PRIMARY KEY, workload TEXT NOT NULL, \
             target TEXT NOT NULL, started_unix_ms INTEGER NOT NULL, \
             finished_unix_ms INTEGER NOT NULL, verdict TEXT NOT NULL, \
             reasons TEXT NOT NULL, trend TEXT, comparison TEXT, summary TEXT, \
             samples TEXT, artifacts TEXT NOT NULL);",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO runs VALUES ('20261120T101500Z-0a6a616f', 'chat', 'vllm', \
             1795170900000, 1795170930000, 'fail', \
             '[\"request_latency p99 812.0 ms > 500 ms\"]', 'regressed', \
             '{\"trend\":\"regressed\",\"baseline_runs\":3,\"metrics\":{\"request_latency\":\
             {\"baseline_median\":410.5,\"median\":612.25,\"shift_ratio\":1.49,\
             \"shift_in_mads\":7.5,\"p_value\":0.0001,\"rank_biserial\":0.8,\
             \"trend\":\"regressed\"}}}', \
             '{\"requests\":40,\"completed\":40,\"errors\":0}', \
             '{\"ttft_ms\":[12.5],\"itl_ms\":[3.0],\"e2e_ms\":[612.25]}', \
             '/var/lib/canaryd/artifacts/chat/20261120T101500Z-0a6a616f')",
            [],
        )
        .unwrap();
    }
    let h = History::open(&path).unwrap();
    let row = h.get("20261120T101500Z-0a6a616f").unwrap().unwrap();
    assert_eq!(row.run.workload, "chat");
    assert_eq!(row.run.target, "vllm");
    assert_eq!(row.run.verdict.kind, VerdictKind::Fail);
    assert_eq!(
        row.run.verdict.reasons,
        ["request_latency p99 812.0 ms > 500 ms"]
    );
    assert_eq!(row.trend, Some(Trend::Regressed));
    let comparison = row.run.comparison.as_ref().expect("the stored comparison");
    assert_eq!(comparison.baseline_runs, 3);
    assert_eq!(comparison.metrics["request_latency"].median, 612.25);
    assert_eq!(row.summary.as_ref().unwrap()["requests"], 40);
    // Serialized as before: the run's fields at the top level, samples never.
    let served = serde_json::to_value(&row).unwrap();
    for key in ["id", "workload", "target", "verdict", "trend", "comparison"] {
        assert!(served.get(key).is_some(), "{key} missing: {served:#}");
    }
    assert!(served.get("samples").is_none() && served.get("run").is_none());
    assert_eq!(served["started_unix_ms"], 1_795_170_900_000_i64);
    // Its samples count in a baseline (a failed run's do not, so store a passing copy).
    let mut passing = row.clone();
    passing.run.id = "20261120T102000Z-1b2c3d4e".into();
    passing.run.verdict.kind = VerdictKind::Pass;
    passing.run.samples = Some(Samples {
        ttft_ms: vec![11.0],
        ..Default::default()
    });
    passing.run.load = Some(serde_json::json!({}));
    h.insert(&passing).unwrap();
    assert_eq!(
        h.baseline("chat", 10, passing.run.load.as_ref()).unwrap()[0].ttft_ms,
        [11.0]
    );
}

#[test]
fn an_older_file_without_the_capacity_column_opens_and_keeps_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    {
        // The first schema, as files written before capacity workloads hold it.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        conn.execute(
            "INSERT INTO runs (id, workload, target, started_unix_ms, finished_unix_ms, \
             verdict, reasons, artifacts) VALUES ('old', 'w', 't', 1, 2, 'pass', '[]', '/a')",
            [],
        )
        .unwrap();
    }
    let h = History::open(&path).unwrap();
    let old = h.get("old").unwrap().unwrap();
    assert_eq!(old.run.verdict.kind, VerdictKind::Pass);
    assert!(old.run.capacity.is_none());
    let mut r = run("new", "w", 3, VerdictKind::Pass, 1.0);
    let found = Capacity::of(
        canary_core::RateBracket {
            passed: Some(100.0),
            failed: Some(125.0),
        },
        "time_to_first_token:100".into(),
        0.95,
        "precision",
    );
    let load = |isl: u32| serde_json::json!({"target": "t", "load": {"isl": isl}});
    let searched = CapacityRun {
        found: found.clone(),
        probes: Vec::new(),
        baseline: None,
        new_load: None,
        load: Some(load(32)),
    };
    r.run.capacity = Some(searched.clone());
    r.run.load = searched.load.clone();
    h.insert(&r).unwrap();
    drop(h);
    // Opened again: the column is not added twice, the capacity reads back.
    let h = History::open(&path).unwrap();
    assert_eq!(
        h.get("new").unwrap().unwrap().run.capacity.unwrap().found,
        found
    );
    assert_eq!(
        h.capacity_baseline("w", 10, &searched).unwrap(),
        vec![found.clone()]
    );
    // A search under another SLO (a reload changed it) has no baseline yet: the capacity at
    // 100 ms says nothing of the capacity at 50 ms. Nor under another good fraction.
    let mut tighter = searched.clone();
    tighter.found.slo = "time_to_first_token:50".into();
    assert!(h.capacity_baseline("w", 10, &tighter).unwrap().is_empty());
    let mut stricter = searched.clone();
    stricter.found.min_good_fraction = 0.99;
    assert!(h.capacity_baseline("w", 10, &stricter).unwrap().is_empty());
    // Nor of another load: longer prompts (a reload changed isl) have a lower capacity, and
    // the old one's failed every run of the new until it aged out. A search whose load is not
    // known (stored before it was recorded) is no baseline of one that is.
    let mut longer = searched.clone();
    longer.load = Some(load(4096));
    assert!(h.capacity_baseline("w", 10, &longer).unwrap().is_empty());
    let mut unknown = searched.clone();
    unknown.load = None;
    assert!(h.capacity_baseline("w", 10, &unknown).unwrap().is_empty());
}

#[test]
fn an_unreadable_row_is_left_out_of_listings_and_named_when_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    let now = now_unix_ms();
    let h = History::open(&path).unwrap();
    h.insert(&run("r1", "w", now - 2000, VerdictKind::Pass, 1.0))
        .unwrap();
    h.insert(&run("r2", "w", now - 1000, VerdictKind::Pass, 2.0))
        .unwrap();
    // A hand edit SQLite allows: text where a number is kept.
    h.conn()
        .execute("UPDATE runs SET finished_unix_ms = 'x' WHERE id = 'r1'", [])
        .unwrap();
    let ids = |rows: Vec<ListedRow>| rows.into_iter().map(|r| r.run.id).collect::<Vec<_>>();
    assert_eq!(ids(h.recent(None, 10).unwrap()), ["r2"]);
    assert_eq!(ids(h.latest_per_workload().unwrap()), ["r2"]);
    let e = format!("{:#}", h.get("r1").unwrap_err());
    assert!(
        e.starts_with(&format!("history {}: run r1", path.display())),
        "{e}"
    );
    assert!(h.get("r2").unwrap().is_some());
}

#[test]
fn a_knee_baseline_is_over_sweeps_of_the_same_axis_and_grid() {
    use crate::cli::sweep::point::Axis;
    use crate::judge::knee::{SweepKnee, SweepPointRow, SweepRun};
    let dir = tempfile::tempdir().unwrap();
    let h = History::open(&dir.path().join("h.sqlite")).unwrap();
    let sweep = |values: &[f64], knee: f64| SweepRun {
        axis: Axis::Concurrency,
        knee: Some(SweepKnee {
            label: "c8".into(),
            value: 8.0,
            request_throughput: knee,
        }),
        knee_rule: crate::judge::knee::KNEE_RULE,
        left_out: Vec::new(),
        interrupted: false,
        not_run: Vec::new(),
        capacity: None,
        points: values
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
    let (three, five) = (&[1.0, 8.0, 16.0][..], &[1.0, 4.0, 8.0, 16.0, 32.0][..]);
    let now = now_unix_ms();
    // Each sweep stamped before the one recorded ahead of it (the clock stepped back):
    // newest is still the last recorded.
    for (i, (grid, knee)) in [(three, 100.0), (three, 104.0), (five, 50.0)]
        .into_iter()
        .enumerate()
    {
        let mut r = run(
            &format!("s{i}"),
            "w",
            now - 10_000 - i as i64,
            VerdictKind::Pass,
            1.0,
        );
        r.run.sweep = Some(sweep(grid, knee));
        h.insert(&r).unwrap();
    }
    // A reload that changed the grid (or the axis) starts a baseline of its own.
    let any = Some(&serde_json::json!({}));
    assert_eq!(
        h.knee_baseline("w", 10, &sweep(three, 0.0), any).unwrap(),
        [104.0, 100.0]
    );
    assert_eq!(
        h.knee_baseline("w", 10, &sweep(five, 0.0), any).unwrap(),
        [50.0]
    );
    let mut rates = sweep(three, 0.0);
    rates.axis = Axis::RequestRate;
    assert!(h.knee_baseline("w", 10, &rates, any).unwrap().is_empty());
}

/// Newest means recorded last, not started last: after the wall clock steps back an hour,
/// the runs recorded since must not stay behind the one stamped before the step, in the
/// baseline, the listings or retention's count (retention by age still goes by start).
#[test]
fn newest_is_the_last_recorded_even_after_the_clock_stepped_back() {
    let dir = tempfile::tempdir().unwrap();
    let h = History::open(&dir.path().join("h.sqlite")).unwrap();
    let now = now_unix_ms();
    let minutes = |m: i64| now - 120 * 60_000 + m * 60_000;
    let with_context = |mut r: RunRow| {
        r.summary = Some(serde_json::json!({"requests": 3, "context": {}}));
        r
    };
    // r2 is stamped an hour ahead; the clock then steps back and r3, r4 follow it.
    // Each run's capacity (and TTFT) is its number, to tell them apart.
    let capacity = |rate: f64| {
        Capacity::of(
            canary_core::RateBracket {
                passed: Some(rate),
                failed: None,
            },
            "time_to_first_token:100".into(),
            0.95,
            "precision",
        )
    };
    for (id, m, kind) in [
        ("r1", 0, VerdictKind::Pass),
        ("r2", 60, VerdictKind::Pass),
        ("r3", 10, VerdictKind::Pass),
        ("r4", 20, VerdictKind::Fail),
    ] {
        let n: f64 = id[1..].parse().unwrap();
        let mut r = with_context(run(id, "w", minutes(m), kind, n));
        r.run.capacity = Some(CapacityRun {
            found: capacity(n),
            probes: Vec::new(),
            baseline: None,
            new_load: None,
            load: Some(serde_json::json!({})),
        });
        h.insert(&r).unwrap();
    }
    let ids = |rows: Vec<ListedRow>| rows.into_iter().map(|r| r.run.id).collect::<Vec<_>>();
    let ttfts = |b: Vec<Samples>| b.iter().map(|s| s.ttft_ms[0]).collect::<Vec<_>>();
    assert_eq!(
        ttfts(h.baseline("w", 2, Some(&serde_json::json!({}))).unwrap()),
        [3.0, 2.0]
    );
    assert_eq!(h.baseline_context("w").unwrap().unwrap().run, "r3");
    assert_eq!(
        h.capacity_baseline(
            "w",
            1,
            &CapacityRun {
                found: capacity(0.0),
                probes: Vec::new(),
                baseline: None,
                new_load: None,
                load: Some(serde_json::json!({})),
            }
        )
        .unwrap(),
        [capacity(3.0)]
    );
    assert_eq!(
        ids(h.recent(Some("w"), 10).unwrap()),
        ["r4", "r3", "r2", "r1"]
    );
    assert_eq!(ids(h.latest_per_workload().unwrap()), ["r4"]);
    // Age goes by start: r1 and r3 began over 105 min ago, but r3 is the baseline's
    // newest passing run. The count keeps the last two recorded.
    let gone = h
        .prune("w", 4, Duration::from_secs(105 * 60), 1, "", &mut |_| true)
        .unwrap();
    assert_eq!(gone, [PathBuf::from("/a/w/r1")]);
    let gone = h
        .prune("w", 2, Duration::from_secs(200 * 60), 1, "", &mut |_| true)
        .unwrap();
    assert_eq!(gone, [PathBuf::from("/a/w/r2")]);
}

/// A history SQLite can only read (a read-only mount, `chattr +i`: it then opens the file
/// read-only without a word) is refused at open, naming it: every run would fail to record.
#[test]
fn a_read_only_history_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    drop(History::open(&path).unwrap());
    // Root ignores permissions, so the read-only open is asked for.
    let conn =
        Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let e = format!("{:#}", check_writable_and_sound(&conn, &path).unwrap_err());
    assert!(
        e.contains("cannot be written") && e.contains("h.sqlite"),
        "{e}"
    );
    let conn = Connection::open(&path).unwrap();
    check_writable_and_sound(&conn, &path).unwrap();
}

/// Damaged inner pages open without complaint and then fail every write (`malformed`):
/// `quick_check` at open refuses the file, naming it.
#[test]
fn a_damaged_history_is_refused_at_open_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    {
        let h = History::open(&path).unwrap();
        for i in 0..200 {
            let mut r = run(&format!("r{i:03}"), "w", 1000 + i, VerdictKind::Pass, 1.0);
            r.summary = Some(serde_json::json!({ "pad": "x".repeat(500) }));
            h.insert(&r).unwrap();
        }
    }
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 8 * 4096, "{}", bytes.len());
    // Pages 3 to 5 (4 KiB each): past the header and the schema page.
    bytes[2 * 4096..5 * 4096].fill(0x5a);
    std::fs::write(&path, bytes).unwrap();
    let e = format!("{:#}", History::open(&path).err().expect("refused"));
    assert!(e.contains("is damaged") && e.contains("h.sqlite"), "{e}");
}

/// The file removed while the daemon runs: the next run is written to a new one at the
/// path, where the status API, retention and the next start look, not into the unlinked one.
#[test]
fn a_history_removed_while_open_is_recreated_at_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    let h = History::open(&path).unwrap();
    h.insert(&run("r1", "w", 1000, VerdictKind::Pass, 1.0))
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    h.insert(&run("r2", "w", 2000, VerdictKind::Pass, 1.0))
        .unwrap();
    drop(h);
    let reopened = History::open(&path).unwrap();
    let ids: Vec<String> = reopened
        .recent(None, 10)
        .unwrap()
        .into_iter()
        .map(|r| r.run.id)
        .collect();
    assert_eq!(ids, ["r2"]);
}

/// The file removed and a new one impossible to create (its folder made read-only, or, as
/// here where root ignores permissions, the folder replaced by a file): the old connection
/// is kept, so the runs recorded before are still listed and still make baselines, instead of
/// an empty in-memory database failing every read with "no such table". The recording fails
/// naming why (warned once), and the next one, once the folder is back, records to a new file
/// at the path.
#[test]
fn a_history_that_cannot_be_recreated_keeps_serving_the_runs_before() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let path = state.join("h.sqlite");
    let h = History::open(&path).unwrap();
    h.insert(&run("r1", "w", 1000, VerdictKind::Pass, 1.0))
        .unwrap();
    std::fs::remove_dir_all(&state).unwrap();
    std::fs::write(&state, "not a folder").unwrap();
    let ids = |h: &History| -> Vec<String> {
        let rows = h.recent(None, 10).unwrap();
        rows.into_iter().map(|r| r.run.id).collect()
    };
    let load = serde_json::json!({});
    for _ in 0..2 {
        let e = h
            .insert(&run("r2", "w", 2000, VerdictKind::Pass, 1.0))
            .unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("re-creating the history database"), "{e}");
        assert!(h.reopen_failed.load(Ordering::Relaxed));
        assert_eq!(ids(&h), ["r1"]);
        assert_eq!(h.baseline("w", 10, Some(&load)).unwrap().len(), 1);
        assert_eq!(h.workloads().unwrap(), ["w"]);
    }
    std::fs::remove_file(&state).unwrap();
    h.insert(&run("r3", "w", 3000, VerdictKind::Pass, 1.0))
        .unwrap();
    assert!(!h.reopen_failed.load(Ordering::Relaxed));
    assert_eq!(ids(&h), ["r3"]);
    drop(h);
    assert_eq!(ids(&History::open(&path).unwrap()), ["r3"]);
}

/// A reload that changes the load (`osl` 16 → 64) starts a baseline of its own, for the
/// latencies and the knee alike: compared with the old load's, every run of the new failed
/// (failing runs join no baseline), until retention took the old ones away. A run stored
/// before loads were recorded joins none.
#[test]
fn a_baseline_is_of_runs_of_one_load() {
    use crate::cli::sweep::point::Axis;
    use crate::judge::knee::{SweepKnee, SweepRun};
    let dir = tempfile::tempdir().unwrap();
    let h = History::open(&dir.path().join("h.sqlite")).unwrap();
    let load =
        |osl: u32| serde_json::json!({"target": {"name": "sim"}, "load": {"osl": {"mean": osl}}});
    let (short, long) = (load(16), load(64));
    let knee = |k: f64| SweepRun {
        axis: Axis::Concurrency,
        knee: Some(SweepKnee {
            label: "c8".into(),
            value: 8.0,
            request_throughput: k,
        }),
        knee_rule: crate::judge::knee::KNEE_RULE,
        left_out: Vec::new(),
        interrupted: false,
        not_run: Vec::new(),
        capacity: None,
        points: Vec::new(),
        baseline: None,
        new_load: None,
    };
    let now = now_unix_ms();
    for (i, (l, ttft)) in [
        (None, 9.0),
        (Some(&short), 1.0),
        (Some(&short), 2.0),
        (Some(&long), 7.0),
    ]
    .into_iter()
    .enumerate()
    {
        let mut r = run(
            &format!("r{i}"),
            "w",
            now - 10_000 + i as i64,
            VerdictKind::Pass,
            ttft,
        );
        r.run.load = l.cloned();
        r.run.sweep = Some(knee(ttft * 10.0));
        h.insert(&r).unwrap();
    }
    let ttfts = |b: Vec<Samples>| b.iter().map(|s| s.ttft_ms[0]).collect::<Vec<_>>();
    assert_eq!(
        ttfts(h.baseline("w", 10, Some(&short)).unwrap()),
        [2.0, 1.0]
    );
    assert_eq!(ttfts(h.baseline("w", 1, Some(&short)).unwrap()), [2.0]);
    assert_eq!(ttfts(h.baseline("w", 10, Some(&long)).unwrap()), [7.0]);
    assert!(h.baseline("w", 10, None).unwrap().is_empty());
    assert_eq!(
        h.knee_baseline("w", 10, &knee(0.0), Some(&short)).unwrap(),
        [20.0, 10.0]
    );
    assert_eq!(
        h.knee_baseline("w", 10, &knee(0.0), Some(&long)).unwrap(),
        [70.0]
    );
    // A third load finds no baseline, and says what changed since the newest baseline run.
    let longer = load(128);
    assert!(h.baseline("w", 10, Some(&longer)).unwrap().is_empty());
    assert_eq!(
        h.new_load("w", BaselineOf::Latency, Some(&longer))
            .unwrap()
            .as_deref(),
        Some("new load: baseline starts again (load.osl.mean 64 → 128)")
    );
    assert_eq!(
        h.new_load("w", BaselineOf::Knee, Some(&long)).unwrap(),
        None
    );
    assert_eq!(
        h.new_load("w", BaselineOf::Capacity, Some(&long)).unwrap(),
        None
    );
}

/// A capacity search stored before the load had a column (its load inside the search) still
/// joins the baseline of its load, read by the same query.
#[test]
fn a_capacity_stored_before_the_load_column_joins_the_baseline_of_its_load() {
    let dir = tempfile::tempdir().unwrap();
    let h = History::open(&dir.path().join("h.sqlite")).unwrap();
    let load = |isl: u32| serde_json::json!({"load": {"isl": isl}});
    let found = |rate: f64| {
        Capacity::of(
            canary_core::RateBracket {
                passed: Some(rate),
                failed: None,
            },
            "time_to_first_token:100".into(),
            0.95,
            "precision",
        )
    };
    let searched = |rate: f64, isl: u32| CapacityRun {
        found: found(rate),
        probes: Vec::new(),
        baseline: None,
        new_load: None,
        load: Some(load(isl)),
    };
    for (id, rate, isl, column) in [
        ("a", 10.0, 32, false),
        ("b", 20.0, 64, false),
        ("c", 30.0, 32, true),
    ] {
        let mut r = run(id, "w", now_unix_ms(), VerdictKind::Pass, 1.0);
        r.run.capacity = Some(searched(rate, isl));
        r.run.load = column.then(|| load(isl));
        h.insert(&r).unwrap();
    }
    assert_eq!(
        h.capacity_baseline("w", 10, &searched(0.0, 32)).unwrap(),
        [found(30.0), found(10.0)]
    );
    assert_eq!(
        h.capacity_baseline("w", 10, &searched(0.0, 64)).unwrap(),
        [found(20.0)]
    );
    // Its load read from the search: the newest is of isl 32, so 32 is no new load.
    assert_eq!(
        h.new_load("w", BaselineOf::Capacity, Some(&load(32)))
            .unwrap(),
        None
    );
}

/// A run recorded late (its history write failed; recorded from its verdict.json at the next
/// start) takes its place by start among its workload's runs: the runs that finished after it
/// stay the newest, for listings, the latest per workload and retention.
#[test]
fn a_run_recorded_late_takes_its_place_not_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let h = History::open(&dir.path().join("h.sqlite")).unwrap();
    h.insert(&run("r0", "w", 500, VerdictKind::Pass, 1.0))
        .unwrap();
    h.insert(&run("other", "v", 600, VerdictKind::Pass, 1.0))
        .unwrap();
    h.insert(&run("r2", "w", 2000, VerdictKind::Pass, 1.0))
        .unwrap();
    h.insert(&run("r3", "w", 3000, VerdictKind::Fail, 1.0))
        .unwrap();
    h.insert_late(&[run("r1", "w", 1000, VerdictKind::Pass, 1.0)])
        .unwrap();
    let listed: Vec<String> = h
        .recent(Some("w"), 10)
        .unwrap()
        .into_iter()
        .map(|r| r.run.id)
        .collect();
    assert_eq!(listed, ["r3", "r2", "r1", "r0"]);
    let latest: Vec<String> = h
        .latest_per_workload()
        .unwrap()
        .into_iter()
        .map(|r| r.run.id)
        .collect();
    assert_eq!(latest, ["other", "r3"]);
}

/// Many runs recorded late (a history removed while the daemon ran: at the next start every
/// run of the workload is): each takes its place by start, one call at a time or many at
/// once, and the rowids grow by the runs placed, never past what SQLite can hold (they
/// doubled with each run placed, and overflowed after about 60).
#[test]
fn a_hundred_and_fifty_runs_recorded_late_keep_start_order_without_overflow() {
    let dir = tempfile::tempdir().unwrap();
    let h = History::open(&dir.path().join("h.sqlite")).unwrap();
    for k in 1..=100i64 {
        h.insert(&run(
            &format!("s{k:03}"),
            "w",
            k * 1000,
            VerdictKind::Pass,
            1.0,
        ))
        .unwrap();
        if k % 10 == 0 {
            h.insert(&run(
                &format!("v{k:03}"),
                "v",
                k * 1000,
                VerdictKind::Pass,
                1.0,
            ))
            .unwrap();
        }
    }
    // A hundred late, one call each, newest first (each then has the most rows after it).
    for k in (1..=100i64).rev() {
        let late = run(
            &format!("l{k:03}"),
            "w",
            k * 1000 - 500,
            VerdictKind::Fail,
            1.0,
        );
        h.insert_late(&[late]).unwrap();
    }
    // Fifty more in one call, out of order.
    let batch: Vec<RunRow> = (1..=50i64)
        .rev()
        .map(|k| {
            run(
                &format!("m{k:03}"),
                "w",
                k * 2000 - 250,
                VerdictKind::Pass,
                1.0,
            )
        })
        .collect();
    h.insert_late(&batch).unwrap();
    let listed = h.recent(Some("w"), 1000).unwrap();
    assert_eq!(listed.len(), 250);
    let starts: Vec<i64> = listed.iter().map(|r| r.run.started_unix_ms).collect();
    let mut by_start = starts.clone();
    by_start.sort_by(|a, b| b.cmp(a));
    assert_eq!(starts, by_start, "newest first is latest start first");
    let others: Vec<String> = h
        .recent(Some("v"), 100)
        .unwrap()
        .into_iter()
        .map(|r| r.run.id)
        .collect();
    assert_eq!(
        others,
        (1..=10)
            .rev()
            .map(|k| format!("v{:03}", k * 10))
            .collect::<Vec<_>>()
    );
    let latest: Vec<String> = h
        .latest_per_workload()
        .unwrap()
        .into_iter()
        .map(|r| r.run.id)
        .collect();
    assert_eq!(latest, ["v100", "s100"]);
    let (count, max): (i64, i64) = h
        .conn()
        .query_row("SELECT COUNT(*), MAX(rowid) FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(count, 260);
    assert!(max <= 260, "rowids grow by the runs placed: {max}");
    // Count retention keeps the latest by start now.
    let gone = h
        .prune(
            "w",
            3,
            Duration::from_secs(u32::MAX as u64),
            0,
            "",
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(gone.len(), 247);
    let kept: Vec<String> = h
        .recent(Some("w"), 10)
        .unwrap()
        .into_iter()
        .map(|r| r.run.id)
        .collect();
    assert_eq!(kept, ["s100", "m050", "l100"]);
}

/// Placing runs recorded late is one transaction: when it fails, none of them is stored and
/// the rows there keep their places (an INSERT committed before a failed UPDATE left the run
/// stored as the newest, and the log said it was not recorded).
#[test]
fn runs_recorded_late_are_all_placed_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let h = History::open(&dir.path().join("h.sqlite")).unwrap();
    h.insert(&run("r1", "w", 1000, VerdictKind::Pass, 1.0))
        .unwrap();
    h.insert(&run("r3", "w", 3000, VerdictKind::Pass, 1.0))
        .unwrap();
    // Moving a row fails (as a full disk or a lock would make it).
    h.conn()
        .execute_batch(
            "CREATE TRIGGER refuse BEFORE UPDATE ON runs BEGIN SELECT RAISE(ABORT, 'refused'); END",
        )
        .unwrap();
    let e = h
        .insert_late(&[
            run("r0", "w", 500, VerdictKind::Pass, 1.0),
            run("r2", "w", 2000, VerdictKind::Pass, 1.0),
        ])
        .unwrap_err();
    assert!(format!("{e:#}").contains("refused"), "{e:#}");
    assert!(h.get("r0").unwrap().is_none());
    assert!(h.get("r2").unwrap().is_none());
    let rowids: Vec<(i64, String)> = h
        .conn()
        .prepare("SELECT rowid, id FROM runs ORDER BY rowid")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(rowids, [(1, "r1".to_string()), (2, "r3".to_string())]);
}

/// A history an earlier version's doubling left with rowids near 2^63: a run recorded late
/// is refused with a clear error, never numbered past the end (a panic in a debug build, a
/// wrap to negative rowids in release).
#[test]
fn a_history_at_the_end_of_its_row_numbers_refuses_late_runs_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let h = History::open(&dir.path().join("h.sqlite")).unwrap();
    h.insert(&run("r1", "w", 1000, VerdictKind::Pass, 1.0))
        .unwrap();
    h.conn()
        .execute("UPDATE runs SET rowid = ?1", [i64::MAX])
        .unwrap();
    let e = h
        .insert_late(&[run("r2", "w", 2000, VerdictKind::Pass, 1.0)])
        .unwrap_err();
    assert!(
        format!("{e:#}").contains("at the end of their range"),
        "{e:#}"
    );
    assert!(h.get("r2").unwrap().is_none());
}

/// The latest run of each workload is found in one pass, not by a subquery per row (that
/// was quadratic in a workload's runs, and ran before the daemon said it was ready: 20,000
/// runs took 51 s). Read from SQLite's own plan for the query.
#[test]
fn the_latest_run_per_workload_takes_no_subquery_per_row() {
    let dir = tempfile::tempdir().unwrap();
    let h = History::open(&dir.path().join("h.sqlite")).unwrap();
    for k in 0..20i64 {
        let w = if k % 2 == 0 { "a" } else { "b" };
        h.insert(&run(
            &format!("r{k:02}"),
            w,
            k * 1000,
            VerdictKind::Pass,
            1.0,
        ))
        .unwrap();
    }
    let plan: Vec<String> = h
        .conn()
        .prepare(&format!("EXPLAIN QUERY PLAN {}", latest_per_workload_sql()))
        .unwrap()
        .query_map([], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert!(
        !plan.iter().any(|step| step.contains("CORRELATED")),
        "{plan:#?}"
    );
    let latest: Vec<String> = h
        .latest_per_workload()
        .unwrap()
        .into_iter()
        .map(|r| r.run.id)
        .collect();
    assert_eq!(latest, ["r18", "r19"]);
}

/// Listings read of each stored summary only what a brief shows (a full summary parsed
/// for each of a thousand runs held hundreds of MB): the briefs are those of the whole
/// summary, for odd summaries too, and one run's endpoint still gets it all.
#[test]
fn listings_read_only_the_briefs_part_of_a_summary_and_show_the_same_brief() {
    use crate::service::status::RunBrief;
    let dir = tempfile::tempdir().unwrap();
    let h = History::open(&dir.path().join("h.sqlite")).unwrap();
    let full = serde_json::json!({
        "requests": 20, "completed": 19, "errors": 1, "duration_s": 3.5,
        "interrupted": false, "unsent": 0,
        "goodput": {"good_request_fraction": 0.9, "goodput": 5.0,
                    "met_on_bound": {"inter_token_latency": 2}},
        "time_to_first_token": {"p50": 12.0, "p99": 40.0, "avg": 15.0},
        "inter_token_latency": {"p50": 2.0, "p99": 4.0},
        "request_latency": {"p50": 120.0, "p99": null},
        "telemetry_sources": {"nvml": {"state": "unavailable", "reason": "no GPU"}},
        "diagnosis": {"class": "queueing", "confidence": "high", "why": "queue 400 ms",
                      "evidence": [{"at": 1.0}], "findings": ["x"]},
        "context_changes": {"baseline_run": "r-1", "changes": []},
        "timeslices": (0..256).map(|i| serde_json::json!({"t": i, "ttft": [1, 2, 3]}))
            .collect::<Vec<_>>(),
        "by_url": {"http://a": {"requests": 10}},
    });
    let summaries = [
        Some(full.to_string()),
        Some(r#"{"requests": "many", "timeslices": []}"#.to_string()),
        Some(r#"{"goodput": 5, "requests": 3}"#.to_string()),
        Some(r#"{"diagnosis": "slow", "requests": 3}"#.to_string()),
        Some(r#"{"diagnosis": {"class": 7}, "requests": 3}"#.to_string()),
        Some("[1, 2]".to_string()),
        Some(r#"{"requests": 3"#.to_string()),
        Some("{}".to_string()),
        Some(r#"{"receive_timestamps": {"requests": "odd"}, "requests": 3}"#.to_string()),
        None,
    ];
    for (k, summary) in summaries.iter().enumerate() {
        let id = format!("r{k}");
        h.insert(&run(&id, "w", k as i64 * 1000, VerdictKind::Pass, 1.0))
            .unwrap();
        h.conn()
            .execute(
                "UPDATE runs SET summary = ?1 WHERE id = ?2",
                params![summary, id],
            )
            .unwrap();
    }
    let listed = h.recent(Some("w"), 100).unwrap();
    assert_eq!(listed.len(), summaries.len());
    for row in &listed {
        let whole = h.get(&row.run.id).unwrap().unwrap();
        assert_eq!(
            serde_json::json!(RunBrief::from(row)),
            serde_json::json!(RunBrief::from(&whole)),
            "{}",
            row.run.id
        );
    }
    let listed_brief = |id: &str| {
        let row = listed.iter().find(|r| r.run.id == id).unwrap();
        serde_json::json!(RunBrief::from(row))
    };
    // An array is of no summary's shape (a struct reads one field by field); receive
    // timestamps of another shape cost the bounds, not the figures.
    assert!(listed_brief("r5")["figures"]["requests"].is_null());
    assert_eq!(listed_brief("r8")["figures"]["requests"], 3);
    assert_eq!(
        listed_brief("r8")["figures"]["bounds"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let first = listed.iter().find(|r| r.run.id == "r0").unwrap();
    let whole = h.get("r0").unwrap().unwrap().summary.unwrap();
    assert_eq!(whole, full);
    let brief = serde_json::json!(RunBrief::from(first));
    assert_eq!(brief["figures"]["good_request_fraction"], 0.9);
    assert_eq!(brief["figures"]["time_to_first_token"]["p99"], 40.0);
    assert_eq!(brief["diagnosis"]["class"], "queueing");
    assert_eq!(brief["context_changes"]["baseline_run"], "r-1");
    let latest = h.latest_per_workload().unwrap();
    assert!(latest[0].summary.is_none(), "r9 has no summary");
}

/// A stored sample set, capacity search or sweep that does not read (a hand edit, a damaged
/// file) is passed over by its baseline, which goes on to the runs before it, and said once
/// naming the run: one such row turned off every comparison of its workload while it was in
/// the baseline's window.
#[test]
fn an_unreadable_baseline_row_is_passed_over_not_the_whole_baseline() {
    use crate::cli::sweep::point::Axis;
    use crate::judge::knee::{SweepKnee, SweepPointRow, SweepRun};
    let dir = tempfile::tempdir().unwrap();
    let h = History::open(&dir.path().join("h.sqlite")).unwrap();
    let capacity = |rate: f64| {
        Capacity::of(
            canary_core::RateBracket {
                passed: Some(rate),
                failed: None,
            },
            "time_to_first_token:100".into(),
            0.95,
            "precision",
        )
    };
    let searched = |rate: f64| CapacityRun {
        found: capacity(rate),
        probes: Vec::new(),
        baseline: None,
        new_load: None,
        load: Some(serde_json::json!({})),
    };
    let sweep = |knee: f64| SweepRun {
        axis: Axis::Concurrency,
        knee: Some(SweepKnee {
            label: "c8".into(),
            value: 8.0,
            request_throughput: knee,
        }),
        knee_rule: crate::judge::knee::KNEE_RULE,
        left_out: Vec::new(),
        interrupted: false,
        not_run: Vec::new(),
        capacity: None,
        points: vec![SweepPointRow {
            label: "c8".into(),
            value: 8.0,
            verdict: "pass".into(),
            request_throughput: None,
            ttft_p99_ms: None,
        }],
        baseline: None,
        new_load: None,
    };
    for k in 1..=4i64 {
        let n = k as f64;
        let mut r = run(&format!("r{k}"), "w", k * 1000, VerdictKind::Pass, n);
        r.run.capacity = Some(searched(n));
        r.run.sweep = Some(sweep(n));
        h.insert(&r).unwrap();
    }
    h.conn()
        .execute(
            "UPDATE runs SET samples = '{\"ttft_ms\":[1,2', capacity = '{', sweep = '[' \
             WHERE id = 'r3'",
            [],
        )
        .unwrap();
    let load = Some(serde_json::json!({}));
    let ttfts = |b: Vec<Samples>| b.iter().map(|s| s.ttft_ms[0]).collect::<Vec<_>>();
    assert_eq!(
        ttfts(h.baseline("w", 10, load.as_ref()).unwrap()),
        [4.0, 2.0, 1.0]
    );
    assert_eq!(
        ttfts(h.baseline("w", 2, load.as_ref()).unwrap()),
        [4.0, 2.0]
    );
    assert_eq!(
        h.capacity_baseline("w", 2, &searched(0.0)).unwrap(),
        [capacity(4.0), capacity(2.0)]
    );
    assert_eq!(
        h.knee_baseline("w", 2, &sweep(0.0), load.as_ref()).unwrap(),
        [4.0, 2.0]
    );
    let mut warned: Vec<(String, &str)> = h
        .unreadable_baseline_rows
        .lock()
        .unwrap()
        .iter()
        .cloned()
        .collect();
    warned.sort();
    assert_eq!(
        warned,
        [
            ("r3".to_string(), "capacity search"),
            ("r3".to_string(), "sample set"),
            ("r3".to_string(), "sweep")
        ]
    );
}

/// A history SQLite cannot open for a reason of the file system's (here its `-wal` path taken
/// by a folder: `SQLITE_CANTOPEN`, as a full disk gives `SQLITE_IOERR` creating the `-shm`) is
/// refused with SQLite's error, never called damaged nor moved away: the file is intact, and
/// opens with every run once the cause is gone.
#[test]
fn a_history_that_cannot_be_opened_is_not_called_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    History::open(&path)
        .unwrap()
        .insert(&run("r1", "w", 1000, VerdictKind::Pass, 1.0))
        .unwrap();
    let wal = dir.path().join("h.sqlite-wal");
    assert!(!wal.exists(), "the last connection's close removes it");
    std::fs::create_dir(&wal).unwrap();
    let e = format!("{:#}", History::open(&path).err().expect("refused"));
    assert!(
        e.contains("h.sqlite cannot be opened or read (unable to open database file")
            && e.contains("CannotOpen")
            && e.contains("do not move it away"),
        "{e}"
    );
    assert!(!e.contains("damaged ("), "{e}");
    // The file system holding it, with its free space and mount, is named.
    assert!(
        e.contains("bytes free") && e.contains("mounted at /"),
        "{e}"
    );
    std::fs::remove_dir(&wal).unwrap();
    let h = History::open(&path).unwrap();
    assert_eq!(h.get("r1").unwrap().unwrap().run.id, "r1");
}

/// SQLite's own verdicts on the content, "not a database" and "malformed", are damage.
#[test]
fn a_file_that_is_not_a_database_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    std::fs::write(&path, "this is not a database\n".repeat(400)).unwrap();
    let e = format!("{:#}", History::open(&path).err().expect("refused"));
    assert!(
        e.contains("h.sqlite is damaged (file is not a database)") && e.contains("move it away"),
        "{e}"
    );
}

#[test]
fn the_mount_holding_a_folder_is_found_and_escapes_undone() {
    let dir = tempfile::tempdir().unwrap();
    let space = open_error::free_space(dir.path()).expect("statvfs answers");
    let mount = space.mount.expect("mountinfo names it");
    assert!(std::fs::canonicalize(dir.path())
        .unwrap()
        .starts_with(&mount));
    // As /proc/self/mountinfo writes a space, a tab and a backslash.
    assert_eq!(
        open_error::unescape("/mnt/a\\040b\\011c\\134d"),
        "/mnt/a b\tc\\d"
    );
}

/// Retention hands each doomed run's folder over while its row is still stored, and deletes
/// the row only when the folder went: a removal cut short (a kill, a file that would not go)
/// must not leave a folder without its row, which the next start would record as an `error`
/// run whose process died.
#[test]
fn retention_takes_each_folder_away_while_its_row_is_still_stored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    let h = History::open(&path).unwrap();
    for (i, id) in ["r1", "r2", "r3"].into_iter().enumerate() {
        h.insert(&run(id, "w", 1000 + i as i64, VerdictKind::Pass, 1.0))
            .unwrap();
    }
    let other = Connection::open(&path).unwrap();
    let mut seen = Vec::new();
    let gone = h
        .prune(
            "w",
            1,
            Duration::from_secs(u32::MAX as u64),
            0,
            "",
            &mut |folder| {
                let stored: i64 = other
                    .query_row(
                        "SELECT COUNT(*) FROM runs WHERE artifacts = ?1",
                        [folder.to_string_lossy()],
                        |r| r.get(0),
                    )
                    .unwrap();
                seen.push((folder.to_path_buf(), stored));
                // r2's folder would not go.
                folder != Path::new("/a/w/r2")
            },
        )
        .unwrap();
    seen.sort();
    assert_eq!(
        seen,
        [(PathBuf::from("/a/w/r1"), 1), (PathBuf::from("/a/w/r2"), 1)]
    );
    assert_eq!(gone, [PathBuf::from("/a/w/r1")]);
    // r2 stays stored, its folder with it, for the next pass.
    let ids: Vec<String> = h
        .recent(Some("w"), 10)
        .unwrap()
        .into_iter()
        .map(|r| r.run.id)
        .collect();
    assert_eq!(ids, ["r3", "r2"]);
}

// A capacity run stored before its bracket's ends on bounds were kept (its JSON has no
// `not_established`, as the code before it wrote it) still reads, and has them noted from its
// probes' verdicts, by the rule that `sweep.json` and the log line use; one whose probes
// held at both ends of their bounds reads with none. They are noted once, as the file (one
// from before the upgrade: no `upgrades` table) is opened; a read takes the row as stored.
#[test]
fn a_capacity_run_stored_without_its_ends_on_bounds_reads_with_them_noted() {
    use crate::judge::verdict::GoodRange;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    let h = History::open(&path).unwrap();
    // 20 requests judged, every TTFT miss on an upper bound: a fail the truth could pass.
    let range = GoodRange {
        judged: 20,
        good: 0,
        at_least: 0,
        at_most: 20,
        on_bound: 20,
    };
    let words = range.could_flip(false, 0.9).unwrap();
    let on_bounds = format!(
        "fail: good-request fraction 0.000 below min_good_fraction 0.9 (time_to_first_token: \
         20 missed), which {words}"
    );
    let cases = [
        ("bounds", on_bounds.as_str(), true),
        ("exact", "fail: …", false),
    ];
    for (id, verdict, _) in cases {
        let mut r = run(id, "cap", 1, VerdictKind::Fail, 1.0);
        r.run.samples = None;
        h.insert(&r).unwrap();
        h.conn
            .lock()
            .unwrap()
            .execute(
                "UPDATE runs SET capacity = ?1 WHERE id = ?2",
                params![old_capacity(verdict).to_string(), id],
            )
            .unwrap();
    }
    // The file as the code before the upgrade left it.
    h.conn
        .lock()
        .unwrap()
        .execute_batch("DROP TABLE upgrades")
        .unwrap();
    drop(h);
    let h = History::open(&path).unwrap();
    for (id, _, noted) in cases {
        let read = h.get(id).unwrap().unwrap().run.capacity;
        let c = read.unwrap_or_else(|| panic!("{id}: the old row did not read"));
        assert_eq!(c.probes.len(), 2, "{c:?}");
        let ends = &c.found.not_established;
        if !noted {
            assert!(ends.is_empty(), "{ends:?}");
            continue;
        }
        assert_eq!(ends.len(), 1, "{ends:?}");
        assert_eq!((ends[0].end.as_str(), ends[0].rate), ("failed", 10.0));
        assert_eq!(ends[0].why, words);
        // And in the list the status page and /api/runs read.
        let listed = h.recent(Some("cap"), 10).unwrap();
        let row = listed.iter().find(|r| r.run.id == id).unwrap();
        let c = row.run.capacity.as_ref().unwrap();
        assert_eq!(c.found.not_established, *ends);
    }
}

/// A capacity search's JSON as the code before `not_established` stored it: its failing end
/// at 10 req/s, both probes with `verdict`.
fn old_capacity(verdict: &str) -> serde_json::Value {
    serde_json::json!({
        "slo": "time_to_first_token:0.001",
        "min_good_fraction": 0.9,
        "max_passing_rate": null,
        "min_failing_rate": 10.0,
        "relative_uncertainty": null,
        "stopped_by": "max_runs",
        "probes": [
            {"rate": 20.0, "passed": false, "verdict": verdict},
            {"rate": 10.0, "passed": false, "verdict": verdict},
        ],
        "baseline": null,
    })
}

// Reading is pure: a file already upgraded is not noted again on each read (every read of
// every capacity row ran the rule again), so a row stored without ends reads without them,
// from `get` and from the listings, and the upgrade is not made at the next open either.
#[test]
fn a_capacity_row_is_read_as_stored_once_its_file_is_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    let h = History::open(&path).unwrap();
    let mut r = run("later", "cap", 1, VerdictKind::Fail, 1.0);
    r.run.samples = None;
    h.insert(&r).unwrap();
    let verdict = "fail: good-request fraction 0.000 below min_good_fraction 0.9, which rests \
                   on bounds: up to 100.0 % may be good (20 judgements rest on a bound)";
    h.conn
        .lock()
        .unwrap()
        .execute(
            "UPDATE runs SET capacity = ?1 WHERE id = 'later'",
            params![old_capacity(verdict).to_string()],
        )
        .unwrap();
    let ends = |h: &History| {
        let got = h.get("later").unwrap().unwrap().run.capacity.unwrap();
        let listed = h.recent(Some("cap"), 10).unwrap();
        let row = listed[0].run.capacity.clone().unwrap();
        assert_eq!(row.found.not_established, got.found.not_established);
        got.found.not_established
    };
    assert_eq!(ends(&h), Vec::new());
    drop(h);
    let h = History::open(&path).unwrap();
    assert_eq!(ends(&h), Vec::new());
}

/// A file written before due times were kept (its CREATE statement then) opens: the column
/// is added, its rows read back without a due time (a restart resumes them from their
/// start), and a new row keeps its due time, through a reopening too.
#[test]
fn a_file_from_before_due_times_opens_and_new_rows_keep_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE runs (id TEXT PRIMARY KEY, workload TEXT NOT NULL, target TEXT NOT \
             NULL, started_unix_ms INTEGER NOT NULL, finished_unix_ms INTEGER NOT NULL, verdict \
             TEXT NOT NULL, reasons TEXT NOT NULL, trend TEXT, comparison TEXT, summary TEXT, \
             samples TEXT, artifacts TEXT NOT NULL, capacity TEXT, sweep TEXT, load TEXT, \
             load_hash INTEGER);
             CREATE INDEX runs_by_workload ON runs (workload, started_unix_ms);
             INSERT INTO runs (id, workload, target, started_unix_ms, finished_unix_ms, verdict, \
             reasons, artifacts) VALUES ('old', 'w', 't', 5000, 6000, 'pass', '[]', '/a');",
        )
        .unwrap();
    }
    let h = History::open(&path).unwrap();
    let old = h.get("old").unwrap().unwrap();
    assert_eq!((old.run.started_unix_ms, old.run.due_unix_ms), (5000, None));
    let mut new = run("new", "w", 9000, VerdictKind::Pass, 1.0);
    new.run.due_unix_ms = Some(8000);
    h.insert(&new).unwrap();
    drop(h);
    let h = History::open(&path).unwrap();
    assert_eq!(h.get("new").unwrap().unwrap().run.due_unix_ms, Some(8000));
    assert_eq!(h.get("old").unwrap().unwrap().run.due_unix_ms, None);
    let listed = h.recent(Some("w"), 10).unwrap();
    let dues: Vec<_> = listed.iter().map(|r| r.run.due_unix_ms).collect();
    assert_eq!(dues, [Some(8000), None]);
}

/// A row an older canaryd wrote for a run a signal cut short (`verdict` `error`, `reasons`
/// `["interrupted"]`: `error: interrupted`) reads as `interrupted`, so `/metrics`, the page and
/// `/api/runs` do not show it as an error after an upgrade; interrupted runs, old or new, stay
/// out of the baseline.
#[test]
fn an_interrupted_run_stored_as_an_error_reads_as_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.sqlite");
    let h = History::open(&path).unwrap();
    let mut old = run("old", "w", 1000, VerdictKind::Pass, 1.0);
    old.run.verdict = Verdict::error("interrupted");
    h.insert(&old).unwrap();
    let mut new = run("new", "w", 2000, VerdictKind::Pass, 2.0);
    new.run.verdict = Verdict::interrupted();
    h.insert(&new).unwrap();
    let mut other = run("other", "w", 3000, VerdictKind::Pass, 3.0);
    other.run.verdict = Verdict::error("target unusable: top cause: interrupted");
    h.insert(&other).unwrap();
    drop(h);
    // As the old code stored it: the kind `error`, the reason `interrupted`.
    let stored: Vec<(String, String, String)> = rusqlite::Connection::open(&path)
        .unwrap()
        .prepare("SELECT id, verdict, reasons FROM runs ORDER BY rowid")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        stored[0],
        ("old".into(), "error".into(), "[\"interrupted\"]".into())
    );
    assert_eq!(stored[1].1, "interrupted");

    let h = History::open(&path).unwrap();
    for id in ["old", "new"] {
        let row = h.get(id).unwrap().unwrap();
        assert_eq!(row.run.verdict, Verdict::interrupted(), "{id}");
        assert_eq!(row.run.verdict.to_string(), "interrupted", "{id}");
    }
    assert_eq!(
        h.get("other").unwrap().unwrap().run.verdict.kind,
        VerdictKind::Error
    );
    let latest = h.latest_per_workload().unwrap();
    assert_eq!(latest[0].run.id, "other");
    assert!(h
        .baseline("w", 10, Some(&serde_json::json!({})))
        .unwrap()
        .is_empty());
}
