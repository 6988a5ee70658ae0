#!/usr/bin/env bash
# Rate mode against trace replay at the same rate (issue 17), refereed by the simulator's truth.
# Usage: bench/rate-vs-trace.sh [RATE] [REPEATS]   (default 2000 req/s, 3 repeats, A B C order)
# The trace is the real 2000-row Mooncake conversation slice, sped up by `canaryd synthesize` to
# RATE on average (its bursts kept) and capped at 256 input / 16 output tokens; the synthetic
# runs send 2000 requests of 256 in / 16 out, Poisson and constant, at RATE. Each synthetic run
# is followed by its twin: a trace of the very send times it planned (from its records.jsonl),
# the same lengths, replayed as a trace, so rate mode and trace mode are compared over the same
# arrivals (a mode's own cost), apart from the Mooncake bursts (an arrival pattern's cost).
# BIN=path skips the build; every run's JSON line goes to $LOG (default in a temp dir), and the
# medians and ratios are printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/canaryd/target}"
if [ -z "${BIN:-}" ]; then
  cargo build --release -p canaryd >/dev/null
  BIN="$CARGO_TARGET_DIR/release/canaryd"
fi
RATE="${1:-2000}"
REPEATS="${2:-3}"
SRC="${TRACE:-../shared/traces/mooncake_conversation_first2000.jsonl}"
OUT="$(mktemp -d)"
PORT="${PORT:-18473}"
LOG="${LOG:-$OUT/rate-vs-trace.jsonl}"
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
  python3 bench/shape_stats.py "$label" "$OUT/run-$label" "$OUT/truth-$label.jsonl" "$cpu" | tee -a "$LOG"
}

twin() { # LABEL: a Mooncake trace of run LABEL's planned send times and lengths
  python3 - "$OUT/run-$1/records.jsonl" "$OUT/twin-$1.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
with open(sys.argv[2], "w") as out:
    for i, r in enumerate(sorted((r for r in rows if not r.get("warmup")), key=lambda r: r["id"])):
        out.write(json.dumps({"timestamp": round(r["scheduled_at_ms"], 3),
                              "input_length": r["input_tokens"], "output_length": 16,
                              "hash_ids": [i]}) + "\n")
PY
}

for i in $(seq "$REPEATS"); do
  run "trace-$i" --trace "$OUT/trace.jsonl"
  for pattern in poisson constant; do
    run "$pattern-$i" --request-rate "$RATE" --arrival-pattern "$pattern" --request-count 2000 \
      --isl 256 --osl 16 --random-seed "$i"
    twin "$pattern-$i"
    run "${pattern}_trace-$i" --trace "$OUT/twin-$pattern-$i.jsonl"
  done
done
python3 - "$LOG" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
kinds = {}
for r in runs:
    kinds.setdefault(r["label"].rsplit("-", 1)[0], []).append(r)
figures = ["cpu_ms_per_request", "client_lag_p99_ms", "referee_lag_p99_ms", "achieved_rps_at_sim"]
med = {k: {f: statistics.median(r[f] for r in v) for f in figures} for k, v in kinds.items()}
print("medians over", {k: len(v) for k, v in kinds.items()}, "runs")
print("| kind | " + " | ".join(figures) + " |")
for k, m in med.items():
    print(f"| {k} | " + " | ".join(f"{m[f]:g}" for f in figures) + " |")
for p in ("poisson", "constant"):
    if p in med and f"{p}_trace" in med:
        print(f"{p} rate / its trace twin, CPU per request: "
              f"{med[p]['cpu_ms_per_request'] / med[p + '_trace']['cpu_ms_per_request']:.2f}")
    if p in med and "trace" in med:
        print(f"{p} rate / Mooncake trace, CPU per request: "
              f"{med[p]['cpu_ms_per_request'] / med['trace']['cpu_ms_per_request']:.2f}")
PY
