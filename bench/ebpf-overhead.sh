#!/usr/bin/env bash
# Overhead of eBPF socket timing, measured side by side: the same replay with the programs
# attached (on) and with --no-ebpf (off), interleaved on/off PAIRS times so drifting machine
# load hits both alike. Needs root (or CAP_BPF + CAP_PERFMON).
#
# Two runs per mode and pair, both on the real Mooncake slice with lengths scaled by 1/32:
#   sat   all requests due at once, 16 in flight: throughput as fast as client + sim go;
#   rate  the trace's own schedule at ~1,000 requests/s (speedup 334): canaryd's CPU time,
#         schedule lag, and the kernel's view of client overhead.
# Usage: bench/ebpf-overhead.sh [PAIRS]   (default 3). Prints ratios on/off per pair.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/canaryd/target}"
# CANARYD=path runs an existing binary instead of building the release one.
if [ -z "${CANARYD:-}" ]; then
  cargo build --release -p canaryd >/dev/null
  CANARYD="$CARGO_TARGET_DIR/release/canaryd"
fi
BIN="$CANARYD"
TRACE="${TRACE:-../shared/traces/mooncake_conversation_first2000.jsonl}"
PAIRS="${1:-3}"
PORT="${PORT:-18472}"
OUT="$(mktemp -d)"
trap 'kill $SIM 2>/dev/null || true; rm -rf "$OUT"' EXIT

"$BIN" sim --profile fast --port "$PORT" 2>"$OUT/sim.log" &
SIM=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done

run() { # MODE NAME FLAGS...
  local mode=$1 name=$2
  shift 2
  local off=()
  [ "$mode" = off ] && off=(--no-ebpf)
  /usr/bin/time -f "%e %U %S" -o "$OUT/$name.time" \
    "$BIN" replay --trace "$TRACE" --url "http://127.0.0.1:$PORT" --model canary-sim \
      --scale-lengths 0.03125 --no-server-metrics --no-nvml --output-dir "$OUT/$name" \
      --json "${off[@]}" "$@" >/dev/null 2>"$OUT/$name.log"
}

echo "== $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$PAIRS"); do
  for mode in on off; do
    run "$mode" "sat-$mode-$i" --speedup 1000000 --concurrency 16
    run "$mode" "rate-$mode-$i" --speedup 334
  done
done
python3 bench/ebpf_stats.py "$OUT" "$PAIRS"
