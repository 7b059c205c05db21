#!/usr/bin/env python3
"""Single-threaded encode throughput of the Hugging Face `tokenizers` library (the baseline
mlxcel's tokenizer is compared with).

    python3 tools/reference/bench_tokenizers.py NPM_DIR OUTDIR [--mb 10] [--repeats 3]
    python3 tools/reference/bench_tokenizers.py - OUTDIR --text-only   (stdlib only: just the text)

1. Builds >= --mb MB of mixed text deterministically (the committed test strings, shuffled
   and repeated, plus generated English-like prose and code-like text) and writes the exact
   bytes to OUTDIR/bench_text.txt, so mlxcel can encode the very same input.
2. Splits it into chunks: whole lines ('\\n'-terminated, the '\\n' stays with its line) are
   appended to a chunk until the chunk holds >= 4096 bytes (UTF-8), then a new chunk starts.
   The last chunk may be shorter. mlxcel's benchmark must use the same rule.
3. Times Tokenizer.encode(chunk, add_special_tokens=False) over all chunks, one call at a
   time (single-threaded: RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false, and no
   encode_batch), best of --repeats runs.
Prints one JSON object and writes it to OUTDIR/bench_tokenizers.json:
  {"text_bytes", "text_sha256", "chunk_rule", "chunks", "tokenizers_version",
   "results": {name: {"mb_per_s", "seconds", "tokens"}}}  (MB = 1e6 bytes)
"""
import os

os.environ["RAYON_NUM_THREADS"] = "1"        # before tokenizers is imported
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = ["llama3", "qwen3", "mistral"]
CHUNK_BYTES = 4096

WORDS = ("the of and to in a is that for it as with was on be by at this from or have an they "
         "which one you were all we her she there would their will when who him been has more "
         "if no out so said what up its about into than them can only other new some could time "
         "these two may then do first any my now such like our over man me even most made after "
         "also did many before must through back years where much your way well down should "
         "because each just those people how too little state good very make world still own "
         "see men work long get here between both life being under never day same another know "
         "while last might us great old year off come since against go came right used take "
         "model token tokenizer cache kernel batch decode prefill attention memory latency "
         "throughput server request response stream sequence logits sampler scheduler").split()
IDENTS = ("x y i j n k buf len ptr data out in src dst count size offset idx tmp result value "
          "node list map key ctx err status config model tensor shape stride dtype device").split()


def english(rng, n_bytes):
    out, size = [], 0
    while size < n_bytes:
        sent = [rng.choice(WORDS) for _ in range(rng.randrange(4, 25))]
        sent[0] = sent[0].capitalize()
        if rng.random() < 0.2:
            sent.insert(rng.randrange(len(sent)), str(rng.randrange(1, 100000)))
        if rng.random() < 0.15:
            k = rng.randrange(len(sent))
            sent[k] = sent[k] + rng.choice(["'s", "'t", "'re", "'ll", ","])
        s = " ".join(sent) + rng.choice([".", ".", ".", "?", "!"])
        s += "\n\n" if rng.random() < 0.15 else ("\n" if rng.random() < 0.3 else " ")
        out.append(s)
        size += len(s.encode())
    return "".join(out)


def code(rng, n_bytes):
    out, size = [], 0
    while size < n_bytes:
        depth = rng.randrange(0, 4)
        ind = "    " * depth if rng.random() < 0.7 else "\t" * depth
        a, b, c = (rng.choice(IDENTS) for _ in range(3))
        line = rng.choice([
            f"{ind}{a} = {b} + {c} * {rng.randrange(1000)};\n",
            f"{ind}if ({a} < {b}) {{\n",
            f"{ind}}}\n",
            f"{ind}for (int {a} = 0; {a} < {b}; ++{a}) {{ {c}[{a}] = {rng.randrange(256)}; }}\n",
            f"{ind}def {a}_{b}(self, {c}=None):\n",
            f"{ind}return {a}.{b}({c}, \"{rng.choice(WORDS)}\")\n",
            f"{ind}# {' '.join(rng.choice(WORDS) for _ in range(6))}\n",
            f"{ind}{{\"{a}\": {rng.randrange(10**6)}, \"{b}\": [{c!r}, {rng.random():.4f}]}},\n",
            f"{ind}echo \"${a}\" | grep -v {b} > /tmp/{c}.log 2>&1\n",
            "\n",
        ])
        out.append(line)
        size += len(line.encode())
    return "".join(out)


def build_text(target_bytes):
    rng = random.Random(12345)
    strings = json.load(open(os.path.join(REPO, "tests", "fixtures", "tokenizers",
                                          "strings.json"), encoding="utf-8"))["strings"]
    # NUL and lone control characters are kept out of the bench text (tests cover them).
    strings = [s for s in strings if "\x00" not in s]
    parts, size = [], 0
    while size < target_bytes:
        kind = rng.random()
        if kind < 0.3:
            shuffled = strings[:]
            rng.shuffle(shuffled)
            piece = "\n".join(shuffled[: rng.randrange(20, 120)]) + "\n"
        elif kind < 0.7:
            piece = english(rng, 64 * 1024)
        else:
            piece = code(rng, 64 * 1024)
        parts.append(piece)
        size += len(piece.encode())
    return "".join(parts)


def chunks_of(text):
    chunks, cur, cur_bytes = [], [], 0
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if i < len(lines) - 1:
            line += "\n"
        elif not line:
            break
        cur.append(line)
        cur_bytes += len(line.encode())
        if cur_bytes >= CHUNK_BYTES:
            chunks.append("".join(cur))
            cur, cur_bytes = [], 0
    if cur:
        chunks.append("".join(cur))
    assert "".join(chunks) == text
    return chunks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("npm_dir")
    ap.add_argument("outdir")
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--text-only", action="store_true",
                    help="only write OUTDIR/bench_text.txt (stdlib only; no tokenizers needed)")
    args = ap.parse_args()

    os.makedirs(args.outdir, exist_ok=True)
    text = build_text(int(args.mb * 1e6))
    data = text.encode("utf-8")
    with open(os.path.join(args.outdir, "bench_text.txt"), "wb") as f:
        f.write(data)
    chunks = chunks_of(text)
    if args.text_only:
        print(json.dumps({"text_bytes": len(data), "text_sha256": hashlib.sha256(data).hexdigest(),
                          "chunks": len(chunks)}))
        return

    import tokenizers
    from tokenizers import Tokenizer

    report = {
        "text_bytes": len(data),
        "text_sha256": hashlib.sha256(data).hexdigest(),
        "chunk_rule": f"whole '\\n'-terminated lines appended until the chunk has >= {CHUNK_BYTES} bytes",
        "chunks": len(chunks),
        "tokenizers_version": tokenizers.__version__,
        "threads": 1,
        "results": {},
    }
    for name in NAMES:
        try:
            tok = Tokenizer.from_file(os.path.join(args.npm_dir, name, "tokenizer.json"))
            tok.encode(chunks[0], add_special_tokens=False)  # warm-up
            best, n_tokens = None, 0
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                n = 0
                for c in chunks:
                    n += len(tok.encode(c, add_special_tokens=False).ids)
                dt = time.perf_counter() - t0
                n_tokens = n
                best = dt if best is None else min(best, dt)
            report["results"][name] = {"mb_per_s": round(len(data) / 1e6 / best, 3),
                                       "seconds": round(best, 4), "tokens": n_tokens}
        except Exception as e:
            report["results"][name] = {"error": f"{type(e).__name__}: {e}"}
        print(name, report["results"][name], file=sys.stderr, flush=True)
    with open(os.path.join(args.outdir, "bench_tokenizers.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
