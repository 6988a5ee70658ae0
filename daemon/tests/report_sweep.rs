//! `canaryd report` of real sweeps and a real `--runs N` experiment, run here against
//! `canaryd sim`: the page marks the figures that are bounds as the sweep's own table does
//! (`sweep.json`'s `bounds`), leads a capacity search's page with its answer and marks its
//! probes, says why there is no knee when too few points are evidence, and marks an
//! experiment's means of bounds. Read as text from the page (and, where Chromium is there,
//! from its DOM).

mod common;

use canary_testkit::browser::{chromium, Browser};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn canaryd(args: &[&str], cwd: &Path) -> Output {
    Command::new(common::CANARYD)
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "error")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .expect("canaryd runs")
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", common::text(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `canaryd sweep` against `port` with `args`, into `dir/out`: its `sweep.json`. A sweep whose
/// points fail their gates exits non-zero and still writes it.
fn sweep(dir: &Path, port: u16, out: &str, args: &[&str]) -> Value {
    let url = format!("http://127.0.0.1:{port}");
    let mut all = vec!["sweep", "--url", &url, "--model", "canary-sim", "--no-ebpf"];
    all.extend(["--no-nvml", "-o", out]);
    all.extend(args);
    let o = canaryd(&all, dir);
    let file = dir.join(out).join("sweep.json");
    assert!(file.is_file(), "no sweep.json: {}", common::text(&o));
    serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap()
}

/// `canaryd report DIR`: the page's HTML.
fn report(dir: &Path, folder: &str) -> String {
    let page = format!("{folder}.html");
    ok(&canaryd(&["report", folder, "-o", &page], dir));
    std::fs::read_to_string(dir.join(page)).unwrap()
}

/// The page's text: tags, charts and style dropped, entities read, spaces folded.
fn text(html: &str) -> String {
    let mut out = String::new();
    let mut rest = html;
    while let Some(i) = ["<svg", "<style"].iter().filter_map(|t| rest.find(t)).min() {
        out.push_str(&rest[..i]);
        let close = if rest[i..].starts_with("<svg") {
            "</svg>"
        } else {
            "</style>"
        };
        rest = rest[i..].split_once(close).map_or("", |(_, after)| after);
    }
    out.push_str(rest);
    let mut t = String::new();
    let mut in_tag = false;
    for c in out.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                t.push(' ');
            }
            c if !in_tag => t.push(c),
            _ => {}
        }
    }
    let t = t
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&quot;", "\"");
    t.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The body rows of the page's table of class `class`, each cell's text.
fn rows(html: &str, class: &str) -> Vec<Vec<String>> {
    let open = format!("<table class=\"{class}\">");
    let table = html
        .split_once(&open)
        .unwrap_or_else(|| panic!("no table {class}"))
        .1;
    let body = table.split_once("</table>").unwrap().0;
    let body = body.split_once("<tbody>").unwrap().1;
    body.split("<tr>")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let inner = cell.split_once('>').unwrap().1;
                    text(inner.split_once("</td>").unwrap().0)
                })
                .collect()
        })
        .collect()
}

/// `sweep.json`'s point whose folder is `dir`.
fn point<'a>(doc: &'a Value, dir: &str) -> &'a Value {
    doc["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["dir"] == dir)
        .unwrap_or_else(|| panic!("{dir} not in sweep.json"))
}

fn bounds(p: &Value) -> Vec<&str> {
    p["bounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap())
        .collect()
}

/// Each row of the series table (`point`: its folder first, `point-01-c1`, or for repeated
/// points the point's) marks its cells as `sweep.json`'s `bounds` say: TTFT and e2e `≤`,
/// tokens/s per user `*`.
fn assert_cells_marked_as_sweep_json(html: &str, doc: &Value) {
    let table = rows(html, "sweep");
    assert_eq!(table.len(), doc["points"].as_array().unwrap().len());
    for row in &table {
        let b = bounds(point(doc, &row[0]));
        // point, req/s, tok/s, tok/s per user, TTFT p50, TTFT p99, e2e p99, …
        for (cell, metric, mark) in [
            (&row[3], "output_token_throughput_per_user", "*"),
            (&row[4], "time_to_first_token", "≤"),
            (&row[5], "time_to_first_token", "≤"),
            (&row[6], "request_latency", "≤"),
        ] {
            let marked = match mark {
                "≤" => cell.starts_with("≤ "),
                _ => cell.ends_with('*'),
            };
            assert_eq!(
                marked,
                b.contains(&metric),
                "{metric} {cell}: {row:?} {b:?}"
            );
        }
    }
}

// Audit finding 2: under the series table the page said "Exact: each figure from the run's
// records." (with --runs, "each exact from that run's records") while the sweep's own table
// marked those TTFT cells `*` and sweep.json listed them as bounds. Without kernel receive
// stamps every time is canaryd's read, so every point's TTFT and e2e are upper bounds.
#[test]
fn a_sweeps_page_marks_the_figures_its_sweep_json_calls_bounds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_sim, port) = common::sim(&[]);
    let load = [
        "--concurrency",
        "1,2",
        "--isl",
        "16",
        "--osl",
        "8",
        "--benchmark-duration",
        "1s",
        "--no-kernel-timestamps",
    ];
    for (out, runs) in [("once", "1"), ("twice", "2")] {
        let mut args = load.to_vec();
        args.extend(["--runs", runs]);
        let doc = sweep(dir, port, out, &args);
        for p in doc["points"].as_array().unwrap() {
            let b = bounds(p);
            assert!(
                b.contains(&"time_to_first_token") && b.contains(&"request_latency"),
                "{out}: {p}"
            );
        }
        let html = report(dir, out);
        assert_cells_marked_as_sweep_json(&html, &doc);
        let page = text(&html);
        assert!(!page.contains("Exact: each figure"), "{out}: {page}");
        assert!(
            !page.contains("each exact from that run's records"),
            "{out}: {page}"
        );
        assert!(
            page.contains("a latency marked ≤ is an upper bound"),
            "{out}: {page}"
        );
        if runs == "2" {
            assert!(
                page.contains("a mean of upper bounds is one too"),
                "{out}: {page}"
            );
        }
    }

    // What a reader's browser shows: the same cells, and a page without errors.
    let bin = match chromium() {
        Ok(bin) => bin,
        Err(why) => return canary_testkit::skip("chromium", &why),
    };
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut b = Browser::launch(&bin).unwrap();
    let page = dir.join("once.html");
    let url = format!("file://{}", page.display());
    common::page::check(&mut b, &url, &shots.join("sweep-bounds.png"));
    let load = b.open(&url, 1240).unwrap();
    let cells: Vec<Vec<String>> = serde_json::from_str(
        b.eval(
            &load,
            "JSON.stringify([...document.querySelectorAll('table.sweep tbody tr')]\
             .map(r => [...r.cells].map(c => c.textContent)))",
        )
        .unwrap()
        .as_str()
        .unwrap(),
    )
    .unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(cells, rows(&html, "sweep"));
    assert!(cells.iter().all(|r| r[5].starts_with("≤ ")), "{cells:?}");
}

// Audit finding 8: the page of a `--find-max-rate` sweep had no capacity answer: only the
// knee, the front and the probes as a series. It leads with the sweep's last line (its bounds
// rounded outward, so they still hold) and marks each probe passed or failed.
#[test]
fn a_capacity_searchs_page_gives_its_answer_and_marks_its_probes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_sim, port) = common::sim_with_profile(dir, r#"{"profile": "capacity"}"#, &[]);
    let doc = sweep(
        dir,
        port,
        "search",
        &[
            "--find-max-rate",
            "--slo",
            "time_to_first_token:100",
            "--min-good-fraction",
            "0.95",
            "--request-rate",
            "50",
            "--arrival-pattern",
            "constant",
            "--benchmark-duration",
            "1s",
            "--max-runs",
            "3",
            "--isl",
            "32",
            "--osl",
            "16",
        ],
    );
    let c = &doc["capacity"];
    let html = report(dir, "search");
    let page = text(&html);
    let head = "capacity at SLO (time_to_first_token:100, 95% good): ";
    assert!(page.contains(head), "{c}: {page}");
    use canary_core::rate_text::{rate_at_least, rate_below};
    let tried = doc["points"].as_array().unwrap().len();
    match (
        c["max_passing_rate"].as_f64(),
        c["min_failing_rate"].as_f64(),
    ) {
        (Some(p), Some(f)) => assert!(
            page.contains(&format!(
                "{head}at least {} req/s (passed), below {} req/s (failed); {tried} rates \
                 tried, stopped by {}",
                rate_at_least(p),
                rate_below(f),
                c["stopped_by"].as_str().unwrap()
            )),
            "{c}: {page}"
        ),
        (Some(p), None) => assert!(
            page.contains(&format!(
                "{head}at least {} req/s (a lower bound",
                rate_at_least(p)
            )),
            "{c}: {page}"
        ),
        (None, f) => assert!(
            page.contains(&format!(
                "{head}no rate passed (lowest tried, failed: {} req/s",
                f.map_or("–".into(), rate_below)
            )),
            "{c}: {page}"
        ),
    }
    // Each probe passed or failed, as sweep.json says.
    let table = rows(&html, "sweep");
    assert_eq!(table.len(), tried);
    for row in &table {
        let passed = point(&doc, &row[0])["passed"].as_bool().unwrap();
        let tags = row.last().unwrap();
        let want = if passed {
            "probe passed"
        } else {
            "probe failed"
        };
        assert!(tags.contains(want), "{row:?}: {}", point(&doc, &row[0]));
    }
    // The bracket's ends are probes, one passed and one failed.
    if let Some(p) = c["max_passing_rate"].as_f64() {
        assert!(table.iter().any(|r| {
            point(&doc, &r[0])["value"].as_f64() == Some(p)
                && r.last().unwrap().contains("probe passed")
        }));
    }
    assert_cells_marked_as_sweep_json(&html, &doc);
}

// Audit finding 14: with every point left out (over 5 % of each point's requests failed at
// the target), the page still gave the knee rule ("no step gained under 10 % throughput …")
// as why there is no knee, which reads as a server that kept scaling. It says, as the sweep's
// own knee line does, that too few points are evidence, which and why.
#[test]
fn a_sweep_with_too_few_points_as_evidence_says_so_on_its_page() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_sim, port) = common::sim(&["--fault-rate", "0.5", "--fault", "status=503"]);
    let doc = sweep(
        dir,
        port,
        "failing",
        &[
            "--concurrency",
            "1,2",
            "--isl",
            "16",
            "--osl",
            "8",
            "--benchmark-duration",
            "1s",
        ],
    );
    let left = doc["left_out"].as_array().unwrap();
    assert_eq!(left.len(), 2, "{doc}");
    assert!(doc["knee"].is_null(), "{doc}");
    let page = text(&report(dir, "failing"));
    assert!(
        page.contains(
            "No knee (sweep.json's): 0 of the 2 points are evidence, and a knee is a step \
             between two; left out: c1 ("
        ),
        "{page}"
    );
    for l in left {
        let rate = l["error_rate"].as_f64().unwrap();
        assert!(
            page.contains(&format!(
                "{} ({:.1}% of its requests failed at the target)",
                l["label"].as_str().unwrap(),
                rate * 100.0
            )),
            "{l}: {page}"
        );
    }
    assert!(!page.contains("no step gained under"), "{page}");
}

// Audit finding 4 (the page): an experiment's page showed means ± intervals of TTFT with no
// mark though every run's TTFT were upper bounds (its own table said `TTFT (ms, bound)`). A
// mean of upper bounds is one: marked `≤`, from the runs' own summaries.
#[test]
fn an_experiments_page_marks_means_of_bounds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    ok(&canaryd(
        &[
            "profile",
            "-m",
            "canary-sim",
            "--url",
            &url,
            "--isl",
            "16",
            "--osl",
            "8",
            "--request-rate",
            "20",
            "--request-count",
            "10",
            "--runs",
            "2",
            "--no-kernel-timestamps",
            "--no-ebpf",
            "--no-nvml",
            "-o",
            "exp",
        ],
        dir,
    ));
    let html = report(dir, "exp");
    let table = rows(&html, "estimates");
    let mean = |figure: &str| {
        table
            .iter()
            .find(|r| r[0] == figure)
            .unwrap_or_else(|| panic!("{figure}: {table:?}"))[1]
            .clone()
    };
    for figure in ["TTFT p50", "TTFT p99", "e2e p50", "e2e p99"] {
        assert!(mean(figure).starts_with("≤ "), "{figure}: {table:?}");
    }
    // ITL's gaps between bounds are exact in neither direction; counts and rates are exact.
    assert!(mean("ITL p50").ends_with('*'), "{table:?}");
    assert!(!mean("throughput").contains(['≤', '*']), "{table:?}");
    let page = text(&html);
    assert!(page.contains("A mean marked ≤ is an upper bound"), "{page}");
}
