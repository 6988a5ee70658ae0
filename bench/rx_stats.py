#!/usr/bin/env python3
"""TTFT from kernel receive timestamps vs canaryd's reads, refereed by the simulator and eBPF.

Usage: rx_stats.py RUN_DIR TRUTH_JSONL

RUN_DIR holds one canaryd replay's records.jsonl and summary.json (receive timestamps on, eBPF
on where it loads); TRUTH_JSONL is the simulator's --truth-log. Every clock here is
CLOCK_MONOTONIC on one host. Per request, the first token's time:

  kernel   the record's ttft_ms: the kernel's receive stamp of the first-token segment
  read     rx.userspace.ttft_ms: when canaryd's code saw the token (the figure before issue 16)
  ebpf     sent + request_write + server_wait + remainder: eBPF's sk_data_ready of the
           first-token bytes, the referee where it loads
  truth    the simulator's first_token_ns: its clock read right after the write(2) carrying
           the token returned (on loopback the bytes reach the client's socket inside that
           write, so the receive stamp is a few µs before it)

Prints each difference's distribution, side by side for kernel and read, then one JSON line.
"""
import json
import sys


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def dist(values):
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p99": pct(values, 99),
        "max": max(values) if values else float("nan"),
        "min": min(values) if values else float("nan"),
    }


def main():
    run_dir, truth_path = sys.argv[1], sys.argv[2]
    summary = json.load(open(f"{run_dir}/summary.json"))
    t0 = summary["t0_monotonic_ns"]
    run_id = summary["run"]["run_id"]
    records = {}
    for line in open(f"{run_dir}/records.jsonl"):
        r = json.loads(line)
        if not r.get("warmup") and r.get("status") == "ok":
            records[f"{run_id}-{r['id']}"] = r
    truth = {}
    for line in open(truth_path):
        t = json.loads(line)
        if t.get("request_id") in records:
            truth[t["request_id"]] = t

    d = {k: [] for k in [
        "kernel_minus_ebpf", "read_minus_ebpf",
        "kernel_minus_truth", "read_minus_truth",
        "abs_kernel_minus_ebpf", "abs_read_minus_ebpf",
        "abs_kernel_minus_truth", "abs_read_minus_truth",
        "read_delay_first_token", "read_delay_max", "clock_map_uncertainty_us",
        "kernel_minus_truth_exact", "kernel_minus_truth_bound",
    ]}
    sources = {}
    no_rx = 0
    for rid, r in records.items():
        rx = r.get("rx")
        if rx is None or r.get("ttft_ms") is None:
            no_rx += 1
            continue
        sources[rx.get("first_token")] = sources.get(rx.get("first_token"), 0) + 1
        sent = t0 + r["sent_at_ms"] * 1e6
        kernel = sent + r["ttft_ms"] * 1e6
        read = sent + rx["userspace"]["ttft_ms"] * 1e6
        d["read_delay_first_token"].append((read - kernel) / 1e6)
        if rx.get("read_delay_max_ms") is not None:
            d["read_delay_max"].append(rx["read_delay_max_ms"])
        d["clock_map_uncertainty_us"].append(rx["clock_map_uncertainty_us"])
        k = r.get("kernel") or {}
        parts = [k.get(p) for p in ("request_write_ms", "server_wait_ms", "remainder_ms")]
        if all(p is not None for p in parts):
            ebpf = sent + sum(parts) * 1e6
            for name, at in (("kernel", kernel), ("read", read)):
                d[f"{name}_minus_ebpf"].append((at - ebpf) / 1e6)
                d[f"abs_{name}_minus_ebpf"].append(abs(at - ebpf) / 1e6)
        t = truth.get(rid)
        if t and t.get("first_token_ns"):
            for name, at in (("kernel", kernel), ("read", read)):
                d[f"{name}_minus_truth"].append((at - t["first_token_ns"]) / 1e6)
                d[f"abs_{name}_minus_truth"].append(abs(at - t["first_token_ns"]) / 1e6)
            label = "exact" if rx.get("first_token") == "kernel" else "bound"
            d[f"kernel_minus_truth_{label}"].append((kernel - t["first_token_ns"]) / 1e6)

    rx = summary.get("receive_timestamps", {})
    print(f"records ok {len(records)}, errors {summary['errors']}, without rx {no_rx}, "
          f"joined with truth {len(truth)}, with eBPF parts {len(d['kernel_minus_ebpf'])}; "
          f"receive timestamps {rx.get('state')}; first token {sources}; "
          f"token events {rx.get('token_events')}, bound {rx.get('token_events_bound')}")

    def row(name, unit, v):
        s = dist(v)
        print(f"{name:<52} n={s['n']:<6} p50={s['p50']:9.4f}  p99={s['p99']:9.4f}  "
              f"max={s['max']:9.4f}  min={s['min']:9.4f} {unit}")

    print("first token, kernel stamp vs canaryd's read (ms):")
    for ref in ("ebpf", "truth"):
        row(f"  kernel - {ref}", "ms", d[f"kernel_minus_{ref}"])
        row(f"  read   - {ref}", "ms", d[f"read_minus_{ref}"])
        row(f"  |kernel - {ref}|", "ms", d[f"abs_kernel_minus_{ref}"])
        row(f"  |read   - {ref}|", "ms", d[f"abs_read_minus_{ref}"])
    row("  kernel - truth, first tokens labelled exact", "ms", d["kernel_minus_truth_exact"])
    row("  kernel - truth, first tokens labelled bound", "ms", d["kernel_minus_truth_bound"])
    row("canaryd read delay, first token (read - kernel)", "ms", d["read_delay_first_token"])
    row("canaryd read delay, per request max over events", "ms", d["read_delay_max"])
    row("clock mapping uncertainty", "us", d["clock_map_uncertainty_us"])
    out = {k: dist(v) for k, v in d.items()}
    out["first_token_sources"] = sources
    out["records_ok"] = len(records)
    out["errors"] = summary["errors"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
