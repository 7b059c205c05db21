#!/usr/bin/env python3
"""Write the demo model's card (MODEL_DIR/README.md). Python 3 standard library only.

Usage: python3 tools/train_demo/make_card.py MODEL_DIR [--mlxcel-samples JSON]
                                             [--wordnet-copyright FILE]

Reads from MODEL_DIR (all written by train.py / sample.py on the GPU machine):
  config.json, train_stats.json, data_stats.json, tokenizer_stats.json (optional),
  loss_curve.png, samples_transformers.json
--mlxcel-samples: greedy outputs of `mlxcel generate` on the same prompts, same shape as
  samples_transformers.json: {"engine": "...", "samples": [{"prompt", "generated_ids",
  "generated_text"}, ...]}. Without it the card carries a clearly marked placeholder.
The WordNet licence text is copied from the Debian copyright file (required on all copies).
"""

import argparse
import json
import os
import re
import sys

MLXCEL_PLACEHOLDER = "MLXCEL SAMPLES NOT FILLED IN YET"


def load(path, required=True):
    if not os.path.exists(path):
        if required:
            sys.exit("make_card: %s not found" % path)
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def wordnet_licence(path):
    """The 'License: WordNet3.0' paragraph of the Debian copyright file, unwrapped."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^License: WordNet3\.0\n((?: .*\n)+)", text, re.M)
    if not m:
        sys.exit("make_card: no 'License: WordNet3.0' block in %s" % path)
    paras, cur = [], []
    for line in m.group(1).splitlines():
        line = line[1:]
        if line.strip() == ".":
            paras.append(" ".join(cur))
            cur = []
        else:
            cur.append(line.strip())
    if cur:
        paras.append(" ".join(cur))
    return "\n\n".join(p for p in paras if p)


def md_escape(text):
    return text.replace("|", "\\|").replace("\n", " ")


def mb(n):
    return "%.1f MB" % (n / 1e6)


def section_samples(ref, mlx):
    out = ["## Samples", ""]
    out.append("Greedy decoding, the question sent as one user message through the chat template "
               "(`add_generation_prompt`), at most %d new tokens, stopping at `<|im_end|>`."
               % ref["max_new_tokens"])
    out.append("")
    if mlx is None:
        out += ["<!-- %s: run make_card.py with --mlxcel-samples -->" % MLXCEL_PLACEHOLDER, "",
                "**%s.** The outputs below are transformers' (%s); the card must show "
                "mlxcel's greedy outputs and their comparison with these." % (
                    MLXCEL_PLACEHOLDER, ref["engine"]), ""]
        out += ["| question | transformers greedy answer |", "|---|---|"]
        for s in ref["samples"]:
            out.append("| %s | %s |" % (md_escape(s["prompt"]), md_escape(s["generated_text"])))
        return out
    by_prompt = {s["prompt"]: s for s in mlx["samples"]}
    same = 0
    rows = []
    for s in ref["samples"]:
        m = by_prompt.get(s["prompt"])
        if m is None:
            sys.exit("make_card: mlxcel samples lack the prompt %r" % s["prompt"])
        ok = m["generated_ids"] == s["generated_ids"]
        same += ok
        rows.append("| %s | %s | %s |" % (md_escape(s["prompt"]), md_escape(m["generated_text"]),
                                         "identical" if ok else "**differs**"))
    out.append("Produced by %s. Token ids compared with transformers' greedy output "
               "(%s, fp32): **%d of %d identical**."
               % (mlx.get("engine", "mlxcel"), ref["engine"], same, len(rows)))
    out += ["", "| question | mlxcel greedy answer | token ids vs transformers |",
            "|---|---|---|"] + rows
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--mlxcel-samples")
    ap.add_argument("--wordnet-copyright", default="/usr/share/doc/wordnet-base/copyright")
    args = ap.parse_args()
    d = args.model_dir
    name = os.path.basename(os.path.normpath(d))
    cfg = load(os.path.join(d, "config.json"))
    st = load(os.path.join(d, "train_stats.json"))
    ds = load(os.path.join(d, "data_stats.json"))
    ts = load(os.path.join(d, "tokenizer_stats.json"), required=False)
    ref = load(os.path.join(d, "samples_transformers.json"))
    mlx = load(args.mlxcel_samples) if args.mlxcel_samples else None
    tcfg = load(os.path.join(d, "tokenizer_config.json"))
    src = ds["sources"][0]
    weights = os.path.getsize(os.path.join(d, "model.safetensors"))
    demo_q = ref["samples"][0]["prompt"]

    L = []
    add = L.append
    add("# %s" % name)
    add("")
    add("A small chat model trained from scratch by the mlxcel project, so that `make run`, the "
        "README examples and the end-to-end tests have a real model without a model hub. It "
        "answers questions about English words: meanings, examples, synonyms, opposites, kinds "
        "of things and parts of speech, in the style of WordNet's definitions. It is a "
        "%.1f M-parameter toy: it knows what it saw in training, and for other words it invents "
        "plausible-sounding but unreliable definitions. Do not use it for anything else."
        % (st["parameters"] / 1e6))
    add("")
    add("```")
    add("mlxcel generate -m models/%s -p '%s'" % (name, demo_q))
    add("```")
    add("")
    add("## Model")
    add("")
    add("| | |")
    add("|---|---|")
    rope = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta")
    for k, v in (("architecture", "%s (`model_type` %s)" % (cfg["architectures"][0],
                                                          cfg["model_type"])),
                 ("parameters", "{:,} (embeddings tied with the output layer)".format(
                     st["parameters"])),
                 ("layers", cfg["num_hidden_layers"]), ("hidden size", cfg["hidden_size"]),
                 ("attention heads / KV heads / head dim", "%d / %d / %d" % (
                     cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"])),
                 ("MLP intermediate size", cfg["intermediate_size"]),
                 ("vocabulary", cfg["vocab_size"]),
                 ("context (max positions)", cfg["max_position_embeddings"]),
                 ("RoPE theta", rope), ("weights", "bf16, `model.safetensors`, %s" % mb(weights)),
                 ("all files in this folder", mb(sum(
                     os.path.getsize(os.path.join(d, n)) for n in os.listdir(d))))):
        add("| %s | %s |" % (k, v))
    add("")
    add("## Tokenizer")
    add("")
    line = ("Byte-level BPE trained with the `tokenizers` library on the training split: "
            "vocabulary %d, NFC normalizer, Qwen2-style pre-tokenizer (regex split, then "
            "byte-level), byte-level decoder, no BOS." % cfg["vocab_size"])
    if ts:
        line += " %.2f characters per token on the corpus." % ts["characters_per_token"]
    add(line)
    add("Special tokens: `<|endoftext|>` = 0 (padding, document separator), `<|im_start|>` = 1, "
        "`<|im_end|>` = 2 (end of turn, EOS). Chat template (ChatML) from "
        "`tokenizer_config.json`:")
    add("")
    add("```jinja")
    add(tcfg["chat_template"])
    add("```")
    add("")
    add("## Data")
    add("")
    add("Only the Debian package **%s %s** (WordNet 3.0, %s; licence %s, reproduced below). "
        "`tools/train_demo/prepare_data` (Python standard library) reads its data and index "
        "files and writes one ChatML dialogue per question. No other text was used."
        % (src["package"], src["version"], src.get("copyright") or "Princeton University",
           src["licence"]))
    add("")
    add("| dialogue kind | train | held-out |")
    add("|---|---|---|")
    for k in sorted(ds["train"]["kinds"]):
        add("| %s | %d | %d |" % (k, ds["train"]["kinds"][k], ds["heldout"]["kinds"].get(k, 0)))
    add("| **documents** | %d | %d |" % (ds["train"]["documents"], ds["heldout"]["documents"]))
    add("| lemmas | %d | %d |" % (ds["train"]["lemmas"], ds["heldout"]["lemmas"]))
    add("| characters | %d | %d |" % (ds["train"]["characters"], ds["heldout"]["characters"]))
    add("| tokens | %d | %d |" % (st["train_corpus_tokens"], st["heldout_tokens"]))
    add("")
    add("The split is by lemma (a hash of the word, about 2 %%; seed %d): held-out words never "
        "appear as the subject of a training question, so the held-out loss measures how well "
        "the model generalises to unseen words." % ds["seed"])
    add("")
    add("## Training")
    add("")
    tr = st["training"]
    add("```")
    add("tools/train_demo/prepare_data DATA_DIR")
    add("tools/train_demo/run_device.sh DATA_DIR OUT_DIR   # runs the three steps below")
    add("python3 tools/train_demo/train_tokenizer.py DATA_DIR OUT_DIR/tokenizer")
    add(st["command"])
    add("python3 tools/train_demo/sample.py MODEL_DIR MODEL_DIR/samples_transformers.json")
    add("```")
    add("")
    add("On one %s (torch %s, transformers %s): %d steps of %d sequences x %d tokens in %.1f "
        "minutes (%s tokens/s), %.2f epochs of the training split. AdamW (betas 0.9/0.95, "
        "weight decay %g), peak learning rate %g after %d warm-up steps, cosine decay over the "
        "time budget to %g, gradient clipping 1.0, bf16 autocast, plain next-token loss on "
        "packed sequences. Exported: the weights of step %d (%s)."
        % (st["device"], st["versions"]["torch"], st["versions"]["transformers"],
                        st["steps"], tr["batch"], tr["seq"], st["train_seconds"] / 60,
                        "{:,}".format(st["tokens_per_second"]), st["epochs"],
                        tr["weight_decay"], tr["lr"], tr["warmup"], tr["min_lr"],
                        st["exported_step"],
                        "lowest held-out loss" if tr.get("export") == "best" else "the last step"))
    add("")
    add("## Results")
    add("")
    add("Cross-entropy in nats per token, exported bf16 weights computed in fp32:")
    add("")
    add("| | nats / token |")
    add("|---|---|")
    add("| final train loss | %.4f |" % st["final_train_loss"])
    add("| final held-out loss | **%.4f** |" % st["final_heldout_loss"])
    if "lowest_heldout_loss_seen_bf16_autocast" in st:
        add("| lowest held-out loss during training (bf16 autocast) | %.4f |"
            % st["lowest_heldout_loss_seen_bf16_autocast"])
    add("| unigram entropy of the held-out tokens | %.4f |" % st["heldout_unigram_entropy"])
    add("| unigram model fitted on train, on held-out | %.4f |"
        % st["heldout_unigram_cross_entropy_from_train"])
    add("")
    add("![loss curve](loss_curve.png)")
    add("")
    L += section_samples(ref, mlx)
    add("")
    add("## Licence")
    add("")
    add("The model is derived from WordNet 3.0 only; the weights, tokenizer and this card are "
        "distributed with the WordNet licence and copyright notice below, as that licence "
        "requires for copies and modifications. The name of Princeton University may not be "
        "used in advertising or publicity about this model.")
    add("")
    add("WordNet 3.0 licence (from `%s`):" % args.wordnet_copyright)
    add("")
    for para in wordnet_licence(args.wordnet_copyright).split("\n\n"):
        add("> " + para)
        add(">")
    if L[-1] == ">":
        L.pop()
    add("")
    with open(os.path.join(d, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(L))
    print("make_card: wrote %s%s" % (os.path.join(d, "README.md"),
                                     "" if mlx else " (mlxcel samples still missing)"))


if __name__ == "__main__":
    main()
