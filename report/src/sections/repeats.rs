//! A `--runs N` experiment: each headline figure's mean over its runs with its confidence
//! interval, as its `summary.json` states them, and each run with its verdict, those its
//! estimates leave out named. Its runs repeat one load, so there is no knee and no front: a
//! step between two of them is noise, not load.

use super::num;
use crate::artifacts::Repeats;
use crate::html::{esc, table};

/// A figure's label (`TTFT p99`) and unit as the page writes them.
fn label(metric: &str, statistic: &str) -> String {
    let name = match metric {
        "time_to_first_token" => "TTFT",
        "inter_token_latency" => "ITL",
        "request_latency" => "e2e",
        "request_throughput" => "throughput",
        "output_token_throughput" => "output tokens/s",
        "goodput" => "goodput",
        "schedule_lag" => "schedule lag",
        other => other,
    };
    match statistic {
        "" | "value" => name.to_string(),
        s => format!("{name} {s}"),
    }
}

fn unit(unit: &str) -> &str {
    match unit {
        "requests/s" => "req/s",
        "tokens/s" => "tok/s",
        u => u,
    }
}

/// The estimates section's body.
pub fn render(e: &Repeats) -> String {
    let level = e.confidence.unwrap_or(0.95) * 100.0;
    let complete = e.complete();
    let mut html = String::new();
    let rows: Vec<Vec<String>> = e
        .estimates
        .iter()
        .map(|m| {
            let u = unit(&m.unit);
            let with = |v: f64| format!("{} {u}", num(v));
            vec![
                esc(&label(&m.metric, &m.statistic)),
                esc(&m.mean.map_or("–".into(), with)),
                esc(&m
                    .half_width
                    .map_or("–".into(), |h| format!("± {}", with(h)))),
                num(m.values.len() as f64),
                esc(&m
                    .values
                    .iter()
                    .map(|v| num(*v))
                    .collect::<Vec<_>>()
                    .join(", ")),
            ]
        })
        .collect();
    if rows.is_empty() {
        html.push_str("<p class=\"note\">summary.json has no figure over the runs.</p>\n");
    } else {
        let half = format!("half-width ({level:.0} % CI)");
        html.push_str(&table(
            "estimates",
            &["figure", "mean", &half, "runs", "each run's"],
            &rows,
        ));
    }
    html.push_str(&format!(
        "<p class=\"note\">Estimates, as summary.json states them: each figure the mean of the \
         runs' own, ± the half-width of its {level:.0} % confidence interval (Student's t, n−1 \
         degrees of freedom), over the {complete} of {} runs its estimates are over. Each run's \
         own is its summary.json's: throughputs and goodput exact (counted over the run), \
         percentiles estimates from its histograms, within 0.1 %. The runs repeat one load: no \
         knee and no Pareto front.</p>\n",
        e.per_run.len()
    ));
    let runs: Vec<Vec<String>> = e
        .per_run
        .iter()
        .map(|r| {
            vec![
                esc(&r.dir),
                esc(r.run_id.as_deref().unwrap_or("–")),
                esc(r.verdict.as_deref().unwrap_or("–")),
                esc(&match &r.left_out {
                    None => "yes".to_string(),
                    Some(why) if r.verdict.as_ref() == Some(why) => {
                        "left out: its verdict".to_string()
                    }
                    Some(why) => format!("left out: {why}"),
                }),
            ]
        })
        .collect();
    html.push_str(&table(
        "repeats",
        &["run", "run id", "verdict", "in the estimates"],
        &runs,
    ));
    let asked = e.runs_asked.unwrap_or(e.per_run.len() as u64);
    if e.interrupted || asked > e.per_run.len() as u64 {
        html.push_str(&format!(
            "<p class=\"warn\">A signal stopped the experiment: {} of {asked} runs ran.</p>\n",
            e.per_run.len()
        ));
    }
    html
}
