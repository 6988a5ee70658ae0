//! NVML and dcgm-exporter sampled together, the way the daemon runs them: the fake
//! `libnvidia-ml.so` in-process and a loopback dcgm-exporter serving a real capture, their two
//! rings' windows concatenated. Each GPU must count once, and energy never be differenced
//! across sources.

use std::time::Duration;

use canary_core::MonoTime;
use canary_telemetry::{
    energy_over_run, gpu_over_interval, gpu_summary, DcgmConfig, DcgmScraper, EnergyMethod,
    GpuSample, GpuSource, NvmlConfig, NvmlSampler, Ring,
};
use tokio_util::sync::CancellationToken;

/// The capture's GPU, and the UUID the fake NVML library gives its GPU 0.
const CAPTURE_UUID: &str = "GPU-a8394b51-c086-568a-9f1a-c1e1c934c44c";
const FAKE_GPU0_UUID: &str = "GPU-fake-0000";

/// Samples NVML four times, with at least one DCGM scrape between rounds, and returns both
/// rings' windows over the run as the daemon gathers them (NVML's, then DCGM's).
async fn both_sources(page: String) -> (Vec<GpuSample>, MonoTime, MonoTime) {
    let dir = tempfile::tempdir().unwrap();
    let lib = crate::nvml::build_fake(dir.path(), "libnvidia-ml.so", &[]);
    let config = NvmlConfig {
        capacity: 1000,
        // Rounds a second apart as far as the sampler knows: each reads the energy counter.
        interval: Duration::from_secs(1),
        ..crate::nvml::config(lib)
    };
    let mut nvml = NvmlSampler::open(config).unwrap();
    let nvml_ring = nvml.samples();
    let base = crate::scraper::serve(move |_| page.clone()).await;
    let dcgm = DcgmScraper::new(DcgmConfig {
        url: format!("{base}/metrics"),
        tls: None,
        interval: Duration::from_millis(20),
        timeout: Some(Duration::from_secs(5)),
        capacity: 1000,
        ..DcgmConfig::default()
    })
    .unwrap();
    let dcgm_ring = dcgm.samples();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(dcgm.run(shutdown.clone()));
    crate::scraper::wait_for("a first DCGM scrape", || !dcgm_ring.is_empty()).await;
    let t0 = MonoTime::now();
    for round in 0..4 {
        nvml.sample_now();
        if round < 3 {
            let n = dcgm_ring.len();
            crate::scraper::wait_for("a DCGM scrape", || dcgm_ring.len() > n).await;
        }
    }
    let t1 = MonoTime::now();
    shutdown.cancel();
    task.await.unwrap().unwrap();
    let rings: [&Ring<GpuSample>; 2] = [&nvml_ring, &dcgm_ring];
    let all = rings.iter().flat_map(|r| r.covering(t0, t1)).collect();
    (all, t0, t1)
}

/// Energy as the counters' growth between the first and last rounds, give or take the part of
/// an interval before or after a run's edge, which is read between samples: the two GPUs are
/// read microseconds apart, and the window's edges fall near, not on, a round.
macro_rules! assert_about {
    ($joules:expr, $rounds_growth:expr) => {{
        let (j, g): (f64, f64) = ($joules, $rounds_growth);
        assert!(
            g <= j && j < g * 1.01,
            "{} = {j}, expected {g} or a little more",
            stringify!($joules)
        );
    }};
}

#[tokio::test]
async fn nvml_and_dcgm_of_the_same_gpu_count_it_once() {
    // The capture as if dcgm-exporter ran on the fake's host: its one GPU is NVML's GPU 0.
    let page =
        fixture!("dcgm_exporter_metrics_rtx4000ada.prom").replace(CAPTURE_UUID, FAKE_GPU0_UUID);
    let (samples, t0, t1) = both_sources(page).await;
    assert!(samples.iter().any(|s| s.source == GpuSource::Dcgm));
    let e = energy_over_run(&samples, t0, t1).unwrap();
    // NVML alone: 2 GPUs, 4 rounds, each GPU's counter 10 J higher every round (the fake adds
    // 5 J per read and reads both GPUs). DCGM's stale 455 kJ counter for GPU 0 is not used.
    assert_eq!((e.gpus, e.method), (2, EnergyMethod::Counter));
    assert_about!(e.joules, 2.0 * 3.0 * 10.0);
    let w = gpu_over_interval(&samples, None, t0, t1);
    // The capture says 0 % and 41 W for GPU 0; only NVML's 73 % and 215 W count.
    assert_eq!((w.samples, w.util_avg_pct), (8, Some(73.0)));
    assert_eq!(w.power_max_w, Some(215.123));

    let s = gpu_summary(&samples, t0, t1, 6).unwrap();
    assert_eq!((s.gpus, s.sources.as_slice()), (2, &[GpuSource::Nvml][..]));
    assert_about!(s.energy_per_output_token_j.unwrap(), 10.0);
}

#[tokio::test]
async fn a_dcgm_gpu_nvml_does_not_see_is_kept_apart() {
    // The capture unchanged: another GPU (its own UUID), e.g. dcgm-exporter on the server's node.
    let (samples, t0, t1) = both_sources(fixture!("dcgm_exporter_metrics_rtx4000ada.prom")).await;
    let e = energy_over_run(&samples, t0, t1).unwrap();
    // Its counter is constant across the captures served: a stale counter (dcgm-exporter
    // refreshes every 30 s by default), which says nothing, so its 40.979 W is integrated
    // instead (it once added 0 J). Before GPUs were told apart by source, its 455 kJ against
    // NVML's 1 kJ on the same index looked like a reset.
    assert_eq!((e.gpus, e.method), (3, EnergyMethod::Mixed));
    let dcgm_most = 40.979 * t1.since(t0).as_secs_f64();
    let dcgm = e.joules - 60.0;
    // Each reading is held until the next, for at most twice the usual gap: at least half the
    // window is covered however a loaded host spaced the scrapes.
    assert!(
        dcgm > 0.5 * dcgm_most && dcgm <= dcgm_most + 0.6,
        "{} J, the DCGM GPU's part {dcgm} J of at most {dcgm_most} J",
        e.joules
    );
}

#[tokio::test]
async fn the_run_summary_carries_memory_temperature_throttling_and_the_server_process() {
    let (samples, t0, t1) = both_sources(fixture!("dcgm_exporter_metrics_rtx4000ada.prom")).await;
    let s = gpu_summary(&samples, t0, t1, 0).unwrap();
    assert_eq!(s.gpus, 3);
    assert_eq!(s.sources, [GpuSource::Nvml, GpuSource::Dcgm]);
    // The fake's values (NVML), above the capture's 48 C and 1 MiB.
    assert_eq!(s.temp_max_c, Some(64.0));
    assert_eq!(s.mem_used_max_bytes, Some(12_345_678_912));
    // Throttle reason 0x4 from the fake; the capture's field set has none.
    assert_eq!(s.throttle_reasons, Some(vec!["sw_power_cap".to_owned()]));
    // The fake reports pid 4242 (the configured server pid) at SM 55 %, memory 22 %.
    assert_eq!(s.process_sm_util_avg_pct, Some(55.0));
    assert_eq!(s.process_sm_util_max_pct, Some(55.0));
    assert_eq!(s.process_mem_util_avg_pct, Some(22.0));
    let dcgm = &s.per_gpu[2];
    assert_eq!((dcgm.source, dcgm.gpu), (GpuSource::Dcgm, 0));
    assert_eq!(
        dcgm.model_name.as_deref(),
        Some("NVIDIA RTX 4000 Ada Generation")
    );
    assert_eq!(
        (dcgm.temp_max_c, dcgm.mem_used_max_bytes),
        (Some(48.0), Some(1 << 20))
    );
    assert_eq!(dcgm.process_sm_util_avg_pct, None);
    // Clocks and memory utilization from both sources: the fake's SM 1980 MHz, memory 2619 MHz
    // and 41 % (NVML), the capture's 2310 MHz, 9001 MHz and DCGM_FI_DEV_MEM_COPY_UTIL 0 %.
    let figures = |p: &canary_telemetry::GpuRunStats| {
        (
            p.sm_clock_min_mhz,
            p.sm_clock_avg_mhz,
            p.mem_clock_avg_mhz,
            p.util_mem_avg_pct,
            p.util_mem_max_pct,
        )
    };
    assert_eq!(
        figures(&s.per_gpu[0]),
        (
            Some(1980.0),
            Some(1980.0),
            Some(2619.0),
            Some(41.0),
            Some(41.0)
        )
    );
    assert_eq!(
        figures(dcgm),
        (
            Some(2310.0),
            Some(2310.0),
            Some(9001.0),
            Some(0.0),
            Some(0.0)
        )
    );
    assert_eq!(s.sm_clock_min_mhz, Some(1980.0));
    let avg = s.sm_clock_avg_mhz.unwrap();
    assert!(avg > 1980.0 && avg < 2310.0, "{avg}");
    assert_eq!(s.util_mem_max_pct, Some(41.0));
    // What summary.json gets: the fields the daemon wrote before keep their names.
    let json = serde_json::to_value(&s).unwrap();
    for key in [
        "util_avg_pct",
        "util_max_pct",
        "power_avg_w",
        "power_max_w",
        "energy",
    ] {
        assert!(!json[key].is_null(), "{key}: {json}");
    }
    assert_eq!(json["sources"], serde_json::json!(["nvml", "dcgm"]));
    assert_eq!(json["per_gpu"][0]["uuid"], "GPU-fake-0000");
}
