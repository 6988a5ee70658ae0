//! The real nvml-wrapper loading path, against a fake `libnvidia-ml.so` compiled from
//! `tests/fake_nvml/fake_nvml.c` at test time. Skips loudly when no C compiler is present.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use canary_telemetry::{probe_nvml, GpuSource, NvmlConfig, NvmlOpener, NvmlSampler, SourceState};
use tokio_util::sync::CancellationToken;

/// Compiles the fake library into `dir`. A C compiler is part of the base image, so its
/// absence fails the test rather than skipping it.
pub fn build_fake(dir: &Path, name: &str, defines: &[&str]) -> PathBuf {
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_nvml/fake_nvml.c");
    let out = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .args(defines)
        .arg(src)
        .status();
    match status {
        Ok(s) if s.success() => out,
        other => panic!("cannot build the fake libnvidia-ml.so with `{cc}`: {other:?}"),
    }
}

pub fn config(lib: PathBuf) -> NvmlConfig {
    NvmlConfig {
        lib_path: Some(lib),
        interval: Duration::from_millis(10),
        capacity: 6,
        // The fake reports three samples of pid 4242 (unless FAKE_NVML_PID is set) and one of
        // pid 1 per query.
        server_pid: Some(4242),
    }
}

/// A GPU that stops answering mid-run (fallen off the bus): its samples stop, the others go
/// on, and the sampler names it for the run's report.
#[test]
fn a_gpu_that_stops_answering_is_named_and_the_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let lib = build_fake(
        dir.path(),
        "libnvidia-ml-lose.so",
        &["-DLOSE_GPU_1_AFTER=2"],
    );
    // The first lookup of GPU 1 is open's, the second the first round's.
    let mut s = NvmlSampler::open(config(lib)).expect("fake NVML loads");
    let lost = s.lost();
    assert_eq!(s.sample_now().len(), 2);
    assert!(lost.all().is_empty());
    let after: Vec<u32> = s.sample_now().iter().map(|g| g.gpu).collect();
    assert_eq!(after, vec![0]);
    assert_eq!(lost.all(), vec![1]);
    assert_eq!(s.sample_now().len(), 1);
    assert_eq!(lost.all(), vec![1], "named once");
}

#[test]
fn fake_nvml_values_come_out_in_gpu_samples() {
    let dir = tempfile::tempdir().unwrap();
    let lib = build_fake(dir.path(), "libnvidia-ml.so", &[]);
    let mut s = NvmlSampler::open(config(lib.clone())).expect("fake NVML loads");
    assert!(s
        .detail()
        .starts_with("2 GPU(s), Fake NVIDIA H100 80GB HBM3, driver 580.00-fake"));
    let first = s.sample_now();
    assert_eq!(first.len(), 2);
    let g = &first[1];
    assert_eq!((g.source, g.gpu), (GpuSource::Nvml, 1));
    assert_eq!(g.uuid.as_deref(), Some("GPU-fake-0001"));
    assert_eq!(g.model_name.as_deref(), Some("Fake NVIDIA H100 80GB HBM3"));
    assert_eq!((g.util_gpu_pct, g.util_mem_pct), (Some(73.0), Some(41.0)));
    assert_eq!(g.mem_used_bytes, Some(12_345_678_912));
    assert_eq!(g.mem_total_bytes, Some(80 << 30));
    assert_eq!(g.power_w, Some(215.123));
    assert_eq!(g.temp_c, Some(64.0));
    assert_eq!(
        (g.sm_clock_mhz, g.mem_clock_mhz),
        (Some(1980.0), Some(2619.0))
    );
    assert_eq!(g.throttle_reasons, Some(0x4));
    // Not read, though the library has it: NVML waits out a 20 ms window per direction.
    assert_eq!((g.pcie_tx_bytes_per_s, g.pcie_rx_bytes_per_s), (None, None));
    // The mean of the pid's three samples since the last query, not the first (40 %, 10 %).
    assert_eq!(
        (g.process_sm_util_pct, g.process_mem_util_pct),
        (Some(55.0), Some(22.0))
    );
    // The energy counter grows by 5 J per read; at this 10 ms interval the second round
    // does not read it (see the next test).
    let second = s.sample_now();
    let e0 = first[0].energy_j.unwrap();
    assert!(e0 >= 1000.0);
    assert_eq!(second[0].energy_j, None);
    assert_eq!(second[0].power_w, Some(215.123));
    assert!(second[0].at >= first[1].at);
    assert_eq!(s.samples().len(), 4);

    // Doctor says what one sampling round over every GPU costs.
    match probe_nvml(Some(lib)) {
        SourceState::Available { detail } => {
            assert!(detail.starts_with("2 GPU(s), Fake NVIDIA H100"), "{detail}");
            assert!(
                detail.contains("; one sampling round ")
                    && detail.contains(" ms with the energy counter (median of 5, ")
                    && detail.ends_with(" ms, wall time)"),
                "{detail}"
            );
        }
        other => panic!("fake NVML probed as {other:?}"),
    }
}

/// The energy counter's read is most of a round's cost on a real GPU (2.4 ms of CPU on an
/// H200), so it is read once a second at most: every round at 1 s or more, every 100th at
/// 10 ms; a run's energy interpolates between its readings.
#[test]
fn the_energy_counter_is_read_once_a_second_at_most() {
    let dir = tempfile::tempdir().unwrap();
    let lib = build_fake(dir.path(), "libnvidia-ml.so", &[]);
    let read = |interval_ms: u64, rounds: usize| -> Vec<bool> {
        let mut s = NvmlSampler::open(NvmlConfig {
            interval: Duration::from_millis(interval_ms),
            ..config(lib.clone())
        })
        .unwrap();
        (0..rounds)
            .map(|_| s.sample_now()[0].energy_j.is_some())
            .collect()
    };
    let fast = read(10, 201);
    let with: Vec<usize> = (0..fast.len()).filter(|&i| fast[i]).collect();
    assert_eq!(with, vec![0, 100, 200]);
    assert_eq!(read(500, 4), vec![true, false, true, false]);
    assert_eq!(read(300, 4), vec![true, false, false, true]);
    assert_eq!(read(1000, 3), vec![true, true, true]);
    assert_eq!(read(5000, 2), vec![true, true]);
}

/// `--server-pid`'s per-process query cost 1.4 ms of CPU a round on the H200, so it is made
/// on the energy counter's rounds, once a second at most; NVML returns every sample of each
/// process since the previous query, and the reading is the mean of the server's.
#[test]
fn the_server_process_is_queried_once_a_second_and_all_its_samples_count() {
    let dir = tempfile::tempdir().unwrap();
    let lib = build_fake(dir.path(), "libnvidia-ml.so", &[]);
    let read = |interval_ms: u64, pid: u32, rounds: usize| -> Vec<(Option<f64>, Option<f64>)> {
        let mut s = NvmlSampler::open(NvmlConfig {
            interval: Duration::from_millis(interval_ms),
            server_pid: Some(pid),
            ..config(lib.clone())
        })
        .unwrap();
        (0..rounds)
            .map(|_| {
                let g = &s.sample_now()[1];
                (g.process_sm_util_pct, g.process_mem_util_pct)
            })
            .collect()
    };
    let fast = read(10, 4242, 201);
    let with: Vec<usize> = (0..fast.len()).filter(|&i| fast[i].0.is_some()).collect();
    assert_eq!(with, vec![0, 100, 200]);
    // Each reading the mean of the pid's three samples (SM 40, 55, 70 %; memory 10, 22, 34 %),
    // the other process's (99 %) left out.
    assert!(fast.iter().flat_map(|r| r.0).all(|sm| sm == 55.0));
    assert_eq!(fast[100], (Some(55.0), Some(22.0)));
    let queried = |r: Vec<(Option<f64>, Option<f64>)>| -> Vec<bool> {
        r.iter().map(|r| r.0.is_some()).collect()
    };
    assert_eq!(queried(read(500, 4242, 4)), vec![true, false, true, false]);
    assert_eq!(queried(read(1000, 4242, 3)), vec![true, true, true]);
    // The other process, and a pid NVML has no sample of.
    assert_eq!(read(1000, 1, 1), vec![(Some(99.0), Some(99.0))]);
    assert_eq!(read(1000, 7, 2), vec![(None, None); 2]);
}

#[test]
fn missing_symbol_loses_only_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let lib = build_fake(dir.path(), "libnvidia-ml.so", &["-DNO_PROCESS_UTIL"]);
    let mut s = NvmlSampler::open(config(lib)).unwrap();
    let g = &s.sample_now()[0];
    assert_eq!(g.process_sm_util_pct, None);
    assert_eq!(g.util_gpu_pct, Some(73.0));
}

#[tokio::test]
async fn sampler_runs_until_shutdown_and_ring_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let lib = build_fake(dir.path(), "libnvidia-ml.so", &[]);
    let s = NvmlSampler::open(config(lib)).unwrap();
    let ring = s.samples();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(s.run(shutdown.clone()));
    crate::scraper::wait_for("a full ring", || ring.len() == 6).await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(ring.len(), 6);
}

/// A run's NVML, opened through the opener on a thread of its own: available, the GPUs
/// described, samples coming until the stop; a second open through the same opener works too
/// (the first returned, so it does not wait on it).
#[tokio::test]
async fn the_opener_opens_on_its_own_thread_and_samples_until_the_stop() {
    let dir = tempfile::tempdir().unwrap();
    let lib = build_fake(dir.path(), "libnvidia-ml.so", &[]);
    let opener = NvmlOpener::default();
    for _ in 0..2 {
        let stop = CancellationToken::new();
        let (opened, state) = opener.open(config(lib.clone()), stop.clone()).await;
        assert!(matches!(state, SourceState::Available { .. }), "{state}");
        let nvml = opened.expect("opened");
        assert_eq!(nvml.context.count, canary_core::Known::Value(2));
        crate::scraper::wait_for("a full ring", || nvml.samples.len() == 6).await;
        stop.cancel();
    }
}

/// A missing library through the opener: unavailable with the reason, at once.
#[tokio::test]
async fn the_opener_says_why_a_missing_library_is_unavailable() {
    let opener = NvmlOpener::default();
    let (opened, state) = opener
        .open(
            config("/nonexistent/libnvidia-ml.so".into()),
            CancellationToken::new(),
        )
        .await;
    assert!(opened.is_none());
    match state {
        SourceState::Unavailable { reason } => {
            assert!(
                reason.starts_with("cannot initialize NVML from"),
                "{reason}"
            )
        }
        other => panic!("{other}"),
    }
}

#[test]
fn no_library_is_unavailable_with_a_reason() {
    let (sampler, state) = NvmlSampler::open_or_report(NvmlConfig {
        lib_path: Some("/nonexistent/libnvidia-ml.so".into()),
        ..NvmlConfig::default()
    });
    assert!(sampler.is_none());
    match state {
        SourceState::Unavailable { reason } => {
            assert!(reason.contains("/nonexistent/libnvidia-ml.so"), "{reason}")
        }
        other => panic!("{other}"),
    }
}
