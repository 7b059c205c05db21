#!/usr/bin/env python3
"""Synthetic real-size checkpoints: random bf16 weights in transformers' (Hugging Face hub)
layout for the shapes of Llama-3.2-1B, Llama-3.1-8B, Qwen3-8B and Qwen3-30B-A3B (MoE).

    python3 tools/reference/make_synthetic.py OUTDIR --shape llama-3.2-1b|llama-3.1-8b|qwen3-8b|qwen3-30b-a3b
        [--seed S] [--layers N] [--device cuda|cpu]

Needs torch + safetensors (GPU machine; the weights are drawn on the GPU, ~1 s per GB).
Writes OUTDIR/config.json (the hub config of that model, trimmed to what the architecture
needs), generation_config.json (greedy), and bf16 safetensors sharded like the hub
(model-0000i-of-0000n.safetensors of <= 5 GB + model.safetensors.index.json; a single
model.safetensors when it fits one shard). MoE experts use the hub's per-expert names
(mlp.experts.E.{gate,up,down}_proj.weight), which transformers 5.x fuses on load.

Scales keep activations sane and the greedy choice well defined: every linear weight is
N(0, 1/fan_in) (each projection keeps unit RMS), norms 1 + N(0, 0.05^2), the embedding and
the lm_head N(0, 16/hidden), so the final logits have a standard deviation near 4 and top-1
margins far above bf16 rounding (top-1 agreement between implementations is meaningful).
The projections that write into the residual stream (o_proj, down_proj) are further scaled
by --resid-scale (default 1/sqrt(2 * layers), GPT-2's scaled init): at full scale a random
32-layer stack is chaotic, a bf16 rounding difference in layer 0 grows into a different
argmax at ~6% of positions even between transformers' own generate() and its teacher-forced
forward (Llama-3.1-8B shape), so top-1 agreement measured the chaos, not the implementation.
--resid-scale 1 gives the earlier checkpoints back.
--layers N truncates the depth (quick checks); the file then says so in config.json.
"""
import argparse
import json
import math
import os
import sys
import time

SHAPES = {
    "llama-3.2-1b": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=128256,
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64,
        max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, original_max_position_embeddings=8192),
        tie_word_embeddings=True, hidden_act="silu", attention_bias=False, mlp_bias=False,
        bos_token_id=128000, eos_token_id=128001, torch_dtype="bfloat16"),
    "llama-3.1-8b": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=128256,
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, original_max_position_embeddings=8192),
        tie_word_embeddings=False, hidden_act="silu", attention_bias=False, mlp_bias=False,
        bos_token_id=128000, eos_token_id=128001, torch_dtype="bfloat16"),
    "qwen3-8b": dict(
        architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151936,
        hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
        rope_scaling=None, tie_word_embeddings=False, hidden_act="silu", attention_bias=False,
        use_sliding_window=False, sliding_window=None, max_window_layers=36,
        bos_token_id=151643, eos_token_id=151645, torch_dtype="bfloat16"),
    "qwen3-30b-a3b": dict(
        architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", vocab_size=151936,
        hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], output_router_logits=False, router_aux_loss_coef=0.001,
        max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
        rope_scaling=None, tie_word_embeddings=False, hidden_act="silu", attention_bias=False,
        use_sliding_window=False, sliding_window=None, max_window_layers=48,
        bos_token_id=151643, eos_token_id=151645, torch_dtype="bfloat16"),
}

SHARD_BYTES = 5 * 10**9


def tensor_list(c):
    """(name, shape, kind) in the hub's order; kind picks the init scale."""
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    D, Hq, Hkv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    out = [("model.embed_tokens.weight", (V, H), "embed")]
    for l in range(L):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (H,), "norm"),
                (p + "self_attn.q_proj.weight", (Hq * D, H), "linear"),
                (p + "self_attn.k_proj.weight", (Hkv * D, H), "linear"),
                (p + "self_attn.v_proj.weight", (Hkv * D, H), "linear"),
                (p + "self_attn.o_proj.weight", (H, Hq * D), "resid")]
        if c["model_type"] in ("qwen3", "qwen3_moe"):
            out += [(p + "self_attn.q_norm.weight", (D,), "norm"),
                    (p + "self_attn.k_norm.weight", (D,), "norm")]
        out.append((p + "post_attention_layernorm.weight", (H,), "norm"))
        if c.get("num_experts"):
            E, I = c["num_experts"], c["moe_intermediate_size"]
            out.append((p + "mlp.gate.weight", (E, H), "linear"))
            for e in range(E):
                q = f"{p}mlp.experts.{e}."
                out += [(q + "gate_proj.weight", (I, H), "linear"),
                        (q + "up_proj.weight", (I, H), "linear"),
                        (q + "down_proj.weight", (H, I), "resid")]
        else:
            I = c["intermediate_size"]
            out += [(p + "mlp.gate_proj.weight", (I, H), "linear"),
                    (p + "mlp.up_proj.weight", (I, H), "linear"),
                    (p + "mlp.down_proj.weight", (H, I), "resid")]
    out.append(("model.norm.weight", (H,), "norm"))
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", (V, H), "head"))
    return out


def write_configs(outdir, c):
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump({k: v for k, v in c.items() if v is not None or k == "rope_scaling"}, f, indent=2)
    with open(os.path.join(outdir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": c["bos_token_id"], "eos_token_id": c["eos_token_id"],
                   "do_sample": False}, f, indent=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int, default=0, help="truncate to N layers (quick checks)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--resid-scale", type=float, default=0.0,
                    help="extra factor on o_proj / down_proj (default 0: 1/sqrt(2 * layers))")
    ap.add_argument("--config-only", action="store_true",
                    help="write config.json and generation_config.json only (for mlxcel's "
                         "--load-format dummy: timing without weight files)")
    a = ap.parse_args()

    c = dict(SHAPES[a.shape])
    if a.layers:
        c["num_hidden_layers"] = min(a.layers, c["num_hidden_layers"])
        if "max_window_layers" in c:
            c["max_window_layers"] = c["num_hidden_layers"]
        c["_synthetic_truncated_from"] = SHAPES[a.shape]["num_hidden_layers"]
    resid = a.resid_scale or 1.0 / math.sqrt(2 * c["num_hidden_layers"])
    c["_synthetic"] = (f"tools/reference/make_synthetic.py --shape {a.shape} --seed {a.seed} "
                       f"--resid-scale {resid:.6g}")
    os.makedirs(a.outdir, exist_ok=True)
    if a.config_only:
        write_configs(a.outdir, c)
        return 0

    import torch
    from safetensors.torch import save_file

    dev = a.device if (a.device != "cuda" or torch.cuda.is_available()) else "cpu"
    H = c["hidden_size"]
    tensors = tensor_list(c)
    total = sum(2 * math.prod(s) for _, s, _ in tensors)
    n_shards = max(1, -(-total // SHARD_BYTES))
    print(f"{a.shape}: {len(tensors)} tensors, {total / 1e9:.2f} GB bf16, {n_shards} shard(s), "
          f"drawn on {dev}", flush=True)

    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    t0 = time.time()
    weight_map, shard, shard_bytes, idx = {}, {}, 0, 1

    def shard_name(i):
        return "model.safetensors" if n_shards == 1 else \
            f"model-{i:05d}-of-{n_shards:05d}.safetensors"

    def flush():
        nonlocal shard, shard_bytes, idx
        if not shard:
            return
        name = shard_name(idx)
        save_file(shard, os.path.join(a.outdir, name), metadata={"format": "pt"})
        for k in shard:
            weight_map[k] = name
        print(f"  {name}: {len(shard)} tensors, {shard_bytes / 1e9:.2f} GB "
              f"({time.time() - t0:.0f} s)", flush=True)
        shard, shard_bytes, idx = {}, 0, idx + 1

    for name, shape, kind in tensors:
        nbytes = 2 * math.prod(shape)
        if shard and shard_bytes + nbytes > SHARD_BYTES and idx < n_shards:
            flush()
        if kind == "norm":
            t = 1.0 + 0.05 * torch.randn(shape, generator=gen, device=dev)
        elif kind in ("embed", "head"):
            t = torch.randn(shape, generator=gen, device=dev) * (4.0 / math.sqrt(H))
        else:
            scale = resid if kind == "resid" else 1.0
            t = torch.randn(shape, generator=gen, device=dev) * (scale / math.sqrt(shape[-1]))
        shard[name] = t.to(torch.bfloat16).cpu().contiguous()
        shard_bytes += nbytes
    flush()

    if n_shards > 1:
        with open(os.path.join(a.outdir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    write_configs(a.outdir, c)
    print(f"done: {a.outdir} in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
