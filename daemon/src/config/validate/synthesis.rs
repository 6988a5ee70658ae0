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

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    const HEAD: &str = "[targets.t]\nurl = \"http://127.0.0.1:1\"\nmodel = \"m\"\n\n\
                        [workloads.w]\ntarget = \"t\"\nevery = \"1m\"\n";

    fn parse(keys: &str) -> Result<Config, crate::config::ConfigError> {
        Config::parse(
            &format!("{HEAD}{keys}"),
            Path::new("c.toml"),
            Path::new("/"),
        )
    }

    #[test]
    fn synthesis_keys_reach_the_plan() {
        let c = parse(
            "trace = \"bundled\"\nsynthesis_max_isl = 512\nsynthesis_speedup_ratio = 2.5\n\
             random_seed = 9\n",
        )
        .unwrap();
        let s = c.workloads[0].synthesis.clone().unwrap();
        assert_eq!((s.max_isl, s.speedup_ratio, s.seed), (Some(512), 2.5, 9));
        assert_eq!(s.prompt_len_multiplier, 1.0);
        let plan = canary_replay::Plan::try_from(crate::config::WorkloadPlan {
            workload: &c.workloads[0],
            target: &c.targets["t"],
        })
        .unwrap();
        assert_eq!(plan.trace().unwrap().synthesis, Some(s));
        let none = parse("trace = \"bundled\"\n").unwrap();
        assert_eq!(none.workloads[0].synthesis, None);
    }

    #[test]
    fn a_bad_synthesis_value_names_the_file_line_and_key() {
        let e = parse(
            "trace = \"bundled\"\nsynthesis_max_osl = 8\nsynthesis_prompt_len_multiplier = 0\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "c.toml:10: workloads.w.synthesis_prompt_len_multiplier 0: expected a positive number"
        );
        let e = parse("trace = \"bundled\"\nsynthesis_prefix_root_multiplier = 0\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "c.toml:9: workloads.w.synthesis_prefix_root_multiplier 0: expected 1 or more"
        );
        // A synthetic load has no trace to transform.
        let e = parse("request_rate = 2.0\nsynthesis_max_isl = 5\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("c.toml:9: workloads.w: synthesis_* keys transform a trace"),
            "{e}"
        );
        // A value of the wrong type is caught by the parser, with its line.
        let e = parse("trace = \"bundled\"\nsynthesis_max_isl = \"big\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("c.toml:9"), "{e}");
    }
}
