#!/usr/bin/env python3
"""Schedule-lag and TTFT-agreement figures of one canaryd replay, refereed by the simulator.

Usage: lag_stats.py RUN_DIR TRUTH_JSONL

RUN_DIR holds canaryd's records.jsonl and summary.json; TRUTH_JSONL is the simulator's
--truth-log. Both clocks are CLOCK_MONOTONIC on the same host, so the simulator's arrival
time minus canaryd's scheduled time is the lag as a neutral observer saw it, in two views:
the server's (`arrival_ns`, the simulator had read and parsed the head: includes its own
scheduling delay) and, when the truth log has kernel receive stamps, the wire's
(`arrival_kernel_ns`, the kernel's stamp of the request's first byte: dispatch precision).
Truth logs without the kernel field give the server's view only.
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


def load(run_dir, truth_path):
    """The run's summary, its measured records by request id, and the simulator's truth for them."""
    summary = json.load(open(f"{run_dir}/summary.json"))
    run_id = summary["run"]["run_id"]
    records = {}
    for line in open(f"{run_dir}/records.jsonl"):
        r = json.loads(line)
        if not r.get("warmup"):
            records[f"{run_id}-{r['id']}"] = r
    truth = {}
    for line in open(truth_path):
        t = json.loads(line)
        if t.get("request_id") in records:
            truth[t["request_id"]] = t
    return summary, records, truth


def main():
    summary, records, truth = load(sys.argv[1], sys.argv[2])
    t0 = summary["t0_monotonic_ns"]

    client_lag = [r["schedule_lag_ms"] for r in records.values()]
    referee_lag, ttft_gap, arrival_after_send = [], [], []
    kernel_lag, kernel_after_send, read_delay = [], [], []
    for rid, r in records.items():
        t = truth.get(rid)
        if t is None:
            continue
        scheduled_ns = t0 + r["scheduled_at_ms"] * 1e6
        referee_lag.append((t["arrival_ns"] - scheduled_ns) / 1e6)
        arrival_after_send.append((t["arrival_ns"] - (t0 + r["sent_at_ms"] * 1e6)) / 1e6)
        k = t.get("arrival_kernel_ns")
        if k is not None:
            kernel_lag.append((k - scheduled_ns) / 1e6)
            kernel_after_send.append((k - (t0 + r["sent_at_ms"] * 1e6)) / 1e6)
            read_delay.append((t["arrival_ns"] - k) / 1e6)
        if r.get("ttft_ms") is not None and t.get("first_token_ns"):
            server_ttft = (t["first_token_ns"] - (t0 + r["sent_at_ms"] * 1e6)) / 1e6
            ttft_gap.append(r["ttft_ms"] - server_ttft)

    def row(name, v):
        print(f"{name:<44} n={len(v):<6} p50={pct(v, 50):8.3f}  p99={pct(v, 99):8.3f}  max={max(v) if v else float('nan'):8.3f}")

    print(f"records {len(records)}, errors {summary['errors']}, joined with truth {len(truth)}")
    row("client schedule lag (ms, sent - scheduled)", client_lag)
    row("referee lag, server (ms, head parsed - scheduled)", referee_lag)
    row("wire delay, server (ms, head parsed - sent)", arrival_after_send)
    if kernel_lag:
        row("referee lag, wire (ms, kernel arrival - scheduled)", kernel_lag)
        row("wire delay, wire (ms, kernel arrival - sent)", kernel_after_send)
        row("sim read delay (ms, head parsed - kernel arrival)", read_delay)
    else:
        print("(truth log without arrival_kernel_ns: no wire's-view lag)")
    row("TTFT agreement (ms, client - sim token write)", ttft_gap)
    out = {
        "records": len(records),
        "errors": summary["errors"],
        "client_lag_p50_ms": pct(client_lag, 50),
        "client_lag_p99_ms": pct(client_lag, 99),
        "client_lag_max_ms": max(client_lag) if client_lag else None,
        "referee_lag_p50_ms": pct(referee_lag, 50),
        "referee_lag_p99_ms": pct(referee_lag, 99),
        "referee_lag_max_ms": max(referee_lag) if referee_lag else None,
        "kernel_stamped": len(kernel_lag),
        "referee_kernel_lag_p50_ms": pct(kernel_lag, 50) if kernel_lag else None,
        "referee_kernel_lag_p99_ms": pct(kernel_lag, 99) if kernel_lag else None,
        "referee_kernel_lag_max_ms": max(kernel_lag) if kernel_lag else None,
        "sim_read_delay_p50_ms": pct(read_delay, 50) if read_delay else None,
        "sim_read_delay_p99_ms": pct(read_delay, 99) if read_delay else None,
        "ttft_gap_p50_ms": pct(ttft_gap, 50),
        "ttft_gap_p99_ms": pct(ttft_gap, 99),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
