//! The latency model's parameters, and the named profiles.
//!
//! A profile is plain data: the engine reads the current one at every step, so swapping it at
//! runtime (`POST /sim/profile`) changes the timing of requests already running. Its
//! closed-form throughput is in the `capacity` submodule.

mod capacity;

pub use capacity::{Capacity, UnloadedLatency};

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// The largest time a profile may give (µs): 100 s a step or a token. Larger ones only wedge
/// the engine in a sleep no later profile can cut short.
pub const MAX_TIME_US: f64 = 1e8;

/// Parameters of the latency model (see the crate docs for the maths). Times are microseconds
/// and may be fractional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Name shown by `GET /sim/profile`; `custom` for a loaded or patched profile.
    pub name: String,
    /// Fixed cost added to the engine step in which a request is prefilled.
    pub prefill_overhead_us: f64,
    /// Prefill cost per uncached prompt token.
    pub prefill_us_per_token: f64,
    /// Cost of one decode step with no sequences (weights read, launch overhead).
    pub decode_base_us: f64,
    /// Extra cost of one decode step per running sequence (continuous batching).
    pub decode_per_seq_us: f64,
    /// Most sequences running at once (vLLM's `max_num_seqs`).
    pub max_running: u32,
    /// KV-cache budget in tokens. A running sequence holds `prompt + generated` tokens.
    pub kv_budget_tokens: u64,
    /// Output length when a request gives neither `max_tokens` nor `max_completion_tokens`.
    pub default_max_tokens: u32,
    /// How admission uses the KV budget: reserve `prompt + max_tokens` up front (no
    /// preemptions), or admit on the prompt alone and preempt under pressure, as vLLM does.
    #[serde(default)]
    pub kv_admission: KvAdmission,
}

/// How the engine admits requests against the KV budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvAdmission {
    /// Admit only when `prompt + max_tokens` fits beside what running sequences reserved, so a
    /// sequence never runs out of KV and nothing is preempted.
    #[default]
    Reserve,
    /// vLLM's scheduler: admit when the prompt (plus generated tokens, for a preempted
    /// sequence) and its next token fit; grow each sequence by one token per step; when the
    /// next step would overflow the budget, preempt the most recently admitted sequence
    /// (recompute: its KV is freed and it goes back to the head of the queue).
    Optimistic,
}

impl Profile {
    /// As fast as the host allows: no simulated compute time, generous capacity. For load tests.
    pub fn fast() -> Profile {
        Profile {
            name: "fast".into(),
            prefill_overhead_us: 0.0,
            prefill_us_per_token: 0.0,
            decode_base_us: 0.0,
            decode_per_seq_us: 0.0,
            max_running: 4096,
            kv_budget_tokens: 1 << 32,
            default_max_tokens: 16,
            kv_admission: KvAdmission::Reserve,
        }
    }

    /// Illustrative numbers, close to a 1–3B model served by vLLM on one modern data-centre GPU
    /// (H100-class). Not measured on any particular system; see the README for each number.
    pub fn illustrative() -> Profile {
        Profile {
            name: "illustrative".into(),
            prefill_overhead_us: 4_000.0,
            prefill_us_per_token: 25.0,
            decode_base_us: 5_000.0,
            decode_per_seq_us: 50.0,
            max_running: 256,
            kv_budget_tokens: 1_000_000,
            default_max_tokens: 16,
            kv_admission: KvAdmission::Reserve,
        }
    }

    /// A small engine with a known, modest capacity and a sharp knee, for tests of knee and
    /// capacity searches on a small machine: 8 sequences at most, 2 ms + 0.25 ms per sequence
    /// per step. With 32 prompt and 16 output tokens it saturates at about 107 requests/s
    /// ([`Profile::capacity`]); past that the queue, and so latency, grows without bound.
    pub fn capacity_profile() -> Profile {
        Profile {
            name: "capacity".into(),
            prefill_overhead_us: 1_000.0,
            prefill_us_per_token: 10.0,
            decode_base_us: 2_000.0,
            decode_per_seq_us: 250.0,
            max_running: 8,
            kv_budget_tokens: 1 << 20,
            default_max_tokens: 16,
            kv_admission: KvAdmission::Reserve,
        }
    }

    /// The names [`Profile::named`] knows.
    pub const NAMES: &'static [&'static str] = &["fast", "illustrative", "capacity"];

    /// A named profile (`fast`, `illustrative`, `capacity`).
    pub fn named(name: &str) -> Option<Profile> {
        match name {
            "fast" => Some(Profile::fast()),
            "illustrative" => Some(Profile::illustrative()),
            "capacity" => Some(Profile::capacity_profile()),
            _ => None,
        }
    }

    /// Loads a JSON profile file. The file is a [`ProfilePatch`]: `{"profile": "illustrative",
    /// "decode_base_us": 8000}` starts from a named profile and overrides fields; a file without
    /// `profile` starts from `illustrative`.
    pub fn load(path: impl AsRef<Path>) -> Result<Profile, ConfigError> {
        let path = path.as_ref();
        // Bounded: a profile is a few hundred bytes, and `/dev/zero` would fill memory.
        let text = canary_files::read_small_file(path, 1 << 20).map_err(|source| {
            ConfigError::ProfileRead {
                path: path.to_owned(),
                source,
            }
        })?;
        let patch: ProfilePatch =
            serde_json::from_slice(&text).map_err(|source| ConfigError::ProfileParse {
                path: path.to_owned(),
                source,
            })?;
        patch
            .apply(&Profile::illustrative())
            .map_err(|message| ConfigError::ProfileInvalid {
                path: path.to_owned(),
                message,
            })
    }

    /// Checks the numbers are usable (finite, within 0..=`MAX_TIME_US`, non-zero capacities).
    pub fn validate(&self) -> Result<(), String> {
        let times = [
            ("prefill_overhead_us", self.prefill_overhead_us),
            ("prefill_us_per_token", self.prefill_us_per_token),
            ("decode_base_us", self.decode_base_us),
            ("decode_per_seq_us", self.decode_per_seq_us),
        ];
        for (key, v) in times {
            if !v.is_finite() || !(0.0..=MAX_TIME_US).contains(&v) {
                return Err(format!(
                    "{key} must be a number from 0 to {MAX_TIME_US} (µs), got {}",
                    canary_core::rate_text::number(v)
                ));
            }
        }
        if self.max_running == 0 {
            return Err("max_running must be >= 1".into());
        }
        if self.kv_budget_tokens == 0 {
            return Err("kv_budget_tokens must be >= 1".into());
        }
        // Above the request limit, every request without max_tokens would be refused naming a
        // value its client never sent.
        let most = crate::generate::MAX_COMPLETION_TOKENS;
        if !(1..=most).contains(&self.default_max_tokens) {
            return Err(format!(
                "default_max_tokens must be from 1 to {most} (the most tokens a request may ask \
                 for), got {}",
                self.default_max_tokens
            ));
        }
        Ok(())
    }

    /// Nanoseconds of prefill for a request with `uncached` tokens to compute.
    pub(crate) fn prefill_ns(&self, uncached: u64) -> f64 {
        (self.prefill_overhead_us + self.prefill_us_per_token * uncached as f64) * 1_000.0
    }

    /// Nanoseconds of one decode step with `running` sequences.
    pub(crate) fn decode_step_ns(&self, running: usize) -> f64 {
        (self.decode_base_us + self.decode_per_seq_us * running as f64) * 1_000.0
    }
}

/// A partial profile: a base (`profile`, a name) plus any fields to override. The body of
/// `POST /sim/profile` and the content of a profile file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilePatch {
    /// Named base profile; the current (or, for files, `illustrative`) one when absent.
    pub profile: Option<String>,
    #[allow(missing_docs)]
    pub name: Option<String>,
    #[allow(missing_docs)]
    pub prefill_overhead_us: Option<f64>,
    #[allow(missing_docs)]
    pub prefill_us_per_token: Option<f64>,
    #[allow(missing_docs)]
    pub decode_base_us: Option<f64>,
    #[allow(missing_docs)]
    pub decode_per_seq_us: Option<f64>,
    #[allow(missing_docs)]
    pub max_running: Option<u32>,
    #[allow(missing_docs)]
    pub kv_budget_tokens: Option<u64>,
    #[allow(missing_docs)]
    pub default_max_tokens: Option<u32>,
    #[allow(missing_docs)]
    pub kv_admission: Option<KvAdmission>,
}

impl ProfilePatch {
    /// The profile this patch describes, starting from `profile` if named, else from `current`.
    pub fn apply(&self, current: &Profile) -> Result<Profile, String> {
        let mut p = match &self.profile {
            Some(name) => Profile::named(name).ok_or_else(|| {
                format!(
                    "unknown profile {name:?} (known: {})",
                    Profile::NAMES.join(", ")
                )
            })?,
            None => current.clone(),
        };
        let overrides = self.prefill_overhead_us.is_some()
            || self.prefill_us_per_token.is_some()
            || self.decode_base_us.is_some()
            || self.decode_per_seq_us.is_some()
            || self.max_running.is_some()
            || self.kv_budget_tokens.is_some()
            || self.default_max_tokens.is_some()
            || self.kv_admission.is_some();
        if overrides {
            p.name = "custom".into();
        }
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { p.$f = v; } )* };
        }
        set!(
            prefill_overhead_us,
            prefill_us_per_token,
            decode_base_us,
            decode_per_seq_us,
            max_running,
            kv_budget_tokens,
            default_max_tokens,
            kv_admission
        );
        if let Some(name) = &self.name {
            p.name = name.clone();
        }
        p.validate()?;
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // `--profile /dev/zero` grew until the kernel killed it: a profile is read only as a
    // small regular file.
    #[test]
    fn a_profile_file_past_the_cap_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("profile.json");
        let file = std::fs::File::create(&big).unwrap();
        file.set_len((1 << 20) + 1).unwrap();
        let e = Profile::load(&big).unwrap_err();
        let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
        assert!(
            chain.contains("profile.json") && chain.contains("larger than 1048576 bytes"),
            "{chain}"
        );
    }

    // A value of 1e300 was quoted back in full, 301 digits (audit L4).
    #[test]
    fn a_huge_value_is_quoted_back_compactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("profile.json");
        std::fs::write(&path, r#"{"decode_base_us": 1e300}"#).unwrap();
        let e = Profile::load(&path).unwrap_err().to_string();
        assert!(
            e.ends_with("decode_base_us must be a number from 0 to 100000000 (µs), got 1e300"),
            "{e}"
        );
    }

    #[test]
    fn step_costs() {
        let p = Profile::illustrative();
        // 4 ms overhead + 1000 tokens * 25 us = 29 ms.
        assert_eq!(p.prefill_ns(1000), 29_000_000.0);
        // 5 ms + 10 * 50 us = 5.5 ms.
        assert_eq!(p.decode_step_ns(10), 5_500_000.0);
        assert_eq!(Profile::fast().decode_step_ns(1000), 0.0);
        assert_eq!(Profile::fast().prefill_ns(100_000), 0.0);
    }

    #[test]
    fn patch_overrides_and_names() {
        let patch: ProfilePatch =
            serde_json::from_str(r#"{"profile":"fast","decode_base_us":100}"#).unwrap();
        let p = patch.apply(&Profile::illustrative()).unwrap();
        assert_eq!(p.name, "custom");
        assert_eq!(p.decode_base_us, 100.0);
        assert_eq!(p.max_running, Profile::fast().max_running);

        let patch: ProfilePatch = serde_json::from_str(r#"{"profile":"illustrative"}"#).unwrap();
        assert_eq!(
            patch.apply(&Profile::fast()).unwrap(),
            Profile::illustrative()
        );

        let bad: ProfilePatch = serde_json::from_str(r#"{"profile":"nope"}"#).unwrap();
        assert!(bad.apply(&Profile::fast()).unwrap_err().contains("nope"));
        let optimistic: ProfilePatch =
            serde_json::from_str(r#"{"profile":"capacity","kv_admission":"optimistic"}"#).unwrap();
        let p = optimistic.apply(&Profile::fast()).unwrap();
        assert_eq!(p.kv_admission, KvAdmission::Optimistic);
        assert_eq!(p.max_running, 8);
        assert!(serde_json::from_str::<ProfilePatch>(r#"{"kv_admission":"lazy"}"#).is_err());
        let neg: ProfilePatch = serde_json::from_str(r#"{"decode_base_us":-1}"#).unwrap();
        assert!(neg.apply(&Profile::fast()).is_err());
        // A step of 116 days would hold the engine past any later profile.
        let huge: ProfilePatch = serde_json::from_str(r#"{"decode_base_us":1e13}"#).unwrap();
        let e = huge.apply(&Profile::fast()).unwrap_err();
        assert!(
            e.contains("decode_base_us") && e.contains("100000000"),
            "{e}"
        );
        // Before, it loaded, and every request without max_tokens got a 400 naming it.
        let long: ProfilePatch = serde_json::from_str(r#"{"default_max_tokens":1048577}"#).unwrap();
        let e = long.apply(&Profile::fast()).unwrap_err();
        assert!(
            e.contains("default_max_tokens") && e.contains("1048576"),
            "{e}"
        );
        let most: ProfilePatch = serde_json::from_str(r#"{"default_max_tokens":1048576}"#).unwrap();
        assert!(most.apply(&Profile::fast()).is_ok());
        let most: ProfilePatch = serde_json::from_str(r#"{"prefill_us_per_token":1e8}"#).unwrap();
        assert!(most.apply(&Profile::fast()).is_ok());
        assert!(serde_json::from_str::<ProfilePatch>(r#"{"bogus":1}"#).is_err());
    }

    #[test]
    fn load_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        std::fs::write(&path, r#"{"decode_per_seq_us": 7.5}"#).unwrap();
        let p = Profile::load(&path).unwrap();
        assert_eq!(p.decode_per_seq_us, 7.5);
        assert_eq!(p.decode_base_us, Profile::illustrative().decode_base_us);
        std::fs::write(&path, r#"{"default_max_tokens": 2000000}"#).unwrap();
        let err = Profile::load(&path).unwrap_err().to_string();
        assert!(
            err.contains("p.json") && err.contains("default_max_tokens"),
            "{err}"
        );
        std::fs::write(&path, "{").unwrap();
        let err = Profile::load(&path).unwrap_err().to_string();
        assert!(err.contains("p.json"), "{err}");
    }
}
