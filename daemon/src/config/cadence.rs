//! When a workload runs: `every = "15m"` or a cron expression, with optional jitter.
//!
//! The next run is always computed from *now* and the previous run, never by replaying the
//! missed ticks: after a suspend, or a clock jump, a workload runs once and then resumes its
//! rhythm instead of firing every missed schedule as a burst. Waiting is done in short slices
//! against the wall clock, because the monotonic clock stops while a machine is suspended.

mod cron_schedule;

pub use cron_schedule::{CronSchedule, DayRule};
use std::str::FromStr;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// A workload's schedule.
#[derive(Debug, Clone, PartialEq)]
pub enum Cadence {
    /// A run every `period` (the first one at start, or a period after the last run's
    /// due time when the daemon restarts).
    Every {
        /// Time between runs.
        period: Duration,
        /// Up to this much random delay before each run.
        jitter: Option<Duration>,
    },
    /// Runs at the times a cron expression matches (UTC).
    Cron {
        /// The expression with its seconds field (`0 */15 * * * *`).
        expr: String,
        /// Its firings: with a crontab's rule for the two day fields when written with 5.
        schedule: CronSchedule,
        /// Up to this much random delay before each run.
        jitter: Option<Duration>,
    },
}

/// What a tick does when it finds the workload's previous run still going (`on_overrun`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnOverrun {
    /// The due run is skipped (counted in `canaryd_skips_total{reason}`); the next one is
    /// the one after.
    #[default]
    Skip,
    /// The due run starts as soon as the previous one ends, late (its `start_late_ms`),
    /// when that is before the next due time; otherwise it is skipped as with `skip`. Never
    /// more than one waits, and runs never overlap; the due times stay where the cadence
    /// puts them.
    StartWhenFree,
}

/// A cron field's name and the values the `cron` crate takes in it.
struct CronField {
    name: &'static str,
    plural: &'static str,
    min: u32,
    max: u32,
    allowed: &'static str,
}

/// The fields of a 6- or 7-field expression, in order (5 fields lack the first).
const CRON_FIELDS: [CronField; 7] = [
    CronField {
        name: "second",
        plural: "seconds",
        min: 0,
        max: 59,
        allowed: "0 to 59",
    },
    CronField {
        name: "minute",
        plural: "minutes",
        min: 0,
        max: 59,
        allowed: "0 to 59",
    },
    CronField {
        name: "hour",
        plural: "hours",
        min: 0,
        max: 23,
        allowed: "0 to 23",
    },
    CronField {
        name: "day-of-month",
        plural: "days of the month",
        min: 1,
        max: 31,
        allowed: "1 to 31",
    },
    CronField {
        name: "month",
        plural: "months",
        min: 1,
        max: 12,
        allowed: "1 to 12 (or JAN to DEC)",
    },
    // The `cron` crate's numbering, not classic cron's 0-6: 1 is Sunday.
    CronField {
        name: "weekday",
        plural: "weekdays",
        min: 1,
        max: 7,
        allowed: "1 to 7, 1 being Sunday (or SUN to SAT)",
    },
    CronField {
        name: "year",
        plural: "years",
        min: 1970,
        max: 2100,
        allowed: "1970 to 2100",
    },
];

/// Weekday names in classic cron's numbering: 0 is Sunday (and so is 7).
const WEEKDAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// A 5-field expression's weekday field, read as classic cron reads it (0 to 7, 0 and 7 being
/// Sunday, or `SUN` to `SAT`), written as the day names the `cron` crate takes: the crate
/// counts 1 to 7 from Sunday (Quartz's numbering), so a crontab's `1-5` (Monday to Friday)
/// given to it as written would run Sunday to Thursday. `*` and `?` pass as they are.
fn classic_weekdays(field: &str) -> Result<String, String> {
    if field == "*" || field == "?" {
        return Ok(field.to_string());
    }
    let day = |v: &str| -> Result<usize, String> {
        if v.is_empty() {
            return Err("has an empty value".into());
        }
        if let Some(i) = WEEKDAY_NAMES.iter().position(|n| n.eq_ignore_ascii_case(v)) {
            return Ok(i);
        }
        match v.parse::<usize>() {
            Ok(n) if n <= 7 => Ok(n),
            _ => Err(format!(
                "holds {v}; weekdays are 0 to 7, 0 and 7 being Sunday (or SUN to SAT)"
            )),
        }
    };
    let mut days = [false; 7];
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => match s.parse::<usize>() {
                Ok(s) if s > 0 => (r, Some(s)),
                _ => {
                    return Err(format!(
                        "has a step {s:?} that is not a whole number over 0"
                    ))
                }
            },
            None => (item, None),
        };
        let (low, high) = match range.split_once('-') {
            _ if range == "*" => (0, 6),
            Some((a, b)) => (day(a)?, day(b)?),
            // `3/2` runs from 3 to the end of the week, as in a crontab.
            None if step.is_some() => (day(range)?, 6),
            None => {
                let d = day(range)?;
                (d, d)
            }
        };
        if low > high {
            return Err(format!("has a range {range:?} that runs backwards"));
        }
        for d in (low..=high).step_by(step.unwrap_or(1)) {
            days[d % 7] = true;
        }
    }
    let names: Vec<&str> = (0..7)
        .filter(|&d| days[d])
        .map(|d| WEEKDAY_NAMES[d])
        .collect();
    Ok(names.join(","))
}

/// The first number of a cron `field` (its values and range ends; not its steps, `/n`) outside
/// what `range` takes, as written.
fn out_of_range<'f>(field: &'f str, range: &CronField) -> Option<&'f str> {
    field.split(',').find_map(|item| {
        let values = item.split('/').next().unwrap_or_default();
        values.split('-').find(|v| {
            !v.is_empty()
                && v.bytes().all(|b| b.is_ascii_digit())
                && v.parse::<u32>()
                    .map_or(true, |n| n < range.min || n > range.max)
        })
    })
}

/// The cron crate's complaint about `full` (the user's `expr`, with a seconds field put
/// before 5 fields) without what it echoes: the expression in that form, which the user did
/// not write (`0 61 * * * *`), and a caret under it. A syntax error that says nothing more
/// is given the caret's column in `expr`.
fn crate_words(e: &cron::error::Error, full: &str, expr: &str) -> String {
    let text = e.to_string();
    let mut lines = text.lines();
    let (echo, caret) = (lines.next().unwrap_or_default(), lines.next());
    let Some(caret) = caret.filter(|_| echo == full) else {
        return text.trim().to_string();
    };
    let why: Vec<&str> = lines.map(str::trim).filter(|l| !l.is_empty()).collect();
    if !why.is_empty() {
        return why.join(" ");
    }
    match caret.find('^').and_then(|at| column_in(at, full, expr)) {
        Some(column) => format!("cannot be read from column {column} on"),
        None => "cannot be read".into(),
    }
}

/// Each whitespace-separated field of `s` with its byte offset.
fn field_spans(s: &str) -> Vec<(usize, &str)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices().chain(std::iter::once((s.len(), ' '))) {
        match (start, c.is_whitespace()) {
            (None, false) => start = Some(i),
            (Some(st), true) => {
                spans.push((st, &s[st..i]));
                start = None;
            }
            _ => {}
        }
    }
    spans
}

/// The column (from 1, in characters) in `expr`, as the user wrote it, of byte `at` of `full`
/// (`expr` normalised: single spaces, a seconds field put before 5 fields, the weekdays
/// rewritten as names). Mapped field by field: inside a field written as it is in `full`, the
/// same character of it; else the start of the field. `None` when `at` is in the seconds
/// field `full` added.
fn column_in(at: usize, full: &str, expr: &str) -> Option<usize> {
    let (full_fields, expr_fields) = (field_spans(full), field_spans(expr));
    let added = full_fields.len().checked_sub(expr_fields.len())?;
    // The field holding `at`, or the one after the gap it falls in, or the last.
    let k = full_fields
        .iter()
        .position(|&(start, f)| at < start + f.len())
        .unwrap_or(full_fields.len().saturating_sub(1));
    let (full_start, full_field) = *full_fields.get(k)?;
    let (expr_start, expr_field) = *expr_fields.get(k.checked_sub(added)?)?;
    let within = at.saturating_sub(full_start);
    let byte = match full_field == expr_field && within <= expr_field.len() {
        true => expr_start + within,
        false => expr_start,
    };
    Some(expr[..byte].chars().count() + 1)
}

impl Cadence {
    /// A cron cadence. Five fields (`*/15 * * * *`) are read as a crontab line: minutes
    /// first, a seconds field of 0, weekdays 0 to 7, and a day matching either day field when
    /// both restrict it ([`DayRule::Either`]). Six or seven fields are passed to the `cron`
    /// crate as they are, with its numbering and its rule (a day must match both).
    pub fn cron(expr: &str, jitter: Option<Duration>) -> Result<Cadence, String> {
        let fields = expr.split_whitespace().count();
        let full = match fields {
            5 => {
                let mut parts: Vec<String> = expr.split_whitespace().map(str::to_string).collect();
                parts[4] = classic_weekdays(&parts[4]).map_err(|why| {
                    format!("invalid cron expression {expr:?}: the weekday field {why}")
                })?;
                format!("0 {}", parts.join(" "))
            }
            6 | 7 => expr.trim().to_string(),
            n => {
                return Err(format!(
                "invalid cron expression {expr:?}: expected 5 fields (min hour day month weekday) \
                     or 6-7 with seconds, found {n}"
            ))
            }
        };
        // `full`'s fields from the seconds' on (the 0 put before 5 fields is in range).
        for (field, range) in full.split_whitespace().zip(CRON_FIELDS.iter()) {
            if let Some(n) = out_of_range(field, range) {
                return Err(format!(
                    "invalid cron expression {expr:?}: the {} field holds {n}; {} are {}",
                    range.name, range.plural, range.allowed
                ));
            }
        }
        // The whole expression first: the crate's complaints point into it as the user wrote it.
        let schedule = cron::Schedule::from_str(&full)
            .and_then(|_| CronSchedule::new(&full, DayRule::of(expr)))
            .map_err(|e| {
                format!(
                    "invalid cron expression {expr:?}: {}",
                    crate_words(&e, &full, expr)
                )
            })?;
        // `0 0 31 2 *` parses but matches no date (the crate searches up to 2100): a workload
        // that would silently never run.
        if schedule.upcoming().next().is_none() {
            return Err(format!(
                "cron expression {expr:?} never fires: no date from now on matches it"
            ));
        }
        Ok(Cadence::Cron {
            expr: full,
            schedule,
            jitter,
        })
    }

    /// The shortest time between two runs: the period, or for cron the shortest gap between
    /// its next [`CRON_GAPS_CHECKED`] firings (`None` when it fires once at most). Jitter must
    /// stay below it, or a run lands past the next one's due time.
    pub fn shortest_gap(&self) -> Option<Duration> {
        match self {
            Cadence::Every { period, .. } => Some(*period),
            Cadence::Cron { schedule, .. } => {
                let times: Vec<_> = schedule.upcoming().take(CRON_GAPS_CHECKED + 1).collect();
                times
                    .windows(2)
                    .filter_map(|w| (w[1] - w[0]).to_std().ok())
                    .min()
            }
        }
    }

    fn jitter(&self) -> Option<Duration> {
        match self {
            Cadence::Every { jitter, .. } | Cadence::Cron { jitter, .. } => *jitter,
        }
    }

    /// When the next run is due (before jitter), given the previous scheduled time. A time in
    /// the past is never returned twice in a row: at most one run catches up, now.
    pub fn next_due(&self, now: SystemTime, previous: Option<SystemTime>) -> SystemTime {
        match self {
            // Never more than a period ahead either: after the clock steps back, the previous
            // run's time lies in the future and must not hold the next one back.
            Cadence::Every { period, .. } => match previous {
                None => now,
                Some(prev) => later(prev, *period).clamp(now, later(now, *period)),
            },
            Cadence::Cron { schedule, .. } => {
                let after = |t: SystemTime| schedule.after(&t.into()).map(SystemTime::from);
                // From now, so a missed tick is not retried; and after the clock steps back,
                // not from the previous tick, which now lies ahead (an hour's step, an hour
                // without runs). Yet never the previous tick again, when the step was shorter
                // than the gap to it.
                let next = match after(now) {
                    Some(next) if Some(next) == previous => after(next),
                    next => next,
                };
                // An expression that never matches again (a past year): park far ahead.
                next.unwrap_or(later(now, PARK))
            }
        }
    }

    /// A human description for logs and the status API.
    pub fn describe(&self) -> String {
        let j = self
            .jitter()
            .map(|j| format!(" (jitter {})", human(j)))
            .unwrap_or_default();
        match self {
            Cadence::Every { period, .. } => format!("every {}{j}", human(*period)),
            Cadence::Cron { expr, schedule, .. } => {
                let days = schedule.day_rule().describe();
                format!("cron {expr:?} UTC{days}{j}")
            }
        }
    }
}

/// With `start_at`, a workload's runs start on a grid anchored there: `start_at + k × every`,
/// or the cron expression's firings from `start_at` on (cron firings are already wall-clock
/// instants, the same on every host). Each run is launched [`Cadence::grid_lead`] before its
/// grid instant, to load its trace and connect, and its schedule starts at the instant itself.
impl Cadence {
    /// The first grid instant at or after `from` (Unix ns) of the grid anchored at `start`;
    /// `None` when there is none (a cron expression that never fires again).
    pub fn next_on_grid(&self, start: i64, from: i64) -> Option<i64> {
        match self {
            Cadence::Every { period, .. } => {
                crate::instant::next_grid_instant(start, *period, from)
            }
            Cadence::Cron { schedule, .. } => {
                // `after` is strict: from one ns before, so an instant on a firing is kept.
                let from = chrono::DateTime::from_timestamp_nanos(start.max(from) - 1);
                schedule.after(&from)?.timestamp_nanos_opt()
            }
        }
    }

    /// How long before its grid instant a run is launched: half the shortest gap between
    /// runs, at most [`GRID_LEAD_MAX`]. A grid instant closer than that when the scheduler
    /// looks is missed: the run goes to the next one.
    pub fn grid_lead(&self) -> Duration {
        self.shortest_gap()
            .map_or(GRID_LEAD_MAX, |g| (g / 2).min(GRID_LEAD_MAX))
    }
}

/// The most a grid run is launched ahead of its instant.
pub const GRID_LEAD_MAX: Duration = Duration::from_secs(30);

/// What the schedules read the wall clock with: `SystemTime::now`, or in tests a clock they
/// can step back.
pub type WallClock = fn() -> SystemTime;

/// Waits until the wall clock reads `due`, re-reading it at least every few seconds (suspend,
/// clock steps); `None` when `stop` fires first.
pub async fn wait_until(due: SystemTime, wall: WallClock, stop: &CancellationToken) -> Option<()> {
    loop {
        let left = match due.duration_since(wall()) {
            Ok(left) if !left.is_zero() => left,
            _ => return (!stop.is_cancelled()).then_some(()),
        };
        tokio::select! {
            _ = tokio::time::sleep(left.min(SLICE)) => {}
            _ = stop.cancelled() => return None,
        }
    }
}

/// `15m`, `2h`, `90s`, `1.5s`: the largest unit that divides the duration.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match (s, d.subsec_nanos()) {
        (0, _) | (_, 1..) => format!("{d:?}"),
        (s, 0) if s % 86400 == 0 => format!("{}d", s / 86400),
        (s, 0) if s % 3600 == 0 => format!("{}h", s / 3600),
        (s, 0) if s % 60 == 0 => format!("{}m", s / 60),
        (s, _) => format!("{s}s"),
    }
}

/// How many upcoming cron firings [`Cadence::shortest_gap`] looks at: enough to cover a
/// week of hourly runs, or a weekday-only daily schedule several times over.
pub const CRON_GAPS_CHECKED: usize = 200;

/// Yields the moments a workload is due.
pub struct Ticker {
    cadence: Cadence,
    previous: Option<SystemTime>,
    wall: WallClock,
}

/// How far ahead a schedule that never fires again (or would overflow the clock) is parked.
const PARK: Duration = Duration::from_secs(365 * 86400);

/// `t + d`, never panicking: a sum beyond what `SystemTime` holds becomes `t` + a year, and
/// beyond that `t` itself. Config durations are bounded (a year), so this is a last guard
/// for a `Cadence` built in code.
fn later(t: SystemTime, d: Duration) -> SystemTime {
    t.checked_add(d)
        .or_else(|| t.checked_add(PARK))
        .unwrap_or(t)
}

/// Longest single sleep: the wall clock is re-read at least this often (suspend, clock steps).
const SLICE: Duration = Duration::from_secs(5);

impl Ticker {
    /// A ticker whose next tick follows `cadence` from `previous` (its last due time, kept
    /// across config reloads) or, without one, from now as `wall` reads it.
    pub fn resume(cadence: Cadence, previous: Option<SystemTime>, wall: WallClock) -> Ticker {
        Ticker {
            cadence,
            previous,
            wall,
        }
    }

    /// The due time (before jitter) of the last tick.
    pub fn previous(&self) -> Option<SystemTime> {
        self.previous
    }

    /// Waits for the next tick (jitter included); `None` when `stop` fires first.
    pub async fn tick(&mut self, stop: &CancellationToken) -> Option<()> {
        let due = self.cadence.next_due((self.wall)(), self.previous);
        self.previous = Some(due);
        let jitter = self.cadence.jitter().map_or(Duration::ZERO, random_below);
        let mut due = later(due, jitter);
        loop {
            let now = (self.wall)();
            let mut left = match due.duration_since(now) {
                Ok(left) if !left.is_zero() => left,
                _ => return (!stop.is_cancelled()).then_some(()),
            };
            if let Cadence::Every { period, .. } = &self.cadence {
                // The clock stepped back while we waited: wait one period from now instead.
                let span = period.saturating_add(jitter);
                if left > span {
                    due = later(now, span);
                    self.previous = Some(later(now, *period));
                    left = span;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(left.min(SLICE)) => {}
                _ = stop.cancelled() => return None,
            }
        }
    }
}

/// A uniformly random duration in `[0, max)`, from the standard library's random hasher keys.
fn random_below(max: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(max.as_nanos() as u64);
    let r = h.finish() as f64 / u64::MAX as f64;
    max.mul_f64(r.min(0.999_999))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_runs_follow_every_from_start_at_or_the_cron_firings_after_it() {
        const S: i64 = 1_795_518_000 * 1_000_000_000; // 2026-11-24T11:00:00Z
        let every = Cadence::Every {
            period: Duration::from_secs(600),
            jitter: None,
        };
        assert_eq!(every.next_on_grid(S, S - 5), Some(S));
        assert_eq!(every.next_on_grid(S, S + 1), Some(S + 600_000_000_000));
        assert_eq!(every.grid_lead(), GRID_LEAD_MAX);
        let short = Cadence::Every {
            period: Duration::from_secs(2),
            jitter: None,
        };
        assert_eq!(short.grid_lead(), Duration::from_secs(1));
        // Cron: its own firings, none before start_at; one exactly on from is kept.
        let quarter = Cadence::cron("*/15 * * * *", None).unwrap();
        let q = 900_000_000_000;
        assert_eq!(quarter.next_on_grid(S, S - 3 * q), Some(S));
        assert_eq!(quarter.next_on_grid(S, S + q), Some(S + q));
        assert_eq!(quarter.next_on_grid(S + 7, S), Some(S + q));
    }

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn every_runs_at_start_then_each_period() {
        let c = Cadence::Every {
            period: Duration::from_secs(900),
            jitter: None,
        };
        assert_eq!(c.next_due(t(1000), None), t(1000));
        assert_eq!(c.next_due(t(1001), Some(t(1000))), t(1900));
    }

    #[test]
    fn a_suspend_gives_one_catch_up_run_not_a_burst() {
        let c = Cadence::Every {
            period: Duration::from_secs(60),
            jitter: None,
        };
        // Asleep for an hour: due at once, and the following tick is a full period later.
        let resumed = t(1000 + 3600);
        let due = c.next_due(resumed, Some(t(1000)));
        assert_eq!(due, resumed);
        assert_eq!(
            c.next_due(resumed, Some(due)),
            resumed + Duration::from_secs(60)
        );

        let c = Cadence::cron("*/15 * * * *", None).unwrap();
        // 00:00 was the last tick; the machine wakes at 05:07: next is 05:15, once.
        let due = c.next_due(t(5 * 3600 + 7 * 60), Some(t(0)));
        assert_eq!(due, t(5 * 3600 + 15 * 60));
    }

    #[test]
    fn a_clock_stepped_back_does_not_hold_runs_back() {
        let c = Cadence::Every {
            period: Duration::from_secs(60),
            jitter: None,
        };
        // The previous run is "at" 10:00 but the clock now reads 09:00.
        let due = c.next_due(t(9 * 3600), Some(t(10 * 3600)));
        assert_eq!(due, t(9 * 3600 + 60));
    }

    #[test]
    fn a_cron_goes_on_from_now_after_the_clock_steps_back() {
        let c = Cadence::cron("*/15 * * * *", None).unwrap();
        // The 10:00 run went, then the clock stepped back to 09:00: next is 09:15, not 10:15.
        assert_eq!(
            c.next_due(t(9 * 3600), Some(t(10 * 3600))),
            t(9 * 3600 + 900)
        );
        // Back 5 minutes, to 09:55: 10:00 lies ahead again but just ran; next is 10:15.
        assert_eq!(
            c.next_due(t(10 * 3600 - 300), Some(t(10 * 3600))),
            t(10 * 3600 + 900)
        );
    }

    #[test]
    fn cron_takes_five_or_six_fields_and_explains_errors() {
        let c = Cadence::cron("0 3 * * *", None).unwrap();
        assert_eq!(c.next_due(t(0), None), t(3 * 3600));
        let c = Cadence::cron("30 0 3 * * *", None).unwrap();
        assert_eq!(c.next_due(t(0), None), t(3 * 3600 + 30));
        assert!(Cadence::cron("* *", None).unwrap_err().contains("5 fields"));
        assert!(Cadence::cron("61 * * * *", None)
            .unwrap_err()
            .contains("61"));
    }

    // "61 * * * *" said `0 61 * * * *`, a caret line, and "Minutes must be less than 59", though
    // 59 is taken (audit L4): the cron crate's words. Each field's range is ours now.
    #[test]
    fn a_cron_value_out_of_range_names_its_field_and_range() {
        for (expr, says) in [
            (
                "61 * * * *",
                "the minute field holds 61; minutes are 0 to 59",
            ),
            ("0 24 * * *", "the hour field holds 24; hours are 0 to 23"),
            (
                "0 3 0 * *",
                "the day-of-month field holds 0; days of the month are 1 to 31",
            ),
            ("0 3 1-32 * *", "the day-of-month field holds 32"),
            (
                "0 3 * 13 *",
                "the month field holds 13; months are 1 to 12 (or JAN to DEC)",
            ),
            (
                "0 3 * * 8",
                "the weekday field holds 8; weekdays are 0 to 7, 0 and 7 being Sunday",
            ),
            // Six fields are the crate's own form, and its numbering (Quartz's).
            (
                "0 0 3 * * 0",
                "the weekday field holds 0; weekdays are 1 to 7, 1 being Sunday",
            ),
            (
                "0,60 * * * * *",
                "the second field holds 60; seconds are 0 to 59",
            ),
            (
                "0 0 0 1 1 * 2200",
                "the year field holds 2200; years are 1970 to 2100",
            ),
        ] {
            let e = Cadence::cron(expr, None).unwrap_err();
            assert_eq!(
                e.split_once(": ").map(|(head, _)| head),
                Some(format!("invalid cron expression {expr:?}").as_str()),
                "{e}"
            );
            assert!(e.contains(says), "{expr}: {e}");
            assert!(!e.contains('\n') && !e.contains('^'), "{e}");
        }
        // Every bound itself is taken; steps are not values.
        for expr in [
            "59 23 31 12 *",
            "0 0 1 1 7",
            "0 0 1 1 0",
            "*/59 * * * *",
            "0 0 * * SUN-SAT",
        ] {
            assert!(Cadence::cron(expr, None).is_ok(), "{expr}");
        }
        // Another mistake keeps the crate's words, without its 6-field form and caret.
        assert_eq!(
            Cadence::cron("0 0 3 * * FOO", None).unwrap_err(),
            "invalid cron expression \"0 0 3 * * FOO\": 'FOO' is not a valid day of the week."
        );
        assert_eq!(
            Cadence::cron("0 3 * 1- *", None).unwrap_err(),
            "invalid cron expression \"0 3 * 1- *\": cannot be read from column 8 on"
        );
        // The column is the user's own, however the expression was normalised: extra spaces
        // (once a subtraction that overflowed: a panic), weekdays rewritten longer or shorter.
        for (expr, column) in [
            ("0  3  *  1-  *", 11),
            ("  0 3 * 1- *", 10),
            ("0 3 * 1- 1,1,1,1,1,1,1", 8),
            ("0 3 1- * 1-5", 6),
            ("0\t3 1-  * 1-5", 6),
        ] {
            assert_eq!(
                Cadence::cron(expr, None).unwrap_err(),
                format!("invalid cron expression {expr:?}: cannot be read from column {column} on"),
            );
        }
        for (expr, says) in [
            (
                "0 3 * * FOO",
                "the weekday field holds FOO; weekdays are 0 to 7",
            ),
            ("0 3 * * 1-", "the weekday field has an empty value"),
            (
                "0 3 * * 5-1",
                "the weekday field has a range \"5-1\" that runs backwards",
            ),
            ("0 3 * * */0", "the weekday field has a step \"0\""),
        ] {
            let e = Cadence::cron(expr, None).unwrap_err();
            assert!(e.contains(says), "{expr}: {e}");
        }
    }

    /// The weekdays (0 Sunday) of the next two weeks' firings of `expr`.
    fn weekdays_of(expr: &str) -> Vec<u32> {
        use chrono::Datelike;
        let Cadence::Cron { schedule, .. } = Cadence::cron(expr, None).unwrap() else {
            unreachable!()
        };
        let mut days: Vec<u32> = schedule
            .upcoming()
            .take(14)
            .map(|t| t.weekday().num_days_from_sunday())
            .collect();
        days.sort_unstable();
        days.dedup();
        days
    }

    // A crontab's `1-5` is Monday to Friday; the cron crate counts from Sunday = 1, so the
    // same field given to it as written ran Sunday to Thursday.
    #[test]
    fn five_fields_take_classic_crons_weekday_numbers() {
        assert_eq!(weekdays_of("0 9 * * 1-5"), [1, 2, 3, 4, 5]);
        assert_eq!(weekdays_of("0 9 * * MON-FRI"), [1, 2, 3, 4, 5]);
        assert_eq!(weekdays_of("0 9 * * 0"), [0]);
        assert_eq!(weekdays_of("0 9 * * 7"), [0]);
        assert_eq!(weekdays_of("0 9 * * 5-7"), [0, 5, 6]);
        assert_eq!(weekdays_of("0 9 * * */2"), [0, 2, 4, 6]);
        assert_eq!(weekdays_of("0 9 * * 1-5/2,sat"), [1, 3, 5, 6]);
        assert_eq!(weekdays_of("0 9 * * 3/2"), [3, 5]);
        assert_eq!(weekdays_of("0 9 * * *"), [0, 1, 2, 3, 4, 5, 6]);
        // Six fields keep the crate's numbering: 2-6 is Monday to Friday there.
        assert_eq!(weekdays_of("0 0 9 * * 2-6"), [1, 2, 3, 4, 5]);
    }

    /// The first `n` firings of `expr` after `from` (Unix s), as RFC 3339, each found by
    /// `next_due` from the one before as the scheduler finds them.
    fn firings(expr: &str, from: u64, n: usize) -> Vec<String> {
        let c = Cadence::cron(expr, None).unwrap();
        let mut due = c.next_due(t(from), None);
        let mut out = Vec::new();
        for _ in 0..n {
            let at: chrono::DateTime<chrono::Utc> = due.into();
            out.push(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
            due = c.next_due(due, Some(due));
        }
        out
    }

    // A crontab fires a line restricting both day fields on a day matching either: `0 9 1 * 1`
    // is the 1st of each month and every Monday. The cron crate wants both, and so ran it only
    // on Mondays that are the 1st (2027-02-01, 2027-03-01, 2027-11-01). The dates below were
    // computed apart from the crate, by a Python script matching each minute's `datetime`
    // against the fields with Vixie cron's rule (a day field starting with `*` is unrestricted;
    // both restricted: either matches). From Tuesday 2026-11-24 11:00 UTC: Mondays are Nov 30,
    // Dec 7, 14, 21, 28, Jan 4; Dec 1 is a Tuesday, Jan 1 a Friday, Dec 13 a Sunday.
    #[test]
    fn five_fields_restricting_both_days_fire_on_either_as_a_crontab() {
        const FROM: u64 = 1_795_518_000; // 2026-11-24T11:00:00Z, a Tuesday
        for (expr, want) in [
            (
                "0 9 1 * 1",
                &[
                    "2026-11-30T09:00:00Z",
                    "2026-12-01T09:00:00Z",
                    "2026-12-07T09:00:00Z",
                    "2026-12-14T09:00:00Z",
                    "2026-12-21T09:00:00Z",
                    "2026-12-28T09:00:00Z",
                    "2027-01-01T09:00:00Z",
                    "2027-01-04T09:00:00Z",
                ][..],
            ),
            // The 13th or a Friday (Nov 27, Dec 4, 11, 18, 25; Dec 13 is a Sunday).
            (
                "30 6 13 * 5",
                &[
                    "2026-11-27T06:30:00Z",
                    "2026-12-04T06:30:00Z",
                    "2026-12-11T06:30:00Z",
                    "2026-12-13T06:30:00Z",
                    "2026-12-18T06:30:00Z",
                    "2026-12-25T06:30:00Z",
                ],
            ),
            // A range restricts: the first week, and every Sunday (Nov 29, Dec 6, 13, 20).
            (
                "0 0 1-7 * 0",
                &[
                    "2026-11-29T00:00:00Z",
                    "2026-12-01T00:00:00Z",
                    "2026-12-02T00:00:00Z",
                    "2026-12-03T00:00:00Z",
                    "2026-12-04T00:00:00Z",
                    "2026-12-05T00:00:00Z",
                    "2026-12-06T00:00:00Z",
                    "2026-12-07T00:00:00Z",
                    "2026-12-13T00:00:00Z",
                    "2026-12-20T00:00:00Z",
                ],
            ),
            // So does a stepped range: the 1st, 11th, 21st, 31st, or a Monday.
            (
                "0 0 1-31/10 * 1",
                &[
                    "2026-11-30T00:00:00Z",
                    "2026-12-01T00:00:00Z",
                    "2026-12-07T00:00:00Z",
                    "2026-12-11T00:00:00Z",
                    "2026-12-14T00:00:00Z",
                    "2026-12-21T00:00:00Z",
                ],
            ),
            // A field starting with `*` does not (Vixie cron): the 1st, 11th, 21st or 31st
            // that is a Monday.
            (
                "0 0 */10 * 1",
                &[
                    "2026-12-21T00:00:00Z",
                    "2027-01-11T00:00:00Z",
                    "2027-02-01T00:00:00Z",
                    "2027-03-01T00:00:00Z",
                ],
            ),
            // The month still binds both: June 15th or a Saturday in June.
            (
                "0 12 15 6 6",
                &[
                    "2027-06-05T12:00:00Z",
                    "2027-06-12T12:00:00Z",
                    "2027-06-15T12:00:00Z",
                    "2027-06-19T12:00:00Z",
                    "2027-06-26T12:00:00Z",
                    "2028-06-03T12:00:00Z",
                ],
            ),
            // No 31st of February, but Mondays in it: the crate found no date and refused it.
            (
                "0 0 31 2 1",
                &[
                    "2027-02-01T00:00:00Z",
                    "2027-02-08T00:00:00Z",
                    "2027-02-15T00:00:00Z",
                ],
            ),
            // One day field restricted: nothing to combine.
            (
                "0 9 1 * *",
                &[
                    "2026-12-01T09:00:00Z",
                    "2027-01-01T09:00:00Z",
                    "2027-02-01T09:00:00Z",
                ],
            ),
            (
                "0 9 * * 1",
                &[
                    "2026-11-30T09:00:00Z",
                    "2026-12-07T09:00:00Z",
                    "2026-12-14T09:00:00Z",
                ],
            ),
            // Six fields are the crate's form and rule (2 is Monday there): both must match.
            (
                "0 0 9 1 * 2",
                &[
                    "2027-02-01T09:00:00Z",
                    "2027-03-01T09:00:00Z",
                    "2027-11-01T09:00:00Z",
                ],
            ),
        ] {
            assert_eq!(firings(expr, FROM, want.len()), want, "{expr}");
        }
        // A grid anchored at FROM takes the same firings.
        let grid = Cadence::cron("0 9 1 * 1", None).unwrap();
        let ns = |s: u64| s as i64 * 1_000_000_000;
        let nov30 = ns(1_796_029_200); // 2026-11-30T09:00:00Z
        assert_eq!(grid.next_on_grid(ns(FROM), ns(FROM)), Some(nov30));
        assert_eq!(
            grid.next_on_grid(ns(FROM), nov30 + 1),
            Some(nov30 + ns(86_400))
        );
        // Jitter is held under the shortest gap: a Monday then a Tuesday the 1st (or a Sunday
        // the 1st, then Monday), a day; a day that is both fires once, not twice at a gap of 0.
        assert_eq!(grid.shortest_gap(), Some(Duration::from_secs(86_400)));
        // Logs and check-config say which rule an expression restricting both days follows.
        assert_eq!(
            grid.describe(),
            "cron \"0 0 9 1 * MON\" UTC (days matching the day of the month or the weekday)"
        );
        assert_eq!(
            Cadence::cron("0 0 9 1 * 2", None).unwrap().describe(),
            "cron \"0 0 9 1 * 2\" UTC (days matching both the day of the month and the weekday)"
        );
    }

    #[test]
    fn a_cron_that_never_fires_is_refused_and_gaps_are_measured() {
        // February 31st, and a year long gone: both parse, neither ever fires.
        for expr in ["0 0 31 2 *", "0 0 0 1 1 * 2001"] {
            let e = Cadence::cron(expr, None).unwrap_err();
            assert!(e.contains("never fires"), "{e}");
        }
        let gap = |expr: &str| Cadence::cron(expr, None).unwrap().shortest_gap();
        assert_eq!(gap("*/15 * * * *"), Some(Duration::from_secs(900)));
        // Monday to Friday at 09:00 and 17:00: the 8 hours between them, not the night or the
        // weekend.
        assert_eq!(gap("0 9,17 * * 1-5"), Some(Duration::from_secs(8 * 3600)));
        let every = Cadence::Every {
            period: Duration::from_secs(60),
            jitter: None,
        };
        assert_eq!(every.shortest_gap(), Some(Duration::from_secs(60)));
    }

    #[test]
    fn descriptions_read_like_the_config() {
        let every = |s, j| Cadence::Every {
            period: Duration::from_secs(s),
            jitter: j,
        };
        assert_eq!(every(900, None).describe(), "every 15m");
        assert_eq!(
            every(7200, Some(Duration::from_secs(90))).describe(),
            "every 2h (jitter 90s)"
        );
        assert_eq!(
            Cadence::cron("0 3 * * *", None).unwrap().describe(),
            "cron \"0 0 3 * * *\" UTC"
        );
    }

    #[test]
    fn huge_periods_and_jitter_never_overflow_the_clock() {
        let huge = Duration::from_secs(u64::MAX);
        let c = Cadence::Every {
            period: huge,
            jitter: Some(huge),
        };
        let now = SystemTime::now();
        let due = c.next_due(now, Some(now));
        assert!(due >= now, "{due:?}");
        assert!(later(now, huge) >= now);
        assert_eq!(
            later(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
    }

    #[tokio::test]
    async fn a_ticker_with_a_huge_jitter_waits_instead_of_panicking() {
        let huge = Duration::from_secs(u64::MAX / 2);
        let mut t = Ticker::resume(
            Cadence::Every {
                period: huge,
                jitter: Some(huge),
            },
            Some(SystemTime::now()),
            SystemTime::now,
        );
        let stop = CancellationToken::new();
        stop.cancel();
        // Far in the future: the wait ends by the stop, not by a tick or a panic.
        assert_eq!(t.tick(&stop).await, None);
    }

    #[test]
    fn jitter_stays_below_its_bound() {
        let max = Duration::from_millis(500);
        let draws: Vec<Duration> = (0..200).map(|_| random_below(max)).collect();
        assert!(draws.iter().all(|d| *d < max));
        // Not a constant: 200 draws from [0, 500 ms) spread over more than half the range.
        let (lo, hi) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
        assert!(*hi - *lo > Duration::from_millis(250), "{lo:?}..{hi:?}");
    }
}
