//! A wall-clock instant given as RFC 3339 (`2026-11-24T12:00:00Z`), as `--start-at` and a
//! workload's `start_at` take it: every shard of a replay starts its schedule there.

use canary_replay::StartAt;
use std::time::Duration;

/// Parses `text` as an RFC 3339 instant with an explicit offset (`Z` or `+01:00`): a
/// local time without one would mean different instants on hosts in different zones.
pub fn parse_rfc3339(text: &str) -> Result<i64, String> {
    let t = chrono::DateTime::parse_from_rfc3339(text.trim()).map_err(|e| {
        format!("expected an RFC 3339 instant such as 2026-11-24T12:00:00Z ({e}), found {text:?}")
    })?;
    t.timestamp_nanos_opt()
        .ok_or_else(|| format!("{text:?} is outside the years 1678 to 2262"))
}

/// The common start `text`, late by at most `max_late`.
pub fn start_at(text: &str, max_late: Duration) -> Result<StartAt, String> {
    Ok(StartAt {
        text: text.trim().to_string(),
        unix_ns: parse_rfc3339(text)?,
        max_late,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_with_an_offset_only() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01Z"), Ok(1_000_000_000));
        assert_eq!(
            parse_rfc3339("1970-01-01T01:00:01.5+01:00"),
            Ok(1_500_000_000)
        );
        for bad in ["1970-01-01T00:00:01", "tomorrow", "1970-01-01", ""] {
            let e = parse_rfc3339(bad).unwrap_err();
            assert!(e.contains("RFC 3339"), "{bad}: {e}");
        }
    }
}
