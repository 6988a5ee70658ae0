//! `/api/runs`'s query (`?workload=W&limit=N`) against a real `canaryd run` on a real
//! `canaryd sim`: nonsense (`limit=abc`, `-1`, `0`, a number past `usize`, past 1,000, an
//! unknown or repeated parameter, one without a value) is a 400 with a JSON error naming the
//! parameter and what it accepts. Before it each was answered 200 with the default list (100
//! runs), as if asked for it (`limit=0`: no runs), so a client's typo went unseen.

mod common;

use common::{eventually, http};
use serde_json::Value;

#[test]
fn api_runs_refuses_a_query_it_cannot_honour_and_names_the_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, sim_port) = common::sim(&[]);
    let config = dir.path().join("canaryd.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"{}\"\n[telemetry]\nnvml = false\nebpf = false\n\
             [targets.sim]\nurl = \"http://127.0.0.1:{sim_port}\"\nmodel = \"canary-sim\"\n\
             [workloads.chat]\ntarget = \"sim\"\ntrace = \"bundled\"\nmax_requests = 5\n\
             speedup = 20\nscale_lengths = 0.05\nevery = \"1s\"\n",
            dir.path().join("state").display(),
        ),
    )
    .unwrap();
    let (_d, status) = common::daemon_on_own_port(dir.path(), &config, "daemon.log", &[]);
    eventually(120, "two runs of chat", || {
        (common::api_runs(status).len() >= 2).then_some(())
    });
    let get = |query: &str| {
        let (code, body) = http(status, "GET", &format!("/api/runs{query}"), "");
        let v: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{query}: {e}: {body}"));
        (code, v)
    };

    // What it takes: a limit in range, a workload (one with no runs lists none).
    let (code, v) = get("?limit=1");
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["runs"].as_array().unwrap().len(), 1, "{v}");
    let (code, v) = get("?workload=chat&limit=1000");
    assert!(
        code == 200 && v["runs"].as_array().unwrap().len() >= 2,
        "{v}"
    );
    let (code, v) = get("?workload=no-such-workload");
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["runs"], serde_json::json!([]), "{v}");
    assert_eq!(get("").0, 200);
    assert_eq!(get("?").0, 200);

    // What it refuses: each a 400 naming the parameter and its range.
    for (query, parameter) in [
        ("?limit=abc", "limit"),
        ("?limit=-1", "limit"),
        ("?limit=0", "limit"),
        ("?limit=1001", "limit"),
        ("?limit=99999999999999999999", "limit"),
        ("?limit=", "limit"),
        ("?limit", "limit"),
        ("?limit=5&limit=6", "limit"),
        ("?workload=chat&limt=5", "limt"),
        ("?workload=", "workload"),
        ("?workload=chat&workload=other", "workload"),
    ] {
        let (code, v) = get(query);
        assert_eq!(code, 400, "{query}: {v}");
        assert_eq!(v["parameter"], parameter, "{query}: {v}");
        let error = v["error"].as_str().unwrap_or_default();
        assert!(error.contains(parameter), "{query}: {v}");
        if parameter == "limit" {
            assert_eq!(
                v["accepted"], "a whole number from 1 to 1000 (default 100)",
                "{query}: {v}"
            );
            assert!(error.contains("from 1 to 1000"), "{query}: {v}");
        }
        assert!(v.get("runs").is_none(), "{query}: {v}");
    }
}
