//! What a sweep's `sweep.json` says of a point beyond its figures (capped, errored, its notes),
//! and the line that prints it.

use serde::Serialize;
use serde_json::Value;

/// What a sweep's `sweep.json` says of a point beyond its figures: that the open-file limit
/// held it under its load, that it errored, and its notes (why the sweep left it out of the
/// knee and the Pareto front). A comparison of the point is over figures these qualify.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PointSaid {
    /// Held under its nominal load by the open-file limit (`capped`).
    pub capped: bool,
    /// Its verdict, when an error (`error: …`, or a run's `point-03/run-2: error: …` with
    /// `--runs N`: nothing completed, canaryd the bottleneck, a signal); not a failed gate
    /// (`fail: error rate …`).
    pub error: Option<String>,
    /// Its verdict, when a signal cut it short (`interrupted`, or a run's
    /// `point-03/run-2: interrupted`; an older canaryd wrote `error: interrupted`, an error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
    /// Its notes.
    pub notes: Vec<String>,
}

impl PointSaid {
    pub(super) fn of(p: &Value) -> PointSaid {
        let verdict = p.get("verdict").and_then(Value::as_str);
        PointSaid {
            capped: p.get("capped").and_then(Value::as_bool) == Some(true),
            error: verdict
                .filter(|v| crate::artifacts::verdict_error(v).is_some())
                .map(String::from),
            interrupted: verdict
                .filter(|v| crate::artifacts::verdict_interrupted(v))
                .map(String::from),
            notes: p
                .get("notes")
                .and_then(Value::as_array)
                .map(|n| {
                    n.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    fn is_empty(&self) -> bool {
        *self == PointSaid::default()
    }

    /// `c16, B [capped]: its notes` (`None` when there is nothing to say).
    pub(super) fn line(&self, label: &str, side: &str) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut tags = Vec::new();
        if self.capped {
            tags.push("capped");
        }
        if self.error.is_some() {
            tags.push("errored");
        }
        if self.interrupted.is_some() {
            tags.push("interrupted");
        }
        let tags = if tags.is_empty() {
            String::new()
        } else {
            format!(" [{}]", tags.join(", "))
        };
        let said: Vec<&str> = self
            .error
            .iter()
            .chain(&self.interrupted)
            .chain(&self.notes)
            .map(String::as_str)
            .collect();
        Some(if said.is_empty() {
            format!("{label}, {side}{tags}")
        } else {
            format!("{label}, {side}{tags}: {}", said.join("; "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::PointSaid;

    // A run's error with `--runs N` (`point-03/run-2: error: …`) went untagged; a failed gate
    // is no error.
    #[test]
    fn an_error_verdict_is_tagged_after_a_runs_folder_and_a_failed_gate_is_not() {
        let of = |v: &str| PointSaid::of(&serde_json::json!({"verdict": v})).error;
        let run = "point-03/run-2: error: nothing completed";
        assert_eq!(of(run).as_deref(), Some(run));
        assert_eq!(
            of("error: interrupted").as_deref(),
            Some("error: interrupted")
        );
        assert_eq!(of("fail: error rate 0.020 above max_error_rate 0.01"), None);
        // A point a signal cut short is tagged so, not as an error.
        let cut = PointSaid::of(&serde_json::json!({"verdict": "point-03/run-2: interrupted"}));
        assert_eq!(cut.error, None);
        assert_eq!(
            cut.line("c16", "B").as_deref(),
            Some("c16, B [interrupted]: point-03/run-2: interrupted")
        );
        assert_eq!(
            of("point-03/run-2: fail: error rate 0.020 above max_error_rate 0.01"),
            None
        );
    }
}
