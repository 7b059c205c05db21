#!/usr/bin/env python3
"""Synthetic llama-shaped checkpoint with random bf16 weights (stdlib only), for speed figures
and CLI smoke tests. Not a fixture: nothing here is compared against a reference.

    python3 tools/make_synth_model.py OUTDIR [--preset 100m|tiny] [--vocab N --hidden N
        --layers N --heads N --kv-heads N --inter N] [--seed S] [--untied]

Writes OUTDIR/config.json, OUTDIR/generation_config.json and OUTDIR/model.safetensors.
Weights are drawn from a pool of normal values (std 0.02, norms 1 +- 0.02) at random offsets,
so a 100M-parameter model takes seconds instead of minutes.
"""
import argparse
import json
import math
import os
import random
import struct

PRESETS = {
    # ~100M parameters with tied embeddings (llama-style: GQA 12/4, SwiGLU)
    "100m": dict(vocab=32000, hidden=768, layers=12, heads=12, kv_heads=4, inter=2048),
    "tiny": dict(vocab=256, hidden=64, layers=2, heads=4, kv_heads=2, inter=128),
}


def bf16_bytes(values):
    out = bytearray()
    for v in values:
        u = struct.unpack("<I", struct.pack("<f", v))[0]
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
        out += struct.pack("<H", u & 0xFFFF)
    return bytes(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--preset", default="100m", choices=sorted(PRESETS))
    for k in ("vocab", "hidden", "layers", "heads", "kv_heads", "inter"):
        ap.add_argument("--" + k.replace("_", "-"), type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--untied", action="store_true", help="lm_head.weight of its own (tie_word_embeddings false)")
    a = ap.parse_args()
    cfg = dict(PRESETS[a.preset])
    for k in cfg:
        if getattr(a, k) is not None:
            cfg[k] = getattr(a, k)
    rng = random.Random(a.seed)
    V, H, L, NH, KV, I = (cfg[k] for k in ("vocab", "hidden", "layers", "heads", "kv_heads", "inter"))
    D = H // NH
    pool_n = 1 << 20
    pool = bf16_bytes(rng.gauss(0, 0.02) for _ in range(pool_n))
    norm_pool = bf16_bytes(1 + rng.gauss(0, 0.02) for _ in range(4096))

    tensors = [("model.embed_tokens.weight", (V, H), pool), ("model.norm.weight", (H,), norm_pool)]
    if a.untied:
        tensors.append(("lm_head.weight", (V, H), pool))
    for l in range(L):
        p = f"model.layers.{l}."
        tensors += [
            (p + "input_layernorm.weight", (H,), norm_pool),
            (p + "post_attention_layernorm.weight", (H,), norm_pool),
            (p + "self_attn.q_proj.weight", (NH * D, H), pool),
            (p + "self_attn.k_proj.weight", (KV * D, H), pool),
            (p + "self_attn.v_proj.weight", (KV * D, H), pool),
            (p + "self_attn.o_proj.weight", (H, NH * D), pool),
            (p + "mlp.gate_proj.weight", (I, H), pool),
            (p + "mlp.up_proj.weight", (I, H), pool),
            (p + "mlp.down_proj.weight", (H, I), pool),
        ]
    header, off = {}, 0
    for name, shape, _ in tensors:
        n = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    os.makedirs(a.outdir, exist_ok=True)
    n_params = 0
    with open(os.path.join(a.outdir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, shape, src in tensors:
            n = 2 * math.prod(shape)
            n_params += n // 2
            while n > 0:
                start = 2 * rng.randrange(len(src) // 2)
                chunk = src[start:start + n]
                f.write(chunk)
                n -= len(chunk)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V,
        "hidden_size": H, "intermediate_size": I, "num_hidden_layers": L,
        "num_attention_heads": NH, "num_key_value_heads": KV, "head_dim": D,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": not a.untied, "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "torch_dtype": "bfloat16",
    }
    with open(os.path.join(a.outdir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(a.outdir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}, f, indent=2)
    print(f"wrote {a.outdir}: {n_params / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()
