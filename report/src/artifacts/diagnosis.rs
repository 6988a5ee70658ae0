//! `summary.json`'s `diagnosis` block (issue 19, `core/summary.schema.json`), typed for the
//! report. Read from the artifact, never from canaryd's own types, and tolerantly: every
//! field has a default and unknown fields are ignored, so a summary from an older or newer
//! canaryd still shows what it has. Classes and kinds stay strings for the same reason.

use serde::Deserialize;
use serde_json::Value;

/// The run's dominant bottleneck with its evidence.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Diagnosis {
    /// `queueing`, `kv-memory-bound`, …, `healthy` or `unknown`.
    pub class: String,
    /// `high`, `medium` or `low`.
    pub confidence: String,
    /// Why this class, in a sentence.
    pub why: String,
    /// The figures it rests on.
    pub evidence: Vec<Evidence>,
    /// The thresholds that fired.
    pub thresholds: Vec<Threshold>,
    /// Where in the run the class held.
    pub interval: Option<Interval>,
    /// Other classes that fired, weaker.
    pub also: Vec<String>,
    /// What could not be judged, for lack of which source.
    pub missing: Vec<String>,
    /// Every rule's evaluation.
    pub findings: Vec<Finding>,
}

/// One evidence figure.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Evidence {
    /// Its name (`server_queue_time_mean`).
    pub name: String,
    /// Its value, in `unit`.
    pub value: Option<f64>,
    /// Its unit (`ms`, `fraction`).
    pub unit: String,
    /// `exact`, `bound` or `estimate`.
    pub kind: String,
    /// Where it came from (`server_metrics`, `records`, `nvml`, …).
    pub source: String,
}

/// A threshold a rule compared a figure with.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Threshold {
    /// The figure compared.
    pub figure: String,
    /// `>=` or `<`.
    pub op: String,
    /// The limit.
    pub limit: Option<f64>,
    /// The figure's value in this run.
    pub observed: Option<f64>,
    /// The unit of `observed` and `limit` (`ms`, `ratio`); empty in a summary written before
    /// thresholds carried one.
    pub unit: String,
    /// Whether the comparison held.
    pub met: bool,
}

/// Where in the run a condition held.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Interval {
    /// Start of the longest stretch, s from the run's start.
    pub start_s: f64,
    /// Its end.
    pub end_s: f64,
    /// Seconds the condition held in all.
    pub held_s: f64,
    /// `held_s` over the run's length.
    pub share_of_run: f64,
    /// The condition, in words.
    pub condition: String,
    /// The figure's highest value in the stretch.
    pub peak: Option<f64>,
}

/// One rule's evaluation.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Finding {
    /// The class the rule tests for.
    pub class: String,
    /// `fired`, `clear` or `unknown`.
    pub state: String,
    /// What it could not judge.
    pub missing: Vec<String>,
}

impl Diagnosis {
    /// The block `v`, or why it cannot be read (a field of the wrong type).
    pub fn from_value(v: &Value) -> Result<Diagnosis, String> {
        Diagnosis::deserialize(v).map_err(|e| e.to_string())
    }

    /// The interval, when it is a real stretch of time.
    pub fn held(&self) -> Option<&Interval> {
        self.interval
            .as_ref()
            .filter(|i| i.start_s.is_finite() && i.end_s.is_finite() && i.end_s > i.start_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_block_and_tolerates_missing_and_unknown_fields() {
        let d = Diagnosis::from_value(&serde_json::json!({
            "class": "queueing", "confidence": "high", "why": "queue",
            "evidence": [{"name": "q", "value": 400.0, "unit": "ms", "kind": "estimate",
                          "source": "server_metrics", "new_field": 1}],
            "interval": {"start_s": 1.0, "end_s": 4.5, "held_s": 3.0, "share_of_run": 0.5,
                         "condition": "queue_depth >= 1", "peak": 12},
            "findings": [{"class": "network", "state": "unknown", "missing": ["ebpf"]}],
            "future": {"x": 1}
        }))
        .unwrap();
        assert_eq!(d.class, "queueing");
        assert_eq!(d.evidence[0].value, Some(400.0));
        assert_eq!(d.held().unwrap().end_s, 4.5);
        assert!(d.thresholds.is_empty() && d.also.is_empty());
        assert_eq!(d.findings[0].missing, ["ebpf"]);
        // A stretch of no length is not drawn.
        let mut flat = d.clone();
        flat.interval.as_mut().unwrap().end_s = 1.0;
        assert!(flat.held().is_none());
        // A field of the wrong type is named.
        let e = Diagnosis::from_value(&serde_json::json!({"evidence": "many"})).unwrap_err();
        assert!(e.contains("invalid type"), "{e}");
    }
}
