//! Human-readable durations: `250ms`, `90s`, `15m`, `1h30m`, `2.5s`; a bare number is seconds.

use std::time::Duration;

/// The longest duration [`parse`] accepts: 100 years. Anything longer is a typo, and it keeps
/// `Instant + d` and `SystemTime + d` far from overflowing (`1e19` seconds would panic there).
pub const MAX: Duration = Duration::from_secs(100 * 365 * 86400);

/// The longest period, jitter, timeout or interval the daemon's config accepts: one year.
pub const MAX_PERIOD: Duration = Duration::from_secs(365 * 86400);

/// [`parse`], refusing zero (a timeout or interval of nothing).
pub fn parse_positive(s: &str) -> Result<Duration, String> {
    match parse(s)? {
        d if d.is_zero() => Err("must be above zero".into()),
        d => Ok(d),
    }
}

/// [`parse_at_most`] a year, refusing widths under [`canary_core::Timeslices::MIN_WIDTH`]: a
/// timeslice's width (`--slice-duration`, `slice_duration`).
pub fn parse_slice_width(s: &str) -> Result<Duration, String> {
    match parse_at_most(s, MAX_PERIOD, "a year (\"365d\")")? {
        d if d < canary_core::Timeslices::MIN_WIDTH => Err(format!(
            "{:?} is too narrow for a timeslice: at least 1ms",
            s.trim()
        )),
        d => Ok(d),
    }
}

/// Parses a duration of at most `MAX`, naming what was wrong on failure.
pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = s.parse::<f64>() {
        return secs_to_duration(secs, s);
    }
    let mut total = 0.0;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let unit_end = rest[num_end..]
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .map_or(rest.len(), |i| num_end + i);
        let (num, unit) = (&rest[..num_end], rest[num_end..unit_end].trim());
        let value: f64 = num
            .parse()
            .map_err(|_| format!("invalid duration {s:?}: expected a number before {unit:?}"))?;
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hours" => 3600.0,
            "d" | "days" => 86400.0,
            _ => {
                return Err(format!(
                    "invalid duration {s:?}: unknown unit {unit:?} (use ms, s, m, h or d)"
                ))
            }
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    secs_to_duration(total, s)
}

/// [`parse_at_most`] a year ([`MAX_PERIOD`]): a pause between runs, as the daemon's own
/// periods, jitters, timeouts and cooldowns (`sweep --cooldown`, whose 100 years hung the
/// sweep after its first point).
pub fn parse_period(s: &str) -> Result<Duration, String> {
    parse_at_most(s, MAX_PERIOD, "a year (\"365d\")")
}

/// Parses a duration of at most `max`; `what` names the bound in the message ("1 year").
pub fn parse_at_most(s: &str, max: Duration, what: &str) -> Result<Duration, String> {
    let d = parse(s)?;
    if d > max {
        return Err(format!(
            "duration {:?} is too long: at most {what}",
            s.trim()
        ));
    }
    Ok(d)
}

fn secs_to_duration(secs: f64, s: &str) -> Result<Duration, String> {
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!(
            "invalid duration {s:?}: must be a non-negative number"
        ));
    }
    // Compared as seconds first: `from_secs_f64` panics beyond about 584 billion years.
    if secs > MAX.as_secs_f64() {
        return Err(format!(
            "invalid duration {s:?}: too long (at most 100 years)"
        ));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("2.5").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
    }

    #[test]
    fn rejects_garbage_with_reason() {
        assert!(parse("").is_err());
        assert!(parse("-3s").unwrap_err().contains("-3s"));
        assert!(parse("10 fortnights").unwrap_err().contains("fortnights"));
        assert!(parse("s").is_err());
    }

    #[test]
    fn absurd_durations_are_errors_not_panics() {
        for s in ["1e20", "1e19", "1e300", "101y", "36600d", "9999999999999h"] {
            let e = parse(s).unwrap_err();
            assert!(e.contains(s), "{s}: {e}");
        }
        assert_eq!(parse("36500d").unwrap(), MAX);
        let e = parse_at_most("366d", MAX_PERIOD, "1 year").unwrap_err();
        assert_eq!(e, "duration \"366d\" is too long: at most 1 year");
        assert_eq!(
            parse_at_most("365d", MAX_PERIOD, "1 year").unwrap(),
            MAX_PERIOD
        );
        assert_eq!(parse_period("365d").unwrap(), MAX_PERIOD);
        let e = parse_period("36500d").unwrap_err();
        assert_eq!(
            e,
            "duration \"36500d\" is too long: at most a year (\"365d\")"
        );
    }
}
