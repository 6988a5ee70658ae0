//! The diagnosis as a person reads it: the lines `canaryd replay` and `canaryd demo` print
//! under their table. Every figure says whether it is exact, a bound or an estimate.

use super::{fmt_num, Diagnosis, Evidence, FigureKind};

fn kind(k: FigureKind) -> &'static str {
    match k {
        FigureKind::Exact => "exact",
        FigureKind::Bound => "bound",
        FigureKind::Estimate => "estimate",
    }
}

fn evidence(e: &Evidence) -> String {
    format!(
        "{} {} {} ({}, {})",
        e.name,
        fmt_num(e.value),
        e.unit,
        kind(e.kind),
        e.source
    )
}

impl Diagnosis {
    /// The diagnosis in a few lines: the class and confidence, why (the thresholds that
    /// fired and where in the run), its evidence, the other classes that fired, and what
    /// could not be judged for lack of a source.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "diagnosis: {} ({} confidence)",
            self.class,
            self.confidence.as_str()
        )];
        out.push(format!("  why: {}", self.why));
        if !self.evidence.is_empty() {
            let ev: Vec<String> = self.evidence.iter().map(evidence).collect();
            out.push(format!("  evidence: {}", ev.join("; ")));
        }
        if !self.also.is_empty() {
            let also: Vec<&str> = self.also.iter().map(|c| c.as_str()).collect();
            out.push(format!("  also fired: {}", also.join(", ")));
        }
        // `unknown` and `healthy` already list what was missing in `why`.
        let listed = self.why.contains("not judged") || self.why.contains("unavailable");
        if !self.missing.is_empty() && !listed {
            out.push(format!("  not judged: {}", self.missing.join(" | ")));
        }
        out
    }
}
