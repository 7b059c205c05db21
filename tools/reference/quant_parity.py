#!/usr/bin/env python3
"""transformers reference for MLX-quantized models: greedy outputs of the *dequantized* weights.

    python3 tools/reference/quant_parity.py MODEL_DEQ_DIR OUT [--n-new 32]

MODEL_DEQ_DIR is a checkpoint written by `mlxcel convert -d` from an MLX-quantized one (bf16
values = exactly the values the quantized model multiplies by, docs/quantization.md). The model
is built from its config.json with transformers (fp32, eager attention, CPU, deterministic), the
weights are loaded upcast to fp32 with the MLX names mapped back to transformers' (stacked
`switch_mlp.{gate,up,down}_proj` -> the model's expert parameters, fused or per expert; a
multimodal wrapper's `language_model.` prefix dropped; a tied head), and every parameter of the
model must be filled (else the script fails). Nothing is downloaded.

Writes OUT/expected.json in the golden format (tests/unit/test_golden.c):
  {"source": MODEL_DEQ_DIR, "transformers_version", "torch_version", "model_type",
   "cases": [{"prompt_ids", "greedy", "logits", "steps": [[top1_id, top1, top2_id, top2], ...],
              "min_rel_margin"}]}
  greedy   n_new ids from a no-cache argmax loop (lowest id wins a tie);
  logits   fp32 logits [vocab] at the first generated position;
  steps    top-2 of every step: a consumer skips token comparisons after a step whose relative
           margin is too small to decide (random tiny models may have near-ties).
Prompts: lengths 1, 10, 50 (capped by max_position_embeddings - n_new), ids drawn with
random.Random(1234) from [3, vocab) as tools/reference/make_fixtures.py does.

Refused (exit 1, nothing written) when a case's greedy continuation is an echo
(check_fixtures.echo_reasons: a token repeated more than 4 times in a row or in more than a
quarter of the positions, or a copy of the prompt): such a reference passes an engine that
copies its input. The weights come from the source checkpoint, so the fix is there: regenerate
the golden model (make_fixtures.py) or the ckpt fixture (tools/make_ckpt_fixtures.py), then
make_quant_parity_inputs.sh, then this script.

Used by tests/unit/test_quant_parity.c through tests/fixtures/quant_parity/<name>/expected.json.
"""
import argparse
import json
import math
import os
import random
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_fixtures import echo_reasons  # noqa: E402  (stdlib, same directory)

PROMPT_LENS = (1, 10, 50)


def text_config(cfg):
    """The decoder's config dict (multimodal wrappers nest it under text_config)."""
    tc = cfg.get("text_config")
    if isinstance(tc, dict):
        out = dict(tc)
        for k in ("tie_word_embeddings", "eos_token_id", "bos_token_id", "pad_token_id"):
            if k in cfg and k not in out:
                out[k] = cfg[k]
        return out
    return cfg


def build_model(deq_dir):
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = json.load(open(os.path.join(deq_dir, "config.json")))
    for k in ("quantization", "quantization_config"):
        cfg.pop(k, None)
    tc = text_config(cfg)
    model_type = tc.get("model_type", cfg.get("model_type"))
    kw = {k: v for k, v in tc.items() if k not in ("model_type", "architectures", "transformers_version")}
    conf = AutoConfig.for_model(model_type, **kw)
    for attn in ("eager",):
        try:
            conf._attn_implementation = attn
        except Exception:
            pass
    try:
        conf._experts_implementation = "eager"
    except Exception:
        pass
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(conf)
    return model.float().eval(), conf, model_type


def load_mlx(deq_dir):
    from safetensors.torch import load_file
    files = [f for f in sorted(os.listdir(deq_dir)) if f.endswith(".safetensors")]
    sd = {}
    for f in files:
        for k, v in load_file(os.path.join(deq_dir, f)).items():
            if k.endswith(".scales") or k.endswith(".biases") or v.dtype in (torch.uint32, torch.int32):
                raise SystemExit(f"{deq_dir}: {k} is still quantized; run `mlxcel convert -d` first")
            # drop a multimodal wrapper's prefix: language_model.model.X / model.language_model.X
            k = re.sub(r"^language_model\.model\.", "model.", k)
            k = re.sub(r"^model\.language_model\.", "model.", k)
            k = re.sub(r"^language_model\.lm_head\.", "lm_head.", k)
            sd[k] = v.float()
    return sd


def fill_state(model, sd):
    """Every parameter/buffer of the model that is a weight, from the MLX names."""
    target = model.state_dict()
    out, used, missing = {}, set(), []
    stacked = {}  # (layer) -> {"gate": t, "up": t, "down": t}
    for k, v in sd.items():
        m = re.match(r"^model\.layers\.(\d+)\..*switch_mlp\.(gate|up|down)_proj\.weight$", k)
        if m:
            stacked.setdefault(int(m.group(1)), {})[m.group(2)] = (k, v)
    for name, t in target.items():
        if name.endswith("inv_freq") or "rotary_emb" in name:
            continue
        cands = [name, name.replace("block_sparse_moe.", "mlp."), name.replace("mlp.", "block_sparse_moe."),
                 name.replace(".router.", ".gate."), name.replace(".mlp.router.", ".block_sparse_moe.gate.")]
        src = next((c for c in cands if c in sd and tuple(sd[c].shape) == tuple(t.shape)), None)
        if src is not None:
            out[name] = sd[src]
            used.add(src)
            continue
        if name == "lm_head.weight" and "model.embed_tokens.weight" in sd:
            out[name] = sd["model.embed_tokens.weight"]  # tied
            continue
        lm = re.match(r"^model\.layers\.(\d+)\.", name)
        st = stacked.get(int(lm.group(1))) if lm else None
        val = None
        if st:
            g, u, d = (st.get(p, (None, None))[1] for p in ("gate", "up", "down"))
            em = re.search(r"experts\.(\d+)\.(gate_proj|up_proj|down_proj|w1|w2|w3)\.weight$", name)
            if name.endswith("experts.gate_up_proj"):
                val = torch.cat([g, u], dim=1)  # [E, 2I, H], gate rows first
            elif name.endswith("experts.down_proj"):
                val = d  # [E, H, I]
            elif em:
                e, p = int(em.group(1)), em.group(2)
                val = {"gate_proj": g, "w1": g, "up_proj": u, "w3": u, "down_proj": d, "w2": d}[p][e]
            if val is not None:
                if tuple(val.shape) != tuple(t.shape) and val.ndim == 3 and \
                        tuple(val.transpose(1, 2).shape) == tuple(t.shape):
                    val = val.transpose(1, 2)  # a layout that stores [E, in, out]
                for p in ("gate", "up", "down"):
                    if p in st:
                        used.add(st[p][0])
        if val is None or tuple(val.shape) != tuple(t.shape):
            missing.append(f"{name} {tuple(t.shape)}")
            continue
        out[name] = val.contiguous()
    if missing:
        raise SystemExit("parameters not found in the checkpoint: " + ", ".join(missing[:20]))
    unused = [k for k in sd if k not in used and not k.endswith("lm_head.weight")]
    if unused:
        raise SystemExit("checkpoint tensors the model does not use: " + ", ".join(unused[:20]))
    model.load_state_dict(out, strict=False)
    for name, t in model.state_dict().items():  # what we set is what the model holds
        if name in out and not torch.equal(t, out[name].to(t.dtype)):
            raise SystemExit(f"{name}: not loaded")


def greedy_nocache(model, prompt, n_new):
    seq = torch.tensor([prompt], dtype=torch.long)
    out, steps, first, min_rel = [], [], None, math.inf
    with torch.no_grad():
        for _ in range(n_new):
            logits = model(input_ids=seq, use_cache=False).logits[0, -1].float()
            if first is None:
                first = logits.clone()
            top = torch.topk(logits, 2)
            nxt = int(torch.argmax(logits))
            rel = float(top.values[0] - top.values[1]) / max(float(logits.abs().max()), 1e-30)
            min_rel = min(min_rel, rel)
            steps.append([int(top.indices[0]), float(top.values[0]), int(top.indices[1]),
                          float(top.values[1])])
            out.append(nxt)
            seq = torch.cat([seq, torch.tensor([[nxt]])], dim=1)
    return out, first, steps, min_rel


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("deq_dir")
    ap.add_argument("out")
    ap.add_argument("--n-new", type=int, default=32)
    a = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    import transformers
    model, conf, model_type = build_model(a.deq_dir)
    fill_state(model, load_mlx(a.deq_dir))
    vocab = int(conf.vocab_size)
    max_pos = int(getattr(conf, "max_position_embeddings", 128) or 128)
    rng = random.Random(1234)
    cases = []
    for n in PROMPT_LENS:
        n = max(1, min(n, max_pos - a.n_new - 1))
        p = [rng.randrange(3, vocab) for _ in range(n)]
        greedy, logits, steps, min_rel = greedy_nocache(model, p, a.n_new)
        cases.append({"prompt_ids": p, "greedy": greedy, "logits": [float(v) for v in logits],
                      "steps": steps, "min_rel_margin": min_rel})
        print(f"{a.deq_dir}: prompt {n} tokens: min_rel_margin {min_rel:.3g}", flush=True)
    echoes = [f"case {i}: {w}" for i, c in enumerate(cases)
              for w in echo_reasons(c["prompt_ids"], c["greedy"])]
    if echoes:
        print(f"{a.deq_dir}: REFUSED, the greedy continuations echo: {echoes}", file=sys.stderr)
        return 1
    os.makedirs(a.out, exist_ok=True)
    doc = {"source": os.path.abspath(a.deq_dir), "generator": "tools/reference/quant_parity.py",
           "transformers_version": transformers.__version__, "torch_version": torch.__version__,
           "model_type": model_type, "device": "cpu", "compute_dtype": "float32", "cases": cases}
    with open(os.path.join(a.out, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.join(a.out, 'expected.json')}")


if __name__ == "__main__":
    sys.exit(main())
