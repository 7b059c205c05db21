#!/usr/bin/env python3
"""Tiny llama-shaped checkpoint for the real-model server tests (stdlib only, seeded).

    python3 make_test_model.py OUTDIR [--seed S]

Used only when the golden fixture model (tests/fixtures/models/qwen3) is absent. Shapes are the
fixtures' (vocab 512, hidden 64, 3 layers, 4 heads / 2 kv, head_dim 16, MLP 128, eos 2).
Weights are N(0, 1/sqrt(fan_in)) with an untied lm_head scaled up, so that the greedy output
depends on the prompt (a model whose output ignores the prompt could not reveal sequences of
a batch mixing their KV). Nothing here is compared against a reference: the tests compare the
server with itself (concurrent vs solo, stream vs non-stream).
"""
import argparse
import json
import math
import os
import random
import struct

V, H, L, NH, KV, D, I = 512, 64, 3, 4, 2, 16, 128


def bf16(values):
    out = bytearray()
    for v in values:
        u = struct.unpack("<I", struct.pack("<f", v))[0]
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        out += struct.pack("<H", u & 0xFFFF)
    return bytes(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    rng = random.Random(a.seed)

    def normal(shape, std):
        return bf16(rng.gauss(0, std) for _ in range(math.prod(shape)))

    def norm(n):
        return bf16(1 + rng.gauss(0, 0.1) for _ in range(n))

    t = [("model.embed_tokens.weight", (V, H), 1.0), ("model.norm.weight", (H,), None),
         ("lm_head.weight", (V, H), 4.0 / math.sqrt(H))]
    for l in range(L):
        p = f"model.layers.{l}."
        t += [(p + "input_layernorm.weight", (H,), None),
              (p + "post_attention_layernorm.weight", (H,), None),
              (p + "self_attn.q_proj.weight", (NH * D, H), 1 / math.sqrt(H)),
              (p + "self_attn.k_proj.weight", (KV * D, H), 1 / math.sqrt(H)),
              (p + "self_attn.v_proj.weight", (KV * D, H), 1 / math.sqrt(H)),
              (p + "self_attn.o_proj.weight", (H, NH * D), 1 / math.sqrt(NH * D)),
              (p + "mlp.gate_proj.weight", (I, H), 1 / math.sqrt(H)),
              (p + "mlp.up_proj.weight", (I, H), 1 / math.sqrt(H)),
              (p + "mlp.down_proj.weight", (H, I), 1 / math.sqrt(I))]
    blobs = [(n, s, norm(s[0]) if std is None else normal(s, std)) for n, s, std in t]
    header, off = {}, 0
    for name, shape, b in blobs:
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    os.makedirs(a.outdir, exist_ok=True)
    with open(os.path.join(a.outdir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for _, _, b in blobs:
            f.write(b)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V,
              "hidden_size": H, "intermediate_size": I, "num_hidden_layers": L,
              "num_attention_heads": NH, "num_key_value_heads": KV, "head_dim": D,
              "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
              "hidden_act": "silu", "torch_dtype": "bfloat16"}
    with open(os.path.join(a.outdir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    main()
