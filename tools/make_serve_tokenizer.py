#!/usr/bin/env python3
"""Tiny byte-level BPE tokenizer for the real-model server tests (stdlib only, deterministic).

    python3 tools/make_serve_tokenizer.py OUTDIR [--vocab 512]

Writes OUTDIR/tokenizer.json and OUTDIR/tokenizer_config.json. The vocabulary fits the golden
fixture models (vocab_size 512, eos_token_id 2): every model id decodes to something.
  0 <|endoftext|>   special, pad
  1 <|im_start|>    special (ChatML)
  2 <|im_end|>      special, eos (the fixtures' eos_token_id)
  3..258            the 256 byte-level symbols (GPT-2 byte-to-unicode)
  259..vocab-1      BPE merges learned from the small corpus below, most frequent pair first
                    (ties: lexicographically smallest pair)
tokenizer_config.json carries a ChatML chat template (Qwen-style, without tools).
This is test input, not a reference: nothing compares its ids with another implementation.
"""
import argparse
import json
import os
import re
from collections import Counter

CORPUS = """
Hello there! How are you today? I am fine, thank you. The sky is blue and the sun is bright.
Once upon a time there was a small model that answered every prompt with a few words.
prompt number one two three four five six seven eight nine ten eleven twelve
The quick brown fox jumps over the lazy dog. Be brief. Tell me a story about the sea.
What is the capital of France? Paris is the capital of France. Write a poem about the moon.
user assistant system content role message stream token server request response model
Streaming responses arrive as server-sent events; every request gets its own sequence of tokens.
A cancelled request releases its cache blocks, and the next request reuses the shared prefix.
"""

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# GPT-2's pre-tokenization regex (the ByteLevel pre-tokenizer's use_regex)
PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--vocab", type=int, default=512)
    a = ap.parse_args()
    b2u = bytes_to_unicode()
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for b in range(256):
        vocab[b2u[b]] = len(vocab)
    words = Counter()
    for w in PAT.findall(CORPUS):
        words[tuple(b2u[c] for c in w.encode("utf-8"))] += 1
    merges = []
    while len(vocab) < a.vocab:
        pairs = Counter()
        for w, f in words.items():
            for i in range(len(w) - 1):
                pairs[(w[i], w[i + 1])] += f
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merged = best[0] + best[1]
        merges.append(f"{best[0]} {best[1]}")
        vocab[merged] = len(vocab)
        nw = Counter()
        for w, f in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nw[tuple(out)] += f
        words = nw
    if len(vocab) != a.vocab:
        raise SystemExit(f"corpus too small: {len(vocab)} tokens, wanted {a.vocab}")
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True} for i, s in enumerate(SPECIALS)
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": merges},
    }
    cfg = {
        "add_bos_token": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 128,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHATML,
    }
    os.makedirs(a.outdir, exist_ok=True)
    with open(os.path.join(a.outdir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(a.outdir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
