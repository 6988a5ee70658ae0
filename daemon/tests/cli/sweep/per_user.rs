//! Tokens/s per user in a sweep, against `canaryd sim --profile fast`, whose zero-time decode
//! sends a short answer's tokens back to back, so some arrive in one read: such a request has
//! no time between its first token and its end, and so no per-user rate. The point's median
//! left those requests out without a word; a demanding user is told how many, of how many.

use super::{canaryd, point_summary, shared, text};
use crate::common;
use serde_json::Value;

#[test]
fn requests_without_a_per_user_rate_are_counted_and_said() {
    let _host = shared();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let out = canaryd(
        &[
            "sweep",
            "--url",
            &url,
            "--model",
            "canary-sim",
            "--isl",
            "64",
            "--osl",
            "8",
            "--concurrency",
            "1,4",
            "--benchmark-duration",
            "1s",
            "--no-nvml",
            "--no-ebpf",
            "--output-dir",
            "out",
        ],
        dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    let doc: Value =
        serde_json::from_slice(&std::fs::read(dir.join("out/sweep.json")).unwrap()).unwrap();
    let mut left_seen = 0;
    for p in doc["points"].as_array().unwrap() {
        let s = point_summary(dir, p);
        let count = |m: &str| s[m]["count"].as_u64().unwrap_or(0);
        // ITL is recorded at 0 ms for a response in one read; the rate only above 0.
        let rated = count("output_token_throughput_per_user");
        let left = count("inter_token_latency") - rated;
        assert_eq!(p["per_user_requests"].as_u64(), Some(rated), "{p}");
        assert_eq!(p["per_user_unmeasured"].as_u64(), Some(left), "{p}");
        let label = p["label"].as_str().unwrap();
        let said = format!(
            "{left} of the {} requests with more than one token had every token in one read",
            left + rated
        );
        let notes = p["notes"].to_string();
        match left {
            0 => assert!(!notes.contains("in one read"), "{notes}"),
            _ => {
                assert!(notes.contains(&said), "{said}: {notes}");
                assert!(
                    text(&out).contains(&format!(
                        "note: {:02} {label}: {said}",
                        p["index"].as_u64().unwrap()
                    )),
                    "{}",
                    text(&out)
                );
            }
        }
        left_seen += left;
    }
    // What the test is for: some answer came in one read (the first capture had 224 of c1's
    // 1405). Without any, the old code would pass too.
    assert!(left_seen > 0, "no one-read response in either point");
}
