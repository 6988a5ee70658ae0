use super::*;

#[test]
fn schedstat_and_cpu_lists_parse() {
    assert_eq!(
        parse_schedstat("1803221 2625868 2\n"),
        Some(ThreadStat {
            cpu_ns: 1803221,
            wait_ns: 2625868,
            slices: 2
        })
    );
    assert_eq!(parse_schedstat("12 x 3"), None);
    assert_eq!(count_cpu_list("0-3,6\n"), Some(5));
    assert_eq!(count_cpu_list("1"), Some(1));
    assert_eq!(count_cpu_list("3-x"), None);
}

fn snap(at: Instant, threads: &[(u32, u64, u64, u64)], throttled_ns: u64) -> Snapshot {
    Snapshot {
        at,
        threads: threads
            .iter()
            .map(|&(t, cpu_ns, wait_ns, slices)| {
                (
                    t,
                    ThreadStat {
                        cpu_ns,
                        wait_ns,
                        slices,
                    },
                )
            })
            .collect(),
        unread: 0,
        cgroup: Some(CgroupCpu {
            stat: "/sys/fs/cgroup/x/cpu.stat".into(),
            throttled_ns,
            nr_throttled: throttled_ns / 95_000_000,
            quota_cores: Some(0.05),
        }),
    }
}

#[test]
fn figures_are_the_differences_of_the_kernels_counters() {
    let t = Instant::now();
    // Thread 1 lives throughout, 2 exits, 3 is born during the run.
    let a = snap(t, &[(1, 1_000, 5_000, 10), (2, 7, 7, 7)], 0);
    let b = snap(
        t + std::time::Duration::from_secs(2),
        &[
            (1, 50_001_000, 1_005_000, 20),
            (3, 50_000_000, 1_000_000, 30),
        ],
        1_900_000_000,
    );
    let c = between(&a, &b, 2);
    assert_eq!(c.wall_s, 2.0);
    assert!((c.cpu_s - 0.1).abs() < 1e-12);
    // 0.1 CPU s over 2 s of a 0.05-core quota: saturated.
    assert_eq!(c.cpu_quota_cores, Some(0.05));
    assert!((c.utilization - 1.0).abs() < 1e-9, "{c:?}");
    assert!((c.run_delay_s - 0.002).abs() < 1e-12);
    assert_eq!(c.timeslices, 40);
    assert!((c.wait_per_wakeup_ms.unwrap() - 0.05).abs() < 1e-12);
    assert_eq!(c.exited_threads, 1);
    assert_eq!(c.throttled_s, Some(1.9));
    assert_eq!(c.throttled_periods, Some(20));
    assert_eq!(c.cgroup.as_deref(), Some("/sys/fs/cgroup/x/cpu.stat"));
}

#[test]
fn this_process_is_measured_from_proc() {
    let Some(o) = ClientCpuObserver::start() else {
        // Only where the kernel has per-thread schedstat (Linux with /proc).
        assert!(!Path::new("/proc/self/task").exists());
        return;
    };
    let a = o.snapshot().unwrap();
    let t = Instant::now();
    let mut x = 0u64;
    while t.elapsed().as_millis() < 50 {
        x = std::hint::black_box(x.wrapping_add(1));
    }
    let b = o.snapshot().unwrap();
    let c = between(&a, &b, o.cpus_allowed);
    assert!(c.cpu_s > 0.0 && c.timeslices > 0, "{c:?}");
    assert!(c.cpus_allowed >= 1);
}
