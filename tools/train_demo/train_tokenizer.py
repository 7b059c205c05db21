#!/usr/bin/env python3
"""Train the demo model's byte-level BPE tokenizer (runs on the GPU machine: needs `tokenizers`).

Usage: python3 tools/train_demo/train_tokenizer.py DATA_DIR OUT_DIR [--vocab-size 8192]

DATA_DIR is what tools/train_demo/prepare_data wrote (train.jsonl.gz). Writes into OUT_DIR:
  tokenizer.json         tokenizers' own format: NFC normalizer, Qwen2-style pre-tokenizer
                         (regex Split + ByteLevel), BPE model, ByteLevel decoder
  tokenizer_config.json  transformers' side: special tokens, ChatML chat template
  tokenizer_stats.json   vocabulary size, tokens per character on the corpus

Special tokens get ids 0, 1, 2: <|endoftext|> (padding / document separator),
<|im_start|>, <|im_end|> (end of turn = EOS). No BOS is added.
"""

import argparse
import gzip
import json
import os
import sys
import time

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, \
    processors, trainers

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Qwen2 / Qwen3 pre-tokenizer regex (contractions, letters with one leading non-letter,
# single digits, punctuation runs, newlines, spaces).
SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Simple ChatML template (the Jinja subset mlxcel implements: for, if, string concatenation,
# subscripts). '\n' is a Jinja string escape, so the JSON file holds a backslash and an n.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

MODEL_MAX_LENGTH = 512


def read_docs(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)["text"]


def strip_special(text):
    # The markers are added tokens, never merged; keep them out of the BPE statistics.
    for s in SPECIAL:
        text = text.replace(s, "")
    return text


def build_tokenizer():
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def tokenizer_config():
    added = {}
    for i, s in enumerate(SPECIAL):
        added[str(i)] = {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                         "single_word": False, "special": True}
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--min-frequency", type=int, default=2)
    args = ap.parse_args()
    if not 4096 <= args.vocab_size <= 16384:
        sys.exit("train_tokenizer: --vocab-size must be within 4096..16384")

    t0 = time.time()
    train_path = os.path.join(args.data_dir, "train.jsonl.gz")
    docs = [strip_special(d) for d in read_docs(train_path)]
    tok = build_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab_size,
        min_frequency=args.min_frequency,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    train_s = time.time() - t0

    # ---- checks: special ids, round trip, marker recognition ----
    for i, s in enumerate(SPECIAL):
        if tok.token_to_id(s) != i:
            sys.exit("train_tokenizer: %s has id %r, expected %d" % (s, tok.token_to_id(s), i))
    sample = next(read_docs(train_path))
    enc = tok.encode(sample, add_special_tokens=False)
    if enc.ids[0] != 1 or 2 not in enc.ids:
        sys.exit("train_tokenizer: ChatML markers were not matched as single tokens")
    if tok.decode(enc.ids, skip_special_tokens=False) != sample:
        sys.exit("train_tokenizer: decode(encode(x)) != x for %r" % sample[:80])

    os.makedirs(args.out_dir, exist_ok=True)
    tok.save(os.path.join(args.out_dir, "tokenizer.json"))
    with open(os.path.join(args.out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(), f, indent=2, ensure_ascii=False)
        f.write("\n")

    # Compression on a slice of the corpus (for the model card).
    probe = [d for d in read_docs(train_path)][:20000]
    n_tok = sum(len(e.ids) for e in tok.encode_batch(probe, add_special_tokens=False))
    n_chr = sum(len(d) for d in probe)
    stats = {
        "vocab_size": tok.get_vocab_size(),
        "special_tokens": {s: i for i, s in enumerate(SPECIAL)},
        "train_documents": len(docs),
        "train_seconds": round(train_s, 1),
        "characters_per_token": round(n_chr / n_tok, 3),
        "sample": sample,
        "sample_ids": enc.ids,
    }
    with open(os.path.join(args.out_dir, "tokenizer_stats.json"), "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print("tokenizer: vocab %d, %.2f chars/token, trained in %.1f s -> %s"
          % (stats["vocab_size"], stats["characters_per_token"], train_s, args.out_dir))


if __name__ == "__main__":
    main()
