#!/usr/bin/env python3
"""transformers' own generate() on a checkpoint, timed like `mlxcel bench`, and a top-1
agreement check against mlxcel's greedy tokens.

    python3 tools/reference/transformers_bench.py MODEL_DIR [--prompt-tokens 512]
        [--gen-tokens 128] [--batch 1,8,32] [--repeat 1] [--out FILE.json]
        [--agree MLXCEL_GENERATE.json ...]

Timing (per batch size B, random prompts, greedy, EOS suppressed by min_new_tokens, sdpa
attention, default dynamic cache): prefill = one forward over [B, P] (tok/s = B*P / time),
TTFT = that time, decode = generate(max_new_tokens=G) minus the prefill forward (aggregate
tok/s = B*(G-1) / time), ITL p50/p99 from a logits processor that synchronises and stamps
every step, memory = torch.cuda.max_memory_allocated. CUDA events are not needed: every stamp
follows torch.cuda.synchronize().

Agreement: MLXCEL_GENERATE.json is the output of
    mlxcel generate -m MODEL_DIR --prompt-ids IDS -n 256 --temp 0 --ignore-eos --json [--device cuda]
(its `prompt_ids` and `tokens`). transformers runs ONE forward over prompt + tokens[:-1]
(teacher forcing on mlxcel's own sequence), and position i agrees when argmax(logits at the
position that predicts tokens[i]) == tokens[i]. Reported: agreement fraction over the
generated positions, mismatches with transformers' top-1/top-2 margin there (a mismatch at a
near-tie is bf16 rounding, one at a wide margin is a bug).
"""
import argparse
import json
import statistics
import sys
import time


def pct(v, p):
    if not v:
        return 0.0
    v = sorted(v)
    k = max(0, min(len(v) - 1, int(-(-p / 100.0 * len(v) // 1)) - 1))
    return v[k]


def load(model_dir):
    import torch
    from transformers import AutoModelForCausalLM
    kw = dict(device_map="cuda", attn_implementation="sdpa")
    try:
        m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, **kw)
    except TypeError:  # transformers 4.x
        m = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.bfloat16, **kw)
    m.eval()
    return m


def bench_batch(m, B, P, G, seed):
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    class Stamp(LogitsProcessor):
        def __init__(self):
            self.t = []

        def __call__(self, input_ids, scores):
            torch.cuda.synchronize()
            self.t.append(time.perf_counter())
            return scores

    V = m.config.vocab_size
    g = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.randint(0, V, (B, P), generator=g).cuda()
    mask = torch.ones_like(ids)
    eos = m.config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        m(input_ids=ids, attention_mask=mask, use_cache=True)
        torch.cuda.synchronize()
        t_prefill = time.perf_counter() - t0
        st = Stamp()
        t0 = time.perf_counter()
        out = m.generate(input_ids=ids, attention_mask=mask, max_new_tokens=G, min_new_tokens=G,
                         do_sample=False, pad_token_id=eos,
                         logits_processor=LogitsProcessorList([st]))
        torch.cuda.synchronize()
        t_gen = time.perf_counter() - t0
    assert out.shape[1] == P + G, out.shape
    itl = [(b - a) * 1e3 for a, b in zip(st.t, st.t[1:])]
    # st.t[0] is stamped after generate's own prefill: decode = the steps after it
    t_dec = st.t[-1] - st.t[0] if len(st.t) > 1 else 0.0
    return dict(batch=B, prefill_tok_s=B * P / t_prefill, ttft_ms=t_prefill * 1e3,
                generate_s=t_gen,
                decode_tok_s=B * (G - 1) / t_dec if t_dec > 0 else 0.0,
                decode_tok_s_per_seq=(G - 1) / t_dec if t_dec > 0 else 0.0,
                itl_ms_p50=pct(itl, 50), itl_ms_p99=pct(itl, 99),
                mem_peak_bytes=torch.cuda.max_memory_allocated())


def agreement(m, path):
    import torch
    with open(path) as f:
        j = json.load(f)
    prompt, toks = list(j["prompt_ids"]), list(j["tokens"])
    if not toks:
        return dict(file=path, error="no generated tokens")
    ids = torch.tensor([prompt + toks[:-1]], device="cuda")
    with torch.no_grad():
        logits = m(input_ids=ids).logits[0].float()
    P = len(prompt)
    pred = logits[P - 1:].argmax(-1).tolist()
    top2 = logits[P - 1:].topk(2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1]).tolist()
    mism = [dict(pos=i, mlxcel=toks[i], transformers=pred[i], margin=margin[i])
            for i in range(len(toks)) if pred[i] != toks[i]]
    return dict(file=path, positions=len(toks), agree=len(toks) - len(mism),
                agreement=(len(toks) - len(mism)) / len(toks),
                median_margin=statistics.median(margin), mismatches=mism[:32])


def self_agreement(m, path, n):
    """transformers against itself: its own greedy generate() (KV cache, one token at a time)
    from the same prompt as mlxcel, then the teacher-forced forward over that sequence. Where
    the two disagree, bf16 rounding noise alone decides the argmax: the reference's own floor
    for a top-1 agreement figure."""
    import torch
    with open(path) as f:
        prompt = list(json.load(f)["prompt_ids"])
    ids = torch.tensor([prompt], device="cuda")
    eos = m.config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    with torch.no_grad():
        out = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                         min_new_tokens=n, do_sample=False, pad_token_id=eos)
    toks = out[0, len(prompt):].tolist()
    tmp = path + ".hf_self.json"
    with open(tmp, "w") as f:
        json.dump(dict(prompt_ids=prompt, tokens=toks), f)
    r = agreement(m, tmp)
    r["what"] = "transformers generate() vs transformers teacher-forced forward"
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--batch", default="1,8,32")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--agree", nargs="*", default=[])
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--self-agree", type=int, default=0,
                    help="also report transformers' generate() vs its own teacher-forced forward "
                         "over N tokens from the first --agree file's prompt")
    ap.add_argument("--fp32-agree", action="store_true",
                    help="also report the --agree files against the model upcast to fp32")
    a = ap.parse_args()

    import torch
    import transformers
    t0 = time.time()
    m = load(a.model_dir)
    res = dict(model=a.model_dir, transformers=transformers.__version__,
               torch=torch.__version__, device=torch.cuda.get_device_name(0),
               load_s=time.time() - t0, prompt_tokens=a.prompt_tokens,
               gen_tokens=a.gen_tokens, results=[], agreement=[])
    for p in a.agree:
        r = agreement(m, p)
        res["agreement"].append(r)
        print(f"agreement {p}: {r.get('agree')}/{r.get('positions')} "
              f"({100 * r.get('agreement', 0):.1f}%)", file=sys.stderr, flush=True)
    if a.self_agree and a.agree:
        r = self_agreement(m, a.agree[0], a.self_agree)
        res["self_agreement"] = r
        print(f"transformers self-agreement (bf16 generate vs teacher-forced): {r.get('agree')}/"
              f"{r.get('positions')} ({100 * r.get('agreement', 0):.1f}%), median margin "
              f"{r.get('median_margin', 0):.2f}", file=sys.stderr, flush=True)
    if a.fp32_agree and a.agree:
        m32 = m.float()
        res["agreement_fp32"] = []
        for p in a.agree:
            r = agreement(m32, p)
            res["agreement_fp32"].append(r)
            print(f"agreement vs transformers fp32 {p}: {r.get('agree')}/{r.get('positions')} "
                  f"({100 * r.get('agreement', 0):.1f}%)", file=sys.stderr, flush=True)
        m = m32.to(torch.bfloat16) if not a.no_timing else m32
    if not a.no_timing:
        bench_batch(m, 1, min(16, a.prompt_tokens), 4, a.seed)  # warm-up
        for B in [int(x) for x in a.batch.split(",") if x]:
            runs = [bench_batch(m, B, a.prompt_tokens, a.gen_tokens, a.seed + r)
                    for r in range(a.repeat)]
            med = {k: (statistics.median([r[k] for r in runs]) if k != "batch" else B)
                   for k in runs[0]}
            med["repeats"] = a.repeat
            res["results"].append(med)
            print(f"B={B}: prefill {med['prefill_tok_s']:.0f} tok/s, TTFT {med['ttft_ms']:.1f} ms, "
                  f"decode {med['decode_tok_s']:.1f} tok/s ({med['decode_tok_s_per_seq']:.1f}/seq), "
                  f"ITL p50 {med['itl_ms_p50']:.2f} ms", file=sys.stderr, flush=True)
    txt = json.dumps(res, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(txt + "\n")
    else:
        print(txt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
