//! The diagnosis (issue 19, README "Diagnosis: why is it slow?"): the dominant bottleneck,
//! how sure, why, the evidence figures each with its kind (exact, bound, estimate) and
//! source, the thresholds that fired, where in the run it held (also shaded on the TTFT
//! timeline, [`band`]), the other classes that fired and what could not be judged.

use super::context::{flatten, kv_table};
use super::num;
use crate::artifacts::{Diagnosis, Run};
use crate::html::{attr, esc, table};

/// The run's diagnosis read from `summary.json`, when it has a readable one.
pub fn of(run: &Run) -> Option<Diagnosis> {
    run.summary.as_ref()?.diagnosis()?.ok()
}

/// The shaded interval for the TTFT timeline: `(start_s, end_s, legend name)`.
pub fn band(run: &Run) -> Option<(f64, f64, String)> {
    let d = of(run)?;
    let i = d.held()?;
    Some((
        i.start_s,
        i.end_s,
        format!("{} held ({}–{} s)", d.class, num(i.start_s), num(i.end_s)),
    ))
}

/// The diagnosis section's body, when the summary has a diagnosis block.
pub fn render(run: &Run) -> Option<String> {
    let summary = run.summary.as_ref()?;
    match summary.diagnosis()? {
        Ok(d) => Some(body(&d)),
        // Unreadable (a field of another type): say so and show the block as it is.
        Err(why) => Some(format!(
            "<p class=\"note\">summary.json: diagnosis: {}; its fields as written:</p>\n{}",
            esc(&why),
            kv_table(&flatten(summary.section("diagnosis")?))
        )),
    }
}

fn body(d: &Diagnosis) -> String {
    let mut html = format!(
        "<div class=\"diagnosis\" data-class=\"{}\">\n<p class=\"headline\">\
         <span class=\"bottleneck {}\">{}</span> <span class=\"confidence\">{} confidence</span></p>\n\
         <p class=\"why\">{}</p>\n",
        attr(&d.class),
        attr(&d.class),
        esc(&d.class),
        esc(&d.confidence),
        esc(&d.why)
    );
    if !d.evidence.is_empty() {
        let rows: Vec<Vec<String>> = d
            .evidence
            .iter()
            .map(|e| {
                vec![
                    format!("<code>{}</code>", esc(&e.name)),
                    e.value.map_or("–".into(), num),
                    esc(&e.unit),
                    format!(
                        "<span class=\"kind {}\">{}</span>",
                        attr(&e.kind),
                        esc(&e.kind)
                    ),
                    esc(&e.source),
                ]
            })
            .collect();
        html.push_str("<h3>Evidence</h3>\n");
        html.push_str(&table(
            "evidence",
            &["figure", "value", "unit", "kind", "source"],
            &rows,
        ));
    }
    if !d.thresholds.is_empty() {
        let rows: Vec<Vec<String>> = d
            .thresholds
            .iter()
            .map(|t| {
                // With its unit, as the CLI's `why:` line has it: `595 ms ≥ 10 ms`.
                let value = |v: Option<f64>| match (v, t.unit.as_str()) {
                    (None, _) => "–".to_string(),
                    (Some(v), "") => num(v),
                    (Some(v), unit) => format!("{} {}", num(v), esc(unit)),
                };
                let op = match t.op.as_str() {
                    ">=" => "≥".to_string(),
                    op => esc(op),
                };
                vec![
                    format!("<code>{}</code>", esc(&t.figure)),
                    format!("{} {op} {}", value(t.observed), value(t.limit)),
                    if t.met { "met" } else { "not met" }.into(),
                ]
            })
            .collect();
        html.push_str("<h3>Thresholds that fired</h3>\n");
        html.push_str(&table(
            "thresholds",
            &["figure", "observed vs limit", "held"],
            &rows,
        ));
    }
    if let Some(i) = d.held() {
        html.push_str(&format!(
            "<h3>Where it held</h3>\n<p class=\"interval\" data-start-s=\"{}\" data-end-s=\"{}\">\
             <code>{}</code> held longest from {} s to {} s after the run's start, {} s in all \
             ({} of the run); peak {} there. Shaded on the TTFT-over-time chart.</p>\n",
            i.start_s,
            i.end_s,
            esc(&i.condition),
            num(i.start_s),
            num(i.end_s),
            num(i.held_s),
            super::pct(i.share_of_run),
            i.peak.map_or("–".into(), num)
        ));
    }
    if !d.also.is_empty() {
        html.push_str(&format!(
            "<p class=\"also\">Also fired: {}.</p>\n",
            esc(&d.also.join(", "))
        ));
    }
    if !d.missing.is_empty() {
        html.push_str("<h3>Not judged</h3>\n<ul class=\"missing\">");
        for m in &d.missing {
            html.push_str(&format!("<li>{}</li>", esc(m)));
        }
        html.push_str("</ul>\n");
    }
    if !d.findings.is_empty() {
        let rows: Vec<Vec<String>> = d
            .findings
            .iter()
            .map(|f| {
                vec![
                    esc(&f.class),
                    format!(
                        "<span class=\"state {}\">{}</span>",
                        attr(&f.state),
                        esc(&f.state)
                    ),
                    esc(&f.missing.join("; ")),
                ]
            })
            .collect();
        html.push_str(&format!(
            "<details class=\"findings\"><summary>Every rule ({})</summary>\n{}</details>\n",
            d.findings.len(),
            table("findings", &["class", "state", "missing source"], &rows)
        ));
    }
    html.push_str("</div>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::Summary;

    fn run(diagnosis: serde_json::Value) -> Run {
        let mut doc = serde_json::Map::new();
        doc.insert("diagnosis".into(), diagnosis);
        Run {
            summary: Some(Summary { doc }),
            ..Default::default()
        }
    }

    #[test]
    fn every_part_is_shown_and_escaped() {
        let r = run(serde_json::json!({
            "class": "queueing", "confidence": "high", "why": "queue <400 ms>",
            "evidence": [{"name": "server_queue_time_mean", "value": 412.0, "unit": "ms",
                          "kind": "estimate", "source": "server_metrics"}],
            "thresholds": [{"figure": "queue_share_of_ttft", "op": ">=", "limit": 0.5,
                            "observed": 0.8, "met": true},
                           {"figure": "server_queue_time_mean", "op": ">=", "limit": 10.0,
                            "observed": 595.0, "unit": "ms", "met": true}],
            "interval": {"start_s": 0.5, "end_s": 3.25, "held_s": 2.5, "share_of_run": 0.6,
                         "condition": "queue_depth >= 1", "peak": 14},
            "also": ["prefill-bound"], "missing": ["network: no eBPF"],
            "findings": [{"class": "network", "state": "unknown", "evidence": [],
                          "thresholds": [], "missing": ["eBPF"]}]
        }));
        let html = render(&r).unwrap();
        for want in [
            "<span class=\"bottleneck queueing\">queueing</span>",
            "high confidence",
            "queue &lt;400 ms&gt;",
            "<td><code>server_queue_time_mean</code></td><td class=\"n\">412</td><td>ms</td>\
             <td><span class=\"kind estimate\">estimate</span></td><td>server_metrics</td>",
            // An older summary's threshold has no unit; a newer one's is on both figures.
            "<td class=\"n\">0.800 ≥ 0.500</td>",
            "<td><code>server_queue_time_mean</code></td><td class=\"n\">595 ms ≥ 10 ms</td>",
            "from 0.500 s to 3.25 s",
            "60.00 % of the run",
            "Also fired: prefill-bound.",
            "<li>network: no eBPF</li>",
            "Every rule (1)",
        ] {
            assert!(html.contains(want), "{want}\n{html}");
        }
        assert_eq!(band(&r).unwrap().2, "queueing held (0.500–3.25 s)");
    }

    #[test]
    fn an_unreadable_block_is_said_and_shown_as_written_and_none_is_nothing() {
        let r = run(serde_json::json!({"class": "queueing", "evidence": 3}));
        let html = render(&r).unwrap();
        assert!(html.contains("invalid type"), "{html}");
        assert!(html.contains("<td>class</td><td>queueing</td>"), "{html}");
        assert!(band(&r).is_none());
        assert!(render(&Run::default()).is_none());
        // Healthy: no interval, no band.
        let r = run(serde_json::json!({"class": "healthy", "confidence": "medium", "why": "ok"}));
        assert!(band(&r).is_none());
        assert!(render(&r).unwrap().contains("bottleneck healthy"));
    }
}
