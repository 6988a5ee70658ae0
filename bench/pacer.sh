#!/usr/bin/env bash
# The release thread's precision and CPU (issue 21): canaryd builds side by side with the floor
# client (`sim/examples/floor_client.rs`, a trivial tokio pacer), each refereed by the
# simulator's truth log. Short requests (64 tokens in, 8 out), three arrival patterns: the real
# Mooncake slice's bursts sped up to RATE, constant and Poisson.
# Usage: bench/pacer.sh [REPEATS] [RATE ...]   (default 3 repeats; 200 1000 2000 4000 req/s)
# FLOOR=path skips building the floor client; BINS="before=/path/a after=/path/b" compares builds (default: this tree's release build);
# every run appends one JSON line to $LOG (default bench-pacer.jsonl in a temp dir), and the
# table of medians and ratios to the floor is printed at the end (bench/pacer_stats.py table).
# PATTERNS="constant poisson" picks patterns; COUNT=N requests per constant/Poisson run
# (default 2000, 1000 at 200 req/s or less), for runs long enough at high rates (capacity).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/canaryd/target}"
if [ -z "${FLOOR:-}" ]; then
  cargo build --release -p canary-sim --example floor_client >/dev/null
  FLOOR="$CARGO_TARGET_DIR/release/examples/floor_client"
fi
if [ -z "${BINS:-}" ]; then
  cargo build --release -p canaryd >/dev/null
  BINS="canaryd=$CARGO_TARGET_DIR/release/canaryd"
fi
FIRST_BIN="${BINS%% *}"; FIRST_BIN="${FIRST_BIN#*=}"
REPEATS="${1:-3}"; shift || true
RATES=("${@:-200 1000 2000 4000}"); RATES=(${RATES[@]})
SRC="${TRACE:-../shared/traces/mooncake_conversation_first2000.jsonl}"
OUT="$(mktemp -d)"
LOG="${LOG:-$OUT/bench-pacer.jsonl}"
PORT="${PORT:-18475}"
SIM=""
trap '[ -n "$SIM" ] && kill $SIM 2>/dev/null; rm -rf "$OUT"' EXIT

echo "== $(nproc) cores, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load average $(cut -d' ' -f1-3 /proc/loadavg)"

sim_up() { # LABEL
  "$FIRST_BIN" sim --profile fast --port "$PORT" --truth-log "$OUT/truth-$1.jsonl" 2>/dev/null &
  SIM=$!
  # Listening is ready (no curl needed: GPU hosts' images may lack it).
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.05; done
}
sim_down() { kill "$SIM"; wait "$SIM" 2>/dev/null || true; SIM=""; }

one() { # TOOL PATTERN RATE REP
  local tool=$1 pattern=$2 rate=$3 rep=$4 label="$1-$2-$3-$4" n=${COUNT:-2000} shape
  [ -z "${COUNT:-}" ] && [ "$rate" -le 200 ] && n=1000
  sim_up "$label"
  if [ "$tool" = floor ]; then
    case $pattern in
      bursts) shape=(--trace "$OUT/trace-$rate.jsonl") ;;
      *) shape=(--rate "$rate" --pattern "$pattern" --count "$n" --seed "$rep") ;;
    esac
    "${TIME_BIN:-/usr/bin/time}" -o "$OUT/time-$label" -f "%w %c %U %S %M" \
      "$FLOOR" --addr "127.0.0.1:$PORT" --out "$OUT/floor-$label.jsonl" "${shape[@]}"
    sim_down
    python3 bench/pacer_stats.py run "$label" "$OUT/floor-$label.jsonl" "$OUT/truth-$label.jsonl" "$OUT/time-$label" >>"$LOG"
  else
    local bin=""
    for b in $BINS; do [ "${b%%=*}" = "$tool" ] && bin="${b#*=}"; done
    case $pattern in
      bursts) shape=(--trace "$OUT/trace-$rate.jsonl") ;;
      *) shape=(--request-rate "$rate" --arrival-pattern "$pattern" --request-count "$n" --isl 64 --osl 8 --random-seed "$rep") ;;
    esac
    "${TIME_BIN:-/usr/bin/time}" -o "$OUT/time-$label" -f "%w %c %U %S %M" \
      "$bin" profile --url "http://127.0.0.1:$PORT" --model canary-sim --no-nvml --no-ebpf \
        --output-dir "$OUT/run-$label" --json "${shape[@]}" >/dev/null
    sim_down
    python3 bench/pacer_stats.py run "$label" "$OUT/run-$label" "$OUT/truth-$label.jsonl" "$OUT/time-$label" >>"$LOG"
  fi
  tail -1 "$LOG"
}

for rate in "${RATES[@]}"; do
  # The first 2000 rows (1000 at 200 req/s or less), sped up to RATE on average.
  rows=2000; [ "$rate" -le 200 ] && rows=1000
  head -n "$rows" "$SRC" >"$OUT/src-$rate.jsonl"
  m=$("$FIRST_BIN" analyze-trace --json "$OUT/src-$rate.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["mean_rate_rps"])')
  "$FIRST_BIN" synthesize "$OUT/src-$rate.jsonl" "$OUT/trace-$rate.jsonl" \
    --speedup-ratio "$(python3 -c "print($rate / $m)")" --max-isl 64 --max-osl 8 >/dev/null
done
TOOLS=(floor); for b in $BINS; do TOOLS+=("${b%%=*}"); done
for rep in $(seq "$REPEATS"); do
  for rate in "${RATES[@]}"; do
    for pattern in ${PATTERNS:-bursts constant poisson}; do
      # Rotate the order every repeat, so no tool always runs first (or last) on a busy host.
      k=$(( (rep - 1) % ${#TOOLS[@]} ))
      order=("${TOOLS[@]:k}" "${TOOLS[@]:0:k}")
      for tool in "${order[@]}"; do one "$tool" "$pattern" "$rate" "$rep"; done
    done
  done
done
echo "== load average after $(cut -d' ' -f1-3 /proc/loadavg)"
python3 bench/pacer_stats.py table "$LOG"
