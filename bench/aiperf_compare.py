#!/usr/bin/env python3
"""canaryd and aiperf side by side, refereed by the simulator's ground truth.

Usage (normally through bench/compare-aiperf, which builds and installs what this needs):
  aiperf_compare.py --canaryd BIN --aiperf BIN --hf-home DIR --out DIR [--quick] [...]

For every run a fresh `canaryd sim --profile fast --truth-log` serves, one tool replays the same
Mooncake rows on the same schedule, and every figure is computed from the simulator's log the
same way for both tools:

- schedule lag: the simulator's arrival time minus the scheduled time, in the server's view
  (`arrival_ns`: the simulator had parsed the head) and, where the truth has kernel receive
  stamps, the wire's (`arrival_kernel_ns`: the kernel's stamp of the first byte; "wire lag"). Scheduled times come from
  the trace (the k-th arrival is paired with the k-th scheduled time: inside a burst of equal
  timestamps the order a tool sends in does not matter). Reported min-anchored (minus the least
  late request, aiperf's `replay_sched_lag` anchoring, needs no knowledge of the tool's start)
  and absolute (from the tool's own start: canaryd's `t0_monotonic_ns`; aiperf's `start_time`,
  wall clock mapped to CLOCK_MONOTONIC with an offset sampled here);
- client CPU seconds per 1,000 requests: user + system time of the tool's whole process tree
  (wait4 rusage, children included), start-up and dataset preparation included;
- peak RSS: the highest sum of VmRSS over the tool's process tree, sampled from /proc every 20 ms;
- TTFT agreement: the tool's TTFT minus the server's (first token written − request arrived),
  joined by `x-request-id`;
- sustained rate: the highest rate whose min-anchored p99 lag stays within 10 ms, stepping up.

Runs alternate A B A B so machine drift hits both tools alike; medians and canaryd/aiperf
ratios are printed and written to OUT/results.json.
"""
import argparse
import datetime as dt
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from lag_stats import pct  # same percentile rule as bench/replay-lag.sh

BLOCK = 512  # Mooncake's hash block size, tokens
LAG_LIMIT_MS = 10.0


def rust_round(x):
    """Rust's f64::round (half away from zero) for non-negative x, as canaryd scales."""
    return int(x + 0.5)


# ---------------------------------------------------------------- traces


def load_rows(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def tile(rows, copies):
    """The real rows repeated `copies` times, later copies shifted past the last timestamp
    (plus the slice's median gap) with hash ids made disjoint, so reuse stays as in the slice."""
    ts = sorted({r["timestamp"] for r in rows})
    gaps = sorted(b - a for a, b in zip(ts, ts[1:])) or [1000]
    period = ts[-1] - ts[0] + gaps[len(gaps) // 2]
    id_span = 1 + max((h for r in rows for h in r.get("hash_ids", [])), default=0)
    out = []
    for c in range(copies):
        for r in rows:
            r = dict(r)
            r["timestamp"] = r["timestamp"] - ts[0] + c * period
            r["hash_ids"] = [h + c * id_span for h in r.get("hash_ids", [])]
            out.append(r)
    return out


def scale_row(r, f):
    """The same scaling as canaryd's --scale-lengths (replay/src/trace/select.rs)."""
    bs = max(1, rust_round(BLOCK * f))
    n = len(r.get("hash_ids", []))
    inp = max(1, rust_round(r["input_length"] * f))
    if n:
        inp = min(max(inp, (n - 1) * bs + 1), n * bs)
    out = max(1, rust_round(r["output_length"] * f))
    return inp, out, bs


class Workload:
    """The first `n` rows of the tiled trace at `speedup`, for both tools."""

    def __init__(self, rows, n, speedup, scale, workdir):
        self.rows = rows[:n]
        self.speedup = speedup
        self.scale = scale
        t0 = self.rows[0]["timestamp"]
        self.sched_ms = sorted((r["timestamp"] - t0) / speedup for r in self.rows)
        span_s = self.sched_ms[-1] / 1000 or 1e-3
        self.rate = len(self.rows) / span_s
        self.canaryd_trace = workdir / "trace-canaryd.jsonl"
        if not self.canaryd_trace.exists():
            with open(self.canaryd_trace, "w") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
        self.aiperf_trace = workdir / f"trace-aiperf-{n}-{speedup:g}.jsonl"
        with open(self.aiperf_trace, "w") as f:
            for r in self.rows:
                inp, out, bs = scale_row(r, scale)
                self.block_size = bs
                f.write(
                    json.dumps(
                        {
                            "timestamp": round((r["timestamp"] - t0) / speedup, 6),
                            "input_length": inp,
                            "output_length": out,
                            "hash_ids": r["hash_ids"],
                        }
                    )
                    + "\n"
                )


# ---------------------------------------------------------------- processes


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_rss_kb(root):
    """Sum of VmRSS over `root` and all its descendants."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    total, stack, procs = 0, [root], 0
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        procs += 1
                        break
        except OSError:
            pass
    return total, procs


def run_measured(cmd, env, log_path, timeout):
    """Runs `cmd`; returns wall s, CPU s of its whole tree, peak summed RSS (KB), peak process
    count, exit status."""
    start = time.monotonic()
    launched_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    peak = {"rss": 0, "procs": 0}
    done = threading.Event()

    def sample():
        while not done.is_set():
            rss, n = tree_rss_kb(proc.pid)
            peak["rss"] = max(peak["rss"], rss)
            peak["procs"] = max(peak["procs"], n)
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    status, ru = None, None
    deadline = start + timeout
    while status is None:
        pid, st, ru_ = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status, ru = os.waitstatus_to_exitcode(st), ru_
            break
        if time.monotonic() > deadline:
            proc.send_signal(signal.SIGINT)
            deadline = time.monotonic() + 30
        time.sleep(0.05)
    done.set()
    sampler.join()
    proc.returncode = status
    return {
        "wall_s": time.monotonic() - start,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "peak_rss_mb": peak["rss"] / 1024,
        "largest_process_rss_mb": ru.ru_maxrss / 1024,
        "processes": peak["procs"],
        "exit": status,
        "launched_ns": launched_ns,
    }


class Sim:
    def __init__(self, canaryd, truth_path, log_path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [canaryd, "sim", "--profile", "fast", "--port", str(self.port), "--truth-log", str(truth_path)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        for _ in range(200):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise SystemExit(f"simulator did not start, see {log_path}")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


# ---------------------------------------------------------------- figures


def lag_figures(arrivals_ns, sched_ms, t0_ns):
    """Pairs the k-th arrival with the k-th scheduled time (rank inside a burst)."""
    arrivals = sorted(arrivals_ns)
    n = min(len(arrivals), len(sched_ms))
    raw = [(arrivals[k] / 1e6) - sched_ms[k] for k in range(n)]
    anchor = min(raw) if raw else 0.0
    anchored = [x - anchor for x in raw]
    out = {
        "lag_min_anchored_p50_ms": pct(anchored, 50),
        "lag_min_anchored_p99_ms": pct(anchored, 99),
        "lag_min_anchored_max_ms": max(anchored, default=float("nan")),
    }
    if t0_ns is not None:
        absolute = [x - t0_ns / 1e6 for x in raw]
        out.update(
            {
                "lag_abs_p50_ms": pct(absolute, 50),
                "lag_abs_p99_ms": pct(absolute, 99),
                "lag_abs_max_ms": max(absolute, default=float("nan")),
                "lag_abs_min_ms": min(absolute, default=float("nan")),
            }
        )
    return out


def read_truth(path):
    truth = {}
    for line in open(path):
        t = json.loads(line)
        if t.get("path", "").startswith("/v1/"):
            truth[t.get("request_id") or f"seq-{t['seq']}"] = t
    return truth


def ttft_gaps(client_ttft, truth):
    """Client TTFT minus the server's (first token written − request arrived), per request."""
    gaps = []
    for rid, ttft in client_ttft.items():
        t = truth.get(rid)
        if t and ttft is not None and t.get("first_token_ns") and t.get("arrival_ns"):
            gaps.append(ttft - (t["first_token_ns"] - t["arrival_ns"]) / 1e6)
    return gaps


# ---------------------------------------------------------------- tools


def mono_minus_wall_ns():
    a = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    w = time.time_ns()
    b = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    return (a + b) // 2 - w


def run_canaryd(args, wl, sim, rundir, env=None):
    out = rundir / "canaryd-out"
    cmd = [
        args.canaryd, "replay", "--trace", str(wl.canaryd_trace), "--format", "mooncake",
        "--url", sim.url, "--model", "canary-sim",
        "--speedup", f"{wl.speedup:g}", "--scale-lengths", f"{wl.scale:g}",
        "--max-requests", str(len(wl.rows)), "--output-dir", str(out),
        "--no-ebpf", "--no-nvml", "--json",
    ]
    m = run_measured(cmd, dict(os.environ, **(env or {})), rundir / "tool.log", args.timeout)
    summary = json.load(open(out / "summary.json"))
    run_id = summary["run"]["run_id"]
    ttft = {}
    for line in open(out / "records.jsonl"):
        r = json.loads(line)
        ttft[f"{run_id}-{r['id']}"] = r.get("ttft_ms")
    return m, summary["t0_monotonic_ns"], ttft, summary.get("errors", 0)


def run_aiperf(args, wl, sim, rundir, cold):
    if cold:
        shutil.rmtree(Path.home() / ".cache" / "aiperf", ignore_errors=True)
    art = rundir / "aiperf-out"
    env = dict(os.environ, HF_HOME=str(args.hf_home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cmd = [
        args.aiperf, "profile", "--model", "canary-sim", "--url", sim.url,
        "--endpoint-type", "chat", "--streaming", "--tokenizer", "local/tokenizer",
        "--input-file", str(wl.aiperf_trace), "--custom-dataset-type", "mooncake_trace",
        "--fixed-schedule", "--isl-block-size", str(wl.block_size),
        # aiperf's lightest settings: server token counts (no response tokenization), no UI.
        "--use-server-token-count", "--ui", "none", "--output-artifact-dir", str(art),
    ]
    offset = mono_minus_wall_ns()
    m = run_measured(cmd, env, rundir / "tool.log", args.timeout)
    t0 = None
    ttft, errors = {}, 0
    summary_path = art / "profile_export_aiperf.json"
    if summary_path.exists():
        s = json.load(open(summary_path))
        start = s.get("start_time")
        if start:
            # aiperf writes local time without a zone; this machine's zone is what it used.
            wall = dt.datetime.fromisoformat(start).timestamp()
            t0 = int(wall * 1e9) + offset
        errors = (s.get("error_summary") and sum(e.get("count", 0) for e in s["error_summary"])) or 0
    jsonl = art / "profile_export.jsonl"
    if jsonl.exists():
        for line in open(jsonl):
            r = json.loads(line)
            v = r.get("metrics", {}).get("time_to_first_token", {}).get("value")
            ttft[r["metadata"]["x_request_id"]] = v
    return m, t0, ttft, errors


def one_run(args, tool, wl, label, cold=False, env=None):
    rundir = args.out / f"{label}-{tool}"
    rundir.mkdir(parents=True, exist_ok=True)
    sim = Sim(args.canaryd, rundir / "truth.jsonl", rundir / "sim.log")
    try:
        if tool == "canaryd":
            m, t0, ttft, errors = run_canaryd(args, wl, sim, rundir, env)
        else:
            m, t0, ttft, errors = run_aiperf(args, wl, sim, rundir, cold)
    finally:
        sim.stop()
    truth = read_truth(rundir / "truth.jsonl")
    arrivals = [t["arrival_ns"] for t in truth.values()]
    fig = {"tool": tool, "label": label, "rate": wl.rate, "speedup": wl.speedup, "requests": len(wl.rows)}
    fig["arrived"] = len(arrivals)
    fig["errors"] = errors
    fig.update(m)
    fig["cpu_s_per_1000"] = m["cpu_s"] / max(1, len(wl.rows)) * 1000
    fig.update(lag_figures(arrivals, wl.sched_ms, t0))
    # The wire's view beside the server's: the kernel's stamp of each request's first byte
    # (truth logs without it, or a sim whose kernel refused stamps, give none).
    kernel = [t["arrival_kernel_ns"] for t in truth.values() if t.get("arrival_kernel_ns") is not None]
    fig["kernel_stamped"] = len(kernel)
    if kernel and len(kernel) == len(arrivals):
        fig.update({f"kernel_{k}": v for k, v in lag_figures(kernel, wl.sched_ms, t0).items()})
        delay = [(t["arrival_ns"] - t["arrival_kernel_ns"]) / 1e6 for t in truth.values()]
        fig["sim_read_delay_p50_ms"] = pct(delay, 50)
        fig["sim_read_delay_p99_ms"] = pct(delay, 99)
    # Launch to the first request the server saw: start-up, trace loading, dataset preparation.
    fig["startup_ms"] = (min(arrivals) - m.pop("launched_ns")) / 1e6 if arrivals else float("nan")
    fig.pop("launched_ns", None)
    gaps = ttft_gaps(ttft, truth)
    fig["ttft_gap_n"] = len(gaps)
    fig["ttft_gap_p50_ms"] = pct(gaps, 50)
    fig["ttft_gap_p99_ms"] = pct(gaps, 99)
    if tool == "aiperf":
        fig["aiperf_cache"] = "cold" if cold else "warm"
    json.dump(fig, open(rundir / "figures.json", "w"), indent=1)
    print(
        f"  {label:<18} {tool:<8} rate {wl.rate:7.1f}/s  arrived {len(arrivals):>5}/{len(wl.rows):<5} "
        f"lag p99 {fig['lag_min_anchored_p99_ms']:8.3f} ms (abs {fig.get('lag_abs_p99_ms', float('nan')):8.3f}; "
        f"wire abs {fig.get('kernel_lag_abs_p99_ms', float('nan')):8.3f})  "
        f"cpu {m['cpu_s']:6.2f} s  rss {m['peak_rss_mb']:7.1f} MB/{m['processes']}p  wall {m['wall_s']:5.1f} s",
        flush=True,
    )
    return fig


# ---------------------------------------------------------------- report

METRICS = [
    ("lag_min_anchored_p50_ms", "lag p50, min-anchored (ms)"),
    ("lag_min_anchored_p99_ms", "lag p99, min-anchored (ms)"),
    ("lag_min_anchored_max_ms", "lag max, min-anchored (ms)"),
    ("lag_abs_p50_ms", "lag p50, absolute (ms)"),
    ("lag_abs_p99_ms", "lag p99, absolute (ms)"),
    ("lag_abs_max_ms", "lag max, absolute (ms)"),
    # The wire's view: the kernel's stamp of each request's first byte instead of the sim's
    # parse of its head (NaN, so left out of nothing, for truth logs without the field).
    ("kernel_lag_min_anchored_p99_ms", "wire lag p99, min-anchored (ms, kernel arrival)"),
    ("kernel_lag_abs_p99_ms", "wire lag p99, absolute (ms, kernel arrival)"),
    ("sim_read_delay_p99_ms", "sim read delay p99 (ms, head parsed − kernel arrival)"),
    ("cpu_s_per_1000", "client CPU s per 1000 requests"),
    ("peak_rss_mb", "peak RSS, process tree (MB)"),
    ("processes", "processes"),
    ("wall_s", "wall time (s)"),
    ("startup_ms", "launch to first request (ms)"),
    ("ttft_gap_p50_ms", "TTFT client − server p50 (ms)"),
    ("ttft_gap_p99_ms", "TTFT client − server p99 (ms)"),
]


def median_of(runs, key):
    vals = [r[key] for r in runs if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
    return statistics.median(vals) if vals else float("nan")


def table(a_runs, b_runs, b_name):
    lines = [f"| figure | canaryd | {b_name} | canaryd/{b_name} |", "|---|---|---|---|"]
    for key, name in METRICS:
        a, b = median_of(a_runs, key), median_of(b_runs, key)
        ratio = a / b if b and b == b and a == a else float("nan")
        lines.append(f"| {name} | {a:.3f} | {b:.3f} | {ratio:.3g} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--canaryd", required=True)
    ap.add_argument("--aiperf", required=True)
    ap.add_argument("--hf-home", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--quick", action="store_true", help="a short smoke run")
    ap.add_argument("--reps", type=int, default=3, help="A B pairs at the headline rate")
    ap.add_argument("--rate", type=float, default=200, help="headline rate, req/s")
    ap.add_argument("--seconds", type=float, default=10, help="length of each run")
    ap.add_argument("--scale", type=float, default=1 / 16, help="length scale (both tools)")
    ap.add_argument("--steps", default="100,200,400,700,1000,1500,2000", help="rates stepped for the sustained rate")
    ap.add_argument("--big-rate", type=float, default=1000, help="rate of canaryd's 12,000-row run")
    ap.add_argument("--only-big", action="store_true", help="only canaryd's 12,000-row run (memory)")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    if args.quick:
        args.reps, args.seconds, args.steps = 1, 3, "200,1000"
    args.out.mkdir(parents=True, exist_ok=True)

    base = load_rows(args.trace)
    rows = tile(base, max(1, -(-12000 // len(base))))[:12000]
    t_first = rows[0]["timestamp"]
    rate_1x = len(rows) / ((rows[-1]["timestamp"] - t_first) / 1000)

    def workload(rate):
        n = int(min(len(rows), max(50, rate * args.seconds)))
        return Workload(rows, n, rate / rate_1x, args.scale, args.out)

    machine = {
        "nproc": os.cpu_count(),
        "kernel": os.uname().release,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_start": os.getloadavg(),
    }
    print(f"trace {args.trace}: {len(base)} rows tiled to {len(rows)}, {rate_1x:.2f} req/s at 1x; "
          f"machine {machine}", flush=True)
    results = {"machine": machine, "trace": args.trace, "scale": args.scale, "runs": []}

    def big_run():
        # The whole 12,000-row trace through canaryd: peak RSS and time to the first request.
        wl = Workload(rows, len(rows), args.big_rate / rate_1x, args.scale, args.out)
        print(f"== canaryd, all {len(rows)} rows at {wl.rate:.0f} req/s "
              f"(MALLOC_ARENA_MAX={os.environ.get('MALLOC_ARENA_MAX', 'unset')})", flush=True)
        f = one_run(args, "canaryd", wl, "big")
        results["big"] = f
        return [
            "",
            f"canaryd, all {len(rows)} rows at {f['rate']:.0f} req/s: peak RSS {f['peak_rss_mb']:.1f} MB, "
            f"launch to first request {f['startup_ms']:.0f} ms, lag p99 {f['lag_min_anchored_p99_ms']:.3f} ms "
            f"(absolute {f.get('lag_abs_p99_ms', float('nan')):.3f}), CPU {f['cpu_s_per_1000']:.3f} s per 1000.",
        ]

    if args.only_big:
        text = "\n".join(big_run())
        print(text)
        json.dump(results, open(args.out / "results.json", "w"), indent=1)
        return

    # Headline: A B A B at one rate; the first aiperf run starts from a cold cache.
    wl = workload(args.rate)
    print(f"== headline: {len(wl.rows)} requests at {wl.rate:.1f} req/s (speedup {wl.speedup:.1f}), "
          f"A B A B x{args.reps}", flush=True)
    head = []
    for i in range(args.reps):
        head.append(one_run(args, "canaryd", wl, f"head{i}"))
        head.append(one_run(args, "aiperf", wl, f"head{i}", cold=(i == 0)))
    results["runs"] += head
    a_runs = [r for r in head if r["tool"] == "canaryd"]
    warm = [r for r in head if r["tool"] == "aiperf" and r["aiperf_cache"] == "warm"]
    cold = [r for r in head if r["tool"] == "aiperf" and r["aiperf_cache"] == "cold"]

    # Sustained rate: step up; each tool drops out after its p99 passes the limit.
    print(f"== sustained rate: steps {args.steps} req/s, limit p99 {LAG_LIMIT_MS} ms (min-anchored)", flush=True)
    best = {"canaryd": 0.0, "aiperf": 0.0}
    alive = {"canaryd": True, "aiperf": True}
    steps = []
    for rate in [float(x) for x in args.steps.split(",")]:
        wl = workload(rate)
        for tool in ("canaryd", "aiperf"):
            if not alive[tool]:
                continue
            f = one_run(args, tool, wl, f"step{rate:g}")
            steps.append(f)
            ok = f["lag_min_anchored_p99_ms"] <= LAG_LIMIT_MS and f["arrived"] >= f["requests"]
            if ok:
                best[tool] = max(best[tool], f["rate"])
            else:
                alive[tool] = False
        if not any(alive.values()):
            break
    results["runs"] += steps
    results["sustained_rate"] = best
    machine["loadavg_end"] = os.getloadavg()

    report = [
        f"Headline rate {a_runs[0]['rate']:.1f} req/s, {a_runs[0]['requests']} requests per run, "
        f"{args.reps} A B pairs; medians.",
        "",
        "aiperf, warm dataset cache:" if warm else "aiperf (cold only):",
        "",
        table(a_runs, warm or cold, "aiperf"),
    ]
    if warm and cold:
        report += ["", "aiperf, cold dataset cache (first run):", "", table(a_runs[:1], cold, "aiperf")]
    report += [
        "",
        "| sustained rate (p99 lag ≤ 10 ms, min-anchored) | canaryd | aiperf | ratio |",
        "|---|---|---|---|",
        f"| req/s | {best['canaryd']:.0f} | {best['aiperf']:.0f} | "
        f"{(best['canaryd'] / best['aiperf']) if best['aiperf'] else float('inf'):.3g} |",
        "",
        "| step rate (req/s) | tool | lag p99 min-anchored (ms) | lag p99 absolute (ms) | CPU s/1000 | peak RSS (MB) |",
        "|---|---|---|---|---|---|",
    ]
    for f in steps:
        report.append(
            f"| {f['rate']:.0f} | {f['tool']} | {f['lag_min_anchored_p99_ms']:.3f} | "
            f"{f.get('lag_abs_p99_ms', float('nan')):.3f} | {f['cpu_s_per_1000']:.3f} | {f['peak_rss_mb']:.1f} |"
        )
    report += big_run()
    text = "\n".join(report)
    print(text)
    (args.out / "report.md").write_text(text + "\n")
    json.dump(results, open(args.out / "results.json", "w"), indent=1)
    print(f"\nfull results: {args.out}/results.json, per-run folders under {args.out}")


if __name__ == "__main__":
    sys.exit(main())
