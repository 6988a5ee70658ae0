//! `canaryd profile` as a real process against `canaryd sim`: synthetic lengths exact in the
//! server's usage, `summary.json` saying what shape ran, and nonsense refused before anything
//! is sent (issue 17).

use super::{canaryd_env, summary};
use crate::common::{sim, text};
use std::path::Path;

fn profile(dir: &Path, url: &str, extra: &[&str]) -> std::process::Output {
    profile_env(dir, url, extra, &[])
}

fn profile_env(
    dir: &Path,
    url: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut args = vec!["profile", "--url", url, "--model", "canary-sim"];
    args.extend(["--output-dir", "out", "--no-nvml", "--no-ebpf"]);
    args.extend_from_slice(extra);
    canaryd_env(&args, dir, env)
}

fn records(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("out/records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn profile_sends_synthetic_lengths_exactly_in_a_closed_loop() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let out = profile(
        dir.path(),
        &url,
        &["--isl", "200", "--osl", "50", "--concurrency", "3"],
    );
    assert!(out.status.success(), "{}", text(&out));
    // No count and no duration: aiperf's default of 10 requests.
    let recs = records(dir.path());
    assert_eq!(recs.len(), 10);
    for r in &recs {
        assert_eq!(r["usage"]["prompt_tokens"], 200, "{r}");
        assert_eq!(r["usage"]["completion_tokens"], 50, "{r}");
    }
    let s = summary(dir.path());
    assert_eq!(s["run"]["load"]["shape"], "closed_loop");
    assert_eq!(s["run"]["load"]["users"], 3);
    assert_eq!(s["run"]["concurrency"], 3);
    assert_eq!(s["run"]["workload"], "closed-loop");
    assert!(s["run"].get("trace").is_none());
    assert!(s["run"].get("cancellation").is_none(), "none asked: {s}");
}

#[test]
fn profile_at_a_rate_records_the_arrival_process() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let out = profile(
        dir.path(),
        &url,
        &[
            "--synthetic-input-tokens-mean",
            "64",
            "--output-tokens-mean",
            "8",
            "--request-rate",
            "200",
            "--arrival-pattern",
            "gamma",
            "--arrival-smoothness",
            "4",
            "--request-count",
            "40",
            "--random-seed",
            "5",
            "--warmup-request-count",
            "2",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let recs = records(dir.path());
    assert_eq!(
        recs.iter().filter(|r| r.get("warmup").is_none()).count(),
        40
    );
    assert_eq!(recs.iter().filter(|r| r["warmup"] == true).count(), 2);
    let s = summary(dir.path());
    let load = &s["run"]["load"];
    assert_eq!(load["shape"], "rate");
    assert_eq!(load["arrival_pattern"], "gamma");
    assert_eq!(load["arrival_smoothness"], 4.0);
    assert_eq!(load["random_seed"], 5);
    assert_eq!(load["isl"]["mean"], 64);
    assert_eq!(s["run"]["prompt_seed"], 5);
}

#[test]
fn profile_with_a_trace_replays_it_as_replay_does() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let trace = crate::common::shared("traces/mooncake_arxiv_first20.jsonl");
    let out = profile(
        dir.path(),
        &url,
        &[
            "--trace",
            trace.to_str().unwrap(),
            "--speedup",
            "100",
            "--request-count",
            "5",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(records(dir.path()).len(), 5);
    let s = summary(dir.path());
    assert_eq!(s["run"]["load"]["shape"], "trace");
    assert_eq!(s["run"]["trace"]["selection"]["requests_out"], 5);
}

// A count above what the trace holds sends what it holds, and says so: a warning line, a note
// under the table, and `run.trace.selection.notes` (it sent 3 of 100 without a word).
#[test]
fn a_count_above_what_the_trace_holds_is_said() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let trace = crate::common::shared("traces/burstgpt_readme_rows.csv");
    let out = profile(
        dir.path(),
        &url,
        &[
            "--trace",
            trace.to_str().unwrap(),
            "--speedup",
            "1000",
            "--request-count",
            "100",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(records(dir.path()).len(), 3);
    let said = "100: the selected window holds only 3 requests";
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("--max-requests {said}")),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("note: max_requests {said}")),
        "{stdout}"
    );
    let s = summary(dir.path());
    let notes = &s["run"]["trace"]["selection"]["notes"];
    assert!(notes[0].as_str().unwrap().contains(said), "{notes}");
}

#[test]
fn nonsensical_combinations_are_refused_before_anything_is_sent() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let trace = crate::common::shared("traces/mooncake_arxiv_first20.jsonl");
    let trace = trace.to_str().unwrap();
    for (flags, says) in [
        (
            vec!["--trace", trace, "--isl", "100"],
            "--isl shapes synthetic requests",
        ),
        (
            vec!["--trace", trace, "--request-rate", "5"],
            "--request-rate shapes",
        ),
        (vec!["--speedup", "2"], "--speedup applies to a --trace"),
        (
            vec!["--arrival-pattern", "poisson"],
            "--request-rate, which is not given",
        ),
        (
            vec!["--request-rate", "5", "--arrival-smoothness", "2"],
            "--arrival-smoothness is the shape of --arrival-pattern gamma",
        ),
        (
            vec!["--request-rate", "0"],
            "'--request-rate <RPS>': expected 0.000001 to 1000000 requests per second, found 0",
        ),
        (
            vec!["--request-rate", "5", "--isl", "0"],
            "'--isl <N>': expected 1 or more",
        ),
        (
            vec!["--request-rate", "5", "--isl", "20000000"],
            "--isl: expected 1 to 10000000 tokens (the length limit), found 20000000",
        ),
        (
            vec!["--concurrency", "20", "--request-count", "10"],
            "--concurrency: 20 users for 10 requests",
        ),
        (
            vec!["--request-count", "0"],
            "'--request-count <N>': expected 1 to",
        ),
        (
            vec![
                "--request-rate",
                "5",
                "--arrival-pattern",
                "gamma",
                "--arrival-smoothness=-1",
            ],
            "'--arrival-smoothness <K>': expected 0.01 to 1000000, found -1",
        ),
        // Values whose arrivals never advance: the run hung, filling memory.
        (
            vec!["--request-rate", "1e15", "--benchmark-duration", "1m"],
            "'--request-rate <RPS>': expected 0.000001 to 1000000 requests per second",
        ),
        (
            vec![
                "--request-rate",
                "10",
                "--arrival-pattern",
                "gamma",
                "--arrival-smoothness",
                "1e-20",
            ],
            "'--arrival-smoothness <K>': expected 0.01 to 1000000",
        ),
        (
            vec!["--concurrency", "100000000", "--benchmark-duration", "10s"],
            "--concurrency: expected 1 to 100000 users",
        ),
    ] {
        let out = profile(dir.path(), &url, &flags);
        assert!(!out.status.success(), "{flags:?} was accepted");
        let said = text(&out);
        assert!(said.contains(says), "{flags:?}: {said}");
        assert!(!said.contains("panicked"), "{said}");
    }
    assert!(
        !dir.path().join("out/records.jsonl").exists(),
        "nothing was sent"
    );
}

// A value out of a flag's own range got exit 2 or 1 by where it was checked: `replay --speedup
// 0` by clap (2), `profile --request-rate 0` by the plan (1) (audit L3). Every such value is
// clap's now (2, as README's table says), in the words a config file's check gives; a value
// wrong only beside another flag stays the plan's (1).
#[test]
fn a_value_out_of_its_flags_own_range_exits_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens: refused before anything is sent.
    let url = format!("http://127.0.0.1:{}", crate::common::free_port());
    let trace = crate::common::shared("traces/burstgpt_readme_rows.csv");
    let trace = trace.to_str().unwrap();
    let replay = |extra: &[&str]| {
        let mut args = vec!["replay", "--trace", trace, "--url", &url, "--model", "m"];
        args.extend(["--output-dir", "out", "--no-nvml", "--no-ebpf"]);
        args.extend_from_slice(extra);
        canaryd_env(&args, dir.path(), &[])
    };
    let cases: [(std::process::Output, &str); 12] = [
        (
            replay(&["--speedup", "0"]),
            "'--speedup <SPEEDUP>': expected a positive number, found 0",
        ),
        (
            profile(dir.path(), &url, &["--request-rate", "0"]),
            "'--request-rate <RPS>': expected 0.000001 to 1000000 requests per second, found 0",
        ),
        (
            profile(dir.path(), &url, &["--request-rate", "1e308"]),
            "found 1e308",
        ),
        (
            profile(dir.path(), &url, &["--request-count", "0"]),
            "'--request-count <N>': expected 1 to 1000000000 requests, found 0",
        ),
        (
            profile(dir.path(), &url, &["--osl-stddev", "nan"]),
            "'--osl-stddev <N>': expected 0 or a positive number of tokens, found NaN",
        ),
        (
            profile(dir.path(), &url, &["--request-cancellation-rate", "101"]),
            "'--request-cancellation-rate <P>': expected a percentage from 0 to 100",
        ),
        (
            profile(dir.path(), &url, &["--max-output-ratio", "0"]),
            "'--max-output-ratio <F>': expected a number of 1 or more, found 0",
        ),
        (
            replay(&["--max-header-bytes", "100"]),
            "'--max-header-bytes <BYTES>': expected at least 1 KiB, found 100 bytes",
        ),
        (
            replay(&["--warmup-requests", "20000"]),
            "expected at most 10000 warm-up requests",
        ),
        // It was a trace loading error that named no flag: `invalid selection:
        // max_input_tokens: expected at least 1`.
        (
            replay(&["--max-input-tokens", "0"]),
            "'--max-input-tokens <MAX_INPUT_TOKENS>': expected 1 or more",
        ),
        (
            canaryd_env(
                &[
                    "sweep",
                    "--url",
                    &url,
                    "--model",
                    "m",
                    "--request-rate",
                    "10,2e6",
                ],
                dir.path(),
                &[],
            ),
            "'--request-rate <RPS,RPS,…>': expected 0.000001 to 1000000 requests per second, \
             found 2000000",
        ),
        (
            profile(
                dir.path(),
                &url,
                &["--request-rate", "5", "--request-count", "0"],
            ),
            "'--request-count <N>': expected 1 to",
        ),
    ];
    for (out, says) in cases {
        let said = text(&out);
        assert_eq!(out.status.code(), Some(2), "{said}");
        assert!(said.contains("error: invalid value '"), "{said}");
        assert!(said.contains(says), "{says:?} in {said}");
    }
    // Wrong only beside another flag (the length limit): the plan's to refuse, exit 1.
    let out = profile(dir.path(), &url, &["--isl", "20000000"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(!dir.path().join("out/records.jsonl").exists());
}

#[test]
fn repeated_urls_share_the_requests_and_the_summary_breaks_them_down() {
    let ((_a, pa), (_b, pb)) = (sim(&[]), sim(&[]));
    let (ua, ub) = (
        format!("http://127.0.0.1:{pa}"),
        format!("http://127.0.0.1:{pb}"),
    );
    let dir = tempfile::tempdir().unwrap();
    let out = profile(
        dir.path(),
        &ua,
        &[
            "--url",
            &ub,
            "--isl",
            "20",
            "--osl",
            "4",
            "--request-count",
            "10",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let s = summary(dir.path());
    let by_url = s["by_url"].as_object().expect("a per-URL breakdown");
    assert_eq!(by_url.len(), 2, "{by_url:?}");
    for (url, share) in by_url {
        assert_eq!(share["requests"], 5, "{url}");
        assert_eq!(share["errors"], 0, "{url}");
    }
    let recs = records(dir.path());
    assert_eq!(
        recs.iter()
            .filter(|r| r["url"].as_str().unwrap().starts_with(&ub))
            .count(),
        5
    );
}

#[test]
fn cancelled_requests_keep_what_they_received_and_are_counted_apart() {
    // Every response stalls for a second after its second token: a request cancelled 100 ms
    // after it was sent has received exactly those two, and the others complete.
    let (_sim, port) = sim(&["--fault-rate", "1", "--fault", "stall_mid_ms=1000,at=2"]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let out = profile(
        dir.path(),
        &url,
        &[
            "--isl",
            "16",
            "--osl",
            "8",
            "--request-count",
            "8",
            "--concurrency",
            "4",
            "--request-cancellation-rate",
            "50",
            "--request-cancellation-delay",
            "100ms",
            "--random-seed",
            "5",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let recs = records(dir.path());
    assert_eq!(recs.len(), 8);
    let cancelled: Vec<_> = recs.iter().filter(|r| r["status"] == "cancelled").collect();
    assert!((1..8).contains(&cancelled.len()), "{recs:?}");
    for r in &cancelled {
        assert_eq!(r["chunks"], 2, "{r}");
        assert!(r["error"].is_null() && r["e2e_ms"].is_null(), "{r}");
    }
    for r in recs.iter().filter(|r| r["status"] != "cancelled") {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["usage"]["completion_tokens"], 8, "{r}");
    }
    let s = summary(dir.path());
    assert_eq!(s["cancelled"], cancelled.len(), "{s}");
    assert_eq!(s["errors"], 0);
    assert_eq!(s["completed"], 8 - cancelled.len());
    assert!(text(&out).contains(&format!("cancelled {}", cancelled.len())));
    // The run says it cancelled on purpose, and how, so it is never read as a clean one.
    let c = &s["run"]["cancellation"];
    assert_eq!(c["rate_percent"], 50.0, "{s}");
    assert_eq!(c["delay_s"], 0.1, "{s}");
    assert!(c["seed"].is_u64(), "{s}");

    // Every request cancelled: nothing was judged, and the run says so rather than blaming
    // the target or printing a 0 % share of nothing.
    let out = profile(
        dir.path(),
        &url,
        &[
            "--overwrite",
            "--isl",
            "16",
            "--osl",
            "8",
            "--request-count",
            "2",
            "--request-cancellation-rate",
            "100",
            "--request-cancellation-delay",
            "100ms",
            "--goodput",
            "time_to_first_token:100",
        ],
    );
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(t.contains("0 of 0 requests"), "{t}");
    assert!(t.contains("(no share)"), "{t}");
    assert!(
        t.contains("nothing to judge: all 2 requests were cancelled on purpose"),
        "{t}"
    );
    // Shares of no judged request are null, not the 0 that read as "no errors" and "none
    // good"; summary.csv leaves their cells empty.
    let s = summary(dir.path());
    assert_eq!(
        (&s["requests"], &s["cancelled"]),
        (&2.into(), &2.into()),
        "{s}"
    );
    assert!(s["error_rate"].is_null(), "{s}");
    assert!(s["goodput"]["good_request_fraction"].is_null(), "{s}");
    assert_eq!(s["schema_version"], 3, "{s}");
    let csv = std::fs::read_to_string(dir.path().join("out/summary.csv")).unwrap();
    assert!(csv.contains("\nerror_rate,\n"), "{csv}");
    assert!(csv.contains("\ngood_request_fraction,\n"), "{csv}");

    let out = profile(
        dir.path(),
        &url,
        &["--overwrite", "--request-cancellation-delay", "1"],
    );
    assert!(!out.status.success());
    assert!(text(&out).contains("--request-cancellation-rate, which picks them, is not given"));
    let out = profile(
        dir.path(),
        &url,
        &["--overwrite", "--request-cancellation-rate", "150"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "out of the flag's own range: clap's"
    );
    assert!(
        text(&out).contains("'--request-cancellation-rate <P>': expected a percentage"),
        "{}",
        text(&out)
    );
}

/// A run's own worker threads: one per 2,000 requests or 150,000 tokens per second it plans
/// (at most one per core), one per core for a closed loop but no more than its users,
/// `CANARYD_REQUEST_WORKERS` over both;
/// `context.canaryd.workers` says how many the runtime had and why.
#[test]
fn a_run_sizes_its_worker_threads_by_its_planned_load() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let cores = std::thread::available_parallelism().unwrap().get() as u64;
    let dir = tempfile::tempdir().unwrap();
    let workers = |shape: &[&str], env: &[(&str, &str)]| -> serde_json::Value {
        let mut extra = vec!["--overwrite", "--isl", "64", "--osl", "8"];
        extra.extend_from_slice(shape);
        let out = profile_env(dir.path(), &url, &extra, env);
        assert!(out.status.success(), "{}", text(&out));
        let s = summary(dir.path());
        assert_eq!(s["errors"], 0, "{s}");
        s["context"]["canaryd"]["workers"].clone()
    };
    let slow = workers(&["--request-rate", "100", "--request-count", "10"], &[]);
    assert_eq!(slow["threads"], 1, "{slow}");
    let why = slow["threads_why"].as_str().unwrap();
    assert!(
        why.starts_with("100 requests/s and 7200 tokens/s planned"),
        "{why}"
    );

    // 5,000 requests/s of 72 tokens: 3 workers by the requests (2.4 by the tokens).
    let fast = workers(&["--request-rate", "5000", "--request-count", "20"], &[]);
    assert_eq!(fast["threads"], 3.min(cores), "{fast}");

    // A closed loop: one per core, no more than its users.
    let closed = workers(&["--concurrency", "2", "--request-count", "6"], &[]);
    assert_eq!(closed["threads"], cores.min(2), "{closed}");
    let single = workers(&["--concurrency", "1", "--request-count", "3"], &[]);
    assert_eq!(single["threads"], 1, "{single}");
    assert!(
        closed["threads_why"]
            .as_str()
            .unwrap()
            .contains("closed loop"),
        "{closed}"
    );

    let knob = workers(
        &["--request-rate", "100", "--request-count", "10"],
        &[("CANARYD_REQUEST_WORKERS", "3")],
    );
    assert_eq!(knob["threads"], 3, "{knob}");
    assert_eq!(knob["threads_why"], "CANARYD_REQUEST_WORKERS=3", "{knob}");
}

// The audit: `TTFT client − server mean 5.190 ms (exact; …)` over two first tokens that were
// kernel_bound, upper bounds. The gap is exact only when every compared first token was
// stamped `kernel`; otherwise it is at most the figure, and says how many are bounds.
#[test]
fn the_client_server_gap_is_exact_only_over_kernel_stamped_first_tokens() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    for timestamps_off in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut extra = vec!["--isl", "10", "--osl", "8", "--request-count", "4"];
        extra.extend(["--concurrency", "2", "--warmup-request-count", "0"]);
        if timestamps_off {
            extra.push("--no-kernel-timestamps");
        }
        let out = profile(dir.path(), &url, &extra);
        let printed = text(&out);
        assert!(out.status.success(), "{printed}");
        let s = summary(dir.path());
        let ttft = &s["server"]["comparison"]["ttft_ms"];
        assert_eq!(s["server"]["comparison"]["state"], "matched", "{s}");
        let line = printed
            .lines()
            .find(|l| l.contains("client vs server over"))
            .unwrap_or_else(|| panic!("{printed}"));
        let rx = &s["receive_timestamps"];
        let kernel = rx["first_token"]["kernel"].as_u64().unwrap_or(0);
        let exact = rx["state"] == "on" && kernel == 4;
        assert!(!(timestamps_off && exact), "{rx}");
        if exact {
            assert_eq!(ttft["mean_kind"], "exact", "{ttft}");
            assert!(line.contains("TTFT client − server mean"), "{line}");
            assert!(line.contains("(exact; network"), "{line}");
        } else {
            assert_eq!(ttft["mean_kind"], "upper_bound", "{ttft}");
            let bound = 4 - kernel;
            let ttft_part = line.split("; e2e").next().unwrap();
            assert!(!ttft_part.contains("exact"), "{line}");
            assert!(
                ttft_part.contains(&format!("{bound} of 4 first tokens are upper bounds")),
                "{line}"
            );
        }
        // The ends likewise, for the e2e gap.
        let e2e = &s["server"]["comparison"]["e2e_ms"];
        let e2e_part = line
            .split("; e2e")
            .nth(1)
            .unwrap_or_else(|| panic!("{line}"));
        let ends = rx["end"]["kernel"].as_u64().unwrap_or(0);
        if rx["state"] == "on" && ends == 4 {
            assert_eq!(e2e["mean_kind"], "exact", "{e2e}");
            assert!(e2e_part.contains("(exact; network"), "{line}");
        } else {
            assert!(!timestamps_off || ends == 0, "{rx}");
            assert_eq!(e2e["mean_kind"], "upper_bound", "{e2e}");
            assert!(!e2e_part.contains("exact"), "{line}");
            let bound = 4 - ends;
            assert!(
                e2e_part.contains(&format!("{bound} of 4 ends are upper bounds")),
                "{line}"
            );
        }
    }
}

// The audit: with `--no-kernel-timestamps` the table said "(client: avg, min, max exact over
// the times recorded…)" and counted no first tokens, though every TTFT and e2e was canaryd's
// read, an upper bound; the HTML report's headline said so. Now the table says it and marks
// the rows, and a run with stamps on marks ITL/TTST when token events are bounds.
#[test]
fn the_table_marks_client_times_that_are_only_bounds() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    for timestamps_off in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut extra = vec!["--isl", "10", "--osl", "8", "--request-count", "4"];
        extra.extend(["--concurrency", "2", "--warmup-request-count", "0"]);
        if timestamps_off {
            extra.push("--no-kernel-timestamps");
        }
        let out = profile(dir.path(), &url, &extra);
        let printed = text(&out);
        assert!(out.status.success(), "{printed}");
        let row = |head: &str| {
            printed
                .lines()
                .find(|l| l.starts_with(head))
                .unwrap_or_else(|| panic!("no {head} row: {printed}"))
                .to_string()
        };
        let rx = &summary(dir.path())["receive_timestamps"];
        if timestamps_off {
            assert!(
                printed.contains("receive timestamps off: every client time is canaryd's read"),
                "{printed}"
            );
            for head in [
                "TTFT (ms, bound)",
                "request latency (ms, bound)",
                "ITL (ms,",
            ] {
                assert!(row(head).contains("bound)"), "{printed}");
            }
            assert!(
                printed.contains("except in a row marked bound"),
                "{printed}"
            );
            continue;
        }
        let kernel = rx["first_token"]["kernel"].as_u64().unwrap_or(0);
        assert_eq!(
            row("TTFT (ms").contains("bound"),
            kernel < 4,
            "{rx}\n{printed}"
        );
        let end_kernel = rx["end"]["kernel"].as_u64().unwrap_or(0);
        assert_eq!(
            row("request latency").contains("bound"),
            end_kernel < 4,
            "{rx}\n{printed}"
        );
        // Token events several to a read make TTST a bound (ITL is over the first token and
        // the end alone: the next test).
        let events_bound = rx["token_events_bound"].as_u64().unwrap();
        if events_bound > 0 {
            assert!(row("TTST (ms").contains("bound"), "{rx}\n{printed}");
            assert!(printed.contains("token events: "), "{printed}");
        }
        assert!(printed.contains("first tokens timed: "), "{printed}");
    }
}

// The README audit's finding 3: ITL, (e2e − TTFT)/(n − 1), was marked a bound in the table
// whenever some token events shared a read, though it is over each request's first token and
// end alone, and the HTML report called it exact even with every time canaryd's read
// (`--no-kernel-timestamps`). One rule now (canary_core::itl_is_bound), in the table,
// `summary.json` and the report, checked here against each record's `rx`.
#[test]
fn itl_is_a_bound_by_its_first_token_and_end_in_the_table_summary_and_report() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    for timestamps_off in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut extra = vec!["--isl", "10", "--osl", "8", "--request-count", "6"];
        extra.extend(["--concurrency", "1", "--warmup-request-count", "0"]);
        if timestamps_off {
            extra.push("--no-kernel-timestamps");
        } else {
            // The audit's run1: a pause after the first token leaves it alone in its read
            // (`kernel`), the tokens after it come several to a read (token events bound).
            extra.extend(["-H", "x-sim-fault: stall_mid_ms=30,at=1"]);
        }
        let out = profile(dir.path(), &url, &extra);
        let printed = text(&out);
        assert!(out.status.success(), "{printed}");
        let row = |head: &str| {
            printed
                .lines()
                .find(|l| l.starts_with(head))
                .unwrap_or_else(|| panic!("no {head} row: {printed}"))
                .to_string()
        };
        // Each ITL by the definition: exact when its first token and end were both stamped
        // `kernel` (a 0 ms ITL is tokens in one read: a bound).
        let recs = records(dir.path());
        let itls: Vec<_> = recs.iter().filter(|r| r["itl_ms"].is_number()).collect();
        assert_eq!(itls.len(), 6, "{recs:?}");
        let bound = itls
            .iter()
            .filter(|r| {
                r["rx"]["first_token"] != "kernel"
                    || r["rx"]["end"] != "kernel"
                    || r["itl_ms"].as_f64() == Some(0.0)
            })
            .count();
        let rx = &summary(dir.path())["receive_timestamps"];
        if timestamps_off {
            assert_eq!(bound, 6, "{recs:?}");
        } else {
            assert_eq!(rx["itl_requests"], 6, "{rx}");
            assert_eq!(rx["itl_bound_requests"], bound, "{rx}\n{recs:?}");
            // Where the kernel stamped every first token and end exactly (loopback, as a
            // rule), every ITL is exact, whatever the token events between.
            if rx["first_token"]["kernel"] == 6 && rx["end"]["kernel"] == 6 {
                assert_eq!(bound, 0, "{rx}");
            }
        }
        let said = format!("{rx}\n{printed}");
        assert_eq!(row("ITL (ms").contains("bound)"), bound > 0, "{said}");
        assert_eq!(
            row("output tokens/s per user").contains("(bound)"),
            bound > 0,
            "{said}"
        );
        // The report's headline, by the same rule.
        let report = canaryd_env(&["report", "out", "-o", "r.html"], dir.path(), &[]);
        assert!(report.status.success(), "{}", text(&report));
        let page = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
        assert_eq!(page.contains("ITL (bound)"), bound > 0, "{said}");
        if timestamps_off {
            assert!(page.contains("6 in neither direction (both)"), "{page}");
        }
    }
}

/// A length spread wider than its mean is refused naming the flag, exit 1, before anything is
/// sent: `--isl-stddev 1e300` used to run "healthy" with every request 1 token or the length
/// limit while `summary.json` said mean 550. `--request-count 0` with a trace is refused
/// naming the flag too (out of its own range: clap's, exit 2); it used to fail at the
/// selection ("300 over the limit").
#[test]
fn a_spread_wider_than_the_mean_and_a_count_of_zero_are_refused_naming_the_flag() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let trace = crate::common::shared("traces/mooncake_arxiv_first20.jsonl");
    let trace = trace.to_str().unwrap();
    for (flags, says) in [
        (
            vec!["--isl-stddev", "1e300"],
            "--isl-stddev: expected 0 to 550 tokens (at most the mean",
        ),
        (
            vec!["--osl", "10", "--output-tokens-stddev", "11"],
            "--osl-stddev: expected 0 to 10 tokens",
        ),
        (
            vec!["--request-rate", "5", "--isl", "100", "--isl-stddev", "101"],
            "--isl-stddev: expected 0 to 100 tokens",
        ),
    ] {
        let out = profile(dir.path(), &url, &flags);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {said}");
        assert!(said.contains(says), "{flags:?}: {said}");
    }
    let out = profile(
        dir.path(),
        &url,
        &["--trace", trace, "--request-count", "0"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("'--request-count <N>': expected 1 to 1000000000 requests, found 0"),
        "{}",
        text(&out)
    );
    assert!(!dir.path().join("out").exists(), "nothing was run");
    // At the mean it runs, every length within 1 and the limit.
    let flags = ["--isl", "20", "--isl-stddev", "20", "--osl", "4"];
    let out = profile(
        dir.path(),
        &url,
        &[&flags[..], &["--request-count", "8"]].concat(),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(records(dir.path()).len(), 8);
}

// `sweep` named its SLO flag `--slo` while `profile` and `replay` said `--goodput` in their
// help and errors. Every command now names it `--slo`, with `--goodput` kept as an alias.
#[test]
fn the_slo_flag_is_named_slo_in_help_and_errors_with_goodput_an_alias() {
    let dir = tempfile::tempdir().unwrap();
    for command in ["profile", "replay"] {
        let help = super::canaryd(&[command, "--help"], dir.path());
        let help = text(&help);
        assert!(
            help.contains("--slo <SLOS>") && help.contains("[alias: --goodput]"),
            "{help}"
        );
        assert!(!help.contains("by `--goodput`"), "{help}");
    }
    // canaryd's own check of the plan names the flag as the user reads it in the help: ITL
    // needs streamed responses, refused before anything is sent (no server needed).
    let url = format!("http://127.0.0.1:{}", crate::common::free_port());
    for slo in ["--slo", "--goodput"] {
        let out = profile(
            dir.path(),
            &url,
            &[
                "--no-streaming",
                "--request-count",
                "2",
                slo,
                "inter_token_latency:40",
            ],
        );
        let said = text(&out);
        assert_ne!(out.status.code(), Some(0), "{said}");
        assert!(
            said.contains("--slo: inter_token_latency needs streamed responses"),
            "{said}"
        );
    }
}
