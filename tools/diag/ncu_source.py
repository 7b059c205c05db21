#!/usr/bin/env python3
"""Summarise `ncu -i REP --page source --csv --print-source sass`: the SASS instructions
holding most warp stall samples, each with its largest stall reasons.

    python3 tools/diag/ncu_source.py REP.csv [TOP]

Columns are found by name (they differ between Nsight Compute versions): the instruction
text ("Source"), the total samples ("Warp Stall Sampling (All Samples)") and one column per
stall reason ("stall_*" or "... (All Samples)" breakdowns) where the version exports them."""
import csv
import sys


def num(v):
    try:
        return float(v.replace(",", ""))
    except (AttributeError, ValueError):
        return 0.0


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    head_i = next((i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r)), None)
    if head_i is None:
        print("no 'Source' column; header candidates:", rows[:2])
        return 1
    head = [c.strip() for c in rows[head_i]]
    body = [r for r in rows[head_i + 1:] if len(r) == len(head)]
    src = head.index("Source")
    tot = next((i for i, c in enumerate(head) if "Warp Stall Sampling (All" in c), None)
    if tot is None:
        print("no stall sampling column; columns:", head)
        return 1
    reasons = [i for i, c in enumerate(head)
               if i != tot and ("stall" in c.lower() or "Samples" in c) and
               any(num(r[i]) for r in body)]
    total = sum(num(r[tot]) for r in body) or 1.0
    print(f"{len(body)} instructions, {total:.0f} stall samples")
    for r in sorted(body, key=lambda r: -num(r[tot]))[:top]:
        why = sorted(((num(r[i]), head[i]) for i in reasons), reverse=True)[:3]
        why_s = ", ".join(f"{n} {v:.0f}" for v, n in why if v > 0)
        print(f"{100 * num(r[tot]) / total:5.1f}%  {r[src].strip()[:60]:60s}  {why_s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
