#!/usr/bin/env python3
"""Tiles a real Mooncake slice into a big trace: copy k of the slice is shifted by k times the
slice's span (plus one gap) and its hash ids by k times (the slice's largest id + 1), so copies
share no prefix blocks with each other (each copy keeps the slice's own prefix sharing).
Every other field is the real row's. Usage: big_trace.py SLICE ROWS OUT"""
import json
import sys

src, rows, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
base = [json.loads(line) for line in open(src) if line.strip()]
span = max(r["timestamp"] for r in base) - min(r["timestamp"] for r in base)
shift_t = span + 1000  # ms: copies follow one another 1 s apart
shift_id = max((max(r.get("hash_ids") or [0]) for r in base), default=0) + 1
with open(out, "w") as f:
    for i in range(rows):
        k, r = divmod(i, len(base))
        row = dict(base[r])
        row["timestamp"] = base[r]["timestamp"] + k * shift_t
        if "hash_ids" in row:
            row["hash_ids"] = [h + k * shift_id for h in base[r]["hash_ids"]]
        f.write(json.dumps(row, separators=(",", ":")) + "\n")
