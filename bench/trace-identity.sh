#!/usr/bin/env bash
# Do two builds read traces to the same rows? For every trace in ../shared/traces, the
# generated ones of bench/trace_identity_inputs.py (every field a row can carry, sessions
# under raw 64-bit ids, rows out of time order) and a tiled 100,000-row trace
# (bench/big_trace.py), compares byte for byte, build A against build B:
#   - `canaryd analyze-trace --json` (stdout, stderr and exit status);
#   - `canaryd synthesize` with defaults and with every transform (output file, stderr and
#     exit status; a trace synthesis refuses must be refused alike);
#   - the trace digest a replay records (`run.trace.digest`; one request sent to
#     `canaryd sim`), and with `--skip-invalid`, the selected rows' count.
# Prints one line per check and a total; exits 1 on any difference.
# Usage: bench/trace-identity.sh BIN_A BIN_B
set -euo pipefail
cd "$(dirname "$0")/.."
A=$1 B=$2
OUT=$(mktemp -d)
PORT="${PORT:-18493}"
"$A" sim --profile fast --port "$PORT" 2>/dev/null &
SIM=$!
trap 'kill $SIM 2>/dev/null || true; rm -rf "$OUT"' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
python3 bench/trace_identity_inputs.py "$OUT/in"
python3 bench/big_trace.py ../shared/traces/mooncake_conversation_first2000.jsonl 100000 "$OUT/in/tiled_100000.jsonl"
checks=0 diffs=0
same() { # NAME FILE_A FILE_B
  checks=$((checks + 1))
  if cmp -s "$2" "$3"; then echo "same  $1"; else echo "DIFF  $1"; diffs=$((diffs + 1)); fi
}
both() { # NAME CMD... (run once per build: {} is the build, @ the per-build output dir)
  local name=$1; shift
  for side in a b; do
    local bin=$A; [ $side = b ] && bin=$B
    mkdir -p "$OUT/$side"; rm -rf "$OUT/$side/out"
    local args=("${@//\{\}/$bin}"); args=("${args[@]//@/$OUT/$side}")
    set +e; "${args[@]}" >"$OUT/$side/stdout" 2>"$OUT/$side/stderr"; echo $? >"$OUT/$side/status"; set -e
    # Paths differ per build; the run id and times differ per run.
    sed -i "s#$OUT/$side#OUT#g" "$OUT/$side/stdout" "$OUT/$side/stderr"
  done
  same "$name status" "$OUT/a/status" "$OUT/b/status"
  same "$name stdout" "$OUT/a/stdout" "$OUT/b/stdout"
  same "$name stderr" "$OUT/a/stderr" "$OUT/b/stderr"
  if [ -f "$OUT/a/out" ] || [ -f "$OUT/b/out" ]; then same "$name output" "$OUT/a/out" "$OUT/b/out"; fi
}
digest() { # SIDE: the digest and request count of the last replay
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["run"]["trace"]["digest"], s["requests"])' \
    "$OUT/$1/run/summary.json" 2>/dev/null || echo "no summary"
}
for f in ../shared/traces/*.jsonl ../shared/traces/*.csv "$OUT"/in/*; do
  n=$(basename "$f")
  both "$n analyze-trace" {} analyze-trace --json "$f"
  both "$n analyze-trace --skip-invalid" {} analyze-trace --json --skip-invalid "$f"
  both "$n synthesize" {} synthesize "$f" @/out
  both "$n synthesize (all transforms)" {} synthesize --speedup-ratio 2.5 --prefix-len-multiplier 1.5 \
    --prefix-root-multiplier 3 --prompt-len-multiplier 0.7 --max-isl 3000 --max-osl 50 --random-seed 9 "$f" @/out
  for side in a b; do
    bin=$A; [ $side = b ] && bin=$B
    rm -rf "$OUT/$side/run"
    "$bin" replay --trace "$f" --url "http://127.0.0.1:$PORT" --model canary-sim --no-nvml --no-ebpf \
      --max-requests 1 --speedup 1e6 --scale-lengths 0.01 --max-output-tokens 2 \
      --output-dir "$OUT/$side/run" --json >/dev/null 2>&1 || true
    digest $side >"$OUT/$side/digest"
  done
  same "$n replay digest ($(cat "$OUT/a/digest"))" "$OUT/a/digest" "$OUT/b/digest"
done
echo "$checks checks, $diffs differences ($A vs $B)"
[ "$diffs" = 0 ]
