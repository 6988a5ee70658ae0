//! Each side's diagnosis (why its runs were slow, from their summaries) and whether the
//! dominant bottleneck changed between A and B.

use crate::Experiment;
use serde::Serialize;

/// The two sides' diagnoses: why each was slow, and whether that changed.
#[derive(Debug, Clone, Serialize)]
pub struct DiagnosisChange {
    /// A's runs' classes with their confidence (`queueing (high)`), one per run that has a
    /// readable diagnosis, in run order.
    pub a: Vec<String>,
    /// B's.
    pub b: Vec<String>,
    /// True when the classes B's runs were given are not the ones A's were (confidence
    /// aside); false when they are, or a side has none.
    pub changed: bool,
}

impl DiagnosisChange {
    pub(super) fn of(a: &Experiment, b: &Experiment) -> DiagnosisChange {
        let read = |e: &Experiment| -> Vec<(String, String)> {
            e.runs
                .iter()
                .filter_map(|r| r.summary.as_ref()?.diagnosis()?.ok())
                .map(|d| (d.class, d.confidence))
                .collect()
        };
        let (da, db) = (read(a), read(b));
        let classes = |d: &[(String, String)]| -> Vec<String> {
            let mut c: Vec<String> = d.iter().map(|(class, _)| class.clone()).collect();
            c.sort_unstable();
            c.dedup();
            c
        };
        let shown = |d: &[(String, String)]| -> Vec<String> {
            d.iter().map(|(c, conf)| format!("{c} ({conf})")).collect()
        };
        DiagnosisChange {
            changed: !da.is_empty() && !db.is_empty() && classes(&da) != classes(&db),
            a: shown(&da),
            b: shown(&db),
        }
    }
}
