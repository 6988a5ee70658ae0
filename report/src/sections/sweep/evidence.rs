//! Which points are the knee's and the front's evidence. With `sweep.json` the sweep said so;
//! without (runs named together), the report leaves out what `canaryd sweep` would, from what
//! the runs' artifacts hold: a run a signal cut short, one the open-file limit held under its
//! load, one whose verdict would be an error, or one with over 5 % of its requests failing at
//! the target. Their figures are partial, of a lighter load than the run's, or of the few
//! requests that were served; a dead server's run made a knee of the step before it.

use super::Point;
use crate::artifacts::{Figures, Run, SweepFile};
use crate::html::esc;
use std::fmt;

/// A target error rate above this leaves a point out (the daemon's default `max_error_rate`,
/// `canaryd sweep`'s `EVIDENCE_MAX_ERROR_RATE`).
pub const EVIDENCE_MAX_ERROR_RATE: f64 = 0.05;

/// Why a point is not evidence for the knee and the Pareto front.
#[derive(Debug, Clone, PartialEq)]
pub enum LeftOut {
    /// A signal cut it short (every run's, for a mean): its figures are partial.
    CutShort,
    /// The open-file limit held it under its load: the sentence says how.
    Capped(String),
    /// Its verdict would be an error (nothing completed, canaryd the bottleneck).
    Errored(String),
    /// This share of its requests failed at the target.
    Errors(f64),
    /// `sweep.json` left it out, for the reason in its notes.
    Sweep(String),
}

impl LeftOut {
    /// A few words for the table.
    pub fn short(&self) -> &'static str {
        match self {
            LeftOut::CutShort => "cut short",
            LeftOut::Capped(_) => "capped",
            LeftOut::Errored(_) => "errored",
            LeftOut::Errors(_) => "errors over 5 %",
            LeftOut::Sweep(s) if s.starts_with("capped") => "capped",
            LeftOut::Sweep(s) if s.contains("failed at the target") => "errors over 5 %",
            LeftOut::Sweep(s) if s.contains("interrupted") => "cut short",
            LeftOut::Sweep(_) => "errored",
        }
    }
}

impl fmt::Display for LeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeftOut::CutShort => f.write_str("a signal cut it short: its figures are partial"),
            LeftOut::Capped(why) | LeftOut::Errored(why) => f.write_str(why),
            // Under a heading that says as much.
            LeftOut::Sweep(why) => f.write_str(
                why.strip_prefix("left out of the knee and the Pareto front: ")
                    .unwrap_or(why),
            ),
            LeftOut::Errors(rate) => write!(
                f,
                "{:.1} % of its requests failed at the target (over {:.0} %), so its figures \
                 are of the requests that were served",
                rate * 100.0,
                EVIDENCE_MAX_ERROR_RATE * 100.0
            ),
        }
    }
}

/// Why `run` (its figures `f`) is left out, or `None` when it is evidence.
pub fn of_run(run: &Run, f: &Figures) -> Option<LeftOut> {
    let summary = run.summary.as_ref();
    if summary.and_then(|s| s.doc.get("interrupted")?.as_bool()) == Some(true) {
        return Some(LeftOut::CutShort);
    }
    if let Some(why) = summary.and_then(capped) {
        return Some(LeftOut::Capped(why));
    }
    if let Some(why) = errored(f) {
        return Some(LeftOut::Errored(why));
    }
    let rate = f.error_rate.filter(|&r| r > EVIDENCE_MAX_ERROR_RATE)?;
    Some(LeftOut::Errors(rate))
}

/// A point that is the mean of its runs (`each`: their labels and reasons; `error_rate`: the
/// mean's): cut short when every run was, else left out for the first run capped or errored,
/// else for the mean's errors; as `canaryd sweep` judges a repeated point.
pub fn of_mean(each: &[(&str, Option<&LeftOut>)], error_rate: Option<f64>) -> Option<LeftOut> {
    if !each.is_empty() && each.iter().all(|(_, w)| *w == Some(&LeftOut::CutShort)) {
        return Some(LeftOut::CutShort);
    }
    for (label, why) in each {
        match why {
            Some(LeftOut::Capped(w)) => return Some(LeftOut::Capped(format!("{label}: {w}"))),
            Some(LeftOut::Errored(w)) => return Some(LeftOut::Errored(format!("{label}: {w}"))),
            _ => {}
        }
    }
    let rate = error_rate.filter(|&r| r > EVIDENCE_MAX_ERROR_RATE)?;
    Some(LeftOut::Errors(rate))
}

/// The open-file limit held requests for a slot (`in_flight_cap`: its source `open_files`,
/// requests `waited`).
fn capped(s: &crate::artifacts::Summary) -> Option<String> {
    let source = s.text(&["in_flight_cap", "source"])?;
    let waited = s.number(&["in_flight_cap", "waited"])?;
    if source != "open_files" || waited <= 0.0 {
        return None;
    }
    let limit = s
        .number(&["in_flight_cap", "limit"])
        .map_or(String::new(), |l| format!(" at {l} requests in flight"));
    Some(format!(
        "capped by the open-file limit{limit}: {waited} requests waited in canaryd for a slot, \
         so the server saw a lighter load than the run's"
    ))
}

/// What would make the run's verdict an error, as the daemon judges it.
fn errored(f: &Figures) -> Option<String> {
    if f.requests == 0 {
        return Some("no request was sent".into());
    }
    let client_share = f.client_errors as f64 / f.requests as f64;
    if f.client_errors > 0 && (client_share > EVIDENCE_MAX_ERROR_RATE || f.completed == 0) {
        return Some(format!(
            "canaryd was the bottleneck: {} of {} requests failed for lack of its own resources",
            f.client_errors, f.requests
        ));
    }
    (f.completed == 0).then(|| format!("none of its {} requests completed", f.requests))
}

/// The name of the layer that crosses out the points left out of the knee and the front.
pub const LEFT_OUT_LAYER: &str = "left out of knee and front";

/// Where the knee and the front come from, each point left out of them and why, and the
/// sweep's notes.
pub fn whys(points: &[Point], sweep: Option<&SweepFile>) -> String {
    let mut html = String::from("<p class=\"note\">");
    html.push_str(match sweep {
        Some(_) => {
            "The knee, the Pareto front and the points left out of them are sweep.json's: the \
             sweep's verdict, as its table and canaryd compare give it."
        }
        None => {
            "No sweep.json: the knee and the front are found here as canaryd sweep finds \
             them, leaving out what it would (a run cut short by a signal, capped by the \
             open-file limit, errored, or with over 5 % of its requests failing at the \
             target)."
        }
    });
    html.push_str("</p>\n");
    let left: Vec<String> = points
        .iter()
        .filter_map(|p| Some(format!("{}: {}", p.label, p.left_out.as_ref()?)))
        .collect();
    if !left.is_empty() {
        html.push_str("<h3>Left out of the knee and the Pareto front</h3>\n<ul>");
        for l in &left {
            html.push_str(&format!("<li>{}</li>", esc(l)));
        }
        html.push_str("</ul>\n");
    }
    // The sweep's notes, and each point's that does not only say why it is left out.
    let mut notes: Vec<String> = sweep.map(|s| s.notes.clone()).unwrap_or_default();
    for p in points {
        let said = match &p.left_out {
            Some(LeftOut::Sweep(why)) => Some(why.as_str()),
            _ => None,
        };
        for n in &p.notes {
            if said != Some(n.as_str()) {
                notes.push(format!("{}: {n}", p.label));
            }
        }
    }
    if !notes.is_empty() {
        html.push_str("<h3>Notes (sweep.json)</h3>\n<ul>");
        for n in &notes {
            html.push_str(&format!("<li>{}</li>", esc(n)));
        }
        html.push_str("</ul>\n");
    }
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    // A repeated point is judged as `canaryd sweep` judges one: cut short only when every run
    // was; left out for any run capped or errored; else for the mean's errors.
    #[test]
    fn a_mean_is_left_out_as_the_sweep_leaves_out_a_repeated_point() {
        let cut = LeftOut::CutShort;
        let capped = LeftOut::Capped("capped by the open-file limit".into());
        assert_eq!(
            of_mean(&[("r1", Some(&cut)), ("r2", Some(&cut))], Some(0.0)),
            Some(LeftOut::CutShort)
        );
        assert_eq!(
            of_mean(&[("r1", Some(&cut)), ("r2", None)], Some(0.01)),
            None
        );
        assert_eq!(
            of_mean(&[("r1", None), ("r2", Some(&capped))], Some(0.0)),
            Some(LeftOut::Capped("r2: capped by the open-file limit".into()))
        );
        // One run's 8 % errors in a mean of 4 %: the mean is the point's figure.
        let errors = LeftOut::Errors(0.08);
        assert_eq!(
            of_mean(&[("r1", None), ("r2", Some(&errors))], Some(0.04)),
            None
        );
        assert_eq!(
            of_mean(&[("r1", None), ("r2", None)], Some(0.06)),
            Some(LeftOut::Errors(0.06))
        );
    }
}
