#!/usr/bin/env python3
"""Why a first token's time is exact or only a bound, per request, refereed by the simulator.

Usage: ttft_stats.py RUN_DIR TRUTH_JSONL [--json]

Joins canaryd's records (RUN_DIR/records.jsonl, summary.json) with the simulator's truth log
(`canaryd sim --truth-log`): both clocks are CLOCK_MONOTONIC on one host. Per request, with the
simulator's write times as the referee (each its clock read right after the write returned):

- agreement: canaryd's TTFT minus the simulator's (token write - canaryd's send), ms;
- read: canaryd's read of the first token (the userspace TTFT) minus its write, ms: how late
  canaryd's code took it in (the kernel had it a few microseconds after the write);
- next write: the simulator's next write after the first token's, minus the first token's, ms:
  how long canaryd had to read the first token alone. A read later than that finds the next
  token queued behind it and the kernel's stamp is the later segment's (`kernel_bound`);
- client_overhead: eBPF's split of the first token (kernel receive -> canaryd's code), when on.

All figures are exact per request; percentiles are interpolated over the requests.
"""
import json
import sys

from lag_stats import load, pct  # same join as the lag figures


def rows(t0, records, truth):
    out = []
    for rid, r in records.items():
        t = truth.get(rid)
        rx = r.get("rx") or {}
        us = rx.get("userspace") or {}
        if t is None or r.get("ttft_ms") is None or not t.get("first_token_ns"):
            continue
        sent_ns = t0 + r["sent_at_ms"] * 1e6
        ft = t["first_token_ns"]
        later = [c for c in t.get("chunk_ns", []) if c > ft]
        read_ms = us.get("ttft_ms", r["ttft_ms"])
        out.append(
            {
                "source": rx.get("first_token", "none"),
                "agreement": r["ttft_ms"] - (ft - sent_ns) / 1e6,
                "read": read_ms - (ft - sent_ns) / 1e6,
                "head_read": (us.get("ttfb_ms") or r.get("ttfb_ms") or 0)
                - ((t.get("first_byte_ns") or sent_ns) - sent_ns) / 1e6,
                "next_write": (min(later) - ft) / 1e6 if later else None,
                "head_to_token": (ft - t["first_byte_ns"]) / 1e6 if t.get("first_byte_ns") else None,
                "overhead": (r.get("kernel") or {}).get("client_overhead_ms"),
                "input_tokens": r.get("input_tokens"),
            }
        )
    return out


def summarize(rs):
    n = len(rs)
    bound = [x for x in rs if x["source"] != "kernel"]
    late = [x for x in rs if x["next_write"] is not None and x["read"] > x["next_write"]]
    fig = {"n": n, "first_token_bound": len(bound), "bound_fraction": len(bound) / n if n else None}
    fig["read_after_next_write"] = len(late)
    for key in ["agreement", "read", "head_read", "next_write", "head_to_token", "overhead"]:
        v = [x[key] for x in rs if x[key] is not None]
        fig[f"{key}_p50_ms"] = pct(v, 50)
        fig[f"{key}_p90_ms"] = pct(v, 90)
        fig[f"{key}_p99_ms"] = pct(v, 99)
    for src in ["kernel", "kernel_bound"]:
        v = [x["agreement"] for x in rs if x["source"] == src]
        fig[f"agreement_{src}_p50_ms"] = pct(v, 50)
    return fig


def main():
    summary, records, truth = load(sys.argv[1], sys.argv[2])
    t0 = summary["t0_monotonic_ns"]
    fig = summarize(rows(t0, records, truth))
    if "--json" in sys.argv:
        print(json.dumps(fig))
        return
    print(f"joined {fig['n']} first tokens; bound {fig['first_token_bound']} "
          f"({fig['bound_fraction']:.1%}); read after the next write {fig['read_after_next_write']}")
    for key in ["agreement", "read", "head_read", "next_write", "head_to_token", "overhead"]:
        print(f"{key:<14} p50={fig[key + '_p50_ms']:8.3f}  p90={fig[key + '_p90_ms']:8.3f}  "
              f"p99={fig[key + '_p99_ms']:8.3f}  (ms)")
    print(f"agreement p50 of exact {fig['agreement_kernel_p50_ms']:.3f}, "
          f"of bounds {fig['agreement_kernel_bound_p50_ms']:.3f} (ms)")


if __name__ == "__main__":
    main()
