//! `histograms.json`: every metric's whole distribution at the end of a run, next to
//! `summary.json`. A summary holds only percentiles, which cannot be combined; these can, so
//! `canaryd merge` builds the shards' union exactly as one process would have (issue 18).
//! Each histogram is its non-empty buckets: bounded by the range of values (a few thousand
//! buckets), never by the number of requests.

use canary_core::{Distribution, DistributionSnapshot};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file's name in a run folder.
pub const HISTOGRAMS_FILE: &str = "histograms.json";

/// The version of `histograms.json`'s layout.
pub const HISTOGRAMS_VERSION: u32 = 1;

/// `histograms.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Histograms {
    /// `HISTOGRAMS_VERSION`.
    pub version: u32,
    /// One entry per metric with at least one value, by `summary.json`'s name.
    pub metrics: BTreeMap<String, MetricHistogram>,
}

/// One metric's distribution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricHistogram {
    /// Its unit (`ms`, `tokens`, `tokens/s`).
    pub unit: String,
    /// The distribution.
    #[serde(flatten)]
    pub distribution: DistributionSnapshot,
}

/// `histograms.json` that could not be read or is not one.
#[derive(Debug, thiserror::Error)]
pub enum HistogramsError {
    /// Unreadable.
    #[error("reading {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not JSON of this layout.
    #[error("{}: not a histograms file", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// Another layout version.
    #[error("{}: version {found}, this canaryd reads {HISTOGRAMS_VERSION}", path.display())]
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u32,
    },
    /// A histogram that is not a distribution's.
    #[error("{}: metric {metric}: {why}", path.display())]
    Metric {
        /// The file.
        path: PathBuf,
        /// The metric.
        metric: String,
        /// Why (in the message, not a source: every reader shows it, chain or not).
        why: canary_core::SnapshotError,
    },
}

impl Histograms {
    /// The distributions of `agg`'s metrics that hold values.
    pub fn of(agg: &canary_core::Aggregator) -> Histograms {
        Histograms {
            version: HISTOGRAMS_VERSION,
            metrics: agg
                .distributions()
                .filter(|(_, _, d)| d.count() > 0)
                .map(|(name, unit, d)| {
                    let h = MetricHistogram {
                        unit: unit.to_string(),
                        distribution: d.snapshot(),
                    };
                    (name.to_string(), h)
                })
                .collect(),
        }
    }

    /// Reads `dir`'s `histograms.json`; `Ok(None)` when it has none.
    pub fn read(dir: &Path) -> Result<Option<Histograms>, HistogramsError> {
        let path = dir.join(HISTOGRAMS_FILE);
        let bytes = match canary_files::read_small_file(&path, crate::MAX_ARTIFACT_BYTES) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(HistogramsError::Io { path, source }),
        };
        let h: Histograms =
            serde_json::from_slice(&bytes).map_err(|source| HistogramsError::Parse {
                path: path.clone(),
                source,
            })?;
        if h.version != HISTOGRAMS_VERSION {
            return Err(HistogramsError::Version {
                path,
                found: h.version,
            });
        }
        Ok(Some(h))
    }

    /// Each metric's distribution, checked.
    pub fn distributions(
        &self,
        path: &Path,
    ) -> Result<BTreeMap<String, (String, Distribution)>, HistogramsError> {
        self.metrics
            .iter()
            .map(|(name, m)| {
                let d = Distribution::from_snapshot(&m.distribution).map_err(|why| {
                    HistogramsError::Metric {
                        path: path.to_path_buf(),
                        metric: name.clone(),
                        why,
                    }
                })?;
                Ok((name.clone(), (m.unit.clone(), d)))
            })
            .collect()
    }
}
