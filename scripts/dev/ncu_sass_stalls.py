#!/usr/bin/env python3
"""Reads the SASS source page Nsight Compute prints as csv (`ncu -i R --page source --csv
--print-source sass`, run.sh ncu-src) and says where a kernel's warps wait: the instructions with
the most stall samples, with their neighbours, and the samples summed by opcode.

Usage: ncu_sass_stalls.py FILE.csv [--top N] [--kernel SUBSTRING]"""
import argparse
import collections
import csv
import io
import re
import sys


def sections(text):
    """The page holds one table per profiled kernel, each after a line naming it."""
    out, name, buf = [], None, []
    for line in text.splitlines():
        if line.startswith('"Kernel Name"'):
            if buf:
                out.append((name, buf))
                buf = []
            name = line.split('","', 1)[-1].strip('",')
            continue
        if line.startswith('"Address"'):
            buf = [line]
            continue
        if buf:
            if line.startswith('"'):
                buf.append(line)
                continue
            out.append((name, buf))
            buf = []
        if line.strip():
            name = line.strip()
    if buf:
        out.append((name, buf))
    return out


def num(v):
    try:
        return float(v.replace(',', ''))
    except (ValueError, AttributeError):
        return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('file')
    ap.add_argument('--top', type=int, default=25)
    ap.add_argument('--kernel', default='')
    a = ap.parse_args()
    text = open(a.file, errors='replace').read()
    for name, lines in sections(text):
        if a.kernel and a.kernel not in (name or ''):
            continue
        rows = list(csv.DictReader(io.StringIO('\n'.join(lines))))
        if not rows:
            continue
        cols = list(rows[0].keys())
        src = next((c for c in cols if c.strip() in ('Source', 'SASS')), cols[1] if len(cols) > 1 else cols[0])
        allc = next((c for c in cols if 'Sampling' in c and 'All' in c), None)
        if allc is None:
            allc = next((c for c in cols if 'Sampling' in c), None)
        if allc is None:
            print(f'{name}: no stall sampling column; columns: {cols[:12]}')
            continue
        reasons = [c for c in cols if c.startswith('stall_')]
        total = sum(num(r[allc]) for r in rows) or 1.0
        print(f'== {name}: {len(rows)} instructions, {int(total)} samples ({allc})')
        by_op = collections.Counter()
        for r in rows:
            op = re.sub(r'^@!?U?P\w+\s+', '', r[src].strip()).split(' ')[0]
            by_op[op] += num(r[allc])
        print('   by opcode: ' + ', '.join(f'{op} {100 * n / total:.1f}%' for op, n in by_op.most_common(14)))
        order = sorted(range(len(rows)), key=lambda i: -num(rows[i][allc]))[:a.top]
        for i in sorted(order):
            r = rows[i]
            extra = ''
            if reasons:
                rs = sorted(((num(r[c]), c) for c in reasons), reverse=True)[:3]
                extra = '  [' + ', '.join(f'{c.replace("stall_", "")} {int(v)}' for v, c in rs if v > 0) + ']'
            prev = rows[i - 1][src].strip()[:40] if i > 0 else ''
            print(f'  {i:5d} {100 * num(r[allc]) / total:5.1f}%  {r[src].strip()[:70]:<70} (after: {prev}){extra}')


if __name__ == '__main__':
    sys.exit(main())
