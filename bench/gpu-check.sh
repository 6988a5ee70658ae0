#!/usr/bin/env bash
# canaryd on a host with a real NVIDIA GPU (no CI machine has one): NVML found and read, what
# each NVML query costs, canaryd's figures against pynvml's over the same window, what sampling
# costs the GPU's work and canaryd's CPU, and the pacer beside the floor client on that host's
# cores. Needs python3 with torch and pynvml (nvidia-ml-py), and release builds of canaryd and
# the floor client.
# Usage: CANARYD=… FLOOR=… TRACE=…/mooncake_conversation_first2000.jsonl bench/gpu-check.sh OUT_DIR
# Writes into OUT_DIR check.log (all it said), doctor.json, queries.json, pynvml.csv,
# compare.json, run.tgz (the run beside the load), impact.json, pacer.log and pacer.jsonl. Each
# part runs on if another fails. PARTS picks parts (default "doctor queries nvml impact pacer");
# IMPACT_INTERVALS (default "none 100ms 10ms") and IMPACT_REPS (2) shape the sampling-cost part;
# PACER="REPEATS RATE …" and CEILING="REPEATS RATE …" the pacer's runs; TIME_BIN is GNU time
# (default /usr/bin/time). Needs bash 4.4 or later.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: CANARYD=… FLOOR=… TRACE=… $0 OUT_DIR" >&2; exit 2; }
# Paths as given, before the cd to the repository.
OUT="$(realpath -m "$1")"; mkdir -p "$OUT"
C="$(realpath "${CANARYD:?release canaryd}")"
[ -n "${FLOOR:-}" ] && FLOOR="$(realpath "$FLOOR")"
[ -n "${TRACE:-}" ] && TRACE="$(realpath "$TRACE")"
export TIME_BIN="${TIME_BIN:-/usr/bin/time}"
for tool in "$TIME_BIN" python3 nvidia-smi timeout; do
  command -v "$tool" >/dev/null || { echo "gpu-check: $tool not found" >&2; exit 2; }
done
cd "$(dirname "$0")/.."
exec > >(tee "$OUT/check.log") 2>&1
W="$(mktemp -d)"
PORT=18500
PARTS=" ${PARTS:-doctor queries nvml impact pacer} "
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$W"' EXIT

say() { echo; echo "== $(date -u +%T) $*"; }
part() { [[ "$PARTS" == *" $1 "* ]]; }
sim_up() { # PORT
  "$C" sim --profile fast --port "$1" 2>/dev/null &
  SIM=$!
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.05; done
}
# canaryd replaying short requests to the simulator at RATE for COUNT requests, NVML on.
replay() { # OUT_DIR RATE COUNT FLAGS…
  local dir=$1 rate=$2 count=$3; shift 3
  timeout 60 "$C" profile --url "http://127.0.0.1:$PORT" --model canary-sim --request-rate "$rate" \
    --request-count "$count" --isl 64 --osl 8 ${NVML_LIB[@]+"${NVML_LIB[@]}"} --output-dir "$dir" "$@"
}

say "host"
uname -a; nproc; grep -m1 'model name' /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv
ldconfig -p | grep -i nvidia-ml || echo "libnvidia-ml not in the loader's cache"
sim_up $PORT

# Where the loader's default search does not find NVML, name the library (and say so).
NVML_LIB=()
if ! "$C" doctor --json | python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["nvml"]["state"] != "available")'; then
  lib=$(find /usr/local/nvidia /usr/lib /usr/lib64 -name 'libnvidia-ml.so.1' 2>/dev/null | head -1)
  [ -n "$lib" ] && echo "NVML not found by the default search; naming $lib" && NVML_LIB=(--nvml-lib "$lib")
fi

if part doctor; then
  say "doctor"
  "$C" doctor ${NVML_LIB[@]+"${NVML_LIB[@]}"}
  "$C" doctor --json ${NVML_LIB[@]+"${NVML_LIB[@]}"} >"$OUT/doctor.json"
fi

if part queries; then
  say "each NVML query, timed; memory used as NVML's two versions and nvidia-smi say, and as canaryd reads it"
  python3 bench/gpu_check.py queries "$OUT/queries.json" "$W/held" 6 &
  Q=$!
  for _ in $(seq 300); do [ -e "$W/held" ] || ! kill -0 $Q 2>/dev/null && break; sleep 0.1; done
  replay "$W/held-run" 20 40 --gpu-interval 100ms --no-ebpf >/dev/null 2>&1
  wait $Q; echo "queries exit $?"
  python3 - "$OUT/queries.json" "$W/held-run/summary.json" <<'PY'
import json, sys
q = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))
q["canaryd_mem_used_max_bytes"] = (s.get("gpu") or {}).get("mem_used_max_bytes")
json.dump(q, open(sys.argv[1], "w"), indent=1)
print(json.dumps(q, indent=1))
PY
fi

if part nvml; then
  say "NVML against pynvml: idle 4 s, bf16 products 8 s, idle 4 s; canaryd replays beside it"
  python3 bench/gpu_check.py load "$OUT/pynvml.csv" "$W/phases.json" 4 8 4 "$W/run-ended" &
  LOADER=$!
  sleep 0.5
  replay "$W/run" 20 440 --gpu-interval 100ms --server-pid "$LOADER" --slice-duration 2s
  echo "profile exit $?"
  sleep 0.3; touch "$W/run-ended"
  wait $LOADER; echo "loader exit $?"
  python3 bench/gpu_check.py compare "$W/run" "$OUT/pynvml.csv" "$W/phases.json" >"$OUT/compare.json"
  echo "compare exit $?"; cat "$OUT/compare.json"
  tar -czf "$OUT/run.tgz" -C "$W" run
fi

if part impact; then
  say "what NVML sampling costs: kernels per second over 5 s with canaryd sampling at each interval (sampling from before the loop to after it), and canaryd's CPU"
  results=()
  for rep in $(seq "${IMPACT_REPS:-2}"); do
    for interval in ${IMPACT_INTERVALS:-none 100ms 10ms}; do
      tag="$interval-$rep"
      python3 bench/gpu_check.py launches 5 "$W/warm-$tag" "$W/go-$tag" >"$W/kernels-$tag" &
      loop=$!
      for _ in $(seq 600); do [ -e "$W/warm-$tag" ] || ! kill -0 $loop 2>/dev/null && break; sleep 0.05; done
      pid=""
      if [ "$interval" != none ]; then
        # 40 requests at 5 req/s: 8 s of sampling, the loop's 5 s inside it from its first second.
        "$TIME_BIN" -o "$W/time-$tag" -f "%e %U %S" timeout 30 "$C" profile \
          --url "http://127.0.0.1:$PORT" --model canary-sim --request-rate 5 --request-count 40 \
          --isl 64 --osl 8 --gpu-interval "$interval" --no-ebpf --no-server-metrics ${NVML_LIB[@]+"${NVML_LIB[@]}"} \
          --output-dir "$W/impact-$tag" >/dev/null 2>&1 &
        pid=$!
        sleep 1
      fi
      touch "$W/go-$tag"
      wait $loop; k=$(cat "$W/kernels-$tag")
      [ -n "$pid" ] && wait "$pid"
      # The last line: GNU time puts "Command exited with non-zero status" before it.
      cpu=$(tail -n1 "$W/time-$tag" 2>/dev/null || echo "- - -")
      echo "rep $rep interval $interval kernels/s ${k:-?} canaryd elapsed user sys $cpu"
      results+=("{\"rep\":$rep,\"interval\":\"$interval\",\"kernels_per_s\":${k:-null},\"canaryd_elapsed_user_sys_s\":\"$cpu\"}")
    done
  done
  (IFS=,; echo "[${results[*]}]") >"$OUT/impact.json"
fi
kill "$SIM"; wait "$SIM" 2>/dev/null

if part pacer; then
  say "pacer beside the floor client on this host's cores"
  FLOOR="${FLOOR:?release floor_client}" BINS="canaryd=$C" TRACE="${TRACE:?}" \
    LOG="$OUT/pacer.jsonl" timeout 300 bench/pacer.sh ${PACER:-2 500 1000 2000 4000} | tee "$OUT/pacer.log"
  say "one process's ceiling: constant arrivals, 30,000 requests"
  FLOOR="$FLOOR" BINS="canaryd=$C" TRACE="$TRACE" PATTERNS=constant COUNT=30000 \
    LOG="$OUT/pacer.jsonl" timeout 120 bench/pacer.sh ${CEILING:-1 10000 20000} | tee -a "$OUT/pacer.log"
fi
say "done"
# Let tee write the last lines before the script's end is taken for the log's.
exec 1>&- 2>&-; sleep 0.5
