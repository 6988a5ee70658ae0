#!/usr/bin/env python3
"""canaryd's NVML figures against a real GPU (bench/gpu-check.sh), with PyTorch and pynvml.

Usage:
  gpu_check.py load OUT_CSV OUT_PHASES IDLE_S LOAD_S IDLE_S STOP_FILE
      idle, then bf16 matrix products on GPU 0, then idle until STOP_FILE exists; meanwhile
      reads NVML itself through pynvml every 100 ms (the reference), from before PyTorch loads,
      writing one CSV row per read on CLOCK_MONOTONIC.
  gpu_check.py compare RUN_DIR REF_CSV PHASES_JSON
      canaryd's summary.json `gpu` figures against the reference's over the run (time-weighted
      as canaryd weighs its samples), and each record's `telemetry` against the reference over
      that request's life; prints JSON.
  gpu_check.py queries OUT_JSON READY_FILE HOLD_S
      each NVML query canaryd makes, timed; memory used by NVML's two versions and nvidia-smi
      while 2 GiB are held, then READY_FILE is written and the memory held HOLD_S seconds.
  gpu_check.py launches SECONDS READY_FILE GO_FILE
      small kernels back to back (launch-bound, as decode steps are): once warm, writes
      READY_FILE, waits for GO_FILE, then prints kernels per second over SECONDS, for the cost
      of NVML sampling to the GPU's work.
"""

import csv
import json
import os
import statistics
import sys
import threading
import time

FIELDS = ["t_ns", "util_gpu", "util_mem", "mem_used", "mem_total", "power_w", "energy_j",
          "temp_c", "sm_mhz", "mem_mhz", "throttle", "proc_sm", "proc_mem"]


def reference_sampler(rows, stop, pid, period_s=0.1):
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    last_proc = 0
    nxt = time.monotonic()
    while not stop.is_set():
        def read(f, *a):
            try:
                return f(h, *a)
            except pynvml.NVMLError:
                return None
        t = time.monotonic_ns()
        u = read(pynvml.nvmlDeviceGetUtilizationRates)
        m = read(memory_v2(pynvml))
        p = read(pynvml.nvmlDeviceGetPowerUsage)
        e = read(pynvml.nvmlDeviceGetTotalEnergyConsumption)
        temp = read(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU)
        sm = read(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM)
        mc = read(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM)
        thr = read(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)
        procs = read(pynvml.nvmlDeviceGetProcessUtilization, last_proc) or []
        mine = [s for s in procs if s.pid == pid]
        if procs:
            last_proc = max(s.timeStamp for s in procs)
        rows.append([t, u.gpu if u else None, u.memory if u else None,
                     m.used if m else None, m.total if m else None,
                     p / 1000 if p is not None else None, e / 1000 if e is not None else None,
                     temp, sm, mc, thr,
                     mine[-1].smUtil if mine else None, mine[-1].memUtil if mine else None])
        nxt += period_s
        time.sleep(max(0.0, nxt - time.monotonic()))


def memory_v2(pynvml):
    """NVML's memory info version 2, as nvml-wrapper reads it: `used` is what is allocated,
    `reserved` (the driver's and firmware's) apart; version 1's `used` counts both."""
    return lambda h: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)


def queries(out_json, ready, hold_s, rounds=20):
    """Each NVML query canaryd makes, timed (median and max of ROUNDS, exact wall time), and
    memory used by NVML's two versions and nvidia-smi while 2 GiB are held; writes READY
    when canaryd may sample, then holds HOLD_S seconds."""
    import subprocess
    import pynvml
    import torch
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    held = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    q = {
        "utilization": lambda: pynvml.nvmlDeviceGetUtilizationRates(h),
        "memory_v1": lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
        "memory_v2": lambda: memory_v2(pynvml)(h),
        "power": lambda: pynvml.nvmlDeviceGetPowerUsage(h),
        "energy": lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
        "temperature": lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        "clock_sm": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        "clock_mem": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
        "throttle_reasons": lambda: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h),
        "pcie_tx": lambda: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
        "pcie_rx": lambda: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES),
        "process_utilization": lambda: pynvml.nvmlDeviceGetProcessUtilization(h, 0),
        "device_by_index": lambda: pynvml.nvmlDeviceGetHandleByIndex(0),
    }
    out = {"rounds": rounds, "queries_ms": {}}
    for name, f in q.items():
        took, err = [], None
        for _ in range(rounds):
            c0, t0 = time.process_time_ns(), time.perf_counter_ns()
            try:
                f()
            except pynvml.NVMLError as e:
                err = str(e)
            took.append(((time.perf_counter_ns() - t0) / 1e6, (time.process_time_ns() - c0) / 1e6))
        out["queries_ms"][name] = {
            "wall_median": statistics.median(t for t, _ in took),
            "wall_max": max(t for t, _ in took),
            "cpu_median": statistics.median(c for _, c in took),
            "error": err,
        }
    m1, m2 = pynvml.nvmlDeviceGetMemoryInfo(h), memory_v2(pynvml)(h)
    out["memory"] = {
        "held_bytes": held.numel(),
        "v1_used": m1.used, "v1_total": m1.total,
        "v2_used": m2.used, "v2_reserved": m2.reserved, "v2_total": m2.total,
        "nvidia_smi_used_reserved_total_mib": subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used,memory.reserved,memory.total",
             "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.strip(),
    }
    with open(out_json, "w") as f:
        json.dump(out, f, indent=1)
    open(ready, "w").close()
    time.sleep(hold_s)
    del held


def wait_for(path, limit_s=60):
    """Waits until PATH exists (another process's signal), at most LIMIT_S seconds."""
    deadline = time.monotonic() + limit_s
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


def load(out_csv, out_phases, idle1, busy, idle2, stop_file):
    rows, stop = [], threading.Event()
    sampler = threading.Thread(target=reference_sampler, args=(rows, stop, os.getpid()))
    sampler.start()
    import torch  # seconds: the reference reads from before, to cover all of canaryd's run
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    torch.cuda.synchronize()
    phases = {"idle1_start_ns": time.monotonic_ns()}
    time.sleep(idle1)
    phases["load_start_ns"] = time.monotonic_ns()
    products = 0
    end = time.monotonic() + busy
    while time.monotonic() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
        products += 10
    phases["load_end_ns"] = time.monotonic_ns()
    phases["products"] = products
    phases["tflops"] = 2 * 8192 ** 3 * products / busy / 1e12
    time.sleep(idle2)
    phases["idle2_end_ns"] = time.monotonic_ns()
    # The reference reads on until canaryd's run has ended, so it covers all of it.
    wait_for(stop_file)
    stop.set()
    sampler.join()
    with open(out_csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        w.writerows(rows)
    with open(out_phases, "w") as f:
        json.dump(phases, f)


def read_ref(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    num = lambda v: None if v in ("", "None") else float(v)
    return [{k: num(v) for k, v in r.items()} for r in rows]


def mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def time_weighted(ref, field, a, b):
    """FIELD's mean over [A, B] (ns), each read holding until the next, as canaryd weighs its
    samples; None where the reads do not cover [A, B]."""
    if not ref or ref[0]["t_ns"] > a or ref[-1]["t_ns"] < b:
        return None
    total = 0.0
    for r, nxt in zip(ref, ref[1:] + [{"t_ns": b}]):
        lo, hi = max(r["t_ns"], a), min(nxt["t_ns"], b)
        if hi > lo and r[field] is not None:
            total += r[field] * (hi - lo)
    return total / (b - a)


def counter_at(ref, field, t):
    """A cumulative FIELD at T (ns), interpolated between the reads on either side."""
    for r, nxt in zip(ref, ref[1:]):
        if r["t_ns"] <= t <= nxt["t_ns"] and r[field] is not None and nxt[field] is not None:
            return r[field] + (nxt[field] - r[field]) * (t - r["t_ns"]) / (nxt["t_ns"] - r["t_ns"])
    return None


def compare(run_dir, ref_csv, phases_json):
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    phases = json.load(open(phases_json))
    ref = read_ref(ref_csv)
    t0 = summary["t0_monotonic_ns"]
    end_ns = t0 + summary["duration_s"] * 1e9
    records = [json.loads(line) for line in open(os.path.join(run_dir, "records.jsonl"))]
    records = [r for r in records if not r.get("warmup")]
    # The reference reads from before the run's t0 to after its end: both sides cover the run.
    win = [r for r in ref if t0 <= r["t_ns"] <= end_ns]
    throttle = 0
    for r in win:
        throttle |= int(r["throttle"] or 0)
    e0, e1 = counter_at(ref, "energy_j", t0), counter_at(ref, "energy_j", end_ns)
    largest = lambda k: max((r[k] for r in win if r[k] is not None), default=None)
    out = {
        "run_s": summary["duration_s"],
        "reference_covers_run": bool(ref) and ref[0]["t_ns"] <= t0 and ref[-1]["t_ns"] >= end_ns,
        "reference_reads_in_run": len(win),
        "canaryd_gpu": summary.get("gpu"),
        "telemetry_sources": summary.get("telemetry_sources"),
        "context_gpu": (summary.get("context") or {}).get("gpu"),
        # Over the run, [t0, t0 + duration], as canaryd's summary takes it.
        "reference": {
            "util_avg_pct": time_weighted(ref, "util_gpu", t0, end_ns),
            "util_max_pct": largest("util_gpu"),
            "power_avg_w": time_weighted(ref, "power_w", t0, end_ns),
            "power_max_w": largest("power_w"),
            "energy_j": e1 - e0 if e0 is not None and e1 is not None else None,
            "mem_used_max_bytes": largest("mem_used"),
            "temp_max_c": largest("temp_c"),
            "throttle_mask": hex(throttle),
            "process_sm_util_avg_pct": mean(r["proc_sm"] for r in win),
            "sm_mhz_max": largest("sm_mhz"),
        },
        "phases_s_from_t0": {k: (v - t0) / 1e9 for k, v in phases.items() if k.endswith("_ns")},
        "tflops": phases.get("tflops"),
    }
    # Each record's GPU utilization against the reference over its own life, by canaryd's rule:
    # the read in force when it was sent, then the reads until it ended.
    load = (phases["load_start_ns"], phases["load_end_ns"])
    per = {"busy": [], "idle": [], "abs_diff": []}
    for r in records:
        ours = (r.get("telemetry") or {}).get("gpu_util_avg_pct")
        if ours is None or r.get("ended_at_ms") is None:
            continue
        a, b = t0 + r["sent_at_ms"] * 1e6, t0 + r["ended_at_ms"] * 1e6
        before = [x for x in ref if x["t_ns"] <= a][-1:]
        theirs = mean(x["util_gpu"] for x in before + [x for x in ref if a < x["t_ns"] <= b])
        if theirs is None:
            continue
        per["abs_diff"].append(abs(ours - theirs))
        if load[0] + 0.5e9 <= a and b <= load[1]:
            per["busy"].append(ours)
        elif b < load[0] or a > load[1] + 0.5e9:
            per["idle"].append(ours)
    out["per_request"] = {
        "with_reference": len(per["abs_diff"]),
        "busy_requests": len(per["busy"]), "busy_util_avg": mean(per["busy"]),
        "idle_requests": len(per["idle"]), "idle_util_avg": mean(per["idle"]),
        "abs_diff_vs_reference_median": statistics.median(per["abs_diff"]) if per["abs_diff"] else None,
        "abs_diff_vs_reference_max": max(per["abs_diff"], default=None),
    }
    print(json.dumps(out, indent=1))


def launches(seconds, ready, go):
    """Warms up, writes READY, waits for GO (sampling has begun), then times the loop."""
    import torch
    x = torch.randn(256, 256, dtype=torch.float16, device="cuda")
    for _ in range(100):
        x @ x
    torch.cuda.synchronize()
    open(ready, "w").close()
    wait_for(go)
    n, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        for _ in range(200):
            x @ x
        torch.cuda.synchronize()
        n += 200
    print(f"{n / (time.monotonic() - start):.0f}")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "load":
        load(args[0], args[1], float(args[2]), float(args[3]), float(args[4]), args[5])
    elif cmd == "compare":
        compare(*args)
    elif cmd == "queries":
        queries(args[0], args[1], float(args[2]))
    elif cmd == "launches":
        launches(float(args[0]), args[1], args[2])
    else:
        sys.exit(__doc__)
