//! Fault injection: what can go wrong with one response, and how a fault is chosen.
//!
//! Syntax (the `x-sim-fault` request header and each `--fault` flag): comma-separated items,
//! combinable, e.g. `stall_first_ms=200,no_done`.
//!
//! | item | effect |
//! |---|---|
//! | `status=429\|500\|503` (any 400–599) | reply at once with that status and an OpenAI-style error body |
//! | `reset_after=N` | after N token chunks, close the connection with a TCP RST (SO_LINGER 0) |
//! | `stall_first_ms=MS` | wait MS before writing the response head |
//! | `stall_mid_ms=MS,at=K` | after K token chunks, stop writing for MS |
//! | `malformed_at=K` | token chunk K (from 1) is a `data:` line with invalid JSON |
//! | `trickle_headers_ms=MS` | write the response head in 8-byte pieces spread over MS |
//! | `no_done` | end the stream cleanly but without `data: [DONE]` |
//! | `close_after[=MS]` | after a complete response, close the connection although it was kept alive, MS later (default 0) and without reading anything meanwhile (llama.cpp's `llama-server` does this after every stream) |
//! | `net_delay_ms=MS` | a slow link: every write of the response reaches the socket MS after the sim produced it (a constant one-way delay, not a stall: the spacing between writes is kept); the server-side figures (`/metrics`, `TruthRecord::net_delay`) exclude it |
//!
//! "Token chunks" are the chunks that carry one output token (reasoning or content), counted
//! from 1; the role, finish and usage chunks do not count. For non-streaming requests `reset_after`
//! resets before any byte of the reply, `malformed_at` makes the JSON body invalid, and
//! `stall_mid_ms` and `no_done` do nothing. A client that leaves during a stall (or a trickled
//! head's pauses) is noticed at once, not when the stall ends.

use std::fmt;

use canary_core::splitmix64;

use serde::{Deserialize, Serialize};

/// One response's faults. `FaultPlan::default()` is a healthy response.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultPlan {
    /// Reply with this HTTP status and an error body.
    pub status: Option<u16>,
    /// Reset the connection after this many token chunks.
    pub reset_after: Option<u32>,
    /// Stall before the response head, in milliseconds.
    pub stall_first_ms: Option<u64>,
    /// Stall `(ms, at)`: after `at` token chunks, for `ms` milliseconds.
    pub stall_mid: Option<(u64, u32)>,
    /// Token chunk (from 1) replaced by invalid JSON.
    pub malformed_at: Option<u32>,
    /// Spread the response head over this many milliseconds.
    pub trickle_headers_ms: Option<u64>,
    /// Omit `data: [DONE]`.
    pub no_done: bool,
    /// Close the connection this many milliseconds after the response, without announcing it.
    pub close_after: Option<u64>,
    /// Delay every write of the response by this many milliseconds (a slow link).
    #[serde(default)]
    pub net_delay_ms: Option<u64>,
}

/// A fault specification that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad fault spec {spec:?}: {reason}")]
pub struct FaultParseError {
    /// The text given.
    pub spec: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The longest delay a fault may ask for (ten minutes).
pub const MAX_FAULT_MS: u64 = 600_000;

impl FaultPlan {
    /// Parses the header / flag syntax described in the module docs.
    pub fn parse(spec: &str) -> Result<FaultPlan, FaultParseError> {
        let err = |reason: String| FaultParseError {
            spec: spec.to_owned(),
            reason,
        };
        let mut plan = FaultPlan::default();
        let mut stall_mid_ms = None;
        let mut at = None;
        let mut any = false;
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            any = true;
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (item, None),
            };
            let num = |v: Option<&str>| -> Result<u64, FaultParseError> {
                let v = v.ok_or_else(|| err(format!("{key} needs a value ({key}=N)")))?;
                v.parse::<u64>()
                    .map_err(|_| err(format!("{key}={v}: not a non-negative integer")))
            };
            // A delay is at most MAX_FAULT_MS: a longer one only holds a socket and a task.
            let ms = |v: Option<&str>| -> Result<u64, FaultParseError> {
                let n = num(v)?;
                if n > MAX_FAULT_MS {
                    return Err(err(format!("{key}={n}: at most {MAX_FAULT_MS} ms")));
                }
                Ok(n)
            };
            let num32 = |v: Option<&str>| -> Result<u32, FaultParseError> {
                u32::try_from(num(v)?).map_err(|_| err(format!("{key}: value too large")))
            };
            match key {
                "status" => {
                    let s = num(value)?;
                    if !(400..=599).contains(&s) {
                        return Err(err(format!("status={s}: must be 400..=599")));
                    }
                    plan.status = Some(s as u16);
                }
                "reset_after" => plan.reset_after = Some(num32(value)?),
                "stall_first_ms" => plan.stall_first_ms = Some(ms(value)?),
                "stall_mid_ms" => stall_mid_ms = Some(ms(value)?),
                "at" => at = Some(num32(value)?),
                "malformed_at" => {
                    let k = num32(value)?;
                    if k == 0 {
                        return Err(err("malformed_at counts from 1".into()));
                    }
                    plan.malformed_at = Some(k);
                }
                "trickle_headers_ms" => plan.trickle_headers_ms = Some(ms(value)?),
                "no_done" => {
                    if value.is_some() {
                        return Err(err("no_done takes no value".into()));
                    }
                    plan.no_done = true;
                }
                "close_after" => {
                    plan.close_after = Some(match value {
                        Some(_) => ms(value)?,
                        None => 0,
                    })
                }
                "net_delay_ms" => plan.net_delay_ms = Some(ms(value)?),
                other => {
                    return Err(err(format!(
                        "unknown item {other:?} (known: status, reset_after, stall_first_ms, \
                         stall_mid_ms+at, malformed_at, trickle_headers_ms, no_done, close_after, \
                         net_delay_ms)"
                    )))
                }
            }
        }
        if !any {
            return Err(err("empty".into()));
        }
        match (stall_mid_ms, at) {
            (Some(ms), Some(k)) => plan.stall_mid = Some((ms, k)),
            (Some(_), None) => return Err(err("stall_mid_ms needs at=K".into())),
            (None, Some(_)) => return Err(err("at=K only goes with stall_mid_ms".into())),
            (None, None) => {}
        }
        Ok(plan)
    }

    /// True when nothing is injected.
    pub fn is_none(&self) -> bool {
        *self == FaultPlan::default()
    }

    /// The default mix for `--fault-rate` when no `--fault` is given.
    pub fn default_mix() -> Vec<FaultPlan> {
        [
            "status=429",
            "status=500",
            "status=503",
            "reset_after=2",
            "stall_first_ms=500",
            "stall_mid_ms=500,at=2",
            "malformed_at=2",
            "no_done",
        ]
        .iter()
        .map(|s| FaultPlan::parse(s).expect("valid built-in fault"))
        .collect()
    }
}

impl fmt::Display for FaultPlan {
    /// The canonical spec, parseable by [`FaultPlan::parse`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items = Vec::new();
        if let Some(s) = self.status {
            items.push(format!("status={s}"));
        }
        if let Some(n) = self.reset_after {
            items.push(format!("reset_after={n}"));
        }
        if let Some(ms) = self.stall_first_ms {
            items.push(format!("stall_first_ms={ms}"));
        }
        if let Some((ms, at)) = self.stall_mid {
            items.push(format!("stall_mid_ms={ms},at={at}"));
        }
        if let Some(k) = self.malformed_at {
            items.push(format!("malformed_at={k}"));
        }
        if let Some(ms) = self.trickle_headers_ms {
            items.push(format!("trickle_headers_ms={ms}"));
        }
        if self.no_done {
            items.push("no_done".into());
        }
        if let Some(ms) = self.close_after {
            items.push(format!("close_after={ms}"));
        }
        if let Some(ms) = self.net_delay_ms {
            items.push(format!("net_delay_ms={ms}"));
        }
        f.write_str(&items.join(","))
    }
}

/// Server-wide random faults: with probability `rate`, a request gets one plan of `mix`, chosen
/// uniformly. Deterministic: the draw for the *i*-th generation request (in arrival order) is a
/// hash of `(seed, i)`.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultInjector {
    /// Probability in `[0, 1]`.
    pub rate: f64,
    /// Faults to choose from; never empty when `rate > 0`.
    pub mix: Vec<FaultPlan>,
    /// Seed of the draws.
    pub seed: u64,
}

impl Default for FaultInjector {
    fn default() -> Self {
        FaultInjector {
            rate: 0.0,
            mix: Vec::new(),
            seed: 0,
        }
    }
}

impl FaultInjector {
    /// The fault for the `index`-th request, if any.
    pub fn draw(&self, index: u64) -> Option<&FaultPlan> {
        if self.rate <= 0.0 || self.mix.is_empty() {
            return None;
        }
        let r = splitmix64(self.seed ^ splitmix64(index));
        let u = (r >> 11) as f64 / (1u64 << 53) as f64;
        if u >= self.rate {
            return None;
        }
        let pick = splitmix64(r) % self.mix.len() as u64;
        self.mix.get(pick as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_kind() {
        let p = |s| FaultPlan::parse(s).unwrap();
        assert_eq!(p("status=503").status, Some(503));
        assert_eq!(p("reset_after=5").reset_after, Some(5));
        assert_eq!(p("stall_first_ms=200").stall_first_ms, Some(200));
        assert_eq!(p("stall_mid_ms=100,at=5").stall_mid, Some((100, 5)));
        assert_eq!(p("at=5, stall_mid_ms=100").stall_mid, Some((100, 5)));
        assert_eq!(p("malformed_at=3").malformed_at, Some(3));
        assert_eq!(p("trickle_headers_ms=300").trickle_headers_ms, Some(300));
        assert!(p("no_done").no_done);
        assert_eq!(p("close_after").close_after, Some(0));
        assert_eq!(p("close_after=20").close_after, Some(20));
        assert_eq!(p("net_delay_ms=40").net_delay_ms, Some(40));
        let both = p("stall_first_ms=10,no_done");
        assert!(both.no_done && both.stall_first_ms == Some(10));
    }

    #[test]
    fn rejects_bad_specs() {
        for bad in [
            "",
            "status",
            "status=200",
            "status=abc",
            "reset_after=-1",
            "stall_mid_ms=5",
            "at=3",
            "malformed_at=0",
            "no_done=1",
            "close_after=soon",
            "net_delay_ms",
            "net_delay_ms=-3",
            // Longer than ten minutes: the socket and task would be held for ever.
            "close_after=18446744073709551615",
            "stall_first_ms=600001",
            "stall_mid_ms=18446744073709,at=1",
            "trickle_headers_ms=700000",
            "net_delay_ms=600001",
            "explode",
        ] {
            let e = FaultPlan::parse(bad).unwrap_err();
            assert!(!e.reason.is_empty(), "{bad}");
        }
    }

    #[test]
    fn ten_minutes_is_the_longest_delay() {
        let plan = FaultPlan::parse("net_delay_ms=600000,stall_first_ms=600000").unwrap();
        assert_eq!(plan.net_delay_ms, Some(MAX_FAULT_MS));
        let e = FaultPlan::parse("net_delay_ms=600001").unwrap_err();
        assert!(e.reason.contains("at most 600000 ms"), "{}", e.reason);
    }

    #[test]
    fn display_round_trips() {
        for s in FaultPlan::default_mix() {
            assert_eq!(FaultPlan::parse(&s.to_string()).unwrap(), s);
        }
        let all = FaultPlan::parse(
            "status=500,reset_after=1,stall_first_ms=2,stall_mid_ms=3,at=4,malformed_at=5,\
             trickle_headers_ms=6,no_done,close_after=7,net_delay_ms=8",
        )
        .unwrap();
        assert_eq!(FaultPlan::parse(&all.to_string()).unwrap(), all);
    }

    #[test]
    fn injector_is_deterministic_and_near_rate() {
        let inj = FaultInjector {
            rate: 0.25,
            mix: FaultPlan::default_mix(),
            seed: 42,
        };
        let a: Vec<_> = (0..10_000).map(|i| inj.draw(i).cloned()).collect();
        let b: Vec<_> = (0..10_000).map(|i| inj.draw(i).cloned()).collect();
        assert_eq!(a, b);
        let hits = a.iter().filter(|x| x.is_some()).count();
        assert!((2000..3000).contains(&hits), "{hits}");
        let other = FaultInjector {
            seed: 43,
            ..inj.clone()
        };
        let c: Vec<_> = (0..10_000).map(|i| other.draw(i).cloned()).collect();
        assert_ne!(a, c);
        assert!(FaultInjector::default().draw(0).is_none());
    }
}
