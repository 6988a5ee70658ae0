#!/usr/bin/env bash
# Precision mode (--realtime-workers) against the default, on the real-sized replay of
# bench/replay-lag.sh (the 2,000-row Mooncake slice at 20x, eBPF on, `canaryd sim --profile
# fast` as referee), PAIRS rounds of every condition, the order reversed every other round
# (A B C, C B A, ...) so drifting load hits all alike. Needs root for eBPF and SCHED_FIFO.
#
# Usage: bench/realtime-workers.sh [PAIRS]   (default 2)
#   BIN=path/to/canaryd (required): the release build measured.
#   CONDS: conditions, one per word, NAME:FLAGS:ENV with FLAGS and ENV using `+` for spaces,
#     default "default:: rt:--realtime-workers:"; e.g. rt1:--realtime-workers:CANARYD_REALTIME_WORKERS_MAX=1
#     or before::: with BIN_before=path for another build (BIN_<NAME> overrides BIN).
#   KEEP=dir keeps every run (default: a temporary folder).
# Prints one row per run and the medians per condition: client lag, eBPF client_overhead,
# TTFT agreement (bench/ttft_stats.py), first tokens stamped as bounds, canaryd's and the
# simulator's CPU, context switches.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${BIN:?BIN=path/to/release/canaryd}"
PAIRS="${1:-2}"
CONDS="${CONDS:-default:: rt:--realtime-workers:}"
OUT="${KEEP:-$(mktemp -d)}"
mkdir -p "$OUT"
read -r -a conds <<<"$CONDS"

run_one() { # NAME FLAGS ENV ROUND
  local name=$1 flags=${2//+/ } envs=${3//+/ } round=$4
  local binvar="BIN_$name" dir="$OUT/$name-$round"
  local bin="${!binvar:-$BIN}"
  # shellcheck disable=SC2086 # ENV and FLAGS are word lists on purpose
  env $envs BIN="$bin" KEEP="$dir" REPLAY_FLAGS="$flags" PORT="${PORT:-18491}" \
    bench/replay-lag.sh 20 >"$dir.log" 2>&1 || { echo "run $name-$round failed:"; tail -20 "$dir.log"; exit 1; }
  python3 bench/ttft_stats.py "$dir/run-20" "$dir/truth-20.jsonl" --json >"$dir/ttft.json"
  python3 bench/lag_stats.py "$dir/run-20" "$dir/truth-20.jsonl" | tail -1 >"$dir/lag.json"
  echo "$name $round $(grep -o 'load average.*' "$dir.log" | head -1)"
}

echo "== $(nproc) cores, $(uname -r), sched_rt_runtime_us $(cat /proc/sys/kernel/sched_rt_runtime_us)"
for round in $(seq "$PAIRS"); do
  order=("${conds[@]}")
  if [ $((round % 2)) -eq 0 ]; then
    order=()
    for ((i = ${#conds[@]} - 1; i >= 0; i--)); do order+=("${conds[$i]}"); done
  fi
  for c in "${order[@]}"; do
    IFS=: read -r name flags envs <<<"$c"
    run_one "$name" "$flags" "$envs" "$round"
  done
done

python3 - "$OUT" "$CONDS" <<'PY'
import json, re, statistics, sys
out, conds = sys.argv[1], [c.split(":")[0] for c in sys.argv[2].split()]
cols = ["lag p50", "lag p99", "ovh p50", "ovh p99", "agree p50", "agree p99", "bounds %",
        "CPU-s", "sim CPU-s", "vol sw", "invol sw"]
print(f"{'run':<14}" + "".join(f"{c:>11}" for c in cols))
per = {}
import glob, os
for d in sorted(glob.glob(f"{out}/*-[0-9]*/")):
    name = os.path.basename(d.rstrip("/"))
    cond = name.rsplit("-", 1)[0]
    t = json.load(open(f"{d}/ttft.json"))
    lag = json.load(open(f"{d}/lag.json"))
    tm = open(f"{d}/time-20").read()
    user, sys_ = (float(x) for x in re.search(r"([\d.]+) s user, ([\d.]+) s sys", tm).groups())
    vol, invol = (int(x) for x in re.search(r"(\d+) voluntary and (\d+) involuntary", tm).groups())
    sim = float(re.search(r"sim: ([\d.]+)", open(f"{d}/sim-cpu-20").read()).group(1))
    row = [lag["client_lag_p50_ms"], lag["client_lag_p99_ms"], t["overhead_p50_ms"],
           t["overhead_p99_ms"], t["agreement_p50_ms"], t["agreement_p99_ms"],
           100 * t["bound_fraction"], user + sys_, sim, vol, invol]
    per.setdefault(cond, []).append(row)
    print(f"{name:<14}" + "".join(f"{v:>11.3f}" if isinstance(v, float) else f"{v:>11}" for v in row))
print("medians")
for cond in conds:
    rows = per.get(cond, [])
    if not rows:
        continue
    med = [statistics.median(col) for col in zip(*rows)]
    print(f"{cond:<14}" + "".join(f"{v:>11.3f}" for v in med))
PY
