//! A page with several models' series is read for the run's model only (audit of the server
//! telemetry, F1), by each engine's model label; the whole page is still what is kept.

use canary_core::MonoTime;
use canary_telemetry::prometheus::parse;
use canary_telemetry::{ModelChoice, ServerSample};

const QWEN: &str = "Qwen/Qwen2.5-Coder-1.5B-Instruct";

fn read(page: &str, model: Option<&str>, keep_raw: bool) -> ServerSample {
    ServerSample::from_scrape_for(parse(page), MonoTime(1), keep_raw, model)
}

/// The vLLM capture with its `model_name` series also given to "other", whose queue is 20
/// and whose cache is full.
fn two_models() -> String {
    let label = format!("model_name=\"{QWEN}\"");
    let mut page = String::new();
    for line in fixture!("vllm_metrics_v0_qwen2.5-coder-1.5b.prom").lines() {
        page += &format!("{line}\n");
        if line.starts_with('#') || !line.contains(&label) {
            continue;
        }
        let copy = line.replace(&label, "model_name=\"other\"");
        let value = match copy.split('{').next().unwrap() {
            "vllm:num_requests_waiting" => Some("20.0"),
            "vllm:gpu_cache_usage_perc" => Some("0.99"),
            _ => None,
        };
        page += &match value {
            Some(v) => format!("{} {v}\n", copy.rsplit_once(' ').unwrap().0),
            None => format!("{copy}\n"),
        };
    }
    page
}

#[test]
fn the_runs_models_series_alone_are_read_and_the_page_kept_whole() {
    let page = two_models();
    let s = read(&page, Some(QWEN), true);
    assert_eq!(
        (s.queue_depth, s.kv_cache_usage, s.prompt_tokens_total),
        (Some(0.0), Some(0.0), Some(148.0))
    );
    assert_eq!(
        s.model,
        Some(ModelChoice::Only {
            label: "model_name",
            model: QWEN.into(),
            models: 2
        })
    );
    // The page kept is the page served, every model's series in it.
    let raw = s.raw.unwrap();
    assert_eq!(raw.samples("vllm:num_requests_waiting").count(), 2);

    // No model asked for: summed, as before.
    let all = read(&page, None, false);
    assert_eq!((all.queue_depth, all.model), (Some(20.0), None));
    assert_eq!(all.prompt_tokens_total, Some(296.0));

    // A model the page does not have: every series read, and why.
    let none = read(&page, Some("x"), false);
    assert_eq!(none.queue_depth, Some(20.0));
    let choice = none.model.unwrap();
    assert!(matches!(choice, ModelChoice::NoneMatched { models: 2, .. }));
    assert_eq!(
        choice.to_string(),
        format!(
            "no series of model_name=\"x\" (the run's model) among the page's 2 models \
             (\"{QWEN}\", \"other\"): every model's series read, other models' traffic included"
        )
    );
}

#[test]
fn a_page_of_one_model_is_read_whatever_its_name() {
    let page = fixture!("vllm_metrics_v0_qwen2.5-coder-1.5b.prom");
    let s = read(&page, Some("an-alias"), false);
    assert_eq!(s.model, None);
    assert_eq!(s.prompt_tokens_total, Some(148.0));
}

// The Dynamo frontend labels its series `model` (Dynamo's metrics guide), not `model_name`.
#[test]
fn the_dynamo_frontend_is_read_by_its_model_label() {
    let page = concat!(
        "# TYPE dynamo_frontend_router_queue_pending_requests gauge\n",
        "dynamo_frontend_router_queue_pending_requests{model=\"m\"} 0\n",
        "dynamo_frontend_router_queue_pending_requests{model=\"other\"} 7\n",
        "# TYPE dynamo_frontend_inflight_requests gauge\n",
        "dynamo_frontend_inflight_requests{model=\"m\"} 2\n",
        "dynamo_frontend_inflight_requests{model=\"other\"} 9\n",
    );
    let s = read(page, Some("m"), false);
    assert_eq!((s.queue_depth, s.running_requests), (Some(0.0), Some(2.0)));
    assert!(matches!(
        s.model,
        Some(ModelChoice::Only { label: "model", .. })
    ));
}
