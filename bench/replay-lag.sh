#!/usr/bin/env bash
# Schedule precision of canaryd on the real Mooncake slice, refereed by the simulator's
# ground truth. Usage: bench/replay-lag.sh [SPEEDUP ...]   (default: 20)
# Prints, per speedup, client-side and referee-side lag percentiles and TTFT agreement, and why
# first tokens are exact or bounds (bench/ttft_stats.py). KEEP=dir keeps the run and truth log.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/canaryd/target}"
# BIN=path/to/canaryd compares another build (e.g. an older commit) on the same machine.
# REPLAY_FLAGS="--realtime-workers" adds flags to the replay (word-split).
if [ -z "${BIN:-}" ]; then
  cargo build --release -p canaryd >/dev/null
  BIN="$CARGO_TARGET_DIR/release/canaryd"
fi
TRACE="${TRACE:-../shared/traces/mooncake_conversation_first2000.jsonl}"
PORT="${PORT:-18471}"
if [ -n "${KEEP:-}" ]; then
  OUT="$KEEP"; mkdir -p "$OUT"
  trap 'kill $SIM 2>/dev/null || true' EXIT
else
  OUT="$(mktemp -d)"
  trap 'kill $SIM 2>/dev/null || true; rm -rf "$OUT"' EXIT
fi

for SPEEDUP in "${@:-20}"; do
  "$BIN" sim --profile fast --port "$PORT" --truth-log "$OUT/truth-$SPEEDUP.jsonl" 2>"$OUT/sim.log" &
  SIM=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
  echo "== speedup $SPEEDUP ($(nproc) cores, $(uname -r))"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
  /usr/bin/time -o "$OUT/time-$SPEEDUP" \
    -f "canaryd: %e s wall, %U s user, %S s sys, %M KB max RSS, %w voluntary and %c involuntary switches" \
    "$BIN" replay --trace "$TRACE" --url "http://127.0.0.1:$PORT" --model canary-sim \
      --speedup "$SPEEDUP" --output-dir "$OUT/run-$SPEEDUP" --json ${REPLAY_FLAGS:-} >/dev/null
  # The simulator's own CPU (user + sys, s; it shares the cores), before it is stopped.
  awk -v hz="$(getconf CLK_TCK)" '{ printf "sim: %.2f s user + sys\n", ($14 + $15) / hz }' \
    "/proc/$SIM/stat" >"$OUT/sim-cpu-$SPEEDUP"
  kill "$SIM"; wait "$SIM" 2>/dev/null || true
  cat "$OUT/time-$SPEEDUP" "$OUT/sim-cpu-$SPEEDUP"
  python3 bench/ttft_stats.py "$OUT/run-$SPEEDUP" "$OUT/truth-$SPEEDUP.jsonl"
  python3 bench/lag_stats.py "$OUT/run-$SPEEDUP" "$OUT/truth-$SPEEDUP.jsonl"
done
