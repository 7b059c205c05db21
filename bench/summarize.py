#!/usr/bin/env python3
"""Assembles run_device.sh's per-shape JSON files into one results JSON + a Markdown table.

    python3 bench/summarize.py RES_DIR OUT_BASE DATE COMMIT NVIDIA_SMI_CSV TESTS "SHAPES"

RES_DIR holds <shape>.{mlxcel,mlxcel_long,hf,hf_long}.json (mlxcel bench --json and
tools/reference/transformers_bench.py outputs); writes OUT_BASE.json and OUT_BASE.md and prints
the table (the last thing run_device.sh prints)."""
import json, os, sys
res, base, date, commit, smi, tests, shapes = sys.argv[1:8]
def load(p):
    try:
        with open(p) as f: return json.load(f)
    except Exception as e: return {"error": str(e)}
doc = {"date": date, "commit": commit, "device": open(smi).read().strip(), "tests": tests, "shapes": {}}
for s in shapes.split():
    doc["shapes"][s] = {k: load(os.path.join(res, f"{s}.{k}.json"))
                        for k in ("mlxcel", "mlxcel_long", "hf", "hf_long")}
with open(base + ".json", "w") as f: json.dump(doc, f, indent=1)
rows = []
def get(d, b, k):
    for r in d.get("results", []) if isinstance(d, dict) else []:
        if r.get("batch") == b: return r.get(k)
    return None
def fmt(v, p=0): return "-" if v is None else f"{v:.{p}f}"
hdr = ("| shape | B | prefill tok/s mlxcel / HF | TTFT ms mlxcel / HF | decode tok/s mlxcel / HF | "
       "per seq | ITL p50/p99 ms | mem GiB | decode GB/s | % copy |")
lines = [f"# mlxcel bench {date}, commit {commit}", "", "```", doc["device"], "```", "",
         f"tests: {tests}", "", hdr, "|" + "---|" * 10]
for s, d in doc["shapes"].items():
    m, h = d["mlxcel"], d["hf"]
    for r in m.get("results", []) if isinstance(m, dict) else []:
        b = r["batch"]
        lines.append(f"| {s} | {b} | {fmt(r['prefill_tok_s'])} / {fmt(get(h, b, 'prefill_tok_s'))} | "
                     f"{fmt(r['ttft_ms_p50'], 1)} / {fmt(get(h, b, 'ttft_ms'), 1)} | "
                     f"{fmt(r['decode_tok_s'], 1)} / {fmt(get(h, b, 'decode_tok_s'), 1)} | "
                     f"{fmt(r['decode_tok_s_per_seq'], 1)} | {fmt(r['itl_ms_p50'], 2)}/{fmt(r['itl_ms_p99'], 2)} | "
                     f"{fmt(r['mem_peak_bytes'] / 2**30, 1)} | {fmt(r['decode_gb_s'])} | {fmt(r['decode_pct_of_copy'], 1)} |")
    ml, hl = d["mlxcel_long"], d["hf_long"]
    lines.append(f"| {s} | prefill {ml.get('prompt_tokens', '?')} | "
                 f"{fmt(get(ml, 1, 'prefill_tok_s'))} / {fmt(get(hl, 1, 'prefill_tok_s'))} | "
                 f"{fmt(get(ml, 1, 'ttft_ms_p50'), 1)} / {fmt(get(hl, 1, 'ttft_ms'), 1)} | | | | | | |")
    for key, label in (("agreement", "top-1 agreement (transformers bf16)"),
                       ("agreement_fp32", "top-1 agreement (transformers fp32)")):
        for a in h.get(key, []) if isinstance(h, dict) else []:
            lines.append(f"| {s} | {label} | {a.get('agree')}/{a.get('positions')} = "
                         f"{100 * a.get('agreement', 0):.1f}% (median margin {a.get('median_margin', 0):.2f}) | | | | | | | |")
    a = h.get("self_agreement") if isinstance(h, dict) else None
    if a:
        lines.append(f"| {s} | transformers bf16 vs itself (generate vs teacher-forced) | "
                     f"{a.get('agree')}/{a.get('positions')} = {100 * a.get('agreement', 0):.1f}% "
                     f"(median margin {a.get('median_margin', 0):.2f}) | | | | | | | |")
    if isinstance(m, dict) and "copy_gb_s" in m:
        lines.append(f"| {s} | copy bandwidth | {m['copy_gb_s']:.0f} GB/s | load {m.get('load_s', 0):.1f} s | | | | | | |")
# MLX affine quantized variants (run_device.sh QUANT): decode GB/s counts packed codes +
# scales + biases (model weight bytes), % of measured copy bandwidth; prefill vs bf16's rate.
qlist = os.path.join(res, "quant.list")
if os.path.exists(qlist):
    lines += ["", "| quantized | B | prefill tok/s | decode tok/s | decode GB/s (packed+scales+biases) | "
              "% copy | weights GB | prefill 2048 tok/s (% of bf16) | top-1 vs bf16 | KL mean / max |",
              "|" + "---|" * 10]
    doc["quant"] = {}
    for line in open(qlist).read().split("\n"):
        if not line.strip(): continue
        s, qt = line.split()
        m, ml, c = (load(os.path.join(res, f"{s}.{qt}.{k}.json")) for k in ("mlxcel", "mlxcel_long", "compare"))
        doc["quant"][f"{s}.{qt}"] = {"mlxcel": m, "mlxcel_long": ml, "compare": c}
        base_long = get(doc["shapes"].get(s, {}).get("mlxcel_long", {}), 1, "prefill_tok_s")
        ql = get(ml, 1, "prefill_tok_s")
        pct = f" ({100 * ql / base_long:.0f}%)" if ql and base_long else ""
        wgb = m.get("weight_bytes", 0) / 1e9 if isinstance(m, dict) else 0
        for r in m.get("results", []) if isinstance(m, dict) else []:
            lines.append(f"| {s} {qt} | {r['batch']} | {fmt(r['prefill_tok_s'])} | {fmt(r['decode_tok_s'], 1)} | "
                         f"{fmt(r['decode_gb_s'])} | {fmt(r['decode_pct_of_copy'], 1)} | {wgb:.2f} | "
                         f"{fmt(ql)}{pct} | {fmt(c.get('top1_agreement_pct'), 2)}% | "
                         f"{fmt(c.get('kl_mean'), 4)} / {fmt(c.get('kl_max'), 4)} |")
    with open(base + ".json", "w") as f: json.dump(doc, f, indent=1)
with open(base + ".md", "w") as f: f.write("\n".join(lines) + "\n")
print("\n".join(lines[6:]))
