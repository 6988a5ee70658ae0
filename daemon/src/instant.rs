//! A wall-clock instant given as RFC 3339 (`2026-11-24T12:00:00Z`), as `--start-at` and a
//! workload's `start_at` take it: every shard of a replay starts its schedule there. A daemon
//! workload's runs start on the grid `start_at + k × every` ([`next_grid_instant`]), so that
//! daemons on several hosts given the same `start_at` and period start each run together.

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

/// The first instant of the grid `start + k × period` (k = 0, 1, …) at or after `from`, all
/// in Unix ns: `start` itself when `from` is before it, `from` when it lies on the grid.
/// `None` for a zero period or past the year 2262.
pub fn next_grid_instant(start: i64, period: Duration, from: i64) -> Option<i64> {
    let p = i128::try_from(period.as_nanos()).ok().filter(|p| *p > 0)?;
    let behind = i128::from(from) - i128::from(start);
    // Whole periods to reach `from`, rounded up.
    let k = if behind <= 0 { 0 } else { (behind + p - 1) / p };
    i64::try_from(i128::from(start) + k * p).ok()
}

/// `unix_ns` as RFC 3339 in UTC with nanoseconds when it has them (`2026-11-24T12:00:02Z`).
pub fn rfc3339(unix_ns: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(unix_ns)
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// A wall-clock reading as Unix ns (the largest past the year 2262).
pub fn unix_ns(t: std::time::SystemTime) -> i64 {
    chrono::DateTime::<chrono::Utc>::from(t)
        .timestamp_nanos_opt()
        .unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_795_518_000 * 1_000_000_000;

    #[test]
    fn the_grid_is_start_plus_whole_periods_at_or_after_now() {
        let p = Duration::from_secs(900);
        let p_ns = 900 * 1_000_000_000;
        // Before start_at: start_at itself, however far before.
        assert_eq!(next_grid_instant(S, p, S - 1), Some(S));
        assert_eq!(next_grid_instant(S, p, S - 10 * p_ns), Some(S));
        // Exactly on a grid point: that point, not the next.
        assert_eq!(next_grid_instant(S, p, S), Some(S));
        assert_eq!(next_grid_instant(S, p, S + 3 * p_ns), Some(S + 3 * p_ns));
        // Between grid points: the next one.
        assert_eq!(next_grid_instant(S, p, S + 1), Some(S + p_ns));
        assert_eq!(
            next_grid_instant(S, p, S + 3 * p_ns + 1),
            Some(S + 4 * p_ns)
        );
        assert_eq!(
            next_grid_instant(S, p, S + 4 * p_ns - 1),
            Some(S + 4 * p_ns)
        );
        // A period that does not divide a second stays exact (no float rounding).
        let odd = Duration::from_nanos(333_333_333);
        assert_eq!(
            next_grid_instant(S, odd, S + 1_000_000_000),
            Some(S + 4 * 333_333_333)
        );
        assert_eq!(next_grid_instant(S, Duration::ZERO, S + 1), None);
        assert_eq!(next_grid_instant(i64::MAX - 1, p, i64::MAX), None);
    }

    #[test]
    fn grid_instants_print_as_rfc3339_and_read_back() {
        let g = S + 1_500_000_000;
        let text = rfc3339(g);
        assert_eq!(text, "2026-11-24T11:00:01.500Z");
        assert_eq!(parse_rfc3339(&text), Ok(g));
        assert_eq!(rfc3339(S), "2026-11-24T11:00:00Z");
    }

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
