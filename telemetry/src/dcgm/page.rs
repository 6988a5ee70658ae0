//! One dcgm-exporter page mapped onto [`GpuSample`]s: one per GPU, and one per MIG instance.
//!
//! On a GPU in MIG mode dcgm-exporter writes no line for the GPU itself: every field comes as
//! one line per GPU instance, each with the GPU's `gpu` index and `UUID` and the instance's
//! `GPU_I_ID` and `GPU_I_PROFILE`. Some fields are the instance's own (its framebuffer, its
//! engine activity); the others are the GPU's, repeated on each instance's line (power, the
//! energy counter, temperature, clocks; `tests/dcgm.rs` builds such a page, field by field).
//! So the instance's own go on a sample per instance, and the GPU's go once on a sample of the
//! whole GPU, which a sum over GPUs (power, energy) then counts once.

use canary_core::{GpuSource, MonoTime};

use crate::gpu::GpuSample;
use crate::prometheus::{Labels, Sample, Scrape};

/// A label's name or value as a sample keeps it: at most `max` bytes, printable (a GPU's
/// model name is printed by `doctor` and kept in the run's context).
fn cut(s: &str, max: usize) -> String {
    canary_core::printable(canary_core::prefix_within(s, max)).into_owned()
}

/// Labels that identify the GPU or its MIG instance (used for fields, not copied into
/// [`GpuSample::labels`]).
const IDENTITY_LABELS: &[&str] = &[
    "gpu",
    "UUID",
    "modelName",
    "device",
    "pci_bus_id",
    "GPU_I_ID",
    "GPU_I_PROFILE",
];

/// The Kubernetes labels dcgm-exporter adds for the pod given a GPU or a MIG instance. A whole
/// GPU's sample made from an instance's line leaves them out: the pod is the instance's.
const POD_LABELS: &[&str] = &["pod", "namespace", "container", "pod_uid"];

const MIB: f64 = 1024.0 * 1024.0;

/// GPUs one page may describe; later ones are left out. Nodes have 8, or a few more.
pub const MAX_GPUS: usize = 64;

/// MIG instances one page may describe, over all its GPUs; later ones are left out. MIG gives
/// a GPU at most 7 (A100, H100): 16 GPUs' worth.
pub const MAX_GPU_INSTANCES: usize = 128;

/// The largest `GPU_I_ID` kept (2^31 - 2): the ring's series key has 31 bits for it (see
/// `GpuSample::series`). MIG numbers a GPU's instances from 0 (under 15 on A100 and H100).
pub(crate) const MAX_GPU_INSTANCE_ID: u32 = (1 << 31) - 2;

/// Labels kept per GPU beyond its identity, and the bytes kept of each name and value:
/// every scrape's sample owns a copy, and the ring keeps thousands (a page whose label held
/// 30 MiB grew the daemon by that much every second).
pub const MAX_LABELS: usize = 12;
const MAX_LABEL_NAME: usize = 64;
const MAX_LABEL_VALUE: usize = 128;

/// The `DCGM_FI_*` fields mapped onto [`GpuSample`].
#[derive(Debug, Clone, Copy)]
enum Field {
    Util,
    MemCopyUtil,
    FbUsed,
    FbTotal,
    FbFree,
    FbReserved,
    Power,
    Energy,
    Temp,
    SmClock,
    MemClock,
    Throttle,
    PcieTx,
    PcieRx,
    GrEngineActive,
}

impl Field {
    fn of(family: &str) -> Option<Field> {
        Some(match family {
            "DCGM_FI_DEV_GPU_UTIL" => Field::Util,
            "DCGM_FI_DEV_MEM_COPY_UTIL" => Field::MemCopyUtil,
            "DCGM_FI_DEV_FB_USED" => Field::FbUsed,
            "DCGM_FI_DEV_FB_TOTAL" => Field::FbTotal,
            "DCGM_FI_DEV_FB_FREE" => Field::FbFree,
            "DCGM_FI_DEV_FB_RESERVED" => Field::FbReserved,
            "DCGM_FI_DEV_POWER_USAGE" => Field::Power,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" => Field::Energy,
            "DCGM_FI_DEV_GPU_TEMP" => Field::Temp,
            "DCGM_FI_DEV_SM_CLOCK" => Field::SmClock,
            "DCGM_FI_DEV_MEM_CLOCK" => Field::MemClock,
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" | "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" => {
                Field::Throttle
            }
            "DCGM_FI_PROF_PCIE_TX_BYTES" => Field::PcieTx,
            "DCGM_FI_PROF_PCIE_RX_BYTES" => Field::PcieRx,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE" => Field::GrEngineActive,
            _ => return None,
        })
    }

    /// Whether an instance's line of this field describes the instance itself: its memory and
    /// its engine's activity (and utilization, which dcgm-exporter does not give for MIG
    /// instances, but would be the instance's if it did). The rest is the GPU's: one board's
    /// power, counter, temperature, clocks and PCIe link.
    fn is_the_instances(self) -> bool {
        matches!(
            self,
            Field::Util
                | Field::MemCopyUtil
                | Field::FbUsed
                | Field::FbTotal
                | Field::FbFree
                | Field::FbReserved
                | Field::GrEngineActive
        )
    }
}

/// A sample being filled, with the framebuffer figures only its total needs.
struct Entry {
    sample: GpuSample,
    fb_free: Option<f64>,
    fb_reserved: Option<f64>,
}

impl Entry {
    /// Sets `field`. `first_wins`: a GPU-wide field read off an instance's line does not
    /// replace one already set (by the GPU's own line, or an earlier instance's: the same
    /// field, read moments apart). Otherwise a later line wins, as it always has.
    fn set(&mut self, field: Field, v: f64, first_wins: bool) {
        fn put<T>(slot: &mut Option<T>, v: T, first_wins: bool) {
            if !first_wins || slot.is_none() {
                *slot = Some(v);
            }
        }
        let (g, w) = (&mut self.sample, first_wins);
        match field {
            Field::Util => put(&mut g.util_gpu_pct, v, w),
            Field::MemCopyUtil => put(&mut g.util_mem_pct, v, w),
            Field::FbUsed => put(&mut g.mem_used_bytes, (v * MIB) as u64, w),
            Field::FbTotal => put(&mut g.mem_total_bytes, (v * MIB) as u64, w),
            Field::FbFree => put(&mut self.fb_free, v, w),
            Field::FbReserved => put(&mut self.fb_reserved, v, w),
            Field::Power => put(&mut g.power_w, v, w),
            Field::Energy => put(&mut g.energy_j, v / 1000.0, w),
            Field::Temp => put(&mut g.temp_c, v, w),
            Field::SmClock => put(&mut g.sm_clock_mhz, v, w),
            Field::MemClock => put(&mut g.mem_clock_mhz, v, w),
            Field::Throttle => put(&mut g.throttle_reasons, v as u64, w),
            Field::PcieTx => put(&mut g.pcie_tx_bytes_per_s, v, w),
            Field::PcieRx => put(&mut g.pcie_rx_bytes_per_s, v, w),
            Field::GrEngineActive => put(&mut g.gr_engine_active, v, w),
        }
    }

    /// No FB_TOTAL in the default field set: total = used + free + reserved.
    fn finish(mut self) -> GpuSample {
        let g = &mut self.sample;
        if let (None, Some(used), Some(free)) = (g.mem_total_bytes, g.mem_used_bytes, self.fb_free)
        {
            let reserved = self.fb_reserved.unwrap_or(0.0);
            // `as` saturates; so does the sum, whatever a page claims.
            g.mem_total_bytes = Some(used.saturating_add(((free + reserved) * MIB) as u64));
        }
        self.sample
    }
}

/// The entries of one page, within [`MAX_GPUS`] and [`MAX_GPU_INSTANCES`].
#[derive(Default)]
struct Page {
    entries: Vec<Entry>,
    gpus: usize,
    instances: usize,
    /// A GPU or instance past the caps was left out.
    cut: bool,
}

impl Page {
    /// The entry of GPU `gpu` (`instance` `None`) or of one of its instances, made from `line`
    /// when new; `None` past the caps. A few dozen entries: a linear search.
    fn entry(
        &mut self,
        line: &Sample,
        at: MonoTime,
        gpu: u32,
        instance: Option<u32>,
    ) -> Option<&mut Entry> {
        let found = self
            .entries
            .iter()
            .position(|e| e.sample.gpu == gpu && e.sample.gpu_instance == instance);
        let i = match found {
            Some(i) => i,
            None => {
                let count = match instance {
                    None => &mut self.gpus,
                    Some(_) => &mut self.instances,
                };
                let cap = match instance {
                    None => MAX_GPUS,
                    Some(_) => MAX_GPU_INSTANCES,
                };
                if *count == cap {
                    self.cut = true;
                    return None;
                }
                *count += 1;
                self.entries.push(new_entry(line, at, gpu, instance));
                self.entries.len() - 1
            }
        };
        Some(&mut self.entries[i])
    }
}

/// An empty entry for GPU `gpu` (or its instance `instance`), its identity and labels read
/// off `line`, which may be an instance's line even for the whole GPU's entry.
fn new_entry(line: &Sample, at: MonoTime, gpu: u32, instance: Option<u32>) -> Entry {
    let mut g = GpuSample::new(at, GpuSource::Dcgm, gpu);
    let value = |k: &str| line.labels.get(k).map(|v| cut(v, MAX_LABEL_VALUE));
    g.uuid = value("UUID");
    g.model_name = value("modelName");
    g.gpu_instance = instance;
    if instance.is_some() {
        g.gpu_instance_profile = value("GPU_I_PROFILE");
    }
    let an_instances_line = line.labels.get("GPU_I_ID").is_some_and(|v| !v.is_empty());
    g.labels = line
        .labels
        .iter()
        .filter(|(k, _)| !IDENTITY_LABELS.contains(k) && !k.starts_with("err_"))
        .filter(|(k, _)| instance.is_some() || !an_instances_line || !POD_LABELS.contains(k))
        .take(MAX_LABELS)
        .map(|(k, v)| (cut(k, MAX_LABEL_NAME), cut(v, MAX_LABEL_VALUE)))
        .collect();
    Entry {
        sample: g,
        fb_free: None,
        fb_reserved: None,
    }
}

/// The lines of a page worth keeping while it is parsed, with the caps applied line by line:
/// `DCGM_*` lines with a finite value and a usable `gpu` (and `GPU_I_ID`), of the first
/// [`MAX_GPUS`] GPUs and [`MAX_GPU_INSTANCES`] instances. A page of 200,000 distinct GPUs
/// otherwise took ~16× its size in label maps before the caps applied, every scrape.
#[derive(Default)]
pub(crate) struct Wanted {
    gpus: Vec<u32>,
    instances: Vec<(u32, u32)>,
    /// A GPU or instance past the caps was seen.
    pub cut: bool,
}

impl Wanted {
    /// Whether [`gpu_samples_cut`] could use this line, within the caps.
    pub fn keep(&mut self, name: &str, labels: &Labels, value: f64) -> bool {
        if !name.starts_with("DCGM_") || !value.is_finite() {
            return false;
        }
        let Some(gpu) = labels.get("gpu").and_then(|g| g.parse::<u32>().ok()) else {
            return false;
        };
        let instance = match labels.get("GPU_I_ID") {
            None | Some("") => None,
            Some(id) => match id.parse::<u32>() {
                Ok(i) if i <= MAX_GPU_INSTANCE_ID => Some(i),
                _ => return false,
            },
        };
        if !self.gpus.contains(&gpu) {
            if self.gpus.len() == MAX_GPUS {
                self.cut = true;
                return false;
            }
            self.gpus.push(gpu);
        }
        let Some(id) = instance else { return true };
        if self.instances.contains(&(gpu, id)) {
            return true;
        }
        if self.instances.len() < MAX_GPU_INSTANCES {
            self.instances.push((gpu, id));
            return true;
        }
        self.cut = true;
        // An instance past the cap still carries its GPU's board-wide figures.
        Field::of(name).is_some_and(|f| !f.is_the_instances())
    }
}

/// Maps one dcgm-exporter page onto one [`GpuSample`] per GPU (by the `gpu` label) and one per
/// MIG instance (by `gpu` and `GPU_I_ID`), in GPU order, each GPU before its instances.
///
/// A GPU in MIG mode gets a sample of its own, made from its instances' lines, holding the
/// GPU-wide fields (power, energy counter, temperature, clocks, throttle reasons, PCIe
/// traffic; the first instance line's reading where they differ); each instance's sample holds
/// the instance's own (framebuffer, utilization, `DCGM_FI_PROF_GR_ENGINE_ACTIVE`). A GPU
/// without MIG is one sample with every field, as before.
///
/// Metrics without a `gpu` label (or with a non-numeric one) are ignored, as are lines whose
/// `GPU_I_ID` is not a number up to `MAX_GPU_INSTANCE_ID` (an empty one is a whole GPU's);
/// so are GPUs past [`MAX_GPUS`], instances past [`MAX_GPU_INSTANCES`], and labels past
/// [`MAX_LABELS`] (names and values are cut short).
pub fn gpu_samples(scrape: &Scrape, at: MonoTime) -> Vec<GpuSample> {
    gpu_samples_cut(scrape, at).0
}

/// [`gpu_samples`], and whether GPUs or instances past the caps were left out.
pub fn gpu_samples_cut(scrape: &Scrape, at: MonoTime) -> (Vec<GpuSample>, bool) {
    let mut page = Page::default();
    for fam in scrape
        .families
        .iter()
        .filter(|f| f.name.starts_with("DCGM_"))
    {
        let field = Field::of(&fam.name);
        for s in fam.samples.iter().filter(|s| s.value.is_finite()) {
            let Some(gpu) = s.labels.get("gpu").and_then(|g| g.parse::<u32>().ok()) else {
                continue;
            };
            let instance = match s.labels.get("GPU_I_ID") {
                None | Some("") => None,
                Some(id) => match id.parse::<u32>() {
                    Ok(i) if i <= MAX_GPU_INSTANCE_ID => Some(i),
                    // Neither the GPU's own line nor one to keep apart from its siblings'.
                    _ => continue,
                },
            };
            // Every GPU has its own entry, even one only seen through its instances: it holds
            // the GPU-wide figures, and a GPU past the cap takes its instances with it.
            let Some(whole) = page.entry(s, at, gpu, None) else {
                continue;
            };
            let Some(id) = instance else {
                if let Some(field) = field {
                    whole.set(field, s.value, false);
                }
                continue;
            };
            if let Some(field) = field.filter(|f| !f.is_the_instances()) {
                whole.set(field, s.value, true);
            }
            // Any line of an instance names it (an unmapped field's, a GPU-wide one's too).
            if let Some(e) = page.entry(s, at, gpu, Some(id)) {
                if let Some(field) = field.filter(|f| f.is_the_instances()) {
                    e.set(field, s.value, false);
                }
            }
        }
    }
    let cut = page.cut;
    let mut out: Vec<GpuSample> = page.entries.into_iter().map(Entry::finish).collect();
    out.sort_by_key(|g| (g.gpu, g.gpu_instance));
    (out, cut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prometheus::parse;

    fn samples(page: &str) -> Vec<GpuSample> {
        gpu_samples(&parse(page), MonoTime(1))
    }

    #[test]
    fn a_gpus_own_line_wins_over_its_instances_for_gpu_wide_fields() {
        // The GPU's own line (an empty GPU_I_ID, as some pages write it) after its instances',
        // then before them: either way power is the GPU's line's, and memory stays per instance.
        let instances = "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",GPU_I_ID=\"1\"} 101\n\
            DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",GPU_I_ID=\"2\"} 102\n\
            DCGM_FI_DEV_FB_USED{gpu=\"0\",GPU_I_ID=\"1\"} 5\n\
            DCGM_FI_DEV_FB_USED{gpu=\"0\",GPU_I_ID=\"2\"} 7\n";
        let own = "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",GPU_I_ID=\"\"} 100\n";
        for page in [format!("{instances}{own}"), format!("{own}{instances}")] {
            let g = samples(&page);
            let key = |g: &GpuSample| (g.gpu_instance, g.power_w, g.mem_used_bytes);
            assert_eq!(
                g.iter().map(key).collect::<Vec<_>>(),
                [
                    (None, Some(100.0), None),
                    (Some(1), None, Some(5 << 20)),
                    (Some(2), None, Some(7 << 20)),
                ],
                "{page}"
            );
        }
    }

    #[test]
    fn an_instance_id_that_cannot_be_kept_apart_leaves_its_line_out() {
        let g = samples(
            "DCGM_FI_DEV_FB_USED{gpu=\"0\",GPU_I_ID=\"x\"} 1\n\
             DCGM_FI_DEV_FB_USED{gpu=\"0\",GPU_I_ID=\"-1\"} 2\n\
             DCGM_FI_DEV_FB_USED{gpu=\"0\",GPU_I_ID=\"2147483647\"} 3\n\
             DCGM_FI_DEV_FB_USED{gpu=\"0\",GPU_I_ID=\"2147483646\"} 4\n",
        );
        assert_eq!(g.len(), 2, "{g:?}");
        assert_eq!(g[0].mem_used_bytes, None, "not the GPU's own figure");
        assert_eq!(
            (g[1].gpu_instance, g[1].mem_used_bytes),
            (Some(MAX_GPU_INSTANCE_ID), Some(4 << 20))
        );
    }

    #[test]
    fn a_gpu_made_from_an_instances_line_has_no_pod() {
        let g = samples(
            "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"GPU-a\",GPU_I_ID=\"3\",GPU_I_PROFILE=\"1g.10gb\",\
             Hostname=\"n\",pod=\"p\",namespace=\"ns\",container=\"c\"} 40\n",
        );
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].temp_c, g[0].gpu_instance), (Some(40.0), None));
        assert_eq!(g[0].labels, [("Hostname".to_owned(), "n".to_owned())]);
        assert_eq!(g[1].gpu_instance_profile.as_deref(), Some("1g.10gb"));
        assert_eq!(
            (g[1].label("pod"), g[1].label("Hostname")),
            (Some("p"), Some("n"))
        );
        assert_eq!(g[1].uuid.as_deref(), Some("GPU-a"));
    }
}
