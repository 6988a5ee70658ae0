#!/usr/bin/env bash
# Rate mode against trace replay at the same rate (issue 17), refereed by the simulator's truth.
# Usage: bench/rate-vs-trace.sh [RATE] [REPEATS]   (default 2000 req/s, 3 repeats, A B C order)
# The trace is the real 2000-row Mooncake conversation slice, sped up by `canaryd synthesize` to
# RATE on average (its bursts kept) and capped at 256 input / 16 output tokens; the synthetic
# runs send 2000 requests of 256 in / 16 out, Poisson and constant, at RATE.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/canaryd/target}"
cargo build --release -p canaryd >/dev/null
BIN="$CARGO_TARGET_DIR/release/canaryd"
RATE="${1:-2000}"
REPEATS="${2:-3}"
SRC="${TRACE:-../shared/traces/mooncake_conversation_first2000.jsonl}"
OUT="$(mktemp -d)"
PORT="${PORT:-18473}"
SIM=""
trap '[ -n "$SIM" ] && kill $SIM 2>/dev/null; rm -rf "$OUT"' EXIT

MEAN=$("$BIN" analyze-trace --json "$SRC" | python3 -c 'import json,sys; print(json.load(sys.stdin)["mean_rate_rps"])')
RATIO=$(python3 -c "print($RATE / $MEAN)")
"$BIN" synthesize "$SRC" "$OUT/trace.jsonl" --speedup-ratio "$RATIO" --max-isl 256 --max-osl 16 >/dev/null
echo "== $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg); trace sped up ${RATIO}x"

run() { # LABEL ARGS...
  local label=$1; shift
  "$BIN" sim --profile fast --port "$PORT" --truth-log "$OUT/truth-$label.jsonl" 2>/dev/null &
  SIM=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
  /usr/bin/time -o "$OUT/time-$label" -f "%U %S" \
    "$BIN" profile --url "http://127.0.0.1:$PORT" --model canary-sim --no-nvml --no-ebpf \
      --output-dir "$OUT/run-$label" --json "$@" >/dev/null
  kill "$SIM"; wait "$SIM" 2>/dev/null || true; SIM=""
  local cpu; cpu=$(awk '{print $1 + $2}' "$OUT/time-$label")
  python3 bench/shape_stats.py "$label" "$OUT/run-$label" "$OUT/truth-$label.jsonl" "$cpu"
}

for i in $(seq "$REPEATS"); do
  run "trace-$i" --trace "$OUT/trace.jsonl"
  run "poisson-$i" --request-rate "$RATE" --arrival-pattern poisson --request-count 2000 --isl 256 --osl 16
  run "constant-$i" --request-rate "$RATE" --arrival-pattern constant --request-count 2000 --isl 256 --osl 16
done
