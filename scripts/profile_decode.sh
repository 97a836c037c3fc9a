#!/bin/bash
# Per-kernel GPU times (ncu, real clocks, warm caches) of one decode step of a 1-layer synthetic
# Kimi-K2.5 model, in launch order. Usage: scripts/profile_decode.sh [batch]  (TESSERA=path/to/tessera)
TESSERA=${TESSERA:-build/release/tessera}
B=${1:-1}
timeout 400 ncu --clock-control none --cache-control none --kernel-name regex:'^(?!fill_random).*' --metrics gpu__time_duration.sum --csv --page raw \
  "$TESSERA" bench decode --synthetic kimi-k2.5 --layers 1 --batch $B --context 8192 --steps 1 > /tmp/tessera-ncu.csv 2> /tmp/tessera-ncu.err
tail -3 /tmp/tessera-ncu.err
python3 - "$B" <<'PY'
import csv, sys
lines = [l for l in open('/tmp/tessera-ncu.csv') if l.startswith('"')]
rows = list(csv.reader(lines))
hdr = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
h = rows[hdr]; kn = h.index('Kernel Name'); du = h.index('gpu__time_duration.sum')
unit = rows[hdr + 1][du]
scale = {'nsecond': 1e-3, 'usecond': 1.0, 'msecond': 1e3}.get(unit, 1e-3)
data = [r for r in rows[hdr + 2:] if len(r) > du]
# the last step: from the last embedding kernel on
start = max(i for i, r in enumerate(data) if 'embedding' in r[kn])
tot = 0
for r in data[start:]:
    t = float(r[du].replace(',', '')) * scale
    tot += t
    print(f"{t:9.1f} us  {r[kn][:110]}")
print(f"total {tot:.1f} us over {len(data) - start} kernels (batch {sys.argv[1]})")
PY
