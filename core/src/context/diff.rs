//! What changed between two runs' contexts: a new engine version, a new driver, another
//! model. Only fields known on both sides are compared, so a probe that failed once is not a
//! change.

use super::RunContext;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One context field that differs from the baseline's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextChange {
    /// The field, as a dotted path of `summary.json`'s `context` (`server.version`).
    pub field: String,
    /// Its value in the baseline run.
    pub baseline: String,
    /// Its value in this run.
    pub now: String,
}

impl std::fmt::Display for ContextChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} → {}", self.field, self.baseline, self.now)
    }
}

fn leaf_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// True for a `{"unavailable": …}` marker.
fn unavailable(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|o| o.len() == 1 && o.contains_key("unavailable"))
}

fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<ContextChange>) {
    if unavailable(a) || unavailable(b) || a.is_null() || b.is_null() {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                if let Some(vb) = y.get(k) {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(&p, va, vb, out);
                }
            }
        }
        _ if a != b => out.push(ContextChange {
            field: path.to_string(),
            baseline: leaf_text(a),
            now: leaf_text(b),
        }),
        _ => {}
    }
}

/// The context of the run a new run is compared with: the daemon's newest baseline run.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextBaseline {
    /// That run's id.
    pub run: String,
    /// Its context, as its `summary.json` recorded it.
    pub context: RunContext,
}

/// What changed in what a run ran on and against since its baseline run (`summary.json`'s
/// `context_changes`): a regression that comes with a new engine version or driver comes
/// with its likely cause.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextComparison {
    /// The run compared with.
    pub baseline_run: String,
    /// The fields known on both sides whose values differ; empty: nothing changed.
    pub changes: Vec<ContextChange>,
}

impl ContextBaseline {
    /// What changed in `now` since this baseline, in the sections that describe the
    /// environment: canaryd, the host, the GPUs and the server. The `workload` section is
    /// left out: it is what the run's own settings asked (a trace window that moves between
    /// runs changes its lengths every time), not what it ran on.
    pub fn compare(&self, now: &RunContext) -> ContextComparison {
        let changes = now
            .changes_since(&self.context)
            .into_iter()
            .filter(|c| !c.field.starts_with("workload."))
            .collect();
        ContextComparison {
            baseline_run: self.run.clone(),
            changes,
        }
    }
}

impl std::fmt::Display for ContextComparison {
    /// `context changed since run R: server.version 0.9 → 0.10; gpu.driver …`, or that it
    /// did not.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.changes.is_empty() {
            return write!(f, "context unchanged since run {}", self.baseline_run);
        }
        write!(f, "context changed since run {}: ", self.baseline_run)?;
        for (i, c) in self.changes.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

impl RunContext {
    /// The fields known in both `baseline` and this context whose values differ, in the
    /// order of their dotted names.
    pub fn changes_since(&self, baseline: &RunContext) -> Vec<ContextChange> {
        let (Ok(a), Ok(b)) = (serde_json::to_value(baseline), serde_json::to_value(self)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        walk("", &a, &b, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Known;

    #[test]
    fn a_new_engine_version_and_driver_are_changes_a_failed_probe_is_not() {
        let mut base = RunContext::default();
        base.server.version = Known::Value("0.9.2".into());
        base.server.max_model_len = Known::Value(4096);
        base.gpu.driver = Known::Value("570.1".into());
        base.host.kernel = Known::Value("6.1".into());
        let mut now = base.clone();
        now.server.version = Known::Value("0.10.0".into());
        now.gpu.driver = Known::Value("580.2".into());
        now.host.kernel = Known::unavailable("uname failed");
        let changes = now.changes_since(&base);
        let text: Vec<String> = changes.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            text,
            ["gpu.driver 570.1 → 580.2", "server.version 0.9.2 → 0.10.0"]
        );
        assert!(base.changes_since(&base).is_empty());
    }

    #[test]
    fn a_baseline_comparison_names_environment_changes_not_workload_ones() {
        let mut base = RunContext::default();
        base.server.model = Known::Value("llama-8b".into());
        base.canaryd.git_sha = Known::Value("aaa".into());
        base.workload.endpoint = Known::Value("chat".into());
        let baseline = ContextBaseline {
            run: "r1".into(),
            context: base.clone(),
        };
        let same = baseline.compare(&base);
        assert!(same.changes.is_empty());
        assert_eq!(same.to_string(), "context unchanged since run r1");
        let mut now = base.clone();
        now.server.model = Known::Value("llama-70b".into());
        now.canaryd.git_sha = Known::Value("bbb".into());
        now.workload.endpoint = Known::Value("text_completion".into());
        let changed = baseline.compare(&now);
        assert_eq!(
            changed.to_string(),
            "context changed since run r1: canaryd.git_sha aaa → bbb; \
             server.model llama-8b → llama-70b"
        );
        let json = serde_json::to_value(&changed).unwrap();
        assert_eq!(json["baseline_run"], "r1");
        assert_eq!(json["changes"][1]["field"], "server.model");
        assert_eq!(json["changes"][1]["now"], "llama-70b");
    }
}
