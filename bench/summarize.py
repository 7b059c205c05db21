#!/usr/bin/env python3
"""Assembles run_device.sh's per-shape JSON files into one results JSON + a Markdown table.

    python3 bench/summarize.py RES_DIR OUT_BASE DATE COMMIT NVIDIA_SMI_CSV TESTS "SHAPES"

RES_DIR holds <shape>.{mlxcel,mlxcel_long,hf,hf_long}.json (mlxcel bench --json and
tools/reference/transformers_bench.py outputs) and, for shapes served under load
(bench/serve_loadtest.sh), <shape>.loadtest.json (mlxcel loadtest --json) and <shape>.metrics.txt
(/metrics after the load); writes OUT_BASE.json and OUT_BASE.md and prints the tables (the last
thing run_device.sh prints)."""
import json, os, sys
res, base, date, commit, smi, tests, shapes = sys.argv[1:8]
def load(p):
    try:
        with open(p) as f: return json.load(f)
    except Exception as e: return {"error": str(e)}
doc = {"date": date, "commit": commit, "device": open(smi).read().strip(), "tests": tests, "shapes": {}}
def prom(p):
    """The samples of a Prometheus text file: {name{labels}: value}; {} when absent."""
    v = {}
    try:
        for line in open(p):
            if line.strip() and not line.startswith("#"):
                k, _, x = line.strip().rpartition(" ")
                try: v[k] = float(x)
                except ValueError: pass
    except OSError: pass
    return v
for s in shapes.split():
    doc["shapes"][s] = {k: load(os.path.join(res, f"{s}.{k}.json"))
                        for k in ("mlxcel", "mlxcel_long", "hf", "hf_long")}
    if os.path.exists(os.path.join(res, f"{s}.loadtest.json")):
        doc["shapes"][s]["loadtest"] = load(os.path.join(res, f"{s}.loadtest.json"))
        doc["shapes"][s]["serve_metrics"] = prom(os.path.join(res, f"{s}.metrics.txt"))
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
# ---- the server under load (bench/serve_loadtest.sh) next to `mlxcel bench` of the same run ----
def bench_row(m, b):
    for r in m.get("results", []) if isinstance(m, dict) else []:
        if r.get("batch") == b: return r
    return None
for s, d in doc["shapes"].items():
    lt = d.get("loadtest")
    if not isinstance(lt, dict) or "results" not in lt: continue
    mt = d.get("serve_metrics", {})
    lines += ["", f"## mlxcel serve under load: {s}, prompt {lt.get('prompt_tokens')} (token ids), "
              f"gen {lt.get('gen_tokens')}, {'stream' if lt.get('stream') else 'no stream'}, closed loop", "",
              "| concurrency | requests | output tok/s | req/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | "
              "prompt / output tokens per request (server usage) | failures |", "|" + "---|" * 8]
    for r in lt["results"]:
        pt, ct = r.get("prompt_tokens", {}), r.get("completion_tokens", {})
        lines.append(f"| {r['concurrency']} | {r['requests']} (+{r.get('warmup_requests', 0)} warm-up) | "
                     f"{fmt(r['output_tokens_per_s'], 1)} | {fmt(r['requests_per_s'], 2)} | "
                     f"{fmt(r['ttft_ms']['p50'], 1)} / {fmt(r['ttft_ms']['p99'], 1)} | "
                     f"{fmt(r['itl_ms']['p50'], 2)} / {fmt(r['itl_ms']['p99'], 2)} | "
                     f"{pt.get('min')}..{pt.get('max')} / {ct.get('min')}..{ct.get('max')} | {r['failures']}"
                     f"{' (truncated)' if r.get('truncated') else ''} |")
    if lt.get("skipped_levels"): lines.append(f"| skipped (time limit): {lt['skipped_levels']} | | | | | | | |")
    # c=32 against bench B=32: bench's whole-run output rate (B*G tokens over prefill + decode,
    # the same work per sequence as a loadtest request) and its pure decode rate
    l32 = next((r for r in lt["results"] if r["concurrency"] == 32), None)
    b32 = bench_row(d.get("mlxcel"), 32)
    if l32 and b32 and b32.get("prefill_tok_s") and b32.get("decode_tok_s"):
        P, G = d["mlxcel"].get("prompt_tokens", 0), d["mlxcel"].get("gen_tokens", 0)
        e2e = 32 * G / (32 * P / b32["prefill_tok_s"] + b32["decode_tokens_timed"] / b32["decode_tok_s"])
        lines += ["", f"c=32 / bench B=32 = {100 * l32['output_tokens_per_s'] / e2e:.1f}% "
                  f"({l32['output_tokens_per_s']:.1f} / {e2e:.1f} tok/s: bench's B*G tokens over its whole "
                  f"run, prefill + decode, the same work per sequence); against bench's pure decode rate "
                  f"{b32['decode_tok_s']:.1f} tok/s: {100 * l32['output_tokens_per_s'] / b32['decode_tok_s']:.1f}%"]
    if mt:
        fwd = mt.get("llamacpp:prompt_seconds_total", 0) + mt.get("llamacpp:tokens_predicted_seconds_total", 0)
        busy, steps = mt.get("mlxcel_engine_busy_seconds_total", 0), mt.get("llamacpp:n_decode_total", 0)
        errors = mt.get('mlxcel_requests_finished_total{reason="error"}', 0)
        lines.append(f"after the load: KV blocks used {fmt(mt.get('mlxcel_kv_blocks_used'))} of "
                     f"{fmt(mt.get('mlxcel_kv_blocks_capacity'))}; prefix-cache hits "
                     f"{fmt(mt.get('mlxcel_prefix_cache_hits_total'))}; finished with error {errors:.0f}"
                     + (f"; engine thread in forward passes {100 * fwd / busy:.1f}% of its busy time, "
                        f"host time between steps {1e3 * (busy - fwd) / steps:.3f} ms/step" if busy > 0 and steps else ""))
with open(base + ".md", "w") as f: f.write("\n".join(lines) + "\n")
print("\n".join(lines[6:]))
