//! Run folders written by hand: `records.jsonl` with chosen rates and latencies, and the
//! `summary.json`, `sweep.json` beside them.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A run's requests: `n` of them, one every `1000 / rate` ms, each with TTFT `ttft` ms and
/// e2e `ttft + 10` ms; every `fail_every`-th one failed (a timeout).
pub struct Load {
    pub rate: f64,
    pub ttft: f64,
    pub n: usize,
    pub fail_every: Option<usize>,
}

impl Load {
    pub fn new(rate: f64, ttft: f64) -> Load {
        Load {
            rate,
            ttft,
            n: 50,
            fail_every: None,
        }
    }

    pub fn failing(mut self, every: usize) -> Load {
        self.fail_every = Some(every);
        self
    }

    /// The records, each a JSON object.
    pub fn records(&self) -> Vec<Value> {
        (0..self.n)
            .map(|i| {
                let sent = i as f64 * 1000.0 / self.rate;
                let failed = self.fail_every.is_some_and(|k| i % k == 0);
                if failed {
                    json!({"sent_at_ms": sent, "ended_at_ms": sent + 5.0, "status": "error",
                           "error": {"kind": "timeout"}})
                } else {
                    json!({"sent_at_ms": sent, "ended_at_ms": sent + self.ttft + 10.0,
                           "status": "ok", "ttft_ms": self.ttft, "e2e_ms": self.ttft + 10.0,
                           "output_tokens_per_s": 100.0, "chunks": 10})
                }
            })
            .collect()
    }
}

/// Writes `records` as `dir/records.jsonl`.
pub fn records(dir: &Path, records: &[Value]) {
    std::fs::create_dir_all(dir).unwrap();
    let lines: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(dir.join("records.jsonl"), lines).unwrap();
}

/// A run folder of `load`, with `summary` as its `summary.json` when given.
pub fn run(dir: &Path, load: &Load, summary: Option<Value>) -> PathBuf {
    records(dir, &load.records());
    if let Some(s) = summary {
        json_file(&dir.join("summary.json"), &s);
    }
    dir.to_path_buf()
}

pub fn json_file(path: &Path, v: &Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

/// `canaryd report DIRS -o page.html`: the page, and what the command said.
pub fn report(dirs: &[&Path]) -> (String, String) {
    let out = tempfile::tempdir().unwrap();
    let page = out.path().join("page.html");
    let args = canary_report::cli::ReportArgs {
        dirs: dirs.iter().map(|d| d.to_path_buf()).collect(),
        output: page.clone(),
    };
    let said = canary_report::cli::report(&args).unwrap();
    (std::fs::read_to_string(&page).unwrap(), said)
}

/// The page's text, tags dropped (charts and style left out), for finding sentences.
pub fn text(html: &str) -> String {
    // The style sheet, and the charts' SVG text (their axes' and legends': the layers are
    // counted by name instead).
    let mut out = String::new();
    let mut rest = html;
    loop {
        let next = ["<svg", "<style"]
            .iter()
            .filter_map(|open| Some((rest.find(open)?, open)))
            .min();
        let Some((i, open)) = next else { break };
        out.push_str(&rest[..i]);
        let close = if *open == "<svg" {
            "</svg>"
        } else {
            "</style>"
        };
        rest = rest[i..].split_once(close).map_or("", |(_, after)| after);
    }
    out.push_str(rest);
    let mut text = String::new();
    let mut in_tag = false;
    for c in out.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                text.push(' ');
            }
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    let text = text
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&quot;", "\"");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
