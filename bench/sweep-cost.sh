#!/usr/bin/env bash
# A sweep's own cost per point (issue 18): canaryd's CPU in cores (`client_cpu.cpu_s / wall_s`
# of each point's summary.json, exact kernel counters over the measured phase) and its schedule
# lag p99 (exact), for one or more builds taking turns against one `canaryd sim --profile fast`.
# Usage: BINS="before=/path/a after=/path/b" bench/sweep-cost.sh [REPEATS] [RATES]
#   (default 2 repeats; rates 250,500,1000 req/s; short requests, 64 in / 8 out, constant
#   arrivals, 5 s per point). Each point appends one JSON line to $LOG; a table of every run and
#   the medians' ratio to the first build is printed at the end.
# SHAPE=trace sweeps the real 2000-row Mooncake slice instead (its bursts kept, lengths capped
#   at 64 in / 8 out by `canaryd synthesize`), at the speedups that put its mean rate at RATES:
#   the same points in requests per second, Mooncake's arrival pattern instead of even arrivals;
#   each point replays the whole trace (2,000 requests: 8 s at 250 req/s, 2 s at 1,000).
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS="${1:-2}"
RATES="${2:-250,500,1000}"
FIRST_BIN="${BINS%% *}"; FIRST_BIN="${FIRST_BIN#*=}"
OUT="$(mktemp -d)"
LOG="${LOG:-$OUT/sweep-cost.jsonl}"
PORT="${PORT:-18777}"
"$FIRST_BIN" sim --profile fast --port "$PORT" 2>/dev/null &
SIM=$!
trap 'kill $SIM 2>/dev/null; rm -rf "$OUT"' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
if [ "${SHAPE:-rate}" = trace ]; then
  SRC="${TRACE:-../shared/traces/mooncake_conversation_first2000.jsonl}"
  "$FIRST_BIN" synthesize "$SRC" "$OUT/trace.jsonl" --max-isl 64 --max-osl 8 >/dev/null
  MEAN=$("$FIRST_BIN" analyze-trace --json "$OUT/trace.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["mean_rate_rps"])')
  SPEEDUPS=$(python3 -c "print(','.join(f'{int(r) / $MEAN:.4g}' for r in '$RATES'.split(',')))")
  POINTS=(--trace "$OUT/trace.jsonl" --speedup "$SPEEDUPS") # the whole trace per point
else
  POINTS=(--isl 64 --osl 8 --request-rate "$RATES" --arrival-pattern constant --benchmark-duration 5s)
fi
echo "== $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M) UTC"
for rep in $(seq "$REPEATS"); do
  for b in $BINS; do
    tool="${b%%=*}" bin="${b#*=}"
    "$bin" sweep --url "http://127.0.0.1:$PORT" --model canary-sim "${POINTS[@]}" \
      --warmup-request-count 2 --no-nvml --no-ebpf --cooldown 1s \
      -o "$OUT/$tool-$rep" >/dev/null 2>&1
    for point in "$OUT/$tool-$rep"/point-*; do
      python3 - "$tool" "$rep" "$point" >>"$LOG" <<'EOF'
import json, os, sys
tool, rep, point = sys.argv[1:4]
s = json.load(open(f"{point}/summary.json"))
c = s["client_cpu"]
print(json.dumps({"tool": tool, "repeat": int(rep), "point": os.path.basename(point).split("-")[-1],
                  "requests": s["requests"], "cores": round(c["cpu_s"] / c["wall_s"], 4),
                  "lag_p99_ms": s["schedule_lag"]["p99"],
                  "load1": float(open("/proc/loadavg").read().split()[0])}))
EOF
      tail -1 "$LOG"
    done
  done
done
echo "== load average after $(cut -d' ' -f1-3 /proc/loadavg)"
# One row per point: each build's cores and lag p99, run by run, and the ratio of the medians
# of cores to the first build's.
python3 - "$LOG" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tools = list(dict.fromkeys(r["tool"] for r in runs))
points = list(dict.fromkeys(r["point"] for r in runs))
cell = lambda rs, f: ", ".join(f"{r[f]:.3f}" for r in rs)
print("| point | " + " | ".join(f"{t}: cores" for t in tools) + " | "
      + "".join(f"{t} / {tools[0]} | " for t in tools[1:])
      + " | ".join(f"{t}: lag p99 (ms)" for t in tools) + " |")
print("|" + "---|" * (1 + 3 * len(tools) - 1))
for p in points:
    by = {t: [r for r in runs if r["tool"] == t and r["point"] == p] for t in tools}
    med = {t: statistics.median(r["cores"] for r in by[t]) for t in tools if by[t]}
    ratios = [f"{med[t] / med[tools[0]]:.2f}" if t in med and med.get(tools[0]) else "–"
              for t in tools[1:]]
    print(f"| {p} | " + " | ".join(cell(by[t], "cores") for t in tools) + " | "
          + "".join(f"{x} | " for x in ratios)
          + " | ".join(cell(by[t], "lag_p99_ms") for t in tools) + " |")
EOF
