//! `summary.json` read tolerantly: the run's context and the sections a report shows, kept as
//! JSON where a report only displays them, typed where it computes with them.

use crate::error::{io, ReportError};
use serde_json::{Map, Value};
use std::path::Path;

/// What a report takes from `summary.json`.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// The whole document (an object).
    pub doc: Map<String, Value>,
}

impl Summary {
    /// Reads `path`; `Ok(None)` when there is no such file (a run whose process died before
    /// writing it).
    pub fn read(path: &Path) -> Result<Option<Summary>, ReportError> {
        let text = match crate::artifacts::read_json_file(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(path)(e)),
        };
        match serde_json::from_slice::<Value>(&text) {
            Ok(Value::Object(doc)) => Ok(Some(Summary { doc })),
            Ok(_) => Err(ReportError::Summary {
                path: path.to_path_buf(),
                what: "not a JSON object".into(),
            }),
            Err(e) => Err(ReportError::Summary {
                path: path.to_path_buf(),
                what: e.to_string(),
            }),
        }
    }

    /// A top-level section (`run`, `server`, `gpu`, `kernel`, `telemetry_sources`, …).
    pub fn section(&self, key: &str) -> Option<&Value> {
        self.doc.get(key).filter(|v| !v.is_null())
    }

    /// A number at a path of keys (`["goodput", "goodput"]`).
    pub fn number(&self, path: &[&str]) -> Option<f64> {
        self.at(path)?.as_f64()
    }

    /// A string at a path of keys.
    pub fn text(&self, path: &[&str]) -> Option<&str> {
        self.at(path)?.as_str()
    }

    /// The value at a path of keys.
    pub fn at(&self, path: &[&str]) -> Option<&Value> {
        let (first, rest) = path.split_first()?;
        let mut v = self.doc.get(*first)?;
        for k in rest {
            v = v.get(*k)?;
        }
        (!v.is_null()).then_some(v)
    }

    /// The run's id.
    pub fn run_id(&self) -> Option<&str> {
        self.text(&["run", "run_id"])
    }

    /// The SLOs goodput was judged against (aiperf syntax), when the run had any.
    pub fn goodput_slos(&self) -> Option<&str> {
        self.text(&["goodput", "slos"])
            .or_else(|| self.text(&["run", "goodput"]))
            .filter(|s| !s.trim().is_empty())
    }

    /// The `diagnosis` block (issue 19): `None` when the run has none, `Some(Err(why))`
    /// when it cannot be read.
    pub fn diagnosis(&self) -> Option<Result<super::Diagnosis, String>> {
        self.section("diagnosis").map(super::Diagnosis::from_value)
    }

    /// A sentence when the file's `schema_version` is newer than this canaryd writes (or is
    /// no version at all): keys change meaning between versions, so a newer canaryd's file may
    /// be misread. Read all the same, tolerantly, as `canaryd merge` would not; `path` names it.
    pub fn newer_schema(&self, path: &Path) -> Option<String> {
        let v = self.doc.get("schema_version")?;
        let known = canary_core::SUMMARY_SCHEMA_VERSION;
        match v.as_u64() {
            Some(n) if n <= u64::from(known) => None,
            Some(n) => Some(format!(
                "{}: summary.json has schema_version {n}, newer than this canaryd reads \
                 ({known}): a newer version's fields may be misread here",
                path.display()
            )),
            None => Some(format!(
                "{}: summary.json's schema_version is {v}, not a version this canaryd knows \
                 (it reads {known}): its fields may be misread here",
                path.display()
            )),
        }
    }

    /// Wall-clock start of the run, ns since the Unix epoch.
    pub fn started_unix_ns(&self) -> Option<u64> {
        self.at(&["started_unix_ns"])?.as_u64()
    }
}

/// A merged run's `merged` block (`canaryd merge`): where each shard sits on the merged time
/// axis, and how far that placement can be off.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Merged {
    /// Each shard (`1/3`) with its t0 after the earliest shard's, ms (`inputs[].shard`,
    /// `inputs[].t0_offset_ms`): a shard's records are on its own t0, so its times shift by it.
    pub offsets: Vec<(String, f64)>,
    /// How far any two shards' placement can be off, ms (`alignment.bound_ms`); `None` when
    /// a clock has no bound.
    pub bound_ms: Option<f64>,
    /// Why there is no bound (`alignment.unbounded_because`).
    pub unbounded_because: Option<String>,
    /// What the placement rests on (`alignment.basis`: one host's monotonic clock, or the
    /// hosts' wall clocks).
    pub basis: Option<String>,
}

impl Merged {
    /// The offset of `shard`, ms.
    pub fn offset(&self, shard: &str) -> Option<f64> {
        self.offsets.iter().find(|(s, _)| s == shard).map(|o| o.1)
    }
}

impl Summary {
    /// The `merged` block, when the run is `canaryd merge`'s.
    pub fn merged(&self) -> Option<Merged> {
        let m = self.section("merged")?;
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        let offsets = m
            .get("inputs")
            .and_then(Value::as_array)
            .map(|inputs| {
                inputs
                    .iter()
                    .filter_map(|i| {
                        let shard = i.get("shard")?.as_str()?.to_string();
                        Some((shard, i.get("t0_offset_ms")?.as_f64()?))
                    })
                    .filter(|(_, o)| o.is_finite())
                    .collect()
            })
            .unwrap_or_default();
        let alignment = m.get("alignment");
        Some(Merged {
            offsets,
            bound_ms: alignment
                .and_then(|a| a.get("bound_ms")?.as_f64())
                .filter(|b| b.is_finite()),
            unbounded_because: text(alignment.and_then(|a| a.get("unbounded_because"))),
            basis: text(alignment.and_then(|a| a.get("basis"))),
        })
    }
}

/// A UTC date and time (`2026-11-24 09:49:40 UTC`) for Unix ns: civil-from-days (Howard
/// Hinnant's algorithm), so no date library is needed for one label.
pub fn utc(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        // date -u -d @1795513780
        assert_eq!(utc(1_795_513_780_565_227_025), "2026-11-24 09:49:40 UTC");
        assert_eq!(utc(951_782_400_000_000_000), "2000-02-29 00:00:00 UTC");
    }

    #[test]
    fn paths_and_missing_sections() {
        let s = Summary {
            doc: serde_json::from_str(
                r#"{"run":{"run_id":"r1","goodput":""},"goodput":null,"server":{"engine":"vllm_v1"}}"#,
            )
            .unwrap(),
        };
        assert_eq!(s.run_id(), Some("r1"));
        assert_eq!(s.goodput_slos(), None);
        assert!(s.section("goodput").is_none());
        assert_eq!(s.text(&["server", "engine"]), Some("vllm_v1"));
        assert_eq!(s.number(&["server", "nothing"]), None);
    }
}
