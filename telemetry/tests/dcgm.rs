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
        (g.gpu_instance, g.gpu_instance_profile.as_deref()),
        (None, None)
    );
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

// ---- MIG ----
//
// No real capture of a MIG node is among the project's fixtures (`shared/fixtures/` has single
// whole GPUs only). The MIG tests below therefore run on a page built here from the real
// RTX 4000 Ada capture by `mig_page_from_whole_gpu_capture`, which rewrites it into the shape
// dcgm-exporter gives a GPU in MIG mode. That shape was read off a published dcgm-exporter page
// of an 8 x A800-SXM4-80GB node (driver 535.129.03) whose GPU 0 was split into three 2g.20gb
// GPU instances and whose GPUs 1-7 were whole:
//
// - The MIG GPU has no line of its own. Each field it has comes once per GPU instance, every
//   line with the GPU's `gpu`, `UUID`, `device` and `modelName` and the instance's
//   `GPU_I_PROFILE` and `GPU_I_ID` (written after `modelName`, before `Hostname`); the
//   instances are told apart by `GPU_I_ID` only. Ids need not be consecutive (3, 5 and 6).
// - The instance's own figures: DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_FREE (each 2g.20gb
//   instance 10 and 19,957 MiB, not the card's 80 GB), DCGM_FI_PROF_GR_ENGINE_ACTIVE,
//   DCGM_FI_PROF_PIPE_TENSOR_ACTIVE and DCGM_FI_PROF_DRAM_ACTIVE.
// - The GPU's figures, repeated on every instance's line: DCGM_FI_DEV_SM_CLOCK, _MEM_CLOCK,
//   _MEMORY_TEMP, _GPU_TEMP, _TOTAL_ENERGY_CONSUMPTION, _PCIE_REPLAY_COUNTER, _XID_ERRORS,
//   _NVLINK_BANDWIDTH_TOTAL, _VGPU_LICENSE_STATUS with one value on all of them, and
//   DCGM_FI_DEV_POWER_USAGE, read per line moments apart (78.174, 78.174 and 78.446 W).
// - No line at all for the MIG GPU: DCGM_FI_DEV_GPU_UTIL, _MEM_COPY_UTIL, _ENC_UTIL, _DEC_UTIL,
//   _UNCORRECTABLE_REMAPPED_ROWS, _CORRECTABLE_REMAPPED_ROWS, _ROW_REMAP_FAILURE and
//   DCGM_FI_PROF_PCIE_TX_BYTES / _RX_BYTES (the whole GPUs of the same page had them all).
//
// That page had no DCGM_FI_DEV_FB_RESERVED family at all, so how the exporter writes it for an
// instance is not known; the page built here leaves it out for the MIG GPU. The RTX 4000 Ada
// has no MIG: the built page is a made-up node, real in its field set, labels and GPU-wide
// values, made-up in its instances' own figures (`MIG_INSTANCES`) and in the power drift.

/// The real single-GPU capture the MIG page is built from.
const RTX4000_UUID: &str = "GPU-a8394b51-c086-568a-9f1a-c1e1c934c44c";
const RTX4000_POWER_W: f64 = 40.979;

/// One GPU instance of the MIG GPU on the built page, with its own (made-up) figures.
struct MigInstance {
    id: u32,
    profile: &'static str,
    fb_used_mib: u64,
    fb_free_mib: u64,
    gr_engine_active: f64,
    /// Added to the capture's power on this instance's line: the exporter reads power per
    /// line, moments apart (the first instance's reading is the one canaryd keeps).
    power_drift_w: f64,
}

/// Each differs from the others in memory and engine activity, so merged instances show.
const MIG_INSTANCES: [MigInstance; 3] = [
    MigInstance {
        id: 3,
        profile: "2g.10gb",
        fb_used_mib: 2_048,
        fb_free_mib: 8_000,
        gr_engine_active: 0.5,
        power_drift_w: 0.0,
    },
    MigInstance {
        id: 5,
        profile: "1g.5gb",
        fb_used_mib: 10,
        fb_free_mib: 4_990,
        gr_engine_active: 0.0,
        power_drift_w: 0.0,
    },
    MigInstance {
        id: 6,
        profile: "1g.5gb",
        fb_used_mib: 512,
        fb_free_mib: 4_488,
        gr_engine_active: 0.25,
        power_drift_w: 0.272,
    },
];

/// The fields a MIG GPU has per instance, with the instance's own value.
const MIG_PER_INSTANCE: &[&str] = &[
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
];

/// The GPU's fields, repeated on every instance's line.
const MIG_GPU_WIDE: &[&str] = &[
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
];

/// The fields a MIG GPU has no line of (FB_RESERVED: not seen on a MIG page, see above).
const MIG_ABSENT: &[&str] = &[
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_DEV_FB_RESERVED",
];

/// Rewrites a capture of one whole GPU (`gpu="0"`, one line per field) into a page of two:
/// GPU 0 in MIG mode, split into [`MIG_INSTANCES`] in the shape described above, and GPU 1,
/// the capture's GPU again, whole (its lines as captured but for `gpu`, `UUID`, `device` and
/// `pci_bus_id`). `# HELP` and `# TYPE` lines are kept; a field not classified above fails the
/// test rather than guess.
fn mig_page_from_whole_gpu_capture(capture: &str) -> String {
    let mut page = String::new();
    for line in capture.lines() {
        if line.starts_with('#') {
            page += line;
            page.push('\n');
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample line");
        let name = &series[..series.find('{').expect("labels")];
        assert!(series.contains("{gpu=\"0\","), "one whole GPU 0: {line}");
        let instance_line = |i: &MigInstance| {
            assert!(series.contains(",Hostname="), "{line}");
            series.replacen(
                ",Hostname=",
                &format!(
                    ",GPU_I_PROFILE=\"{}\",GPU_I_ID=\"{}\",Hostname=",
                    i.profile, i.id
                ),
                1,
            )
        };
        if MIG_PER_INSTANCE.contains(&name) {
            for i in &MIG_INSTANCES {
                let v = match name {
                    "DCGM_FI_DEV_FB_USED" => i.fb_used_mib.to_string(),
                    "DCGM_FI_DEV_FB_FREE" => i.fb_free_mib.to_string(),
                    "DCGM_FI_PROF_GR_ENGINE_ACTIVE" => format!("{:.6}", i.gr_engine_active),
                    // Not read by canaryd: the capture's value on each instance's line.
                    _ => value.to_owned(),
                };
                page += &format!("{} {v}\n", instance_line(i));
            }
        } else if MIG_GPU_WIDE.contains(&name) {
            for i in &MIG_INSTANCES {
                let v = if name == "DCGM_FI_DEV_POWER_USAGE" {
                    let w: f64 = value.parse().expect("power");
                    format!("{:.6}", w + i.power_drift_w)
                } else {
                    value.to_owned()
                };
                page += &format!("{} {v}\n", instance_line(i));
            }
        } else {
            assert!(MIG_ABSENT.contains(&name), "{name} is not classified");
        }
        // GPU 1: the capture's GPU, whole.
        let whole = series
            .replacen("{gpu=\"0\",", "{gpu=\"1\",", 1)
            .replacen(RTX4000_UUID, &rtx4000_uuid_of(1), 1)
            .replacen("device=\"nvidia0\"", "device=\"nvidia1\"", 1)
            .replacen(
                "pci_bus_id=\"00000000:00:02.0\"",
                "pci_bus_id=\"00000000:00:03.0\"",
                1,
            );
        page += &format!("{whole} {value}\n");
    }
    page
}

/// The UUID GPU `gpu` has on the built page (GPU 0's is the capture's).
fn rtx4000_uuid_of(gpu: u32) -> String {
    match gpu {
        0 => RTX4000_UUID.to_owned(),
        n => format!("{}{n:x}", &RTX4000_UUID[..RTX4000_UUID.len() - 1]),
    }
}

fn mig_page() -> String {
    mig_page_from_whole_gpu_capture(&fixture!("dcgm_exporter_metrics_rtx4000ada.prom"))
}

/// The built page has the shape: every family of the capture, GPU 0 once per instance where
/// it has lines at all, and GPU 0's power counted once per instance by a plain sum over lines
/// (what a mapping keyed by `gpu` alone, or a sum over a page's lines, gets wrong).
#[test]
fn the_built_mig_page_has_dcgm_exporters_mig_shape() {
    let s = parse(&mig_page());
    assert_eq!((s.families.len(), s.skipped_lines), (25, 0));
    let ids = |name: &str| -> Vec<(Option<String>, Option<String>)> {
        s.family(name)
            .unwrap()
            .samples
            .iter()
            .map(|x| {
                let l = |k| x.labels.get(k).map(str::to_owned);
                (l("gpu"), l("GPU_I_ID"))
            })
            .collect()
    };
    let some = |s: &str| Some(s.to_owned());
    let mig_then_whole = [
        (some("0"), some("3")),
        (some("0"), some("5")),
        (some("0"), some("6")),
        (some("1"), None),
    ];
    assert_eq!(ids("DCGM_FI_PROF_GR_ENGINE_ACTIVE"), mig_then_whole);
    assert_eq!(ids("DCGM_FI_DEV_GPU_TEMP"), mig_then_whole);
    assert_eq!(ids("DCGM_FI_DEV_GPU_UTIL"), [(some("1"), None)]);
    assert_eq!(ids("DCGM_FI_PROF_PCIE_TX_BYTES"), [(some("1"), None)]);
    let fb = s.family("DCGM_FI_DEV_FB_USED").unwrap();
    assert_eq!(fb.samples[0].labels.get("GPU_I_PROFILE"), Some("2g.10gb"));
    assert_eq!(fb.samples[0].labels.get("UUID"), Some(RTX4000_UUID));
    assert_close!(
        s.sum("DCGM_FI_DEV_POWER_USAGE").unwrap(),
        RTX4000_POWER_W * 4.0 + 0.272
    );
}

/// GPU 0 of the built page is in MIG mode with three instances (GPU_I_ID 3, 5, 6); GPU 1 is
/// whole. Every line of an instance has `gpu="0"` and GPU 0's UUID: keyed by `gpu` alone the
/// three overwrote each other (the last instance won) and nothing said so.
#[test]
fn a_mig_page_gives_each_gpu_instance_its_own_sample() {
    let gpus = dcgm_gpu_samples(&parse(&mig_page()), MonoTime(3));
    let keys: Vec<(u32, Option<u32>)> = gpus.iter().map(|g| (g.gpu, g.gpu_instance)).collect();
    assert_eq!(
        keys,
        [
            (0, None),
            (0, Some(3)),
            (0, Some(5)),
            (0, Some(6)),
            (1, None)
        ]
    );
    // GPU 0 as a whole: the GPU-wide fields its instances' lines repeat, read once. Power is
    // read per line at slightly different moments (40.979, 40.979, 41.251 W): the first.
    let whole = &gpus[0];
    assert_eq!(whole.uuid.as_deref(), Some(RTX4000_UUID));
    assert_eq!(
        whole.model_name.as_deref(),
        Some("NVIDIA RTX 4000 Ada Generation")
    );
    assert_eq!(whole.gpu_instance_profile, None);
    assert_close!(whole.power_w.unwrap(), RTX4000_POWER_W);
    assert_close!(whole.energy_j.unwrap(), 455_497.156);
    assert_eq!(whole.temp_c, Some(48.0));
    assert_eq!(
        (whole.sm_clock_mhz, whole.mem_clock_mhz),
        (Some(2310.0), Some(9001.0))
    );
    // Memory and engine activity are each instance's own; the GPU as a whole has none, and
    // DCGM gives a MIG GPU no utilization or PCIe traffic.
    assert_eq!((whole.mem_used_bytes, whole.mem_total_bytes), (None, None));
    assert_eq!(whole.gr_engine_active, None);
    assert_eq!(
        (whole.util_gpu_pct, whole.pcie_tx_bytes_per_s),
        (None, None)
    );
    assert_eq!(
        whole.label("Hostname"),
        Some("lke529760-766837-0a634ab30000")
    );
    assert_eq!(whole.label("pod"), None, "the pod is an instance's");
    for (g, i) in gpus[1..4].iter().zip(&MIG_INSTANCES) {
        assert_eq!((g.gpu, g.gpu_instance), (0, Some(i.id)));
        assert_eq!(g.gpu_instance_profile.as_deref(), Some(i.profile));
        assert_eq!(
            g.uuid.as_deref(),
            Some(RTX4000_UUID),
            "the parent GPU's UUID"
        );
        // The instance's memory, not the card's 20 GB.
        assert_eq!(g.mem_used_bytes, Some(i.fb_used_mib * MIB));
        assert_eq!(
            g.mem_total_bytes,
            Some((i.fb_used_mib + i.fb_free_mib) * MIB)
        );
        assert_eq!(g.gr_engine_active, Some(i.gr_engine_active));
        // GPU-wide figures are the whole GPU's sample's, so a sum over samples counts the
        // card's power and energy once, not once per instance.
        assert_eq!((g.power_w, g.energy_j, g.temp_c), (None, None, None));
        // dcgm-exporter reports no GPU_UTIL for MIG instances.
        assert_eq!(g.util_gpu_pct, None);
        assert_eq!(g.label("GPU_I_ID"), None, "identity labels become fields");
        assert_eq!(g.label("GPU_I_PROFILE"), None);
        assert_eq!(g.label("DCGM_FI_DRIVER_VERSION"), Some("580.95.05"));
        assert_eq!(g.label("pod"), Some("cuda-75454ffb9f-8ljq7"));
    }
    // A whole GPU of the same page reads as the capture's GPU does on its own.
    let g1 = &gpus[4];
    assert_eq!(g1.uuid, Some(rtx4000_uuid_of(1)));
    assert_close!(g1.power_w.unwrap(), RTX4000_POWER_W);
    assert_close!(g1.energy_j.unwrap(), 455_497.156);
    assert_eq!((g1.util_gpu_pct, g1.util_mem_pct), (Some(0.0), Some(0.0)));
    assert_eq!(g1.mem_used_bytes, Some(MIB));
    assert_eq!(g1.mem_total_bytes, Some((1 + 20_015 + 457) * MIB));
    assert_eq!(g1.pcie_tx_bytes_per_s, Some(78_398_480.0));
    assert_eq!((g1.gpu_instance, g1.temp_c), (None, Some(48.0)));
}

/// The run summary of one scrape of the built page: 2 GPUs, their energy and power each
/// counted once (GPU 0 from its whole-GPU sample, not three times from its instances), and
/// each instance a `per_gpu` entry of its own.
#[test]
fn a_mig_summary_counts_the_card_once_and_lists_its_instances() {
    const S: u64 = 1_000_000_000;
    let gpus = dcgm_gpu_samples(&parse(&mig_page()), MonoTime(S));
    let s = canary_telemetry::gpu_summary(&gpus, MonoTime(0), MonoTime(2 * S), 0).unwrap();
    assert_eq!(s.gpus, 2);
    // One reading per GPU, held for the second to the run's end (no second reading).
    let e = s.energy.unwrap();
    assert_eq!(e.gpus, 2);
    assert_close!(e.joules, 2.0 * RTX4000_POWER_W);
    assert_close!(s.power_avg_w.unwrap(), RTX4000_POWER_W);
    assert_eq!(
        s.power_max_w,
        Some(RTX4000_POWER_W),
        "not a later instance's"
    );
    let entries: Vec<(u32, Option<u32>, Option<&str>)> = s
        .per_gpu
        .iter()
        .map(|g| (g.gpu, g.gpu_instance, g.gpu_instance_profile.as_deref()))
        .collect();
    assert_eq!(
        entries,
        [
            (0, None, None),
            (0, Some(3), Some("2g.10gb")),
            (0, Some(5), Some("1g.5gb")),
            (0, Some(6), Some("1g.5gb")),
            (1, None, None),
        ]
    );
    for (inst, i) in s.per_gpu[1..4].iter().zip(&MIG_INSTANCES) {
        assert_eq!((inst.power_avg_w, inst.energy_j), (None, None));
        assert_eq!(inst.mem_used_max_bytes, Some(i.fb_used_mib * MIB));
        assert_eq!(
            inst.mem_total_bytes,
            Some((i.fb_used_mib + i.fb_free_mib) * MIB)
        );
    }
    assert_close!(s.per_gpu[0].energy_j.unwrap(), RTX4000_POWER_W);
    // The highest memory share is an instance's (2,048 of 10,048 MiB), above GPU 1's
    // 1 of 20,473 MiB.
    assert_close!(s.mem_used_max_pct.unwrap(), 2_048.0 / 10_048.0 * 100.0);
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
    let (gpus, cut) = canary_telemetry::dcgm_gpu_samples_cut(&parse(&text), MonoTime(1));
    assert_eq!(gpus.len(), DCGM_MAX_GPUS);
    // Said, not cut silently (the scraper's state and warning read it).
    assert!(cut);
    let real = fixture!("dcgm_exporter_metrics_rtx4000ada.prom");
    assert!(!canary_telemetry::dcgm_gpu_samples_cut(&parse(&real), MonoTime(1)).1);
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

#[test]
fn a_page_of_endless_mig_instance_ids_gives_bounded_samples() {
    use canary_telemetry::{DCGM_MAX_GPUS, DCGM_MAX_GPU_INSTANCES};
    let mut text = String::from("# TYPE DCGM_FI_DEV_FB_USED gauge\n");
    for i in 0..100_000u32 {
        let gpu = i % 100;
        text += &format!("DCGM_FI_DEV_FB_USED{{gpu=\"{gpu}\",GPU_I_ID=\"{i}\"}} 1\n");
    }
    let gpus = dcgm_gpu_samples(&parse(&text), MonoTime(1));
    let (instances, whole): (Vec<_>, Vec<_>) = gpus.iter().partition(|g| g.gpu_instance.is_some());
    assert_eq!(whole.len(), DCGM_MAX_GPUS);
    assert_eq!(instances.len(), DCGM_MAX_GPU_INSTANCES);
    // The instances kept are those of the GPUs kept; a GPU past the cap takes its with it.
    assert!(instances.iter().all(|g| g.gpu < DCGM_MAX_GPUS as u32));
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

/// The RTX 4000 capture as a page of `gpus` GPUs: each sample line written once per GPU, with
/// its index, device and UUID (as dcgm-exporter lists every GPU under one `# TYPE`).
fn rtx4000_page_of(gpus: u32) -> String {
    let real = fixture!("dcgm_exporter_metrics_rtx4000ada.prom");
    let mut page = String::new();
    for line in real.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            page += line;
            page.push('\n');
            continue;
        }
        for gpu in 0..gpus {
            page += &line
                .replace("gpu=\"0\"", &format!("gpu=\"{gpu}\""))
                .replace("nvidia0", &format!("nvidia{gpu}"))
                .replace("GPU-a8394b51", &format!("GPU-{gpu:08x}"));
            page.push('\n');
        }
    }
    page
}

// Audit (hostile DCGM exporter), finding 2: a DCGM page was read up to the 32 MiB a server's
// /metrics may take, ~0.5 GB of label maps once parsed, every scrape, said nowhere. A page of
// the most GPUs kept fits well within DCGM's own cap; one of hundreds is refused and said.
#[tokio::test]
async fn a_dcgm_page_is_read_up_to_its_own_cap() {
    use canary_telemetry::{DCGM_MAX_GPUS, DCGM_MAX_PAGE_BYTES};
    let fits = rtx4000_page_of(DCGM_MAX_GPUS as u32);
    assert!(fits.len() * 4 < DCGM_MAX_PAGE_BYTES, "{} bytes", fits.len());
    let over = rtx4000_page_of(600);
    assert!(over.len() > DCGM_MAX_PAGE_BYTES && over.len() < 32 << 20);
    let base =
        crate::scraper::serve(move |n| if n == 0 { fits.clone() } else { over.clone() }).await;
    let url = format!("{base}/metrics");
    let state = probe_dcgm(&url, Duration::from_secs(30)).await;
    assert!(
        state
            .to_string()
            .starts_with(&format!("available: {url}: 64 GPU(s), NVIDIA RTX 4000 Ada")),
        "{state}"
    );
    let state = probe_dcgm(&url, Duration::from_secs(30)).await;
    assert_eq!(
        state.to_string(),
        format!("unavailable: {url}: the response body is over 4 MiB, the most read of it"),
    );
}

// Audit finding 3: past the parser's caps the families that lost lines were emptied, and the
// page was said to be "available: 0 GPU(s)" (or fewer figures) with no word of why.
#[tokio::test]
async fn a_dcgm_page_over_the_parsers_caps_says_so() {
    use canary_telemetry::prometheus::MAX_FAMILIES;
    // Distinct DCGM_ names of GPU 0 fill the families kept before the real page's come: its
    // 25 fields (HELP, TYPE and sample: 75 lines) and the last junk line are left out.
    let mut page: String = (0..=MAX_FAMILIES)
        .map(|i| format!("DCGM_FI_X{i}{{gpu=\"0\"}} 1\n"))
        .collect();
    page += &fixture!("dcgm_exporter_metrics_rtx4000ada.prom");
    assert!(page.len() < canary_telemetry::DCGM_MAX_PAGE_BYTES);
    let base = crate::scraper::serve(move |_| page.clone()).await;
    let url = format!("{base}/metrics");
    let probe = probe_dcgm(&url, Duration::from_secs(30)).await;
    assert!(!probe.is_available(), "{probe}");
    assert!(
        probe.to_string().contains("over the parser's caps"),
        "{probe}"
    );
    let scraper = DcgmScraper::new(DcgmConfig {
        url,
        interval: Duration::from_millis(20),
        timeout: Some(Duration::from_secs(30)),
        ..DcgmConfig::default()
    })
    .unwrap();
    let state = scraper.state();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(scraper.run(shutdown.clone()));
    crate::scraper::wait_for("a DCGM scrape", || {
        !matches!(state.get(), canary_telemetry::SourceState::Pending)
    })
    .await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    let state = state.get().to_string();
    assert!(
        state.contains(
            "1 GPU(s); the page is over the parser's caps (200000 samples, 20000 \
             metric families): 76 line(s) left out"
        ),
        "{state}"
    );
}

// Audit finding 8: the daemon starts a DCGM scraper per run, so an exporter that never answers
// a run shorter than the scrape's timeout stayed `pending` in every summary, never said.
#[tokio::test]
async fn a_dcgm_exporter_silent_for_the_whole_run_is_named_at_its_end() {
    use canary_core::{Aggregator, Goodput, Observer, Source, SourceState};
    use canary_testkit::{Hostile, HostileServer};
    let silent = HostileServer::start(Hostile::Silent);
    let summary = Aggregator::new(Goodput::default()).summary();
    let cfg = canary_telemetry::Config {
        nvml: false,
        dcgm_url: Some(format!("{}/metrics", silent.url())),
        ..canary_telemetry::Config::default()
    };
    // Two short runs sharing the endpoint's outage log, as the daemon's do.
    for _ in 0..2 {
        let stop = CancellationToken::new();
        let t0 = MonoTime::now();
        let observer = canary_telemetry::TelemetryObserver::start(&cfg, &stop).await;
        crate::scraper::wait_for("the scrape's request", || silent.requests() > 0).await;
        let t = observer.finish(t0, MonoTime::now(), &summary).await;
        stop.cancel();
        let state = t.source(Source::Dcgm).cloned();
        let Some(SourceState::Unavailable { reason }) = state else {
            panic!("{state:?}");
        };
        assert!(
            reason.starts_with(&format!(
                "{}/metrics: no page within the run (waited ",
                silent.url()
            )) && reason.ends_with("ms; one scrape may take up to 900 ms)"),
            "{reason}"
        );
    }
}

// Audit (graceful degradation) M2: a DCGM URL answering with a page that is no
// dcgm-exporter's (the inference server's own `/metrics`, a common mix-up, or text that is no
// Prometheus page at all) was `available: 0 GPU(s)`, with no warning.
#[tokio::test]
async fn a_page_without_dcgm_metrics_is_no_dcgm_exporter_and_says_what_it_held() {
    let state_of = |page: String| async move {
        let base = crate::scraper::serve(move |_| page.clone()).await;
        let url = format!("{base}/metrics");
        let scraper = DcgmScraper::new(DcgmConfig {
            url: url.clone(),
            interval: Duration::from_millis(20),
            timeout: Some(Duration::from_secs(5)),
            ..DcgmConfig::default()
        })
        .unwrap();
        let state = scraper.state();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(scraper.run(shutdown.clone()));
        crate::scraper::wait_for("a DCGM scrape", || {
            state.get() != canary_telemetry::SourceState::Pending
        })
        .await;
        shutdown.cancel();
        task.await.unwrap().unwrap();
        let probe = probe_dcgm(&url, Duration::from_secs(5)).await;
        (url, state.get(), probe)
    };
    // vLLM's own page.
    let (url, state, probe) = state_of(fixture!("vllm_metrics_v0_qwen2.5-coder-1.5b.prom")).await;
    assert!(!state.is_available(), "{state}");
    let said = format!("unavailable: {url}: not a dcgm-exporter page, no DCGM_FI_* metric: ");
    assert!(state.to_string().starts_with(&said), "{state}");
    assert!(
        state.to_string().contains("metric families (first: vllm:"),
        "{state}"
    );
    assert_eq!(probe, state, "doctor says the same");
    // dcgm-exporter's counters file, which is CSV: no metric, every line unreadable.
    let csv = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures/dcgm_exporter_default-counters.csv"
    ))
    .unwrap();
    let (url, state, _) = state_of(csv).await;
    assert!(!state.is_available(), "{state}");
    let said = format!("unavailable: {url}: not a dcgm-exporter page, no DCGM_FI_* metric: ");
    assert!(state.to_string().starts_with(&said), "{state}");
    assert!(
        state
            .to_string()
            .contains("line(s) that could not be read as Prometheus text"),
        "{state}"
    );
}
