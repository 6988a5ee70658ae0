#!/usr/bin/env bash
# A closed loop of 1,000 users holds bounded memory (issue 17): canaryd's peak RSS for the same
# loop run 5 s, 20 s and 60 s (DURATIONS="5 20 60") against `canaryd sim --profile fast`. Usage: bench/closed-loop-memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/canaryd/target}"
cargo build --release -p canaryd >/dev/null
BIN="$CARGO_TARGET_DIR/release/canaryd"
OUT="$(mktemp -d)"
PORT="${PORT:-18474}"
"$BIN" sim --profile fast --port "$PORT" 2>/dev/null &
SIM=$!
trap 'kill $SIM 2>/dev/null || true; rm -rf "$OUT"' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
echo "== $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for D in ${DURATIONS:-5 20 60}; do
  /usr/bin/time -o "$OUT/time-$D" -f "%M" \
    "$BIN" profile --url "http://127.0.0.1:$PORT" --model canary-sim --no-nvml --no-ebpf \
      --concurrency 1000 --benchmark-duration "${D}s" --isl 64 --osl 16 \
      --output-dir "$OUT/run-$D" --json >/dev/null
  python3 - "$OUT/run-$D/summary.json" "$(cat "$OUT/time-$D")" "$D" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(json.dumps({"duration_s": int(sys.argv[3]), "requests": s["requests"], "errors": s["errors"],
                  "users": s["run"]["load"]["users"], "max_rss_mb": round(int(sys.argv[2]) / 1024, 1)}))
PY
done
