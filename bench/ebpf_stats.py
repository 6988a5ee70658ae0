#!/usr/bin/env python3
"""Figures of bench/ebpf-overhead.sh: per pair, eBPF on against off, as ratios.

Usage: ebpf_stats.py OUT_DIR PAIRS

OUT_DIR holds canaryd's run directories (summary.json) and NAME.time files ("wall user sys"
from /usr/bin/time): sat-MODE-i and rate-MODE-i per pair i and mode on/off, one-MODE-i
(a single request: the fixed cost), and rate-stats (a rate run with BPF statistics on).
"""
import json
import os
import statistics
import sys


def summary(out, name):
    return json.load(open(f"{out}/{name}/summary.json"))


def cpu(out, name):
    _, user, sys_ = open(f"{out}/{name}.time").read().split()[-3:]
    return float(user) + float(sys_)


def span(values, fmt="{:.3f}"):
    return (f"median {fmt.format(statistics.median(values))} "
            f"(range {fmt.format(min(values))} .. {fmt.format(max(values))})")


def main():
    out, pairs = sys.argv[1], int(sys.argv[2])
    print("pair | sat req/s on | off | ratio | rate req/s on | off | CPU s on | off | ratio "
          "| lag p99 ms on | off")
    sat, cpus, extra_cpu = [], [], []
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
        extra_cpu.append(c_on - c_off)
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
    requests = summary(out, "rate-on-1")["requests"]
    print(f"saturated throughput ratio on/off: {span(sat)}")
    print(f"canaryd CPU ratio on/off at ~1,000 req/s: {span(cpus)}; "
          f"extra CPU s per {requests}-request run: {span(extra_cpu)}")
    ones = [i for i in range(1, 10) if os.path.exists(f"{out}/one-on-{i}.time")]
    if ones:
        fixed = [cpu(out, f"one-on-{i}") - cpu(out, f"one-off-{i}") for i in ones]
        print(f"fixed cost of loading the programs (CPU s, one-request runs): {span(fixed)}")
    print(f"client_overhead at ~1,000 req/s (ms): p50 {span(overhead_p50)}, "
          f"p99 {span(overhead_p99)}")
    print(f"per-request chunk delay p99, median over requests (ms): {span(chunk_p99)}")
    print(f"kernel events: {events} in the on runs at ~1,000 req/s, {lost} lost")
    if os.path.exists(f"{out}/rate-stats/summary.json"):
        st = summary(out, "rate-stats")
        programs = st["kernel"].get("programs") or {}
        total_ms = sum(p["run_time_ms"] for p in programs.values())
        for name, p in sorted(programs.items()):
            print(f"  {name}: {p['runs']} runs, {p['ns_per_run']:.0f} ns/run, "
                  f"{p['run_time_ms']:.1f} ms")
        print(f"programs' kernel CPU: {total_ms:.1f} ms for {st['requests']} requests "
              f"({total_ms * 1e3 / st['requests']:.1f} µs/request, "
              f"{total_ms / st['duration_s'] / 10:.2f}% of one core at "
              f"{st['request_throughput']:.0f} req/s)")
        user_ms = st["kernel"]["userspace_ms"]
        print(f"canaryd draining and joining: {user_ms:.1f} ms "
              f"({user_ms * 1e3 / st['requests']:.1f} µs/request)")


if __name__ == "__main__":
    main()
