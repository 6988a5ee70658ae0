#!/usr/bin/env bash
# Schedule precision of canaryd on the real Mooncake slice, refereed by the simulator's
# ground truth. Usage: bench/replay-lag.sh [SPEEDUP ...]   (default: 20)
# Prints, per speedup, client-side and referee-side lag percentiles and TTFT agreement.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/canaryd/target}"
# BIN=path/to/canaryd compares another build (e.g. an older commit) on the same machine.
if [ -z "${BIN:-}" ]; then
  cargo build --release -p canaryd >/dev/null
  BIN="$CARGO_TARGET_DIR/release/canaryd"
fi
TRACE="${TRACE:-../shared/traces/mooncake_conversation_first2000.jsonl}"
OUT="$(mktemp -d)"
PORT="${PORT:-18471}"
trap 'kill $SIM 2>/dev/null || true; rm -rf "$OUT"' EXIT

for SPEEDUP in "${@:-20}"; do
  "$BIN" sim --profile fast --port "$PORT" --truth-log "$OUT/truth-$SPEEDUP.jsonl" 2>"$OUT/sim.log" &
  SIM=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
  echo "== speedup $SPEEDUP ($(nproc) cores, $(uname -r))"
  /usr/bin/time -f "canaryd: %e s wall, %U s user, %S s sys, %M KB max RSS" \
    "$BIN" replay --trace "$TRACE" --url "http://127.0.0.1:$PORT" --model canary-sim \
      --speedup "$SPEEDUP" --output-dir "$OUT/run-$SPEEDUP" --json >/dev/null
  kill "$SIM"; wait "$SIM" 2>/dev/null || true
  python3 bench/lag_stats.py "$OUT/run-$SPEEDUP" "$OUT/truth-$SPEEDUP.jsonl"
done
