#!/usr/bin/env python3
"""Cross-checks the committed checkpoint fixtures against the real libraries (GPU machine:
torch, transformers 5.x, safetensors). Nothing is downloaded.

    python3 tools/reference/verify_ckpt_fixtures.py OUT_DIR [--mlxcel build/mlxcel]

For every tests/fixtures/ckpt/<name>/:
  * every *.safetensors opens with the `safetensors` library and its tensors match the header
    (validates tools/make_ckpt_fixtures.py's independent writer);
  * transformers parses config.json (AutoConfig);
  * for the Hugging Face-layout fixtures, AutoModelForCausalLM.from_pretrained loads the weights
    with no missing and no unexpected keys, and the parameter count is recorded (tied weights
    counted once);
  * with --mlxcel, `mlxcel inspect --json` params must equal that count.
Writes OUT_DIR/verify_ckpt_fixtures.json and exits non-zero on any mismatch.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "ckpt")
# MLX-only layouts (packed U32 weights, stacked switch_mlp experts) are not loadable by transformers.
HF_LAYOUT = {"llama_tiny", "qwen3_sharded", "gemma3_sliding", "qwen3_moe_tiny"}


def text_only_copy(src, dst):
    """gemma3 wrapper fixture holds only the language model: re-key it for Gemma3ForCausalLM."""
    from safetensors.torch import load_file, save_file
    cfg = json.load(open(os.path.join(src, "config.json")))
    text = dict(cfg["text_config"])
    text["architectures"] = ["Gemma3ForCausalLM"]
    for k in ("eos_token_id", "torch_dtype"):
        if k in cfg:
            text[k] = cfg[k]
    json.dump(text, open(os.path.join(dst, "config.json"), "w"))
    sd = load_file(os.path.join(src, "model.safetensors"))
    sd = {k.replace("language_model.model.", "model."): v for k, v in sd.items()}
    save_file(sd, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    mlxcel = sys.argv[sys.argv.index("--mlxcel") + 1] if "--mlxcel" in sys.argv else None
    os.makedirs(out_dir, exist_ok=True)
    import torch  # noqa: F401
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    results, ok = {}, True
    for name in sorted(os.listdir(FIX)):
        d = os.path.join(FIX, name)
        r = results.setdefault(name, {})
        n_tensors = 0
        for f in sorted(os.listdir(d)):
            if f.endswith(".safetensors"):
                with safe_open(os.path.join(d, f), framework="pt") as sf:
                    for k in sf.keys():
                        sf.get_tensor(k)
                        n_tensors += 1
        r["safetensors_tensors"] = n_tensors
        try:
            AutoConfig.from_pretrained(d)
            r["config"] = "ok"
        except Exception as e:  # record and continue
            r["config"] = f"error: {e}"
            ok = False
        if name in HF_LAYOUT:
            with tempfile.TemporaryDirectory() as tmp:
                src = d
                if name == "gemma3_sliding":
                    text_only_copy(d, tmp)
                    src = tmp
                model, info = AutoModelForCausalLM.from_pretrained(
                    src, output_loading_info=True, dtype=torch.float32)
                r["missing_keys"] = sorted(info["missing_keys"])
                r["unexpected_keys"] = sorted(info["unexpected_keys"])
                r["params_torch"] = sum(p.numel() for p in model.parameters())
                ok &= not r["missing_keys"] and not r["unexpected_keys"]
        if mlxcel:
            out = subprocess.run([mlxcel, "inspect", "-m", d, "--json", "--device", "cpu"],
                                 capture_output=True, text=True, check=True).stdout
            r["params_mlxcel"] = json.loads(out)["params"]
            if "params_torch" in r and r["params_torch"] != r["params_mlxcel"]:
                ok = False
        print(name, r)
    json.dump(results, open(os.path.join(out_dir, "verify_ckpt_fixtures.json"), "w"), indent=2)
    print("OK" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
