#!/usr/bin/env bash
# Peak RSS of `canaryd replay` by trace size (issue 21, "a 1M-row trace replays in <= 64 MB"):
# the real Mooncake conversation slice tiled into SIZES rows (bench/big_trace.py: time-shifted
# copies, hash ids offset per copy), lengths scaled by 1/64 and outputs capped at 8 tokens,
# replayed against `canaryd sim --profile fast` at about RATE req/s with at most CONC requests
# in flight (so a host that falls behind makes the run late, not the process hold a pile of
# requests: what is measured is what the trace costs). Peak RSS from /usr/bin/time -f %M
# (exact: the kernel's high-water mark of the process).
# Usage: SIZES="100000 300000 1000000" RATE=3000 CONC=64 bench/big-trace-memory.sh [BIN...]
# (several BINs: each size is run by each binary in turn, A B A B, for before/after).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/canaryd/target}"
if [ $# -ge 1 ]; then BINS=("$@"); else cargo build --release -p canaryd >/dev/null; BINS=("$CARGO_TARGET_DIR/release/canaryd"); fi
BIN="${BINS[0]}"
SLICE=../shared/traces/mooncake_conversation_first2000.jsonl
OUT="${OUT:-$(mktemp -d)}"
PORT="${PORT:-18491}"
RATE="${RATE:-3000}"
CONC="${CONC:-64}"
# CONC=0: no cap (in flight is whatever the host leaves waiting).
CAP=(); [ "$CONC" = 0 ] || CAP=(--concurrency "$CONC")
# SECONDS_CAP=S: interrupt each run (SIGINT, a clean stop that still writes its summary) S s
# after launch. The trace is loaded and scheduled whole before the first request, so the peak
# then holds everything the trace costs, without the backlog a host that falls behind a long
# run builds up (which is not the trace's cost, and would dominate: see bench/RESULTS.md).
SECONDS_CAP="${SECONDS_CAP:-}"
STOP=(); [ -z "$SECONDS_CAP" ] || STOP=(timeout -s INT "$SECONDS_CAP")
"$BIN" sim --profile fast --port "$PORT" 2>/dev/null &
SIM=$!
trap 'kill $SIM 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$OUT"' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
echo "== $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg), $("$BIN" --version)"
for N in ${SIZES:-100000 300000 1000000}; do
  TRACE="$OUT/trace-$N.jsonl"
  [ -f "$TRACE" ] || python3 bench/big_trace.py "$SLICE" "$N" "$TRACE"
  # The slice offers 2,000 rows in 670 s: this speedup gives about RATE req/s.
  SPEEDUP=$(python3 -c "print(round($RATE * 670 / 2000, 1))")
  for B in "${BINS[@]}"; do
    rm -rf "$OUT/run-$N"
    /usr/bin/time -o "$OUT/time-$N" -f "%M %e %U %S" ${STOP[@]+"${STOP[@]}"} \
      "$B" replay --trace "$TRACE" --url "http://127.0.0.1:$PORT" --model canary-sim \
        --no-nvml --no-ebpf --speedup "$SPEEDUP" ${CAP[@]+"${CAP[@]}"} \
        --scale-lengths 0.015625 --max-output-tokens 8 \
        --output-dir "$OUT/run-$N" --json >/dev/null 2>"$OUT/log-$N" || [ -n "$SECONDS_CAP" ]
    python3 - "$OUT/run-$N/summary.json" "$N" "$B" $(tail -n1 "$OUT/time-$N") <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except OSError:  # a run stopped by SECONDS_CAP may end before its summary is written
    s = {"requests": None, "errors": None}
n, binary, rss_kb, wall, user, sys_ = int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), *map(float, sys.argv[5:])
print(json.dumps({"bin": binary, "rows": n, "requests": s["requests"], "errors": s["errors"],
                  "max_rss_mb": round(rss_kb / 1024, 1),
                  "rss_kb_per_1000_rows": round(rss_kb / (n / 1000), 1),
                  "wall_s": wall, "cpu_s": round(user + sys_, 1)}), flush=True)
PY
  done
done
