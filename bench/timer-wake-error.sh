#!/usr/bin/env bash
# How late this host's timer wakes a thread, for five sleep primitives (issue 21's candidates:
# clock_nanosleep and timerfd with absolute deadlines, against the futex wait canaryd's release
# thread uses). The release thread spins through this error before each distinct deadline, so it
# is what a distinct deadline costs beyond the wake-up itself; `summary.json`'s `clock.release`
# reports the same error as canaryd measured it during a run.
# Usage: bench/timer-wake-error.sh [N]   (N deadlines 1 ms apart per primitive, default 3000)
set -euo pipefail
cd "$(dirname "$0")"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
cc -O2 -o "$OUT/wake_error" timer/wake_error.c
echo "== $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M) UTC"
"$OUT/wake_error" "${1:-3000}"
