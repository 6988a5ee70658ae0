//! `synthesis_*` keys of a `[workloads.NAME]` with a trace: `canaryd synthesize`'s transforms
//! applied on the fly (see `canary_replay::TracePlan::synthesis`), checked by the library's
//! own rules and reported at the key's line.

use super::Source;
use crate::config::{raw, ConfigError};
use canary_replay::trace::Synthesis;

/// The synthesis a workload asks for; `None` when it sets no `synthesis_*` key.
pub(super) fn synthesis(
    name: &str,
    w: &raw::Workload,
    src: &Source,
) -> Result<Option<Synthesis>, ConfigError> {
    let f = |k: &Option<toml::Spanned<f64>>| k.as_ref().map(|v| (v.span().start, *v.get_ref()));
    let n = |k: &Option<toml::Spanned<u32>>| k.as_ref().map(|v| (v.span().start, *v.get_ref()));
    let (speedup, prefix_len, prompt_len) = (
        f(&w.synthesis_speedup_ratio),
        f(&w.synthesis_prefix_len_multiplier),
        f(&w.synthesis_prompt_len_multiplier),
    );
    let (roots, isl, osl) = (
        n(&w.synthesis_prefix_root_multiplier),
        n(&w.synthesis_max_isl),
        n(&w.synthesis_max_osl),
    );
    let at_of = |key: &str| match key {
        "synthesis_speedup_ratio" => speedup.map(|v| v.0),
        "synthesis_prefix_len_multiplier" => prefix_len.map(|v| v.0),
        "synthesis_prompt_len_multiplier" => prompt_len.map(|v| v.0),
        "synthesis_prefix_root_multiplier" => roots.map(|v| v.0),
        "synthesis_max_isl" => isl.map(|v| v.0),
        "synthesis_max_osl" => osl.map(|v| v.0),
        _ => None,
    };
    let given = [speedup, prefix_len, prompt_len]
        .iter()
        .map(|v| v.map(|v| v.0))
        .chain([roots, isl, osl].iter().map(|v| v.map(|v| v.0)))
        .flatten()
        .min();
    let Some(first_at) = given else {
        return Ok(None);
    };
    if w.trace.is_none() {
        return Err(src.err(
            Some(first_at),
            format!(
                "workloads.{name}: synthesis_* keys transform a trace, and this workload has \
                 none (synthetic requests take isl, osl, …)"
            ),
        ));
    }
    let d = Synthesis::default();
    let s = Synthesis {
        speedup_ratio: speedup.map_or(d.speedup_ratio, |v| v.1),
        prefix_len_multiplier: prefix_len.map_or(d.prefix_len_multiplier, |v| v.1),
        prefix_root_multiplier: roots.map_or(d.prefix_root_multiplier, |v| v.1),
        prompt_len_multiplier: prompt_len.map_or(d.prompt_len_multiplier, |v| v.1),
        max_isl: isl.map(|v| v.1),
        max_osl: osl.map(|v| v.1),
        seed: w.random_seed.unwrap_or(d.seed),
    };
    s.validate_settings().map_err(|e| {
        let key = e.setting.name();
        src.err(
            at_of(key).or(Some(first_at)),
            format!("workloads.{name}.{}", e.spelled(key)),
        )
    })?;
    Ok(Some(s))
}
