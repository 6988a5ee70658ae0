#!/usr/bin/env bash
# A sweep's own cost per point (issue 18): canaryd's CPU in cores (`client_cpu.cpu_s / wall_s`
# of each point's summary.json, exact kernel counters over the measured phase) and its schedule
# lag p99 (exact), for one or more builds taking turns against one `canaryd sim --profile fast`.
# Usage: BINS="before=/path/a after=/path/b" bench/sweep-cost.sh [REPEATS] [RATES]
#   (default 2 repeats; rates 250,500,1000 req/s; short requests, 64 in / 8 out, constant)
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS="${1:-2}"
RATES="${2:-250,500,1000}"
FIRST_BIN="${BINS%% *}"; FIRST_BIN="${FIRST_BIN#*=}"
OUT="$(mktemp -d)"
PORT="${PORT:-18777}"
"$FIRST_BIN" sim --profile fast --port "$PORT" 2>/dev/null &
SIM=$!
trap 'kill $SIM 2>/dev/null; rm -rf "$OUT"' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
echo "== $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M) UTC"
for rep in $(seq "$REPEATS"); do
  for b in $BINS; do
    tool="${b%%=*}" bin="${b#*=}"
    "$bin" sweep --url "http://127.0.0.1:$PORT" --model canary-sim --isl 64 --osl 8 \
      --request-rate "$RATES" --arrival-pattern constant --benchmark-duration 5s \
      --warmup-request-count 2 --no-nvml --no-ebpf --cooldown 1s \
      -o "$OUT/$tool-$rep" >/dev/null 2>&1
    for point in "$OUT/$tool-$rep"/point-*; do
      python3 - "$tool" "$rep" "$point" <<'EOF'
import json, os, sys
tool, rep, point = sys.argv[1:4]
s = json.load(open(f"{point}/summary.json"))
c = s["client_cpu"]
print(json.dumps({"tool": tool, "repeat": int(rep), "point": os.path.basename(point).split("-")[-1],
                  "requests": s["requests"], "cores": round(c["cpu_s"] / c["wall_s"], 4),
                  "lag_p99_ms": s["schedule_lag"]["p99"],
                  "load1": float(open("/proc/loadavg").read().split()[0])}))
EOF
    done
  done
done
echo "== load average after $(cut -d' ' -f1-3 /proc/loadavg)"
