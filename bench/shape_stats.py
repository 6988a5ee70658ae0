#!/usr/bin/env python3
"""Schedule lag, arrival variation and achieved rate of one canaryd run, refereed by the
simulator's ground truth (issue 17: rate mode against trace replay).

Usage: shape_stats.py LABEL RUN_DIR TRUTH_JSONL CPU_SECONDS

Prints one JSON line: client lag (sent - scheduled) and referee lag (sim arrival - scheduled)
percentiles, the coefficient of variation of inter-arrival gaps as canaryd intended them and as
the simulator saw them, the achieved rate at the simulator, and CPU per request.
"""
import json
import statistics
import sys


def pct(values, p):
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def cv(times):
    t = sorted(times)
    gaps = [b - a for a, b in zip(t, t[1:])]
    return statistics.stdev(gaps) / statistics.mean(gaps)


def main():
    label, run_dir, truth_path, cpu = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    summary = json.load(open(f"{run_dir}/summary.json"))
    t0 = summary["t0_monotonic_ns"]
    run_id = summary["run"]["run_id"]
    records = {}
    for line in open(f"{run_dir}/records.jsonl"):
        r = json.loads(line)
        if not r.get("warmup"):
            records[f"{run_id}-{r['id']}"] = r
    arrivals, referee, referee_kernel = [], [], []
    for line in open(truth_path):
        t = json.loads(line)
        r = records.get(t.get("request_id"))
        if r is None:
            continue
        arrivals.append(t["arrival_ns"] / 1e6)
        referee.append((t["arrival_ns"] - (t0 + r["scheduled_at_ms"] * 1e6)) / 1e6)
        # The wire's view (kernel stamp of the first byte), where the truth log has it.
        if t.get("arrival_kernel_ns") is not None:
            referee_kernel.append((t["arrival_kernel_ns"] - (t0 + r["scheduled_at_ms"] * 1e6)) / 1e6)
    client = [r["schedule_lag_ms"] for r in records.values()]
    intended = [r["scheduled_at_ms"] for r in records.values()]
    span_s = (max(arrivals) - min(arrivals)) / 1e3
    out = {
        "label": label,
        "records": len(records),
        "joined": len(arrivals),
        "errors": summary["errors"],
        "client_lag_p50_ms": round(pct(client, 50), 3),
        "client_lag_p99_ms": round(pct(client, 99), 3),
        "client_lag_max_ms": round(max(client), 3),
        "referee_lag_p50_ms": round(pct(referee, 50), 3),
        "referee_lag_p99_ms": round(pct(referee, 99), 3),
        **({"referee_kernel_lag_p50_ms": round(pct(referee_kernel, 50), 3),
            "referee_kernel_lag_p99_ms": round(pct(referee_kernel, 99), 3)} if referee_kernel else {}),
        "cv_intended": round(cv(intended), 3),
        "cv_at_sim": round(cv(arrivals), 3),
        "achieved_rps_at_sim": round((len(arrivals) - 1) / span_s, 1),
        "cpu_ms_per_request": round(cpu * 1e3 / len(records), 4),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
