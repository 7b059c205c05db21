#!/usr/bin/env python3
"""Lists golden fixtures whose greedy continuation is an echo (stdlib only, runs anywhere).

    python3 tools/reference/check_fixtures.py [REPO_ROOT] [--known FILE] [--list]

A golden fixture pins a family's forward pass only if its greedy continuation depends on it.
On a tiny random-weight model whose residual stream is dominated by the token embedding (tied
embeddings, gemma's sqrt(hidden) embedding scale) the argmax is the last input token again and
again: a wrong engine that copies its input passes every token check of such a fixture. So a
case is an ECHO when its continuation (`greedy`, 32 ids) does any of:

  run     repeats one token more than MAX_RUN (4) times in a row;
  share   holds one token more than MAX_SHARE (a quarter) of its positions;
  copy    contains a run of COPY_LEN (4) consecutive ids that also occurs, in order, in the
          prompt (an induction-style copy of the prompt), or starts with the prompt's last
          token repeated (the "copy the input" echo; already a `run` when it lasts).

Random continuations of 32 ids over a vocabulary of 64..512 almost never trip these (for 512
ids the expected largest count is 2-3); see tools/reference/README.md.

Scanned: every expected.json under tests/fixtures (models/, quant_parity/, ...) with a `cases`
list holding `prompt_ids` and `greedy`. With --known FILE (CTest passes
tests/fixtures/echo_known.txt) the run fails when the ECHO cases differ from the list in
either direction: a new echo fails, and a listed case that no longer echoes fails until it is
removed from the list (so the list only shrinks as fixtures are regenerated). Exit 0 / 1.
make_fixtures.py and quant_parity.py import echo_reasons() to refuse such fixtures.
"""
import argparse
import collections
import json
import os
import sys

MAX_RUN = 4
MAX_SHARE_FRACTION = 0.25
COPY_LEN = 4


def echo_reasons(prompt, greedy):
    """Why the continuation `greedy` of `prompt` is an echo (empty list: it discriminates)."""
    out = []
    if not greedy:
        return ["empty continuation"]
    run, best, best_tok = 1, 1, greedy[0]
    for i in range(1, len(greedy)):
        run = run + 1 if greedy[i] == greedy[i - 1] else 1
        if run > best:
            best, best_tok = run, greedy[i]
    if best > MAX_RUN:
        out.append(f"run: token {best_tok} {best} times in a row (max {MAX_RUN})")
    tok, count = collections.Counter(greedy).most_common(1)[0]
    max_share = int(MAX_SHARE_FRACTION * len(greedy))
    if count > max_share:
        out.append(f"share: token {tok} is {count} of {len(greedy)} (max {max_share})")
    if prompt:
        grams = {tuple(prompt[i:i + COPY_LEN]) for i in range(len(prompt) - COPY_LEN + 1)}
        for i in range(len(greedy) - COPY_LEN + 1):
            if tuple(greedy[i:i + COPY_LEN]) in grams:
                out.append(f"copy: ids {greedy[i:i + COPY_LEN]} at step {i} occur in the prompt")
                break
        lead = 0
        while lead < len(greedy) and greedy[lead] == prompt[-1]:
            lead += 1
        if lead >= 2:
            out.append(f"copy: starts with the prompt's last token {prompt[-1]} {lead} times")
    return out


def scan(root):
    """[(key, reasons)] for every case of every expected.json under root/tests/fixtures;
    key = '<path relative to tests/fixtures>:<case index>'. Also returns the number of cases."""
    base = os.path.join(root, "tests", "fixtures")
    found, n_cases = [], 0
    for d, _, files in sorted(os.walk(base)):
        if "expected.json" not in files:
            continue
        with open(os.path.join(d, "expected.json")) as f:
            doc = json.load(f)
        cases = doc.get("cases") if isinstance(doc, dict) else None
        if not isinstance(cases, list) or not cases or "greedy" not in cases[0]:
            continue
        rel = os.path.relpath(d, base)
        for i, c in enumerate(cases):
            n_cases += 1
            why = echo_reasons(c.get("prompt_ids") or [], c.get("greedy") or [])
            if why:
                found.append((f"{rel}:{i}", why))
    return found, n_cases


def read_known(path):
    keys = set()
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                keys.add(line.split()[0])
    return keys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--known", help="expected-failure list (one key per line)")
    ap.add_argument("--list", action="store_true", help="print only the echo keys, one a line")
    a = ap.parse_args()
    found, n_cases = scan(os.path.abspath(a.root))
    if a.list:
        for k, _ in found:
            print(k)
        return 0
    print(f"check_fixtures: {n_cases} golden cases scanned, {len(found)} echo")
    if n_cases == 0:
        print("check_fixtures: FAIL: no golden fixture found (wrong root?)")
        return 1
    for k, why in found:
        print(f"  ECHO {k}: {'; '.join(why)}")
    if not a.known:
        return 1 if found else 0
    known = read_known(a.known)
    got = {k for k, _ in found}
    new, gone = sorted(got - known), sorted(known - got)
    for k in new:
        print(f"check_fixtures: FAIL: {k} is an echo and not in {a.known} (regenerate it with "
              f"a discriminating seed / scale: tools/reference/README.md)")
    for k in gone:
        print(f"check_fixtures: FAIL: {k} is listed in {a.known} but no longer an echo: "
              f"remove it from the list")
    if not new and not gone:
        print(f"check_fixtures: ok ({len(got)} known echo cases, expected failures listed in "
              f"{a.known}; the list must shrink to empty)")
    return 1 if new or gone else 0


if __name__ == "__main__":
    sys.exit(main())
