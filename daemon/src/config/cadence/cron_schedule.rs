//! When a cron expression fires, with a crontab's rule for its two day fields.
//!
//! A crontab line that restricts both the day of the month and the weekday fires on a day
//! matching *either* (`0 9 1 * 1`: the 1st of each month, and every Monday), as Vixie cron,
//! cronie, the BSDs' cron and POSIX do; the `cron` crate wants *both* (Mondays that are the
//! 1st). A 5-field expression that restricts both is therefore run as two of the crate's
//! schedules, one with each day field left `*`, taking whichever fires first.
//!
//! "Restricts" follows Vixie cron (the crontab of Debian, Red Hat and macOS), not POSIX: a day
//! field whose first character is `*` counts as unrestricted even with a step, so `0 9 */2 * 1`
//! is Mondays with an odd date there (both fields must match), and `1-31/2` is the way to say
//! "odd dates or Mondays". A line copied from such a crontab then fires on the same days.
//! 6- and 7-field expressions are the crate's own form and keep its rule (both must match).

use chrono::{DateTime, Utc};
use std::str::FromStr;

/// How a schedule's two day fields (day of the month, weekday) combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DayRule {
    /// At most one of them restricts the day: no question of combining.
    Single,
    /// Both restrict it and a day must match both: 6 or 7 fields, the crate's reading.
    Both,
    /// Both restrict it and a day matching either fires: 5 fields, a crontab's reading.
    Either,
}

impl DayRule {
    /// The rule of `expr` as the user wrote it (5 fields, or 6-7 with seconds first); for 5,
    /// before its weekdays are translated to names.
    pub fn of(expr: &str) -> DayRule {
        let f: Vec<&str> = expr.split_whitespace().collect();
        let (dom, dow) = match f.len() {
            5 => (f[2], f[4]),
            6 | 7 => (f[3], f[5]),
            _ => return DayRule::Single,
        };
        match (restricts(dom) && restricts(dow), f.len()) {
            (false, _) => DayRule::Single,
            (true, 5) => DayRule::Either,
            (true, _) => DayRule::Both,
        }
    }

    /// Said after the expression (logs, `check-config`) when both day fields restrict.
    pub fn describe(self) -> &'static str {
        match self {
            DayRule::Single => "",
            DayRule::Both => " (days matching both the day of the month and the weekday)",
            DayRule::Either => " (days matching the day of the month or the weekday)",
        }
    }
}

/// A cron expression's firings (UTC).
#[derive(Debug, Clone, PartialEq)]
pub struct CronSchedule {
    /// The crate's schedules whose firings are merged: one, or with [`DayRule::Either`] the
    /// expression with its weekday field `*` and the one with its day of the month `*`.
    parts: Vec<cron::Schedule>,
    rule: DayRule,
}

/// Whether a 5-field expression's day field restricts the day, as Vixie cron decides it: a
/// field starting with `*` does not, even `*/2` (and `?`, the crate's "no value", neither).
fn restricts(field: &str) -> bool {
    !field.starts_with(['*', '?'])
}

impl CronSchedule {
    /// The schedule of `full`, the expression in the crate's 6- or 7-field form, whose day
    /// fields combine by `rule` (see [`DayRule::of`]). Fails only on an expression the crate
    /// does not take.
    pub fn new(full: &str, rule: DayRule) -> Result<CronSchedule, cron::error::Error> {
        if rule != DayRule::Either {
            return Ok(CronSchedule {
                parts: vec![cron::Schedule::from_str(full)?],
                rule,
            });
        }
        // `sec min hour dom month dow`: one schedule with each day field left `*`.
        let f: Vec<&str> = full.split_whitespace().collect();
        let with = |i: usize| {
            let mut g = f.clone();
            g[i] = "*";
            cron::Schedule::from_str(&g.join(" "))
        };
        Ok(CronSchedule {
            parts: vec![with(5)?, with(3)?],
            rule: DayRule::Either,
        })
    }

    /// How its day fields combine.
    pub fn day_rule(&self) -> DayRule {
        self.rule
    }

    /// The first firing strictly after `t`; `None` when it never fires again (the crate
    /// searches up to the year 2100).
    pub fn after(&self, t: &DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.parts.iter().filter_map(|s| s.after(t).next()).min()
    }

    /// Its firings from now on, each once (a day matching both fields fires once).
    pub fn upcoming(&self) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        std::iter::successors(self.after(&Utc::now()), |t| self.after(t))
    }
}
