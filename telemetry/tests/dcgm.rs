//! dcgm-exporter captures mapped onto `GpuSample`, and the DCGM scraper on loopback.

use std::time::Duration;

use canary_core::MonoTime;
use canary_telemetry::prometheus::parse;
use canary_telemetry::{dcgm_gpu_samples, probe_dcgm, DcgmConfig, DcgmScraper, GpuSource};
use tokio_util::sync::CancellationToken;

const MIB: u64 = 1024 * 1024;

#[test]
fn rtx4000_capture_with_kubernetes_labels() {
    let gpus = dcgm_gpu_samples(
        &parse(&fixture!("dcgm_exporter_metrics_rtx4000ada.prom")),
        MonoTime(7),
    );
    assert_eq!(gpus.len(), 1);
    let g = &gpus[0];
    assert_eq!((g.at, g.source, g.gpu), (MonoTime(7), GpuSource::Dcgm, 0));
    assert_eq!(
        g.uuid.as_deref(),
        Some("GPU-a8394b51-c086-568a-9f1a-c1e1c934c44c")
    );
    assert_eq!(
        g.model_name.as_deref(),
        Some("NVIDIA RTX 4000 Ada Generation")
    );
    assert_eq!(g.sm_clock_mhz, Some(2310.0));
    assert_eq!(g.mem_clock_mhz, Some(9001.0));
    assert_eq!(g.temp_c, Some(48.0));
    assert_close!(g.power_w.unwrap(), 40.979);
    assert_close!(g.energy_j.unwrap(), 455_497.156);
    assert_eq!((g.util_gpu_pct, g.util_mem_pct), (Some(0.0), Some(0.0)));
    assert_eq!(g.mem_used_bytes, Some(MIB));
    // No FB_TOTAL exported: used 1 + free 20015 + reserved 457 MiB = the card's 20 GB.
    assert_eq!(g.mem_total_bytes, Some(20_473 * MIB));
    assert_eq!(g.pcie_tx_bytes_per_s, Some(78_398_480.0));
    assert_eq!(g.pcie_rx_bytes_per_s, Some(45_987_793.0));
    assert_close!(g.gr_engine_active.unwrap(), 0.004656);
    assert_eq!(g.throttle_reasons, None);
    assert_eq!(g.label("pod"), Some("cuda-75454ffb9f-8ljq7"));
    assert_eq!(g.label("namespace"), Some("default"));
    assert_eq!(g.label("container"), Some("cuda"));
    assert_eq!(g.label("DCGM_FI_DRIVER_VERSION"), Some("580.95.05"));
    assert_eq!(g.label("UUID"), None, "identity labels become fields");
}

#[test]
fn rtx6000_capture_with_fb_total() {
    let gpus = dcgm_gpu_samples(
        &parse(&fixture!(
            "dcgm_exporter_metrics_aiperf_testfixture_rtx6000ada.prom"
        )),
        MonoTime(1),
    );
    assert_eq!(gpus.len(), 1);
    let g = &gpus[0];
    assert_eq!(
        g.model_name.as_deref(),
        Some("NVIDIA RTX 6000 Ada Generation")
    );
    assert_eq!((g.util_gpu_pct, g.util_mem_pct), (Some(1.0), Some(15.0)));
    assert_eq!(g.mem_used_bytes, Some(46_614 * MIB));
    assert_eq!(g.mem_total_bytes, Some(48_662 * MIB));
    assert_close!(g.power_w.unwrap(), 22.582);
    assert_close!(g.energy_j.unwrap(), 955_287.014);
    assert_eq!(
        (g.sm_clock_mhz, g.mem_clock_mhz),
        (Some(210.0), Some(405.0))
    );
    assert_eq!(g.temp_c, None, "this field set has no temperature");
    assert_eq!(g.label("Hostname"), Some("ed7e7a5e585f"));
}

#[test]
fn several_gpus_are_split_by_index() {
    let text = "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n\
        DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"b\"} 80\n\
        DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"a\"} 20\n\
        DCGM_FI_DEV_GPU_UTIL{UUID=\"no-index\"} 5\n";
    let gpus = dcgm_gpu_samples(&parse(text), MonoTime(1));
    assert_eq!(gpus.len(), 2);
    assert_eq!((gpus[0].gpu, gpus[0].util_gpu_pct), (0, Some(20.0)));
    assert_eq!(
        (gpus[1].uuid.as_deref(), gpus[1].util_gpu_pct),
        (Some("b"), Some(80.0))
    );
}

#[test]
fn a_hostile_page_gives_bounded_samples_and_no_overflow() {
    use canary_telemetry::{DCGM_MAX_GPUS, DCGM_MAX_LABELS};
    let long = "A".repeat(1024);
    let mut text = String::from("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n");
    for gpu in 0..100 {
        let many: String = (0..20).map(|i| format!(",l{i:02}=\"{long}\"")).collect();
        text += &format!("DCGM_FI_DEV_GPU_UTIL{{gpu=\"{gpu}\",UUID=\"{long}\"{many}}} 1\n");
    }
    // Framebuffer figures whose sum is past what a u64 of bytes holds.
    text += "# TYPE DCGM_FI_DEV_FB_USED gauge\nDCGM_FI_DEV_FB_USED{gpu=\"0\"} 1e14\n";
    text += "# TYPE DCGM_FI_DEV_FB_FREE gauge\nDCGM_FI_DEV_FB_FREE{gpu=\"0\"} 1e14\n";
    let gpus = dcgm_gpu_samples(&parse(&text), MonoTime(1));
    assert_eq!(gpus.len(), DCGM_MAX_GPUS);
    for g in &gpus {
        assert_eq!(g.labels.len(), DCGM_MAX_LABELS);
        assert!(g
            .labels
            .iter()
            .all(|(k, v)| k.len() <= 64 && v.len() <= 128));
        assert!(g.uuid.as_ref().is_some_and(|u| u.len() <= 128));
    }
    assert_eq!(gpus[0].mem_total_bytes, Some(u64::MAX));
}

#[tokio::test]
async fn dcgm_scraper_on_loopback() {
    let page = fixture!("dcgm_exporter_metrics_rtx4000ada.prom");
    let base = crate::scraper::serve(move |_| page.clone()).await;
    let url = format!("{base}/metrics");
    let probe = probe_dcgm(&url, Duration::from_secs(5)).await;
    assert!(probe.to_string().contains("RTX 4000 Ada"), "{probe}");
    let scraper = DcgmScraper::new(DcgmConfig {
        url,
        tls: None,
        interval: Duration::from_millis(20),
        timeout: Some(Duration::from_secs(5)),
        capacity: 3,
        ..DcgmConfig::default()
    })
    .unwrap();
    let ring = scraper.samples();
    let state = scraper.state();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(scraper.run(shutdown.clone()));
    crate::scraper::wait_for("3 DCGM scrapes", || ring.len() == 3).await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert!(state.get().is_available());
    assert!(ring.snapshot().iter().all(|g| g.power_w.is_some()));
}

#[tokio::test]
async fn dcgm_unreachable_is_reported() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let state = probe_dcgm(
        &format!("http://127.0.0.1:{port}/metrics"),
        Duration::from_secs(5),
    )
    .await;
    assert!(!state.is_available());
    assert!(state.to_string().contains("cannot connect"), "{state}");
}
