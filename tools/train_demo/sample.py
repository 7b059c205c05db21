#!/usr/bin/env python3
"""Reference greedy samples of the demo model with transformers (fp32 on the CPU).

Usage: python3 tools/train_demo/sample.py MODEL_DIR OUT_JSON [--max-new-tokens 64]

For each fixed prompt: render the chat template of MODEL_DIR/tokenizer_config.json with
add_generation_prompt, encode it with MODEL_DIR/tokenizer.json (the `tokenizers` library, no
special tokens added), and decode greedily with transformers' generate() until <|im_end|> or
--max-new-tokens. A second, independent greedy loop (full forward pass per token, no KV cache)
should give the same tokens (recorded, warned about otherwise). The top-1/top-2 logit margin per
step is recorded so that a comparison with another engine can tell a real divergence from a
near tie.

OUT_JSON holds, per prompt: prompt (the question), prompt_text (rendered template),
prompt_ids, generated_ids (including <|im_end|> when it was produced), generated_text
(decoded without special tokens), stopped_at_eos, min_margin, margins.
These are the "transformers greedy output" that mlxcel's greedy output is compared with.
"""

import argparse
import json
import os
import sys

import torch
import transformers
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM

# Questions in the model's domain; the words are kept in the training split by prepare_data.
PROMPTS = [
    'What does "ocean" mean?',
    "Define happiness.",
    'What is a synonym of "big"?',
    'What is the opposite of "hot"?',
    'Use "quickly" in a sentence.',
    "What is a dog?",
    'What part of speech is "run"?',
]
IM_END = "<|im_end|>"


def render_prompt(model_dir, question):
    """Chat template through transformers (the reference renderer); checked against the
    ChatML string the template is meant to produce."""
    messages = [{"role": "user", "content": question}]
    expected = "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n" % question
    try:
        tok = transformers.AutoTokenizer.from_pretrained(model_dir)
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    except Exception as e:  # noqa: BLE001 - fall back to plain jinja2, report it
        print("sample: AutoTokenizer failed (%s); rendering with jinja2" % e, file=sys.stderr)
        import jinja2
        with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
            tmpl = json.load(f)["chat_template"]
        text = jinja2.Environment().from_string(tmpl).render(messages=messages,
                                                             add_generation_prompt=True)
    if text != expected:
        sys.exit("sample: chat template rendered %r, expected %r" % (text, expected))
    return text


@torch.no_grad()
def greedy_no_cache(model, ids, max_new, eos):
    seq = list(ids)
    out, margins = [], []
    for _ in range(max_new):
        logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
        top = torch.topk(logits, 2)
        nxt = int(top.indices[0])
        margins.append(float(top.values[0] - top.values[1]))
        out.append(nxt)
        seq.append(nxt)
        if nxt == eos:
            break
    return out, margins


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out_json")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()

    torch.manual_seed(0)
    tok = Tokenizer.from_file(os.path.join(args.model_dir, "tokenizer.json"))
    eos = tok.token_to_id(IM_END)
    # Stored in bf16; fp32 compute is what mlxcel's CPU path does.
    model = AutoModelForCausalLM.from_pretrained(args.model_dir).to(torch.float32).eval()

    results = []
    for q in PROMPTS:
        text = render_prompt(args.model_dir, q)
        ids = tok.encode(text, add_special_tokens=False).ids
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor([ids]),
                                 attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 max_new_tokens=args.max_new_tokens, do_sample=False,
                                 eos_token_id=eos, pad_token_id=tok.token_to_id("<|endoftext|>"))
        gen = out[0, len(ids):].tolist()
        ref, margins = greedy_no_cache(model, ids, args.max_new_tokens, eos)
        if gen != ref:
            # fp32 rounding differs between cached and full passes; only a near tie can flip.
            print("sample: WARNING generate() and the no-cache loop disagree for %r:\n%s\n%s"
                  % (q, gen, ref), file=sys.stderr)
        answer = tok.decode([t for t in gen if t != eos], skip_special_tokens=True)
        results.append({
            "prompt": q,
            "prompt_text": text,
            "prompt_ids": ids,
            "generated_ids": gen,
            "generated_text": answer,
            "stopped_at_eos": bool(gen and gen[-1] == eos),
            "no_cache_loop_agrees": gen == ref,
            "min_margin": round(min(margins), 4) if margins else None,
            "margins": [round(m, 4) for m in margins],
        })
        print("Q: %s\nA: %s\n" % (q, answer), flush=True)

    doc = {
        "engine": "transformers %s, torch %s, fp32 on CPU, greedy" % (transformers.__version__,
                                                                    torch.__version__),
        "model_dir": os.path.basename(os.path.normpath(args.model_dir)),
        "max_new_tokens": args.max_new_tokens,
        "samples": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out_json)), exist_ok=True)
    with open(args.out_json, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
