//! A tolerant parser of the Prometheus text format (0.0.4) and OpenMetrics 1.0.
//!
//! Inference servers write `/metrics` with names like `vllm:num_requests_running` (colons),
//! label values with commas, quotes and newlines, histograms, exemplars and sometimes `# EOF`.
//! `prometheus-parse` drops colon names and mangles label values, so this one is written to the
//! two specs and to what real servers emit. It never fails a whole scrape: a line it cannot read
//! is skipped and counted in
//! [`Scrape::skipped_lines`](crate::prometheus::Scrape::skipped_lines), and the first few are
//! kept in [`Scrape::errors`](crate::prometheus::Scrape::errors) with their line number and
//! reason.
//!
//! Samples are grouped into the family declared by `# TYPE`, following the suffix rules
//! (`_bucket`, `_sum`, `_count`, `_total`, `_created`, `_gsum`, `_gcount`, `_info`); a sample with
//! no declared family gets an untyped family of its own name.

mod histogram;
mod labels;
mod line;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;

pub use histogram::{Fault, HistogramSnapshot, Oversized, MAX_BUCKETS, MAX_LABEL_SETS};
pub use labels::Labels;
use line::{parse_line, Line};

/// How many [`ParseIssue`]s a [`Scrape`] keeps; later ones are only counted.
pub const MAX_ISSUES: usize = 16;

/// Samples kept from one page: a vLLM page has a few thousand; a page of millions (a hostile
/// or broken server, within the 32 MiB body cap) would take gigabytes once parsed, on every
/// scrape. Past it, samples are skipped and said.
pub const MAX_SAMPLES: usize = 200_000;

/// Families kept from one page, for the same reason.
pub const MAX_FAMILIES: usize = 20_000;

/// Labels on one sample: real ones carry a handful. Checked while the line is parsed, since
/// one line of millions of empty labels (`{a="",b="",…}`, within the body cap) would take
/// about eight times its size in memory before any count was looked at.
pub const MAX_LABELS: usize = 128;

/// The type of a metric family, from its `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricKind {
    /// Monotonic counter (`_total`, `_created`).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// Cumulative buckets (`_bucket`, `_sum`, `_count`, `_created`).
    Histogram,
    /// OpenMetrics gauge histogram (`_bucket`, `_gsum`, `_gcount`).
    GaugeHistogram,
    /// Quantiles (`{quantile=".."}`, `_sum`, `_count`, `_created`).
    Summary,
    /// OpenMetrics info (`_info`).
    Info,
    /// OpenMetrics state set.
    StateSet,
    /// `untyped`, `unknown`, or no `# TYPE` at all.
    Untyped,
}

impl MetricKind {
    fn from_type(s: &str) -> Option<MetricKind> {
        Some(match s {
            "counter" => MetricKind::Counter,
            "gauge" => MetricKind::Gauge,
            "histogram" => MetricKind::Histogram,
            "gaugehistogram" => MetricKind::GaugeHistogram,
            "summary" => MetricKind::Summary,
            "info" => MetricKind::Info,
            "stateset" => MetricKind::StateSet,
            "untyped" | "unknown" => MetricKind::Untyped,
            _ => return None,
        })
    }

    /// The sample-name suffixes that belong to a family of this kind.
    fn suffixes(self) -> &'static [&'static str] {
        match self {
            MetricKind::Counter => &["_total", "_created"],
            MetricKind::Histogram => &["_bucket", "_sum", "_count", "_created"],
            MetricKind::GaugeHistogram => &["_bucket", "_gsum", "_gcount"],
            MetricKind::Summary => &["_sum", "_count", "_created"],
            MetricKind::Info => &["_info"],
            _ => &[],
        }
    }
}

/// An OpenMetrics exemplar: `# {trace_id="..."} 0.67 1234.5` after a sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Exemplar {
    /// Its labels (usually a trace id).
    pub labels: Labels,
    /// The observed value.
    pub value: f64,
    /// Unix time in seconds, when given.
    pub timestamp_s: Option<f64>,
}

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Full name, with its suffix (`vllm:e2e_request_latency_seconds_bucket`).
    pub name: String,
    /// Labels, sorted by name.
    pub labels: Labels,
    /// The value; `+Inf`, `-Inf` and `NaN` are kept.
    pub value: f64,
    /// The sample's own timestamp in Unix milliseconds, when given.
    pub timestamp_ms: Option<f64>,
    /// The exemplar attached to the sample, if any.
    pub exemplar: Option<Exemplar>,
}

/// A metric family: its metadata and every sample that belongs to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// The name from `# TYPE` (or the sample name for an undeclared metric).
    pub name: String,
    /// The declared type.
    pub kind: MetricKind,
    /// `# HELP` text, unescaped.
    pub help: Option<String>,
    /// `# UNIT`, when given.
    pub unit: Option<String>,
    /// Samples in the order they appeared.
    pub samples: Vec<Sample>,
}

/// The text format a scrape used, as far as can be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text 0.0.4 (timestamps in milliseconds).
    Prometheus,
    /// OpenMetrics (seen `# EOF` or `# UNIT`; timestamps in seconds).
    OpenMetrics,
}

/// Why a line was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IssueKind {
    /// The metric name is missing or malformed.
    BadName,
    /// The `{...}` label set is malformed (unterminated value, missing `=`, …).
    BadLabels,
    /// The value is not a number.
    BadValue,
    /// The timestamp is not a finite number.
    BadTimestamp,
    /// Something follows the timestamp that is not an exemplar.
    TrailingGarbage,
    /// The exemplar is malformed (the sample itself is kept).
    BadExemplar,
    /// A `# HELP` / `# TYPE` / `# UNIT` line is malformed.
    BadDescriptor,
    /// `# TYPE` names an unknown type (the family is kept as untyped).
    UnknownType,
    /// A second `# TYPE` for a family that already has one.
    DuplicateType,
    /// Content after `# EOF`.
    AfterEof,
    /// Past [`MAX_SAMPLES`] samples or [`MAX_FAMILIES`] families: skipped.
    TooMany,
    /// A sample with more than [`MAX_LABELS`] labels: skipped.
    TooManyLabels,
    /// A second sample of a series (same name and labels) on one page: skipped, the first is
    /// kept. Prometheus rejects such a page; summing both would count the series twice.
    DuplicateSeries,
}

impl fmt::Display for IssueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IssueKind::BadName => "bad metric name",
            IssueKind::BadLabels => "bad label set",
            IssueKind::BadValue => "bad value",
            IssueKind::BadTimestamp => "bad timestamp",
            IssueKind::TrailingGarbage => "unexpected text after the value",
            IssueKind::BadExemplar => "bad exemplar (sample kept)",
            IssueKind::BadDescriptor => "bad HELP/TYPE/UNIT line",
            IssueKind::UnknownType => "unknown metric type (kept as untyped)",
            IssueKind::DuplicateType => "second TYPE line for a family",
            IssueKind::AfterEof => "content after # EOF",
            IssueKind::TooMany => "past the samples or families kept from one page",
            IssueKind::TooManyLabels => "over 128 labels on one sample",
            IssueKind::DuplicateSeries => "a second sample of the same series (the first kept)",
        })
    }
}

/// One problem found while parsing, with its 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseIssue {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong.
    pub kind: IssueKind,
    /// The start of the offending line (at most 120 bytes).
    pub text: String,
}

impl fmt::Display for ParseIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}: {:?}", self.line, self.kind, self.text)
    }
}

/// A parsed exposition: families in first-seen order, plus what could not be read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    /// Families in the order they were first seen.
    pub families: Vec<Family>,
    /// The first [`MAX_ISSUES`] problems.
    pub errors: Vec<ParseIssue>,
    /// How many lines were skipped in all (an issue that keeps its sample is not counted).
    pub skipped_lines: usize,
    /// Whether a `# EOF` was seen (a complete OpenMetrics exposition).
    pub eof: bool,
    /// Lines skipped for room: past [`MAX_SAMPLES`] samples or [`MAX_FAMILIES`] families
    /// (also counted in `skipped_lines`, but only the first few are in `errors`). A family
    /// that lost samples so is left empty: a reader that finds nothing must say why.
    pub over_caps: usize,
    index: HashMap<String, usize>,
}

/// Parses a whole exposition. Never fails; see [`Scrape::errors`].
pub fn parse(text: &str) -> Scrape {
    parse_wanted(text, |_, _, _| true)
}

/// [`parse`], keeping only the samples `wanted(name, labels, value)` accepts: the others are
/// dropped as they are read, before they take room (a reader that uses a few metrics of a
/// large page need not hold the rest). A sample dropped so is neither an issue nor counted,
/// and makes no family of its own.
pub fn parse_wanted(text: &str, wanted: impl FnMut(&str, &Labels, f64) -> bool) -> Scrape {
    parse_with(text, Box::new(wanted), false)
}

/// [`parse_wanted`], but a sample dropped still makes its (undeclared) family, as [`parse`]
/// would: the families a page has are the same either way (an engine is told by them).
pub fn parse_wanted_families(text: &str, wanted: impl FnMut(&str, &Labels, f64) -> bool) -> Scrape {
    parse_with(text, Box::new(wanted), true)
}

fn parse_with(text: &str, wanted: Wanted<'_>, families_of_dropped: bool) -> Scrape {
    let mut b = Builder {
        wanted,
        families_of_dropped,
        ..Builder::default()
    };
    for (i, raw) in text.split('\n').enumerate() {
        b.line(i + 1, raw);
    }
    b.finish()
}

/// Which samples a [`Builder`] keeps.
type Wanted<'a> = Box<dyn FnMut(&str, &Labels, f64) -> bool + 'a>;

struct Builder<'a> {
    wanted: Wanted<'a>,
    /// Whether a sample `wanted` drops still makes its family.
    families_of_dropped: bool,
    scrape: Scrape,
    openmetrics: bool,
    samples: usize,
    /// Families that lost samples to [`MAX_SAMPLES`]: a histogram with some of its buckets
    /// would give wrong quantiles, so they are left empty. A set: every line past the cap
    /// asks, and a scan of 20,000 families per line let a hostile page cost minutes of CPU.
    cut: std::collections::HashSet<usize>,
    /// A hash of each series (name and labels) kept, to skip a second sample of one. A 64-bit
    /// hash, not the series, so 200,000 samples cost 200,000 words; two distinct series on
    /// one page colliding is a chance of about one in 10^9.
    seen: std::collections::HashSet<u64>,
}

impl Default for Builder<'_> {
    fn default() -> Self {
        Builder {
            wanted: Box::new(|_, _, _| true),
            families_of_dropped: false,
            scrape: Scrape::default(),
            openmetrics: false,
            samples: 0,
            cut: Default::default(),
            seen: Default::default(),
        }
    }
}

impl Builder<'_> {
    fn issue(&mut self, line: usize, kind: IssueKind, text: &str, skipped: bool) {
        if skipped {
            self.scrape.skipped_lines += 1;
        }
        if self.scrape.errors.len() < MAX_ISSUES {
            self.scrape.errors.push(ParseIssue {
                line,
                kind,
                text: canary_core::prefix_within(text, 120).to_owned(),
            });
        }
    }

    /// Whether a line naming `name` may be kept: its family is known, or there is room for
    /// another; a sample also needs room under [`MAX_SAMPLES`].
    fn room(&mut self, n: usize, raw: &str, name: &str, sample: bool) -> bool {
        let full = (sample && self.samples >= MAX_SAMPLES)
            || (self.scrape.families.len() >= MAX_FAMILIES && self.scrape.resolve(name).is_none());
        if full {
            self.scrape.over_caps += 1;
            self.issue(n, IssueKind::TooMany, raw, true);
            if let Some(i) = self.scrape.resolve(name) {
                self.cut.insert(i);
            }
        }
        !full
    }

    fn family_mut(&mut self, name: &str) -> &mut Family {
        let s = &mut self.scrape;
        let i = *s.index.entry(name.to_owned()).or_insert_with(|| {
            s.families.push(Family {
                name: name.to_owned(),
                kind: MetricKind::Untyped,
                help: None,
                unit: None,
                samples: Vec::new(),
            });
            s.families.len() - 1
        });
        &mut s.families[i]
    }

    fn line(&mut self, n: usize, raw: &str) {
        if self.scrape.eof {
            if !raw.trim().is_empty() {
                self.issue(n, IssueKind::AfterEof, raw, true);
            }
            return;
        }
        match parse_line(raw) {
            Err(kind) => self.issue(n, kind, raw, true),
            Ok(Line::Blank) => {}
            Ok(Line::Eof) => {
                self.scrape.eof = true;
                self.openmetrics = true;
            }
            Ok(Line::Help(name, _) | Line::Unit(name, _) | Line::Type(name, _))
                if !self.room(n, raw, name, false) => {}
            Ok(Line::Help(name, help)) => self.family_mut(name).help = Some(help),
            Ok(Line::Unit(name, unit)) => {
                self.openmetrics = true;
                self.family_mut(name).unit = Some(unit.to_owned());
            }
            Ok(Line::Type(name, kind)) => {
                let parsed = MetricKind::from_type(kind);
                let fam = self.family_mut(name);
                if fam.kind != MetricKind::Untyped || !fam.samples.is_empty() {
                    self.issue(n, IssueKind::DuplicateType, raw, true);
                } else if let Some(k) = parsed {
                    fam.kind = k;
                } else {
                    self.issue(n, IssueKind::UnknownType, raw, true);
                }
            }
            Ok(Line::Sample(s)) => {
                if !(self.wanted)(&s.name, &s.labels, s.value) {
                    if self.families_of_dropped
                        && self.scrape.resolve(&s.name).is_none()
                        && self.room(n, raw, &s.name, false)
                    {
                        self.family_mut(&s.name);
                    }
                    return;
                }
                if !self.room(n, raw, &s.name, true) {
                    return;
                }
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::hash::Hash::hash(&(&s.name, &s.labels), &mut h);
                if !self.seen.insert(std::hash::Hasher::finish(&h)) {
                    self.issue(n, IssueKind::DuplicateSeries, raw, true);
                    return;
                }
                self.samples += 1;
                let exemplar = match s.exemplar {
                    Ok(e) => e,
                    Err(kind) => {
                        self.issue(n, kind, raw, false);
                        None
                    }
                };
                let i = match self.scrape.resolve(&s.name) {
                    Some(i) => i,
                    None => {
                        self.family_mut(&s.name);
                        self.scrape.index[&s.name]
                    }
                };
                self.scrape.families[i].samples.push(Sample {
                    name: s.name,
                    labels: s.labels,
                    value: s.value,
                    timestamp_ms: s.timestamp,
                    exemplar,
                });
            }
        }
    }

    fn finish(mut self) -> Scrape {
        for &i in &self.cut {
            self.scrape.families[i].samples = Vec::new();
        }
        if self.openmetrics {
            // OpenMetrics timestamps are seconds; keep one unit (ms) in `Sample`.
            for fam in &mut self.scrape.families {
                for s in &mut fam.samples {
                    s.timestamp_ms = s.timestamp_ms.map(|t| t * 1000.0);
                }
            }
        }
        self.scrape
    }
}

// === impl Scrape ===

impl Scrape {
    /// The format this exposition used, judging by `# EOF` / `# UNIT`.
    pub fn format(&self) -> Format {
        let om = self.eof || self.families.iter().any(|f| f.unit.is_some());
        if om {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    /// Index of the family a sample (or family) name belongs to: the exact name, or the name with
    /// a suffix stripped whose family's type allows that suffix.
    fn resolve(&self, name: &str) -> Option<usize> {
        if let Some(&i) = self.index.get(name) {
            return Some(i);
        }
        for suffix in [
            "_bucket", "_sum", "_count", "_total", "_created", "_gsum", "_gcount", "_info",
        ] {
            if let Some(base) = name.strip_suffix(suffix) {
                if let Some(&i) = self.index.get(base) {
                    if self.families[i].kind.suffixes().contains(&suffix) {
                        return Some(i);
                    }
                }
            }
        }
        None
    }

    /// The family `name` belongs to (`foo_total` finds an OpenMetrics counter `foo`).
    pub fn family(&self, name: &str) -> Option<&Family> {
        self.resolve(name).map(|i| &self.families[i])
    }

    /// Samples named exactly `name` (with suffix). For an OpenMetrics counter family `foo`,
    /// `samples("foo")` gives the `foo_total` samples.
    pub fn samples<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        let fam = self.family(name);
        let alias = match fam {
            Some(f) if f.kind == MetricKind::Counter && f.name == name => {
                let exact = f.samples.iter().any(|s| s.name == name);
                (!exact).then(|| format!("{name}_total"))
            }
            _ => None,
        };
        fam.into_iter()
            .flat_map(|f| f.samples.iter())
            .filter(move |s| s.name == name || alias.as_deref() == Some(s.name.as_str()))
    }

    /// Sum of a gauge or counter over all its label sets; `None` when it has no samples.
    /// NaN samples are left out (engines use NaN for "no data yet").
    pub fn sum(&self, name: &str) -> Option<f64> {
        let mut any = false;
        let total = self
            .samples(name)
            .filter(|s| !s.value.is_nan())
            .inspect(|_| any = true)
            .map(|s| s.value)
            .sum();
        any.then_some(total)
    }

    /// The histogram `name` per label set (without `le`); an error when it is too large to
    /// use ([`Oversized`]).
    pub fn histograms(&self, name: &str) -> Result<Vec<(Labels, HistogramSnapshot)>, Oversized> {
        self.family(name).map_or(Ok(Vec::new()), Family::histograms)
    }

    /// The histogram `name` merged over all its label sets (buckets with equal bounds added);
    /// `Ok(None)` when the page has none, an error when it is too large to use.
    pub fn histogram_checked(&self, name: &str) -> Result<Option<HistogramSnapshot>, Oversized> {
        self.family(name).map_or(Ok(None), Family::merged_histogram)
    }

    /// [`Scrape::histogram_checked`], with a histogram too large to use taken as absent.
    pub fn histogram(&self, name: &str) -> Option<HistogramSnapshot> {
        self.histogram_checked(name).ok().flatten()
    }
}
