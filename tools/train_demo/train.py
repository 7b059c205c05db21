#!/usr/bin/env python3
"""Train the demo model from scratch (GPU machine: torch, transformers 5.x, tokenizers, numpy).

Usage: python3 tools/train_demo/train.py DATA_DIR TOK_DIR OUT_MODEL_DIR [--minutes 10]

DATA_DIR: output of tools/train_demo/prepare_data (train.jsonl.gz, heldout.jsonl.gz, stats.json).
TOK_DIR:  output of tools/train_demo/train_tokenizer.py (tokenizer.json, tokenizer_config.json).

A Qwen3 decoder (Qwen3ForCausalLM) with tied embeddings is trained on packed sequences of
the tokenized dialogues with plain next-token loss, AdamW, linear warmup then a cosine decay
over the time budget. The held-out loss is measured every --eval-seconds. The final weights
are exported (--export best: those with the lowest held-out loss instead). Many epochs are
fine here: the demo asks about words of the training split, and the held-out loss shows
how the model does on unseen words.

Writes into OUT_MODEL_DIR (transformers layout + card inputs):
  config.json, model.safetensors (bf16), generation_config.json, tokenizer.json,
  tokenizer_config.json, loss_curve.csv, loss_curve.png, train_stats.json, data_stats.json
Losses are mean cross-entropy in nats per token; the unigram entropy is in nats too.
"""

import argparse
import copy
import csv
import gzip
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from tokenizers import Tokenizer
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

EOT, IM_START, IM_END = 0, 1, 2  # ids fixed by train_tokenizer.py

# ==== Data ====


def read_docs(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def encode_stream(tok, docs, chunk=20000):
    """Concatenate every document's ids followed by <|endoftext|> into one uint16 array."""
    parts = []
    for i in range(0, len(docs), chunk):
        for enc in tok.encode_batch(docs[i:i + chunk], add_special_tokens=False):
            parts.append(np.asarray(enc.ids + [EOT], dtype=np.uint16))
    return np.concatenate(parts)


def unigram_stats(train_ids, heldout_ids, vocab):
    """Entropy of the held-out unigram distribution (the best any unigram model can do on
    it) and the cross-entropy of an add-one unigram model fitted on train, both in nats."""
    h = np.bincount(heldout_ids, minlength=vocab).astype(np.float64)
    p = h[h > 0] / h.sum()
    entropy = float(-(p * np.log(p)).sum())
    t = np.bincount(train_ids, minlength=vocab).astype(np.float64) + 1.0
    q = t / t.sum()
    cross = float(-(h * np.log(q)).sum() / h.sum())
    return entropy, cross


# ==== Model ====


def make_config(args, vocab):
    kw = dict(
        vocab_size=vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.head_dim, hidden_act="silu",
        max_position_embeddings=args.max_pos, initializer_range=0.02, rms_norm_eps=1e-6,
        tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
        attention_dropout=0.0, bos_token_id=EOT, eos_token_id=IM_END, pad_token_id=EOT,
    )
    if int(transformers.__version__.split(".")[0]) >= 5:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": args.rope_theta}
    else:
        kw["rope_theta"] = args.rope_theta
    return Qwen3Config(**kw)


def forward_loss(model, x):
    """x: [B, T+1] token ids. Mean next-token cross-entropy over B*T positions (fp32)."""
    logits = model(input_ids=x[:, :-1], use_cache=False).logits  # [B, T, V]
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


@torch.no_grad()
def eval_loss(model, ids_gpu, seq, batch, max_tokens, autocast):
    """Mean loss over non-overlapping windows of the first max_tokens of a stream."""
    model.eval()
    n_win = min((ids_gpu.numel() - 1) // seq, max(1, max_tokens // seq))
    starts = torch.arange(n_win, device=ids_gpu.device) * seq
    offs = torch.arange(seq + 1, device=ids_gpu.device)
    total, count = 0.0, 0
    for i in range(0, n_win, batch):
        x = ids_gpu[starts[i:i + batch, None] + offs[None, :]]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = forward_loss(model, x)
        total += loss.item() * x.shape[0]
        count += x.shape[0]
    model.train()
    return total / count


# ==== Plot ====


def draw_curve(rows, entropy, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tok = [r["tokens"] / 1e6 for r in rows if r["train_loss"] != ""]
    tr = [r["train_loss"] for r in rows if r["train_loss"] != ""]
    ev = [(r["tokens"] / 1e6, r["heldout_loss"]) for r in rows if r["heldout_loss"] != ""]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    ax.plot(tok, tr, lw=1, label="train loss")
    if ev:
        ax.plot([e[0] for e in ev], [e[1] for e in ev], "o-", ms=3, label="held-out loss")
    ax.axhline(entropy, ls="--", color="gray", label="held-out unigram entropy")
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_ylim(0, max([entropy * 1.1] + tr[:1]) * 1.05)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ==== Export ====


def export(model, config, tok_dir, out):
    os.makedirs(out, exist_ok=True)
    final = Qwen3ForCausalLM(config)
    final.load_state_dict(model.state_dict())
    final = final.to(torch.bfloat16).cpu()
    gen = GenerationConfig(bos_token_id=EOT, eos_token_id=IM_END, pad_token_id=EOT,
                           do_sample=False)
    final.generation_config = gen
    final.save_pretrained(out)  # safetensors is the default (and only) format in 5.x
    gen.save_pretrained(out)
    # Normalise config.json for readers of either transformers layout: "dtype" (5.x) and a
    # top-level rope_theta next to rope_parameters.
    cpath = os.path.join(out, "config.json")
    with open(cpath, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg.pop("torch_dtype", None)
    cfg["dtype"] = "bfloat16"
    cfg["eos_token_id"] = IM_END
    cfg["rope_theta"] = float((cfg.get("rope_parameters") or {}).get("rope_theta",
                                                                    cfg.get("rope_theta")))
    with open(cpath, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer_stats.json"):
        if os.path.exists(os.path.join(tok_dir, name)):
            shutil.copy(os.path.join(tok_dir, name), os.path.join(out, name))
    for name in os.listdir(out):
        if name.endswith(".bin") or name.endswith(".index.json"):
            sys.exit("train: unexpected export file %s (expected one model.safetensors)" % name)
    if not os.path.isfile(os.path.join(out, "model.safetensors")):
        sys.exit("train: save_pretrained wrote no model.safetensors")
    return final


# ==== Main ====


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir")
    ap.add_argument("tok_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--minutes", type=float, default=10.0, help="training-loop time budget")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=128, help="sequences per step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=300, help="warmup steps")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--intermediate", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--max-pos", type=int, default=512)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--eval-seconds", type=float, default=30.0)
    ap.add_argument("--eval-tokens", type=int, default=1_000_000)
    ap.add_argument("--log-steps", type=int, default=50)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--export", choices=("final", "best"), default="final",
                    help="export the last weights or those with the lowest held-out loss")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    if args.seq > args.max_pos:
        sys.exit("train: --seq %d exceeds --max-pos %d" % (args.seq, args.max_pos))
    if not torch.cuda.is_available():
        sys.exit("train: no CUDA device")

    t_start = time.time()
    torch.manual_seed(args.seed)
    dev = torch.device("cuda")

    # ---- data ----
    tok = Tokenizer.from_file(os.path.join(args.tok_dir, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    train_ids = encode_stream(tok, read_docs(os.path.join(args.data_dir, "train.jsonl.gz")))
    held_ids = encode_stream(tok, read_docs(os.path.join(args.data_dir, "heldout.jsonl.gz")))
    entropy, unigram_xent = unigram_stats(train_ids, held_ids, vocab)
    t_data = time.time() - t_start
    print("data: train %d tokens, held-out %d tokens, unigram entropy %.4f nats (%.1f s)"
          % (train_ids.size, held_ids.size, entropy, t_data), flush=True)
    train_gpu = torch.from_numpy(train_ids.astype(np.int64)).to(dev)
    held_gpu = torch.from_numpy(held_ids.astype(np.int64)).to(dev)
    # Fixed slice of train for a train loss measured like the held-out one.
    train_probe = train_gpu[: min(train_gpu.numel(), held_gpu.numel() + 1)]

    # ---- model ----
    config = make_config(args, vocab)
    model = Qwen3ForCausalLM(config).to(dev)
    n_params = sum(p.numel() for p in model.parameters())  # tied: counted once
    print("model: qwen3, %d parameters (%.2f M), bf16 size %.1f MB, attention %s"
          % (n_params, n_params / 1e6, n_params * 2 / 1e6,
             getattr(model.config, "_attn_implementation", "?")), flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if args.compile else model

    # ---- loop ----
    budget = args.minutes * 60.0
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    offs = torch.arange(args.seq + 1, device=dev)
    hi = train_gpu.numel() - args.seq - 1
    rows, best = [], {"loss": float("inf"), "step": 0, "state": None}
    step, tokens, acc, acc_n = 0, 0, torch.zeros((), device=dev), 0
    t0 = time.time()
    last_eval = t0
    model.train()
    while True:
        elapsed = time.time() - t0
        done = elapsed >= budget
        if done or time.time() - last_eval >= args.eval_seconds:
            hl = eval_loss(model, held_gpu, args.seq, args.batch, args.eval_tokens, True)
            last_eval = time.time()
            if hl < best["loss"]:
                best = {"loss": hl, "step": step,
                        "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
            rows.append({"step": step, "elapsed_s": round(elapsed, 1), "tokens": tokens,
                         "lr": "", "train_loss": "", "heldout_loss": round(hl, 5)})
            print("step %6d  %6.1f s  held-out %.4f" % (step, elapsed, hl), flush=True)
        if done:
            break
        progress = min(1.0, elapsed / budget)
        lr = args.min_lr + (args.lr - args.min_lr) * 0.5 * (1 + math.cos(math.pi * progress))
        lr *= min(1.0, (step + 1) / args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, hi, (args.batch,), device=dev, generator=gen)
        x = train_gpu[starts[:, None] + offs[None, :]]  # [B, T+1]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = forward_loss(step_model, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += x.shape[0] * args.seq
        acc += loss.detach()
        acc_n += 1
        if step % args.log_steps == 0:
            tl = (acc / acc_n).item()
            acc.zero_()
            acc_n = 0
            el = time.time() - t0
            rows.append({"step": step, "elapsed_s": round(el, 1), "tokens": tokens,
                         "lr": "%.3g" % lr, "train_loss": round(tl, 5), "heldout_loss": ""})
            if step % (args.log_steps * 10) == 0:
                print("step %6d  %6.1f s  train %.4f  lr %.2e  %.0f tok/s"
                      % (step, el, tl, lr, tokens / el), flush=True)
    train_s = time.time() - t0

    # ---- export, rounded to bf16, evaluated in fp32 (what mlxcel computes) ----
    if args.export == "best":
        model.load_state_dict(best["state"])
    else:
        best["step"] = step
    os.makedirs(args.out_dir, exist_ok=True)
    final = export(model, config, args.tok_dir, args.out_dir)
    # (fp32 matmuls stay full precision: TF32 is off by default for matmul in torch.)
    check = copy.deepcopy(final).to(torch.float32).to(dev)
    final_held = eval_loss(check, held_gpu, args.seq, args.batch, held_gpu.numel(), False)
    final_train = eval_loss(check, train_probe, args.seq, args.batch, held_gpu.numel(), False)

    with open(os.path.join(args.out_dir, "loss_curve.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["step", "elapsed_s", "tokens", "lr", "train_loss",
                                          "heldout_loss"])
        w.writeheader()
        w.writerows(rows)
    draw_curve(rows, entropy, os.path.join(args.out_dir, "loss_curve.png"))
    shutil.copy(os.path.join(args.data_dir, "stats.json"),
                os.path.join(args.out_dir, "data_stats.json"))

    size = sum(os.path.getsize(os.path.join(args.out_dir, n)) for n in os.listdir(args.out_dir))
    stats = {
        "architecture": "Qwen3ForCausalLM",
        "parameters": n_params,
        "config": {k: getattr(args, k) for k in ("hidden", "intermediate", "layers", "heads",
                                                 "kv_heads", "head_dim", "max_pos",
                                                 "rope_theta")},
        "vocab_size": vocab,
        "training": {k: getattr(args, k) for k in ("minutes", "seq", "batch", "lr", "min_lr",
                                                   "warmup", "weight_decay", "seed",
                                                   "compile", "export")},
        "command": "python3 tools/train_demo/train.py " + " ".join(sys.argv[1:]),
        "device": torch.cuda.get_device_name(0),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__},
        "steps": step,
        "train_tokens_seen": tokens,
        "train_corpus_tokens": int(train_ids.size),
        "epochs": round(tokens / train_ids.size, 2),
        "heldout_tokens": int(held_ids.size),
        "tokenize_seconds": round(t_data, 1),
        "train_seconds": round(train_s, 1),
        "total_seconds": round(time.time() - t_start, 1),
        "tokens_per_second": round(tokens / train_s),
        "exported_step": best["step"],
        "lowest_heldout_loss_seen_bf16_autocast": round(best["loss"], 5),
        "final_train_loss": round(final_train, 5),
        "final_heldout_loss": round(final_held, 5),
        "loss_note": "nats/token, exported bf16 weights computed in fp32; train loss on the "
                     "first %d tokens of the (shuffled) train stream" % train_probe.numel(),
        "heldout_unigram_entropy": round(entropy, 5),
        "heldout_unigram_cross_entropy_from_train": round(unigram_xent, 5),
        "files_bytes": size,
    }
    with open(os.path.join(args.out_dir, "train_stats.json"), "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=2)
        f.write("\n")
    print("train: %d steps, %.2f epochs, final train %.4f, held-out %.4f, unigram entropy %.4f"
          % (step, stats["epochs"], final_train, final_held, entropy), flush=True)


if __name__ == "__main__":
    main()
