//! A sweep's knee as its `sweep.json` states it, and why it has none in the sweep's own words:
//! no step met the knee rule, or too few of its points were evidence (`left_out`). A series
//! with no knee is not one that "did not saturate": one whose last step doubled its TTFT p99
//! while gaining just over 10 % throughput saturated, and no step met the rule.

use serde::Serialize;
use serde_json::Value;

/// Where a sweep's knee is.
#[derive(Debug, Clone, Serialize)]
pub struct KneeAt {
    /// The point's label (`c8`).
    pub label: String,
    /// Its axis value.
    pub value: f64,
    /// Its completed requests per second.
    pub request_throughput: Option<f64>,
}

/// A point the sweep left out of its knee, and why: an entry of `sweep.json`'s `left_out`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeftOutOfKnee {
    /// `c16`.
    pub label: String,
    /// Why, as `sweep.json` names it: `cut_short`, `capped`, `error_verdict`,
    /// `target_errors`, `no_figures` (another name is said as it is).
    pub why: String,
    /// Its target error rate, for `target_errors`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_rate: Option<f64>,
}

impl LeftOutOfKnee {
    /// `sweep.json`'s `left_out` (absent in one from before it was written: none left out).
    pub(super) fn all_of(doc: &Value) -> Vec<LeftOutOfKnee> {
        let Some(listed) = doc.get("left_out").and_then(Value::as_array) else {
            return Vec::new();
        };
        listed
            .iter()
            .filter_map(|l| {
                Some(LeftOutOfKnee {
                    label: l.get("label")?.as_str()?.to_string(),
                    why: l.get("why")?.as_str()?.to_string(),
                    error_rate: l.get("error_rate").and_then(Value::as_f64),
                })
            })
            .collect()
    }

    /// `c16 (20.0% of its requests failed at the target)`, as `canaryd sweep` says it.
    fn said(&self) -> String {
        let why = match self.why.as_str() {
            "cut_short" => "cut short by a signal".to_string(),
            "capped" => "capped by the open-file limit".to_string(),
            "error_verdict" => "its verdict is an error".to_string(),
            "target_errors" => match self.error_rate {
                Some(r) => format!("{:.1}% of its requests failed at the target", r * 100.0),
                None => "its requests failed at the target".to_string(),
            },
            "no_figures" => "no request throughput or TTFT p99".to_string(),
            other => other.to_string(),
        };
        format!("{} ({why})", self.label)
    }
}

/// Why a sweep of `points` points, `left` of them left out of its knee, has none, in the
/// words of `canaryd sweep`'s knee line (`none (no step in load gained in throughput under
/// min(10%, 50% of its load increase) while TTFT p99 rose over 20%)`), with the points left
/// out named.
pub fn none_said(points: usize, left: &[LeftOutOfKnee]) -> String {
    let evidence = points.saturating_sub(left.len());
    let left_words = match left {
        [] => String::new(),
        _ => format!(
            "; left out: {}",
            left.iter()
                .map(LeftOutOfKnee::said)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    if evidence < 2 {
        // No step to judge: the rule is not why.
        let of = match left.is_empty() {
            true => format!("the sweep has {points} point{}", plural(points)),
            false => format!(
                "{evidence} of the {points} points {} evidence",
                if evidence == 1 { "is" } else { "are" }
            ),
        };
        return format!("none ({of}, and a knee is a step between two{left_words})");
    }
    let among = match left.is_empty() {
        true => String::new(),
        false => format!(" among the {evidence} points that are evidence"),
    };
    let rule = canary_core::series::step_words(true, "%");
    format!("none{among} (no step in load {rule}{left_words})")
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The audit's fmr: r50, r100, r200 with TTFT p99 8.2, 9.4 and 845 ms, the server taking
    // 53 % of r200's rate, throughput +10.05 % on the last step: no knee by the rule, and
    // compare said "the series did not saturate".
    #[test]
    fn no_knee_is_said_by_the_rule_or_by_the_points_left_out_never_as_not_saturated() {
        assert_eq!(
            none_said(3, &[]),
            "none (no step in load gained in throughput under min(10%, 50% of its load increase) while TTFT p99 rose over 20%)"
        );
        let doc = serde_json::json!({"left_out": [
            {"label": "c16", "value": 16, "why": "target_errors", "error_rate": 0.2},
            {"label": "c32", "value": 32, "why": "capped"}]});
        let left = LeftOutOfKnee::all_of(&doc);
        assert_eq!(
            none_said(4, &left),
            "none among the 2 points that are evidence (no step in load gained in \
             throughput under min(10%, 50% of its load increase) while TTFT p99 rose over 20%; left out: c16 (20.0% of its requests \
             failed at the target), c32 (capped by the open-file limit))"
        );
        assert_eq!(
            none_said(2, &left),
            "none (0 of the 2 points are evidence, and a knee is a step between two; left out: \
             c16 (20.0% of its requests failed at the target), c32 (capped by the open-file \
             limit))"
        );
        assert_eq!(
            none_said(1, &[]),
            "none (the sweep has 1 point, and a knee is a step between two)"
        );
        assert!(LeftOutOfKnee::all_of(&serde_json::json!({})).is_empty());
    }
}
