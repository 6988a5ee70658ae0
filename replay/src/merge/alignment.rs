//! How the shards' clocks line up. Each shard timed its requests on its own CLOCK_MONOTONIC
//! from its own t0; its schedule lag is exact on that clock. To put every shard on one time
//! axis, the merge takes each t0 as a wall-clock instant (the `clock` block's mapping) and
//! states how far that can be off. Shards on one host (the same kernel boot id) share one
//! monotonic clock, so their t0s compare exactly there. Shards on different hosts compare
//! through their wall clocks: each t0 is off by at most its mapping uncertainty plus the
//! kernel's `maxerror` of a synchronized clock; an unsynchronized clock has no bound.

use super::shard::ShardRun;
use serde::Serialize;

/// One shard's place on the merged time axis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardClock {
    /// Its t0 as a wall-clock instant, Unix ns.
    pub t0_unix_ns: i64,
    /// Its t0 after the earliest shard's, ms: added to its record times (and to its schedule
    /// lag, for the union's lag against one schedule).
    pub t0_offset_ms: f64,
    /// `monotonic` (same host as the earliest shard: exact) or `wall_clock`.
    pub offset_basis: &'static str,
    /// How far its t0 as a wall-clock instant can be off, ms: mapping uncertainty plus the
    /// kernel's `maxerror`; `None` when its clock is not known to be synchronized.
    pub wall_clock_error_ms: Option<f64>,
    /// The kernel's view: synchronized or not (`None`: unknown).
    pub synchronized: Option<bool>,
    /// Its kernel boot id, when recorded.
    pub boot_id: Option<String>,
}

/// The shards' alignment, as `summary.json`'s `merged.alignment` states it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alignment {
    /// The `--start-at` instant every shard was given; `None` without one (or with
    /// different ones).
    pub common_start: Option<String>,
    /// The latest shard t0 after the earliest, ms, as measured (on one monotonic clock where
    /// the shards share one, else on the wall clocks).
    pub start_spread_ms: f64,
    /// A bound on how far any two shards' placement on the merged axis can be off, ms: 0 for
    /// shards of one host, else the sum of the two largest wall-clock errors of shards on
    /// different hosts. `None` when a clock has no bound (`unbounded_because` says which).
    pub bound_ms: Option<f64>,
    /// Why there is no bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unbounded_because: Option<String>,
    /// `one host (one CLOCK_MONOTONIC)` or `wall clocks of N hosts`.
    pub basis: String,
}

/// Places every shard; `clocks` in `runs` order.
pub(super) fn align(runs: &[ShardRun]) -> Result<(Alignment, Vec<ShardClock>), String> {
    struct Raw<'a> {
        mono: u64,
        wall: i64,
        err_ns: Option<u64>,
        synchronized: Option<bool>,
        boot: Option<&'a str>,
    }
    let mut raw = Vec::with_capacity(runs.len());
    for r in runs {
        let (Some(mono), Some(clock)) = (r.t0_monotonic_ns, &r.clock) else {
            return Err(format!(
                "{}: summary.json has no t0_monotonic_ns or clock block (written by an older \
                 canaryd): the shards cannot be aligned",
                r.dir.display()
            ));
        };
        let synchronized = clock.kernel.as_ref().map(|k| k.synchronized);
        // The file's numbers: out of any clock's range they would overflow below (a panic
        // in debug builds, a wrapped "bound" in release).
        let out_of_range = |field: &str| {
            format!(
                "{}: summary.json {field} is out of range for a clock",
                r.dir.display()
            )
        };
        let err_ns = match clock.kernel.as_ref().filter(|k| k.synchronized) {
            None => None,
            Some(k) => Some(
                (k.maxerror_us.max(0) as u64)
                    .checked_mul(1_000)
                    .and_then(|e| e.checked_add(clock.mapping_uncertainty_ns))
                    .ok_or_else(|| {
                        out_of_range("clock.kernel.maxerror_us or clock.mapping_uncertainty_ns")
                    })?,
            ),
        };
        // Unix time in ns from 1970 to about 2116: differences of two cannot overflow.
        let wall = i64::try_from(mono)
            .ok()
            .and_then(|m| clock.realtime_minus_monotonic_ns.checked_add(m))
            .filter(|w| (0..=1 << 62).contains(w))
            .ok_or_else(|| out_of_range("t0_monotonic_ns or clock.realtime_minus_monotonic_ns"))?;
        raw.push(Raw {
            mono,
            wall,
            err_ns,
            synchronized,
            boot: clock.boot_id.as_deref(),
        });
    }
    let reference = (0..raw.len())
        .min_by_key(|&i| raw[i].wall)
        .expect("one shard at least");
    let same_boot = |a: &Raw, b: &Raw| a.boot.is_some() && a.boot == b.boot;
    let refr = &raw[reference];
    // Each other host is placed once, by the wall clock of its earliest shard, and its other
    // shards from that one on its monotonic clock: two shards of one host then keep their
    // exact spacing however that host's wall clock stepped between them, and the bound
    // between hosts (their wall clocks' errors) covers every pair.
    let anchor = |x: &Raw| -> usize {
        (0..raw.len())
            .filter(|&i| same_boot(x, &raw[i]))
            .min_by_key(|&i| raw[i].wall)
            .unwrap_or(reference)
    };
    let mut clocks: Vec<ShardClock> = raw
        .iter()
        .zip(runs)
        .map(|(x, r)| {
            let (offset_ns, basis) = if same_boot(x, refr) {
                (x.mono as i64 - refr.mono as i64, "monotonic")
            } else if x.boot.is_some() {
                let a = &raw[anchor(x)];
                // Each term is in range (walls within 2^62, t0s below 2^63); two shards of one
                // host whose t0s are about 2^63 apart make the sum overflow.
                let offset = (a.wall - refr.wall)
                    .checked_add(x.mono as i64 - a.mono as i64)
                    .ok_or_else(|| {
                        format!(
                            "{}: summary.json t0_monotonic_ns is out of range for a clock (too \
                             far from its host's other shards')",
                            r.dir.display()
                        )
                    })?;
                (offset, "wall_clock")
            } else {
                (x.wall - refr.wall, "wall_clock")
            };
            Ok(ShardClock {
                t0_unix_ns: x.wall,
                t0_offset_ms: offset_ns as f64 / 1e6,
                offset_basis: basis,
                wall_clock_error_ms: x.err_ns.map(|e| e as f64 / 1e6),
                synchronized: x.synchronized,
                boot_id: x.boot.map(str::to_string),
            })
        })
        .collect::<Result<_, String>>()?;
    // Shards of the reference's host are placed on its monotonic clock, which can put one
    // a few ns before it: the earliest is the origin.
    let earliest = clocks
        .iter()
        .map(|c| c.t0_offset_ms)
        .fold(f64::INFINITY, f64::min);
    for c in &mut clocks {
        c.t0_offset_ms -= earliest;
    }
    // The worst pair on different hosts.
    let mut bound_ns = Some(0u64);
    let mut unbounded = None;
    let mut hosts: Vec<Option<&str>> = Vec::new();
    for (i, a) in raw.iter().enumerate() {
        if !hosts.iter().any(|h| h.is_some() && *h == a.boot) {
            hosts.push(a.boot);
        }
        for (j, b) in raw.iter().enumerate().skip(i + 1) {
            if same_boot(a, b) {
                continue;
            }
            match (a.err_ns, b.err_ns) {
                (Some(x), Some(y)) => bound_ns = bound_ns.map(|m| m.max(x.saturating_add(y))),
                _ => {
                    bound_ns = None;
                    let who = if a.err_ns.is_none() { i } else { j };
                    unbounded.get_or_insert_with(|| {
                        format!(
                            "{} and {} ran on different hosts (or did not record a boot id), \
                             and the wall clock of {} is not known to be synchronized",
                            runs[i].name(),
                            runs[j].name(),
                            runs[who].name()
                        )
                    });
                }
            }
        }
    }
    let starts: Vec<Option<i64>> = runs
        .iter()
        .map(|r| r.clock.as_ref()?.start_at.as_ref().map(|s| s.unix_ns))
        .collect();
    let common_start = match starts.first() {
        Some(Some(first)) if starts.iter().all(|s| *s == Some(*first)) => runs[0]
            .clock
            .as_ref()
            .and_then(|c| c.start_at.as_ref())
            .map(|s| s.requested.clone()),
        _ => None,
    };
    let spread = clocks.iter().map(|c| c.t0_offset_ms).fold(0.0f64, f64::max)
        - clocks.iter().map(|c| c.t0_offset_ms).fold(0.0f64, f64::min);
    let basis = if hosts.len() == 1 && hosts[0].is_some() {
        "one host (one CLOCK_MONOTONIC)".to_string()
    } else {
        format!("wall clocks of {} hosts", hosts.len())
    };
    Ok((
        Alignment {
            common_start,
            start_spread_ms: spread,
            bound_ms: bound_ns.map(|b| b as f64 / 1e6),
            unbounded_because: unbounded,
            basis,
        },
        clocks,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_core::{ClockReport, KernelSync};

    /// A shard whose t0 is `mono` ns on a host whose wall clock reads `mono + wall_minus_mono`,
    /// with `maxerror_us` (synchronized) or unsynchronized (`None`).
    fn shard(boot: &str, mono: u64, wall_minus_mono: i64, maxerror_us: Option<i64>) -> ShardRun {
        let kernel = KernelSync {
            synchronized: maxerror_us.is_some(),
            state: "ok".into(),
            unsync_flag: maxerror_us.is_none(),
            maxerror_us: maxerror_us.unwrap_or(16_000_000),
            esterror_us: 0,
        };
        ShardRun {
            dir: format!("/runs/{boot}-{mono}").into(),
            shard: None,
            run_id: String::new(),
            run: serde_json::Value::Null,
            digest: None,
            trace_path: String::new(),
            selection: Default::default(),
            max_requests: None,
            goodput: String::new(),
            interrupted: false,
            unsent: 0,
            t0_monotonic_ns: Some(mono),
            clock: Some(ClockReport {
                realtime_minus_monotonic_ns: wall_minus_mono,
                mapping_uncertainty_ns: 2_000,
                mapped_at_monotonic_ns: mono,
                kernel: Some(kernel),
                kernel_unavailable: None,
                warning: None,
                start_at: None,
                boot_id: Some(boot.into()),
                release: None,
            }),
            histograms: None,
            slice_duration: None,
            merged: false,
            metric_counts: Default::default(),
        }
    }

    #[test]
    fn shards_of_one_host_align_on_its_monotonic_clock_exactly() {
        // The wall clock stepped 5 s between the two mappings: the monotonic clock did not.
        let runs = [
            shard("a", 1_000_000_000, 10_000_000_000, None),
            shard("a", 1_000_250_000, 15_000_000_000, None),
        ];
        let (a, clocks) = align(&runs).unwrap();
        assert_eq!(a.bound_ms, Some(0.0));
        assert_eq!(a.basis, "one host (one CLOCK_MONOTONIC)");
        assert_eq!(clocks[1].t0_offset_ms, 0.25);
        assert_eq!(clocks[1].offset_basis, "monotonic");
        assert_eq!(a.start_spread_ms, 0.25);
    }

    #[test]
    fn shards_of_several_hosts_are_bounded_by_their_two_largest_clock_errors() {
        let runs = [
            shard("a", 5_000_000_000, 1_000_000_000, Some(1_000)),
            shard("b", 9_000_000_000, -2_999_000_000, Some(3_000)),
            shard("c", 100, 6_000_000_000, Some(500)),
        ];
        let (a, clocks) = align(&runs).unwrap();
        // Walls: 6.000 s (the earliest: the origin), 6.001 s, 6.0000001 s.
        assert_eq!(clocks[0].offset_basis, "monotonic");
        assert_eq!(clocks[1].offset_basis, "wall_clock");
        assert!((clocks[1].t0_offset_ms - 1.0).abs() < 1e-9, "{clocks:?}");
        assert!((clocks[2].t0_offset_ms - 0.0001).abs() < 1e-9, "{clocks:?}");
        assert_eq!(clocks[0].wall_clock_error_ms, Some(1.002));
        // (3000 µs + 2 µs) + (1000 µs + 2 µs)
        assert_eq!(a.bound_ms, Some(4.004));
        assert_eq!(a.basis, "wall clocks of 3 hosts");
    }

    #[test]
    fn an_unsynchronized_clock_on_another_host_leaves_no_bound_and_says_whose() {
        let runs = [
            shard("a", 1_000, 0, Some(1_000)),
            shard("b", 1_000, 0, None),
        ];
        let (a, clocks) = align(&runs).unwrap();
        assert_eq!(a.bound_ms, None);
        let why = a.unbounded_because.unwrap();
        assert!(
            why.contains("/runs/b-1000 is not known to be synchronized"),
            "{why}"
        );
        assert_eq!(clocks[1].wall_clock_error_ms, None);
        let mut old = shard("a", 1_000, 0, Some(1));
        old.clock = None;
        assert!(align(&[old]).unwrap_err().contains("cannot be aligned"));
    }

    // Two shards of a host other than the earliest's: placed by one of them's wall clock, the
    // other on the monotonic clock from it, so a wall-clock step between their mappings does
    // not move them apart (the bound covers hosts, not a host's own shards).
    #[test]
    fn shards_of_another_host_keep_their_monotonic_spacing() {
        let runs = [
            shard("a", 1_000_000_000, 5_000_000_000, Some(1_000)),
            shard("b", 2_000_000_000, 4_500_000_000, Some(1_000)),
            // 0.25 ms later on b's monotonic clock; b's wall clock stepped 3 s meanwhile.
            shard("b", 2_000_250_000, 7_500_000_000, Some(1_000)),
        ];
        let (a, clocks) = align(&runs).unwrap();
        assert!((clocks[1].t0_offset_ms - 500.0).abs() < 1e-9, "{clocks:?}");
        assert!(
            (clocks[2].t0_offset_ms - clocks[1].t0_offset_ms - 0.25).abs() < 1e-9,
            "{clocks:?}"
        );
        assert_eq!(clocks[2].offset_basis, "wall_clock");
        assert_eq!(a.bound_ms, Some(2.004));
    }

    // A crafted summary's clock overflowed the arithmetic: a panic in debug builds, and in
    // release a wrapped figure still called a bound.
    #[test]
    fn a_clock_out_of_any_range_is_refused_naming_its_field() {
        let e = align(&[shard("a", 1_000, 0, Some(9_000_000_000_000_000_000))]).unwrap_err();
        assert!(e.contains("clock.kernel.maxerror_us"), "{e}");
        assert!(e.contains("out of range"), "{e}");
        let e = align(&[shard("a", u64::MAX, 0, Some(1))]).unwrap_err();
        assert!(e.contains("t0_monotonic_ns"), "{e}");
        let e = align(&[shard("a", 1_000, i64::MAX, Some(1))]).unwrap_err();
        assert!(e.contains("realtime_minus_monotonic_ns"), "{e}");
        // Two shards of a host other than the earliest's, their t0s about 2^63 ns apart on
        // its monotonic clock (each wall in range): the offset overflowed.
        let far = i64::MAX as u64;
        let runs = [
            shard("a", 1_000, 1_000_000_000, Some(1)),
            shard("b", 0, 1_500_000_000, Some(1)),
            shard("b", far, 2_000_000_000 - far as i64, Some(1)),
        ];
        let e = align(&runs).unwrap_err();
        assert!(
            e.contains(&format!("/runs/b-{far}")) && e.contains("t0_monotonic_ns"),
            "{e}"
        );
        assert!(e.contains("out of range"), "{e}");
    }
}
