#!/usr/bin/env bash
# Overhead of eBPF socket timing, measured side by side: the same replay with the programs
# attached (on) and with --no-ebpf (off), interleaved on/off PAIRS times so drifting machine
# load hits both alike (A B B A order). Needs root (or CAP_BPF + CAP_PERFMON).
#
# The trace is the real 2000-row Mooncake slice played 5 times over (10,000 requests), lengths
# scaled by 1/32. Per pair and mode:
#   sat   all requests due at once, 16 in flight: throughput as fast as client + sim go;
#   rate  the trace's own schedule at ~1,000 requests/s (speedup 334): canaryd's CPU time,
#         schedule lag, and the kernel's view of client overhead.
# Then one more "rate" run with the kernel's BPF statistics on (kernel.bpf_stats_enabled,
# restored afterwards), for the programs' own CPU time, and one-request runs for the fixed
# cost of loading them.
# Usage: bench/ebpf-overhead.sh [PAIRS]   (default 5). Prints ratios on/off per pair.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/canaryd/target}"
# CANARYD=path runs an existing binary instead of building the release one.
if [ -z "${CANARYD:-}" ]; then
  cargo build --release -p canaryd >/dev/null
  CANARYD="$CARGO_TARGET_DIR/release/canaryd"
fi
BIN="$CANARYD"
SLICE="${TRACE:-../shared/traces/mooncake_conversation_first2000.jsonl}"
PAIRS="${1:-5}"
PORT="${PORT:-18472}"
OUT="$(mktemp -d)"
STATS_BEFORE="$(cat /proc/sys/kernel/bpf_stats_enabled 2>/dev/null || echo 0)"
trap 'kill $SIM 2>/dev/null || true; echo "$STATS_BEFORE" >/proc/sys/kernel/bpf_stats_enabled 2>/dev/null || true; rm -rf "$OUT"' EXIT

# Five passes over the slice, each starting where the previous one ended.
python3 - "$SLICE" "$OUT/trace.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
span = rows[-1]["timestamp"] - rows[0]["timestamp"] + 1000
with open(sys.argv[2], "w") as out:
    for k in range(5):
        for r in rows:
            out.write(json.dumps(dict(r, timestamp=r["timestamp"] + k * span)) + "\n")
PY

"$BIN" sim --profile fast --port "$PORT" 2>"$OUT/sim.log" &
SIM=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done

run() { # MODE NAME FLAGS...
  local mode=$1 name=$2
  shift 2
  local off=()
  [ "$mode" = off ] && off=(--no-ebpf)
  /usr/bin/time -f "%e %U %S" -o "$OUT/$name.time" \
    "$BIN" replay --trace "$OUT/trace.jsonl" --url "http://127.0.0.1:$PORT" --model canary-sim \
      --scale-lengths 0.03125 --no-server-metrics --no-nvml --output-dir "$OUT/$name" \
      --json "${off[@]}" "$@" >/dev/null 2>"$OUT/$name.log"
}

echo "== $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$PAIRS"); do
  # A B B A: neither mode always goes first.
  order="on off"
  [ $((i % 2)) = 0 ] && order="off on"
  for mode in $order; do
    run "$mode" "sat-$mode-$i" --speedup 1000000 --concurrency 16
    run "$mode" "rate-$mode-$i" --speedup 334
  done
done
for i in 1 2 3; do
  for mode in on off; do run "$mode" "one-$mode-$i" --max-requests 1; done
done
if echo 1 >/proc/sys/kernel/bpf_stats_enabled 2>/dev/null; then
  run on rate-stats --speedup 334
  echo "$STATS_BEFORE" >/proc/sys/kernel/bpf_stats_enabled
fi
python3 bench/ebpf_stats.py "$OUT" "$PAIRS"
