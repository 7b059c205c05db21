#!/usr/bin/env python3
"""The table of bench/serve_vs_llamacpp.sh: mlxcel serve vs llama-server under the same
`mlxcel loadtest`, one row per (workload, streams), from the loadtest reports it wrote.

    python3 bench/serve_vs_table.py RES_DIR [--md OUT.md] [--json OUT.json]

RES_DIR holds <workload>-<server>-c<streams>.json (mlxcel loadtest --json, one level each,
server = mlxcel | llama) and optionally run.json (card, commits, server flags). Printed per row:
output tok/s of each server and their ratio, TTFT p50/p99 and ITL p50/p99 of each, failures,
and from /metrics the wall time per engine step, rows per step and whether the server held
nothing after the level. Standard library only (the GPU image's python3)."""
import glob
import json
import os
import re
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def level(doc):
    r = doc.get("results") or []
    return r[0] if r else None


def fails(r):
    if r is None:
        return "not run"
    n = r.get("failures", 0)
    if not n:
        return "0"
    kinds = ", ".join(f"{g['count']} {g['kind']}" + (f" {g['status']}" if g.get("status") else "")
                      for g in r.get("failures_by_kind", []))
    return f"{n} ({kinds})"


def server_bits(r):
    s = (r or {}).get("server")
    if not s:
        return "-", "-", "-"
    wall = s.get("wall_ms_per_step")
    rows = s.get("rows_per_step")
    after = s.get("after") or {}
    empty = "yes" if after.get("idle") else ("NO " + json.dumps({k: after.get(k) for k in ("kv_blocks_used", "running", "queued")}) if after else "-")
    return (f"{wall:.1f}" if wall is not None else "-"), (f"{rows:.0f}" if rows is not None else "-"), empty


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    res = sys.argv[1]
    md_out = json_out = None
    if "--md" in sys.argv:
        md_out = sys.argv[sys.argv.index("--md") + 1]
    if "--json" in sys.argv:
        json_out = sys.argv[sys.argv.index("--json") + 1]
    rows = {}
    for p in sorted(glob.glob(os.path.join(res, "*-c*.json"))):
        m = re.match(r"(.+)-(mlxcel|llama)-c(\d+)\.json$", os.path.basename(p))
        if not m:
            continue
        wl, srv, c = m.group(1), m.group(2), int(m.group(3))
        rows.setdefault((wl, c), {})[srv] = load(p)
    meta = load(os.path.join(res, "run.json")) if os.path.exists(os.path.join(res, "run.json")) else {}
    lines = []
    if meta:
        lines.append(f"card: {meta.get('card', '?')}; mlxcel {meta.get('mlxcel_commit', '?')}, "
                     f"llama.cpp {meta.get('llama_commit', '?')}; {meta.get('date', '')}")
        for k in ("mlxcel_flags", "llama_flags"):
            for wl, flags in (meta.get(k) or {}).items():
                lines.append(f"  {k.split('_')[0]} {wl}: {flags}")
        lines.append("")
    head = ("| workload | streams | mlxcel tok/s | llama tok/s | ratio | TTFT p50 ms m / l | TTFT p99 ms m / l "
            "| ITL p50 ms m / l | ITL p99 ms m / l | failures m / l | ms/step m / l | rows/step m / l | empty after m / l |")
    lines += [head, "|" + "---|" * 13]
    summary = []
    for (wl, c) in sorted(rows, key=lambda k: (k[0], k[1])):
        d = rows[(wl, c)]
        m, l = level(d.get("mlxcel", {})), level(d.get("llama", {}))
        tm = m["output_tokens_per_s"] if m else None
        tl = l["output_tokens_per_s"] if l else None
        ratio = f"{tm / tl:.2f}x" if tm and tl else "-"

        def pair(key, q):
            a = f"{m[key][q]:.1f}" if m else "-"
            b = f"{l[key][q]:.1f}" if l else "-"
            return f"{a} / {b}"

        sm, sl = server_bits(m), server_bits(l)
        trunc = " (truncated)" if (m and m.get("truncated")) or (l and l.get("truncated")) else ""
        lines.append(f"| {wl} | {c}{trunc} | {tm if tm is None else f'{tm:.0f}'} | {tl if tl is None else f'{tl:.0f}'} | "
                     f"{ratio} | {pair('ttft_ms', 'p50')} | {pair('ttft_ms', 'p99')} | {pair('itl_ms', 'p50')} | "
                     f"{pair('itl_ms', 'p99')} | {fails(m)} / {fails(l)} | {sm[0]} / {sl[0]} | {sm[1]} / {sl[1]} | "
                     f"{sm[2]} / {sl[2]} |")
        summary.append({"workload": wl, "streams": c, "mlxcel": m, "llama": l,
                        "ratio": (tm / tl) if tm and tl else None})
    text = "\n".join(lines)
    print(text)
    if md_out:
        with open(md_out, "w") as f:
            f.write(text + "\n")
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"meta": meta, "rows": summary}, f, indent=1)


if __name__ == "__main__":
    main()
