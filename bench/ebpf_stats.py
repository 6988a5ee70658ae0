#!/usr/bin/env python3
"""Figures of bench/ebpf-overhead.sh: per pair, eBPF on against off, as ratios.

Usage: ebpf_stats.py OUT_DIR PAIRS

OUT_DIR holds, per pair i and mode on/off, the run directories sat-MODE-i and rate-MODE-i
(canaryd's summary.json) and MODE-i.time files ("wall user sys" from /usr/bin/time).
"""
import json
import sys


def summary(out, name):
    return json.load(open(f"{out}/{name}/summary.json"))


def cpu(out, name):
    _, user, sys_ = open(f"{out}/{name}.time").read().split()[-3:]
    return float(user) + float(sys_)


def main():
    out, pairs = sys.argv[1], int(sys.argv[2])
    print("pair | sat req/s on | off | ratio | rate req/s on | off | CPU s on | off | ratio "
          "| lag p99 ms on | off")
    sat, cpus = [], []
    overhead_p50, overhead_p99, chunk_p99, events, lost = [], [], [], 0, 0
    for i in range(1, pairs + 1):
        s_on, s_off = summary(out, f"sat-on-{i}"), summary(out, f"sat-off-{i}")
        r_on, r_off = summary(out, f"rate-on-{i}"), summary(out, f"rate-off-{i}")
        for s in (s_on, s_off, r_on, r_off):
            assert s["errors"] == 0, f"errors in pair {i}"
        assert "kernel" in r_on and "kernel" not in r_off, "eBPF was not on/off as asked"
        t_on, t_off = s_on["request_throughput"], s_off["request_throughput"]
        c_on, c_off = cpu(out, f"rate-on-{i}"), cpu(out, f"rate-off-{i}")
        sat.append(t_on / t_off)
        cpus.append(c_on / c_off)
        k = r_on["kernel"]
        overhead_p50.append(k["client_overhead"]["p50"])
        overhead_p99.append(k["client_overhead"]["p99"])
        chunk_p99.append(k["chunk_delay_p99"]["p50"])
        events += k["events"]
        lost += k["events_lost"]
        print(f"{i} | {t_on:.0f} | {t_off:.0f} | {t_on / t_off:.3f} "
              f"| {r_on['request_throughput']:.0f} | {r_off['request_throughput']:.0f} "
              f"| {c_on:.2f} | {c_off:.2f} | {c_on / c_off:.3f} "
              f"| {r_on['schedule_lag']['p99']:.2f} | {r_off['schedule_lag']['p99']:.2f}")
    print(f"saturated throughput ratio on/off: {min(sat):.3f} .. {max(sat):.3f}")
    print(f"CPU ratio on/off at ~1,000 req/s: {min(cpus):.3f} .. {max(cpus):.3f}")
    print(f"client_overhead at ~1,000 req/s (ms): p50 {min(overhead_p50):.3f} .. "
          f"{max(overhead_p50):.3f}, p99 {min(overhead_p99):.3f} .. {max(overhead_p99):.3f}")
    print(f"per-request chunk delay p99, median over requests (ms): "
          f"{min(chunk_p99):.3f} .. {max(chunk_p99):.3f}")
    print(f"kernel events: {events} in the on runs at ~1,000 req/s, {lost} lost")


if __name__ == "__main__":
    main()
