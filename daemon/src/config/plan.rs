//! A workload and its target as a [`Plan`]: the daemon's front end of the library's run plan.
//! Defaults are the plan's own (the config filled them in when it loaded); errors name the
//! config keys (`workloads.chat.speedup`, `targets.local.api_key_file`).

use super::{Target, TraceSource, Workload};
use crate::bundled::{BUNDLED_TRACE, BUNDLED_TRACE_NAME};
use canary_replay::{
    LoadShape, Plan, PromptSpec, Selection, Setting, Table, TokenizerSpec, TracePlan,
};

/// A workload of the config with its target: what [`Plan::try_from`] builds a plan from.
#[derive(Debug, Clone, Copy)]
pub struct WorkloadPlan<'a> {
    /// The workload.
    pub workload: &'a Workload,
    /// Its target.
    pub target: &'a Target,
}

impl WorkloadPlan<'_> {
    /// How the daemon names `setting` of this workload: its key path in the config file.
    pub fn key(&self, setting: Setting) -> String {
        match setting.table() {
            Table::Workload => format!("workloads.{}.{}", self.workload.name, setting.name()),
            Table::Target => format!("targets.{}.{}", self.target.name, setting.name()),
        }
    }
}

impl TryFrom<WorkloadPlan<'_>> for Plan {
    type Error = anyhow::Error;

    /// The plan of one run of the workload; the caller sets its run id and artifacts folder.
    /// The target's key is read when the run starts, only from the source the target names:
    /// no `OPENAI_API_KEY` fallback as in `canaryd replay` (every target, plain http
    /// included, would get that key).
    fn try_from(p: WorkloadPlan<'_>) -> anyhow::Result<Plan> {
        let (w, t) = (p.workload, p.target);
        // Every URL of the target (replicas: `url = [..]`) with the same settings.
        let make = |url: &str| -> anyhow::Result<canary_replay::Target> {
            let mut target = canary_replay::Target::new(url, t.endpoint, &t.model)
                .map_err(|e| anyhow::anyhow!("{}: {}", p.key_url(), e.reason))?;
            target.headers = t.headers.clone();
            target.ca_bundle.clone_from(&t.ca_bundle);
            target.client_identity.clone_from(&t.client_identity);
            target.timeout = t.request_timeout;
            target.limits = t.limits;
            target.kernel_timestamps = t.kernel_timestamps;
            Ok(target)
        };
        let target = make(&t.url)?;
        let replicas = t
            .replica_urls
            .iter()
            .map(|u| make(u))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let load = match (&w.trace, &w.synthetic) {
            (Some(source), _) => {
                let mut trace = match source {
                    TraceSource::Bundled => TracePlan::embedded(BUNDLED_TRACE_NAME, BUNDLED_TRACE),
                    TraceSource::File(path, format) => TracePlan::file(path).with_format(*format),
                };
                trace.speedup = w.speedup;
                trace.read.max_line_bytes = w.max_line_bytes;
                trace.selection = Selection {
                    start_offset: w.start_offset,
                    end_offset: w.end_offset,
                    max_requests: w.max_requests,
                    scale_lengths: w.scale_lengths,
                    ..Selection::default()
                };
                trace.synthesis.clone_from(&w.synthesis);
                LoadShape::Trace(trace)
            }
            (None, Some(synthetic)) => synthetic.load(),
            (None, None) => {
                anyhow::bail!("workloads.{}: neither a trace nor a synthetic load", w.name)
            }
        };
        let mut plan = Plan::new(w.name.clone(), load, target);
        plan.set_length_limit(w.length_limit);
        plan.target_name = Some(t.name.clone());
        plan.prompts = PromptSpec {
            tokenizer: match &w.tokenizer {
                Some(path) => TokenizerSpec::HuggingFace(path.clone()),
                None => TokenizerSpec::BuiltinO200k,
            },
            seed: w.prompt_seed,
        };
        plan.api_key.clone_from(&t.api_key);
        let closed_loop = matches!(plan.load, LoadShape::ClosedLoop(_));
        let r = &mut plan.replay;
        r.replicas = replicas;
        r.balance = t.url_strategy;
        // A closed loop's users are its ceiling (`Plan::dispatcher_config`), not a second one.
        r.concurrency = w.concurrency.filter(|_| !closed_loop);
        r.cancellation = w.cancellation;
        r.warmup_requests = w.warmup_requests;
        r.grace_period = w.grace_period;
        r.slice_duration = w.slice_duration;
        r.start_at.clone_from(&w.start_at);
        r.goodput = w.slos.clone();
        Ok(plan)
    }
}

impl WorkloadPlan<'_> {
    fn key_url(&self) -> String {
        format!("targets.{}.url", self.target.name)
    }
}
