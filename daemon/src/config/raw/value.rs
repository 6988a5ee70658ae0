//! The value types of the file's keys: each checks what it can while parsing (a duration,
//! a size, a cron expression, a fraction), so an error points at the offending value's line.

use super::*;

/// A duration such as `"90s"` or `"15m"`.
#[derive(Debug, Clone, Copy)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d).map_err(|_| {
            serde::de::Error::custom("expected a duration string such as \"90s\" or \"15m\"")
        })?;
        duration::parse(&s)
            .map(HumanDuration)
            .map_err(serde::de::Error::custom)
    }
}

/// A duration of at most a year: a schedule period, jitter, timeout or interval, which is
/// added to clock readings (a longer one is a typo, and a huge one would overflow them).
#[derive(Debug, Clone, Copy)]
pub struct Period(pub Duration);

impl<'de> Deserialize<'de> for Period {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d).map_err(|_| {
            serde::de::Error::custom("expected a duration string such as \"90s\" or \"15m\"")
        })?;
        duration::parse_period(&s)
            .map(Period)
            .map_err(serde::de::Error::custom)
    }
}

/// A [`Period`] above zero (a zero request timeout fails every request).
#[derive(Debug, Clone, Copy)]
pub struct PositivePeriod(pub Duration);

impl<'de> Deserialize<'de> for PositivePeriod {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Period::deserialize(d)? {
            Period(p) if p.is_zero() => Err(serde::de::Error::custom("must be above zero")),
            Period(p) => Ok(PositivePeriod(p)),
        }
    }
}

/// A request header's value: a string, never quoted when it is not one (`X-Key = 1234567`
/// would have serde say "invalid type: integer `1234567`", the key in the message).
#[derive(Debug, Clone)]
pub struct HeaderText(pub String);

impl<'de> Deserialize<'de> for HeaderText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::String(s) => Ok(HeaderText(s)),
            v => {
                let found = v.type_str();
                let a = if found.starts_with(['a', 'e', 'i', 'o', 'u']) {
                    "an"
                } else {
                    "a"
                };
                Err(serde::de::Error::custom(format!(
                    "expected a string, found {a} {found} (the value is not shown: it may be a \
                     credential)"
                )))
            }
        }
    }
}

/// A timeslice's width: at least 1 ms, at most a year (`duration::parse_slice_width`).
#[derive(Debug, Clone, Copy)]
pub struct SliceWidth(pub Duration);

impl<'de> Deserialize<'de> for SliceWidth {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)
            .map_err(|_| serde::de::Error::custom("expected a duration string such as \"10s\""))?;
        duration::parse_slice_width(&s)
            .map(SliceWidth)
            .map_err(serde::de::Error::custom)
    }
}

/// A size in bytes, at least 1 KiB: a number, or a string with a unit (`"64KiB"`, `"1MiB"`).
#[derive(Debug, Clone, Copy)]
pub struct ByteSize(pub usize);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let n = match toml::Value::deserialize(d)? {
            // The cap a string has (`"2TiB"` was refused, 2^63 as a number taken).
            toml::Value::Integer(n) if n > crate::config::size::MAX as i64 => {
                return Err(D::Error::custom(format!(
                    "{n} bytes is too large: at most 1 TiB ({})",
                    crate::config::size::MAX
                )))
            }
            toml::Value::Integer(n) if n >= 0 => n as usize,
            toml::Value::String(s) => crate::config::size::parse(&s).map_err(D::Error::custom)?,
            _ => {
                return Err(D::Error::custom(
                    "expected a size such as \"64KiB\" or a number of bytes",
                ))
            }
        };
        match n {
            n if n < 1024 => Err(D::Error::custom(format!(
                "expected at least 1 KiB, found {n} bytes"
            ))),
            n => Ok(ByteSize(n)),
        }
    }
}

/// A TOML number (an integer or a float) as `f64`; anything else is refused saying what the
/// key expects (`expected a positive number, found string "fast"`), where serde would name
/// the Rust type (`expected f64`).
fn number<'de, D: serde::Deserializer<'de>>(d: D, expected: &str) -> Result<f64, D::Error> {
    match toml::Value::deserialize(d)? {
        toml::Value::Integer(n) => Ok(n as f64),
        toml::Value::Float(x) => Ok(x),
        other => Err(serde::de::Error::custom(format!(
            "expected {expected}, found {}",
            value_kind(&other)
        ))),
    }
}

/// A TOML value as an error names it: `string "fast"`, `a boolean`, `an array`.
fn value_kind(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("string {s:?}"),
        other => {
            let found = other.type_str();
            let a = if found.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            format!("{a} {found}")
        }
    }
}

/// A finite number of 1 or more (integers accepted).
#[derive(Debug, Clone, Copy)]
pub struct AtLeastOneF64(pub f64);

impl<'de> Deserialize<'de> for AtLeastOneF64 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = number(d, "a number of 1 or more")?;
        if v >= 1.0 && v.is_finite() {
            Ok(AtLeastOneF64(v))
        } else {
            Err(serde::de::Error::custom(format!(
                "expected a number of 1 or more, found {}",
                canary_core::rate_text::number(v)
            )))
        }
    }
}

/// A count of 1 or more (`concurrency = 0` would never send a request).
#[derive(Debug, Clone, Copy)]
pub struct AtLeastOne(pub usize);

impl<'de> Deserialize<'de> for AtLeastOne {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match usize::deserialize(d) {
            Ok(n) if n >= 1 => Ok(AtLeastOne(n)),
            Ok(n) => Err(serde::de::Error::custom(format!(
                "expected 1 or more, found {n}"
            ))),
            Err(_) => Err(serde::de::Error::custom(
                "expected a whole number, 1 or more",
            )),
        }
    }
}

/// A token count of 1 to 2^32 - 1 (lengths are `u32`).
#[derive(Debug, Clone, Copy)]
pub struct LengthLimit(pub u32);

impl<'de> Deserialize<'de> for LengthLimit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let max = canary_replay::trace::MAX_LENGTH_LIMIT;
        match u64::deserialize(d) {
            Ok(n) if n >= 1 && n <= u64::from(max) => Ok(LengthLimit(n as u32)),
            _ => Err(serde::de::Error::custom(format!(
                "expected a whole number of tokens from 1 to {max} (the longest context \
                 announced; a prompt is sized by it)"
            ))),
        }
    }
}

/// The longest trace line read, 1 to 1 GiB bytes as `--max-line-bytes` takes: a line is
/// held whole in memory, so a file without line breaks costs up to this much.
#[derive(Debug, Clone, Copy)]
pub struct MaxLineBytes(pub usize);

impl<'de> Deserialize<'de> for MaxLineBytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let max = crate::cli::replay::MAX_LINE_BYTES;
        match u64::deserialize(d) {
            Ok(n) if n >= 1 && n <= max => Ok(MaxLineBytes(n as usize)),
            _ => Err(serde::de::Error::custom(format!(
                "expected a whole number of bytes from 1 to {max} (1 GiB: a line is held \
                 whole in memory)"
            ))),
        }
    }
}

/// Warm-up requests, at most [`canary_replay::MAX_WARMUP_REQUESTS`].
#[derive(Debug, Clone, Copy)]
pub struct WarmupRequests(pub usize);

impl<'de> Deserialize<'de> for WarmupRequests {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let max = canary_replay::MAX_WARMUP_REQUESTS;
        match u64::deserialize(d) {
            Ok(n) if n <= max as u64 => Ok(WarmupRequests(n as usize)),
            _ => Err(serde::de::Error::custom(format!(
                "expected a whole number of requests from 0 to {max}"
            ))),
        }
    }
}

/// A probability strictly between 0 and 1 (a significance level).
#[derive(Debug, Clone, Copy)]
pub struct Probability(pub f64);

impl<'de> Deserialize<'de> for Probability {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = number(d, "a number strictly between 0 and 1")?;
        if v > 0.0 && v < 1.0 {
            Ok(Probability(v))
        } else {
            Err(serde::de::Error::custom(format!(
                "expected a number strictly between 0 and 1, found {}",
                canary_core::rate_text::number(v)
            )))
        }
    }
}

/// A finite number, zero or more.
#[derive(Debug, Clone, Copy)]
pub struct NonNegative(pub f64);

impl<'de> Deserialize<'de> for NonNegative {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = number(d, "a finite number, zero or more")?;
        if v >= 0.0 && v.is_finite() {
            Ok(NonNegative(v))
        } else {
            Err(serde::de::Error::custom(format!(
                "expected a finite number, zero or more, found {}",
                canary_core::rate_text::number(v)
            )))
        }
    }
}

/// A cron expression, checked.
#[derive(Debug, Clone)]
pub struct CronExpr(pub String);

impl<'de> Deserialize<'de> for CronExpr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Cadence::cron(&s, None).map_err(serde::de::Error::custom)?;
        Ok(CronExpr(s))
    }
}

/// SLOs in aiperf's syntax, checked.
#[derive(Debug, Clone)]
pub struct SloSpec(pub Goodput);

impl<'de> Deserialize<'de> for SloSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        slo_spec(&s).map(SloSpec).map_err(serde::de::Error::custom)
    }
}

/// SLOs as `slos` and `--slo` (`--goodput`) take them: at least one term. An empty spec
/// parses to no SLO at all, which would silently switch off the gates and the capacity
/// search's verdicts that were asked for.
pub fn slo_spec(s: &str) -> Result<Goodput, String> {
    let g = s.parse::<Goodput>().map_err(|e| e.to_string())?;
    if g.is_empty() {
        return Err(
            "expected at least one metric:threshold, such as \"time_to_first_token:400\"".into(),
        );
    }
    Ok(g)
}

/// A number in [0, 1].
#[derive(Debug, Clone, Copy)]
pub struct Fraction(pub f64);

impl<'de> Deserialize<'de> for Fraction {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = number(d, "a fraction between 0 and 1")?;
        if (0.0..=1.0).contains(&v) {
            Ok(Fraction(v))
        } else {
            Err(serde::de::Error::custom(format!(
                "expected a fraction between 0 and 1, found {}",
                canary_core::rate_text::number(v)
            )))
        }
    }
}

/// A positive finite number (integers accepted).
#[derive(Debug, Clone, Copy)]
pub struct Positive(pub f64);

impl<'de> Deserialize<'de> for Positive {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = number(d, "a positive number")?;
        if v > 0.0 && v.is_finite() {
            Ok(Positive(v))
        } else {
            Err(serde::de::Error::custom(format!(
                "expected a positive number, found {}",
                canary_core::rate_text::number(v)
            )))
        }
    }
}
