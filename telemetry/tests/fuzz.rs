//! The Prometheus/OpenMetrics parser fed mutations of the real captures under
//! `shared/fixtures/` (canary_testkit's fuzzer: a fixed seed and count in CI, longer by hand with
//! `CANARYD_FUZZ_SECS`). It must never panic, and its counts must stay consistent. The
//! cargo-fuzz target in `fuzz/` is the same check under libFuzzer, for a nightly toolchain.

use canary_telemetry::prometheus::{parse, MAX_ISSUES};
use canary_testkit::fuzz::{fuzz, Rng};

/// Tokens of the exposition grammar, so mutations hit interesting paths.
const WORDS: &[&[u8]] = &[
    b"{",
    b"}",
    b"\"",
    b",",
    b"=",
    b"\\",
    b"#",
    b"\n",
    b" ",
    b"\t",
    b":",
    b"_",
    b"+Inf",
    b"-Inf",
    b"NaN",
    b"le=\"",
    b"quantile=\"",
    b"# TYPE ",
    b"# HELP ",
    b"# UNIT ",
    b"# EOF\n",
    b" histogram\n",
    b" summary\n",
    b" counter\n",
    b" gauge\n",
    b"_bucket{",
    b"_sum",
    b"_count",
    b"_total",
    b"_created",
    b" # {trace_id=\"a\"} 1 2",
    b"1e308",
    b"\r",
];

/// Parses one input and checks the invariants a scrape relies on; the label is its shape.
fn check(bytes: &[u8]) -> String {
    // The parser takes &str, as a scrape body is decoded first; lossy decoding is what the
    // scraper does with invalid UTF-8.
    let text = String::from_utf8_lossy(bytes);
    let s = parse(&text);
    assert!(s.errors.len() <= MAX_ISSUES);
    assert!(s.errors.len() <= s.skipped_lines + text.lines().count());
    assert!(s.skipped_lines <= text.split('\n').count());
    let mut histograms = 0;
    for f in &s.families {
        for (_, h) in f.histograms().unwrap_or_default() {
            histograms += 1;
            let _ = h.quantile(0.5);
            let _ = h.quantile(0.99);
            let _ = h.mean();
            let _ = h.delta(&h);
        }
    }
    let _ = s.histogram("h");
    format!(
        "{} families, {} histograms, {} skipped",
        s.families.len().min(5),
        histograms.min(3),
        s.skipped_lines.min(3)
    )
}

#[test]
fn mutated_captures_never_panic() {
    let seeds: Vec<Vec<u8>> = crate::fixtures::all()
        .into_iter()
        .map(|(_, t)| t.into_bytes())
        .chain([
            b"# TYPE h histogram\nh_bucket{le=\"1\"} 1 # {t=\"a\"} 0.5 1.5\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n# EOF\n".to_vec(),
            b"m{a=\"x\\\\y\\\"z\\n\",b=\"1,2\"} NaN 17\n{\"q.n\",c=\"d\"} -Inf\n".to_vec(),
        ])
        .collect();
    let report = fuzz("prometheus", seeds, WORDS, 40_000, check);
    assert!(report.outcomes >= 20, "{report}");
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng::new(42);
    for _ in 0..2000 {
        let len = rng.below(300);
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                if rng.below(3) == 0 {
                    let w = WORDS[rng.below(WORDS.len())];
                    w[rng.below(w.len())]
                } else {
                    (rng.next_u64() & 0xff) as u8
                }
            })
            .collect();
        check(&bytes);
    }
}
