#!/usr/bin/env python3
"""Per-kernel GPU time of one decode step, from `ncu --csv --metrics gpu__time_duration.sum`.

ncu serialises kernels, so the sum is pure kernel time; the bench's inter-token latency minus
this sum is what launches and gaps cost. Steps are cut at the embedding kernel (the first of
every forward); the last complete step is a decode step.

usage: ncu_summary.py NCU.csv [ITL_MS]
"""
import csv
import re
import sys
from collections import OrderedDict


def short(name):
    name = re.sub(r"\(.*", "", name)          # drop the argument list
    name = re.sub(r"^void ", "", name)
    return name[:70]


def main():
    rows = []
    with open(sys.argv[1], newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        us = v / 1000.0 if unit in ("ns", "nsecond") else v * 1000.0 if unit in ("ms", "msecond") else v
        rows.append((short(r["Kernel Name"]), us, r.get("Grid Size", ""), r.get("Block Size", "")))
    steps, cur = [], []
    for k in rows:
        if "embed" in k[0] and cur:
            steps.append(cur)
            cur = []
        cur.append(k)
    if cur:
        steps.append(cur)
    if len(steps) < 2:
        print("ncu_summary: fewer than two steps found (%d kernels)" % len(rows))
        return
    report("decode step (the last forward)", steps[-1], itl=float(sys.argv[2]) if len(sys.argv) > 2 else 0)
    pre = [k for st in steps[:-1] for k in st]
    report("every forward before it (prefill chunks, earlier decode steps): %d forwards" % (len(steps) - 1), pre)


def report(title, step, itl=0.0):
    agg = OrderedDict()
    for name, us, grid, block in step:
        a = agg.setdefault(name, [0, 0.0, grid, block])
        a[0] += 1
        a[1] += us
    total = sum(a[1] for a in agg.values())
    print("== %s: %d kernels, %.1f us of kernel time" % (title, len(step), total))
    if itl > 0:
        itl *= 1000
        print("bench ITL %.1f us -> launches/gaps %.1f us (%.0f%%), %.2f us per kernel"
              % (itl, itl - total, 100 * (itl - total) / itl, (itl - total) / len(step)))
    print("%-70s %5s %10s %8s  %s" % ("kernel", "count", "total us", "avg us", "grid x block"))
    for name, (n, us, grid, block) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:14]:
        print("%-70s %5d %10.1f %8.2f  %s x %s" % (name, n, us, us / n, grid, block))


if __name__ == "__main__":
    main()
