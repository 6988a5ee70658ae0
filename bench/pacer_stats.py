#!/usr/bin/env python3
"""Schedule lag and CPU of one paced run (bench/pacer.sh), refereed by the simulator's truth.

Usage:
  pacer_stats.py run LABEL RUN (canaryd output dir or floor_client JSONL) TRUTH_JSONL TIME_FILE
      prints one JSON line: client lag (sent - scheduled), referee lag in the server's view
      (`referee_lag_*`: the sim's head parsed, `arrival_ns`, - scheduled) and, when the truth
      has kernel receive stamps, in the wire's view (`referee_kernel_lag_*`: the kernel's stamp
      of the request's first byte, `arrival_kernel_ns`, - scheduled: dispatch precision without
      the sim's own delay), the sim's read delay between the two (`sim_read_delay_*`), CPU-s
      per 1,000 requests (user + sys from /usr/bin/time) and peak RSS. Truth logs without the
      kernel field give the server's view only.
  pacer_stats.py table LOG_JSONL
      medians (and ranges) over repeats per pattern, rate and tool, and each tool's ratio to the
      floor client's median in the same runs.
LABEL is TOOL-PATTERN-RATE-REPEAT.
"""
import json
import os
import statistics
import sys


def pct(values, p):
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def sends(run):
    """(request id, scheduled ns, client lag ms) per request."""
    if os.path.isdir(run):
        summary = json.load(open(f"{run}/summary.json"))
        t0, run_id = summary["t0_monotonic_ns"], summary["run"]["run_id"]
        out = []
        for line in open(f"{run}/records.jsonl"):
            r = json.loads(line)
            if not r.get("warmup"):
                out.append((f"{run_id}-{r['id']}", t0 + r["scheduled_at_ms"] * 1e6, r["schedule_lag_ms"]))
        return out, summary.get("errors", 0), summary.get("clock", {}).get("release")
    out = []
    for line in open(run):
        r = json.loads(line)
        out.append((r["id"], r["scheduled_ns"], (r["sent_ns"] - r["scheduled_ns"]) / 1e6))
    return out, 0, None


def run(label, path, truth_path, time_path):
    rows, errors, release = sends(path)
    by_id = {i: s for i, s, _ in rows}
    referee, referee_kernel, read_delay = [], [], []
    for line in open(truth_path):
        t = json.loads(line)
        s = by_id.get(t.get("request_id"))
        if s is not None:
            referee.append((t["arrival_ns"] - s) / 1e6)
            k = t.get("arrival_kernel_ns")
            if k is not None:
                referee_kernel.append((k - s) / 1e6)
                read_delay.append((t["arrival_ns"] - k) / 1e6)
    fields = open(time_path).read().split()
    user, sys_, rss_kb = fields[-3:]
    # Voluntary and involuntary context switches of the whole process, when timed with them
    # ("%w %c %U %S %M"): each a thread that slept and was woken, or was preempted.
    switches = [int(x) for x in fields[-5:-3]] if len(fields) >= 5 else None
    client = [lag for _, _, lag in rows]
    tool, pattern, rate, rep = label.rsplit("-", 3)
    out = {
        "tool": tool, "pattern": pattern, "rate": int(rate), "repeat": int(rep),
        "requests": len(rows), "joined": len(referee), "errors": errors,
        "client_lag_p50_ms": round(pct(client, 50), 4),
        "client_lag_p99_ms": round(pct(client, 99), 4),
        "client_lag_max_ms": round(max(client), 4),
        "referee_lag_p50_ms": round(pct(referee, 50), 4),
        "referee_lag_p99_ms": round(pct(referee, 99), 4),
        **({"kernel_stamped": len(referee_kernel),
            "referee_kernel_lag_p50_ms": round(pct(referee_kernel, 50), 4),
            "referee_kernel_lag_p99_ms": round(pct(referee_kernel, 99), 4),
            "sim_read_delay_p50_ms": round(pct(read_delay, 50), 4),
            "sim_read_delay_p99_ms": round(pct(read_delay, 99), 4)}
           if referee_kernel else {}),
        "cpu_s_per_1000": round((float(user) + float(sys_)) * 1000 / len(rows), 4),
        "peak_rss_mb": round(int(rss_kb) / 1024, 1),
        **({"voluntary_switches_per_request": round(switches[0] / len(rows), 3),
            "involuntary_switches_per_request": round(switches[1] / len(rows), 3)}
           if switches else {}),
        "load1": float(open("/proc/loadavg").read().split()[0]),
    }
    if release:
        out["release"] = release
    print(json.dumps(out))


def table(log):
    runs = [json.loads(l) for l in open(log) if l.strip()]
    # referee_lag: head parsed by the sim (server's view); referee_kernel_lag: the kernel's stamp
    # of the first byte (wire's view); sim_read_delay: the one minus the other.
    figs = ["client_lag_p99_ms", "referee_lag_p99_ms", "referee_kernel_lag_p99_ms",
            "sim_read_delay_p99_ms", "cpu_s_per_1000", "voluntary_switches_per_request"]
    groups = {}
    for r in runs:
        groups.setdefault((r["pattern"], r["rate"]), {}).setdefault(r["tool"], []).append(r)
    tools = sorted({r["tool"] for r in runs}, key=lambda t: (t != "floor", t))
    print("| pattern | rate | figure | " + " | ".join(tools) + " | "
          + " | ".join(f"{t} / floor" for t in tools if t != "floor") + " |")
    print("|" + "---|" * (3 + 2 * len(tools) - 1))
    for (pattern, rate), by_tool in sorted(groups.items()):
        for f in figs:
            if not any(f in r for rs in by_tool.values() for r in rs):
                continue  # truth without kernel stamps: no wire's-view rows
            cells, med = [], {}
            for t in tools:
                v = [r[f] for r in by_tool.get(t, []) if f in r]
                if not v:
                    cells.append("–")
                    continue
                med[t] = statistics.median(v)
                cells.append(f"{med[t]:.3f} ({min(v):.3f}–{max(v):.3f})" if len(v) > 1 else f"{v[0]:.3f}")
            ratios = [f"{med[t] / med['floor']:.2f}" if t in med and med.get("floor") else "–"
                      for t in tools if t != "floor"]
            print(f"| {pattern} | {rate} | {f} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(*sys.argv[2:6])
    elif sys.argv[1] == "table":
        table(sys.argv[2])
    else:
        sys.exit(__doc__)
