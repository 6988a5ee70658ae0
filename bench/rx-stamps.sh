#!/usr/bin/env bash
# TTFT from kernel receive timestamps (issue 16) against canaryd's own reads, in one run,
# refereed by the simulator's ground truth and, where it loads (root, or CAP_BPF +
# CAP_PERFMON), eBPF's sk_data_ready. The receive timestamps themselves need no privilege.
#
# The trace is the real 2000-row Mooncake slice played 5 times over (10,000 requests), lengths
# scaled by 1/32, on its own schedule at ~1,000 requests/s (speedup 334), against
# `canaryd sim --profile fast` on the same machine. RUNS runs (default 3), each printing the
# first token's kernel-stamped and read times minus eBPF's and the truth's, side by side, and
# canaryd's CPU time beside a run with --no-kernel-timestamps (A B B A order).
# Usage: bench/rx-stamps.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/canaryd/target}"
# CANARYD=path runs an existing binary instead of building the release one.
if [ -z "${CANARYD:-}" ]; then
  cargo build --release -p canaryd >/dev/null
  CANARYD="$CARGO_TARGET_DIR/release/canaryd"
fi
SLICE="${TRACE:-../shared/traces/mooncake_conversation_first2000.jsonl}"
RUNS="${1:-3}"
PORT="${PORT:-18473}"
SPEEDUP="${SPEEDUP:-334}"
# KEEP=DIR keeps the runs (records, summaries, truth logs) in DIR.
OUT="${KEEP:-$(mktemp -d)}"
mkdir -p "$OUT"
SIM=
trap '[ -n "$SIM" ] && kill $SIM 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$OUT"' EXIT

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

# One replay against a fresh simulator: MODE on (receive timestamps) or off
# (--no-kernel-timestamps, for canaryd's CPU side by side).
replay() { # MODE NAME
  local mode=$1 name=$2 off=()
  [ "$mode" = off ] && off=(--no-kernel-timestamps)
  "$CANARYD" sim --profile fast --port "$PORT" --truth-log "$OUT/truth-$name.jsonl" 2>"$OUT/sim.log" &
  SIM=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
  /usr/bin/time -f "%e %U %S" -o "$OUT/$name.time" \
    "$CANARYD" replay --trace "$OUT/trace.jsonl" --url "http://127.0.0.1:$PORT" --model canary-sim \
      --scale-lengths 0.03125 --speedup "$SPEEDUP" --no-server-metrics --no-nvml \
      --output-dir "$OUT/$name" --json "${off[@]}" >/dev/null 2>"$OUT/$name.log" \
    || { cat "$OUT/$name.log"; exit 1; }
  kill "$SIM"; wait "$SIM" 2>/dev/null || true
  SIM=
}

cpu() { awk '{printf "%.2f", $2 + $3}' "$OUT/$1.time"; }

echo "== $(nproc) cores, $(uname -r), $(id -un), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$RUNS"); do
  # A B B A: neither mode always goes first.
  order="on off"
  [ $((i % 2)) = 0 ] && order="off on"
  for mode in $order; do replay "$mode" "$mode-$i"; done
  echo "-- run $i (load average $(cut -d' ' -f1-3 /proc/loadavg)): $(python3 -c "import json;s=json.load(open('$OUT/on-$i/summary.json'));print(f\"{s['request_throughput']:.0f} req/s, eBPF {s.get('telemetry_sources',{}).get('ebpf',{}).get('state')}\")"); canaryd CPU s on $(cpu "on-$i"), off $(cpu "off-$i")"
  python3 bench/rx_stats.py "$OUT/on-$i" "$OUT/truth-on-$i.jsonl"
done
