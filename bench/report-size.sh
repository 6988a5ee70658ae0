#!/usr/bin/env bash
# Size and speed of `canaryd report` on a 100,000-request run. Usage: bench/report-size.sh
# [TILES] [SPEEDUP]   (defaults 50 and 300).
#
# The run is real: the 2000-row Mooncake conversation slice, tiled TILES times (copy k shifted
# by k × 670 s, the slice's span; nothing else changed), replayed by `canaryd replay` at
# SPEEDUP against `canaryd sim --profile fast` on loopback, lengths scaled by 1/100 and outputs
# capped at 16 tokens so 100,000 requests take about two minutes on 2 cores. Then:
#   - `canaryd report` of that run, three times: wall time, peak RSS, page size; beside the
#     floors of reading records.jsonl (`cat`) and of parsing it (jq, Python's json), and the
#     report of a 2,000-request run;
#   - the page loaded in headless Chromium (testkit's page_load example): load-event end and
#     first contentful paint as the browser timed them, beside a blank page with the same CSP.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/canaryd/target}"
TILES="${1:-50}"
SPEEDUP="${2:-300}"
cargo build --release -p canaryd >/dev/null
cargo build --release -p canary-testkit --example page_load >/dev/null
BIN="$CARGO_TARGET_DIR/release/canaryd"
LOAD="$CARGO_TARGET_DIR/release/examples/page_load"
TRACE=../shared/traces/mooncake_conversation_first2000.jsonl
OUT="${OUT:-$(mktemp -d)}"
PORT="${PORT:-18472}"
trap 'kill $SIM 2>/dev/null || true' EXIT
echo "== $(nproc) cores, $(uname -r), $(date -u +%FT%TZ); artifacts in $OUT"

python3 - "$TRACE" "$TILES" >"$OUT/tiled.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for k in range(int(sys.argv[2])):
    for r in rows:
        print(json.dumps(dict(r, timestamp=r["timestamp"] + k * 670_000)))
PY
"$BIN" sim --profile fast --port "$PORT" 2>"$OUT/sim.log" &
SIM=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
replay() {
  /usr/bin/time -f "replay: %e s wall, %M KB max RSS" \
    "$BIN" replay --trace "$1" --url "http://127.0.0.1:$PORT" --model canary-sim --speedup "$2" \
    --scale-lengths 0.01 --max-output-tokens 16 --output-dir "$3" --json >/dev/null
}
replay "$OUT/tiled.jsonl" "$SPEEDUP" "$OUT/run"
replay "$TRACE" 100 "$OUT/run2000"
kill "$SIM"; wait "$SIM" 2>/dev/null || true

echo "records.jsonl: $(wc -l <"$OUT/run/records.jsonl") lines, $(du -m "$OUT/run/records.jsonl" | cut -f1) MB"
# Floors: reading the file, and parsing every line with jq and with Python's json.
/usr/bin/time -f "floor, cat records.jsonl: %e s wall" cat "$OUT/run/records.jsonl" >/dev/null
if command -v jq >/dev/null; then
  /usr/bin/time -f "floor, jq empty: %e s wall, %U s user" jq empty "$OUT/run/records.jsonl"
fi
/usr/bin/time -f "floor, python json.loads per line: %e s wall, %U s user" \
  python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$OUT/run/records.jsonl"
for i in 1 2 3; do
  /usr/bin/time -f "report (100k) #$i: %e s wall, %U s user, %M KB max RSS" \
    "$BIN" report "$OUT/run" -o "$OUT/report.html"
done
/usr/bin/time -f "report (2000): %e s wall, %M KB max RSS" "$BIN" report "$OUT/run2000" -o "$OUT/report2000.html"
echo "page sizes: 100k $(du -k "$OUT/report.html" | cut -f1) KiB, 2000 $(du -k "$OUT/report2000.html" | cut -f1) KiB"

cat >"$OUT/blank.html" <<'HTML'
<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="default-src 'none'"><title>blank</title></head><body><p>blank</p></body></html>
HTML
# Each page three times, in one browser: the first load of a file includes its read from disk.
"$LOAD" "$OUT/blank.html" "$OUT/report.html" "$OUT/report2000.html" \
  "$OUT/blank.html" "$OUT/report.html" "$OUT/report2000.html" \
  "$OUT/blank.html" "$OUT/report.html" "$OUT/report2000.html"
