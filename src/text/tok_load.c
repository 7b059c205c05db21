/* tokenizer.json -> struct tokenizer. Every unsupported component is a clear error naming
 * the JSON field; nothing here aborts on bad input. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok_json.h"

/* ==== JSON helpers ==== */

static bool jbool(const json_t *o, const char *k, bool def) {
    const json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

static const char *jstr(const json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

static char *xstrndup(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) abort();
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

/* One code point from a JSON string field (Metaspace replacement, Strip content). */
static int jchar(const json_t *o, const char *k, int32_t def, int32_t *out, const char *where,
                 mx_error *err) {
    const json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    const char *s = json_string_value(v);
    size_t n = s ? json_string_length(v) : 0;
    if (!s || n == 0 || !tk_utf8_valid(s, n)) return mx_fail(err, "%s.%s: expected a one-character string", where, k);
    int l = tk_utf8_next(s, n, out);
    if ((size_t)l != n) return mx_fail(err, "%s.%s: expected a one-character string", where, k);
    return 0;
}

/* {"String": s} or {"Regex": r} -> compiled pattern. */
static int jpattern(const json_t *o, tk_regex *re, const char *where, mx_error *err) {
    const json_t *p = json_object_get(o, "pattern");
    const json_t *s = json_object_get(p, "String"), *r = json_object_get(p, "Regex");
    if (json_is_string(s)) {
        if (json_string_length(s) == 0) return mx_fail(err, "%s.pattern.String: empty pattern", where);
        return tk_regex_compile(re, json_string_value(s), json_string_length(s), true, err) ? mx_wrap(err, "%s.pattern", where) : 0;
    }
    if (json_is_string(r))
        return tk_regex_compile(re, json_string_value(r), json_string_length(r), false, err) ? mx_wrap(err, "%s.pattern", where) : 0;
    return mx_fail(err, "%s.pattern: expected {\"String\": ...} or {\"Regex\": ...}", where);
}

static int jbehavior(const json_t *o, tk_split_behavior def, tk_split_behavior *out, const char *where,
                     mx_error *err) {
    const char *b = jstr(o, "behavior");
    if (!b) {
        *out = def;
        return 0;
    }
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(b, names[i])) {
            *out = (tk_split_behavior)i;
            return 0;
        }
    return mx_fail(err, "%s.behavior: unknown value '%s' (expected Removed, Isolated, MergedWithPrevious, "
                        "MergedWithNext or Contiguous)", where, b);
}

static int jprepend(const json_t *o, tk_prepend_scheme *out, const char *where, mx_error *err) {
    const char *s = jstr(o, "prepend_scheme");
    if (!s) { /* legacy files: add_prefix_space */
        *out = jbool(o, "add_prefix_space", true) ? TK_PREPEND_ALWAYS : TK_PREPEND_NEVER;
        return 0;
    }
    if (!strcmp(s, "always")) *out = TK_PREPEND_ALWAYS;
    else if (!strcmp(s, "first")) *out = TK_PREPEND_FIRST;
    else if (!strcmp(s, "never")) *out = TK_PREPEND_NEVER;
    else return mx_fail(err, "%s.prepend_scheme: unknown value '%s' (expected always, first or never)", where, s);
    return 0;
}

/* ==== Stages ==== */

typedef int (*stage_loader)(tokenizer *t, const json_t *o, mx_error *err);

/* Opens one pipeline stage object o (`stage` names it in messages): *ty = its "type" (left
 * NULL when o is absent / null). A "Sequence" is unwrapped here: each entry of its array
 * `list` goes through `load`, in order. Returns 0 when *ty is a single stage for the caller
 * to load, 1 when nothing is left to do (no stage, or the Sequence loaded), -1 on error. */
static int stage_open(tokenizer *t, const json_t *o, const char *stage, const char *list,
                      stage_loader load, const char **ty, mx_error *err) {
    *ty = NULL;
    if (!o || json_is_null(o)) return 1;
    *ty = jstr(o, "type");
    if (!*ty) return mx_fail(err, "%s: missing \"type\"", stage);
    if (strcmp(*ty, "Sequence")) return 0;
    const json_t *arr = json_object_get(o, list);
    if (!json_is_array(arr)) return mx_fail(err, "%s.%s: expected an array", stage, list);
    size_t i;
    const json_t *v;
    json_array_foreach(arr, i, v) if (load(t, v, err)) return -1;
    return 1;
}

/* ==== Normalizers ==== */

static int load_norm(tokenizer *t, const json_t *o, mx_error *err) {
    const char *ty;
    const int st = stage_open(t, o, "normalizer", "normalizers", load_norm, &ty, err);
    if (st) return st < 0 ? -1 : 0;
    if (t->n_norms >= TK_MAX_STAGES) return mx_fail(err, "normalizer: more than %d steps", TK_MAX_STAGES);
    tk_norm n = {0};
    if (!strcmp(ty, "NFC")) n.kind = TK_NORM_NFC;
    else if (!strcmp(ty, "NFD")) n.kind = TK_NORM_NFD;
    else if (!strcmp(ty, "NFKC")) n.kind = TK_NORM_NFKC;
    else if (!strcmp(ty, "NFKD")) n.kind = TK_NORM_NFKD;
    else if (!strcmp(ty, "Lowercase")) n.kind = TK_NORM_LOWERCASE;
    else if (!strcmp(ty, "StripAccents")) n.kind = TK_NORM_STRIP_ACCENTS;
    else if (!strcmp(ty, "Strip")) {
        n.kind = TK_NORM_STRIP;
        n.left = jbool(o, "strip_left", true);
        n.right = jbool(o, "strip_right", true);
    } else if (!strcmp(ty, "Prepend")) {
        const json_t *p = json_object_get(o, "prepend");
        if (!json_is_string(p)) return mx_fail(err, "normalizer Prepend.prepend: expected a string");
        n.kind = TK_NORM_PREPEND;
        n.s_len = json_string_length(p);
        n.s = xstrndup(json_string_value(p), n.s_len);
    } else if (!strcmp(ty, "Replace")) {
        const json_t *c = json_object_get(o, "content");
        if (!json_is_string(c)) return mx_fail(err, "normalizer Replace.content: expected a string");
        n.kind = TK_NORM_REPLACE;
        if (jpattern(o, &n.re, "normalizer Replace", err)) return -1;
        n.s_len = json_string_length(c);
        n.s = xstrndup(json_string_value(c), n.s_len);
    } else
        return mx_fail(err, "normalizer: type '%s' is not supported (supported: NFC, NFD, NFKC, NFKD, "
                            "Lowercase, StripAccents, Strip, Prepend, Replace, Sequence)", ty);
    t->norms = realloc(t->norms, (size_t)(t->n_norms + 1) * sizeof *t->norms);
    t->norms[t->n_norms++] = n;
    return 0;
}

/* ==== Pre-tokenizers ==== */

static const char k_gpt2_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int push_pre(tokenizer *t, const tk_pre *p, mx_error *err) {
    if (t->n_pres >= TK_MAX_STAGES - 1) return mx_fail(err, "pre_tokenizer: more than %d steps", TK_MAX_STAGES - 1);
    t->pres = realloc(t->pres, (size_t)(t->n_pres + 1) * sizeof *t->pres);
    t->pres[t->n_pres++] = *p;
    return 0;
}

static int load_pre(tokenizer *t, const json_t *o, mx_error *err) {
    const char *ty;
    const int st = stage_open(t, o, "pre_tokenizer", "pretokenizers", load_pre, &ty, err);
    if (st) return st < 0 ? -1 : 0;
    tk_pre p = {0};
    if (!strcmp(ty, "ByteLevel")) {
        p.kind = TK_PRE_BYTELEVEL;
        p.add_prefix_space = jbool(o, "add_prefix_space", true);
        p.use_regex = jbool(o, "use_regex", true);
        if (p.use_regex && tk_regex_compile(&p.re, k_gpt2_re, sizeof k_gpt2_re - 1, false, err)) return -1;
    } else if (!strcmp(ty, "Split")) {
        p.kind = TK_PRE_SPLIT;
        if (jpattern(o, &p.re, "pre_tokenizer Split", err)) return -1;
        if (jbehavior(o, TK_SPLIT_ISOLATED, &p.behavior, "pre_tokenizer Split", err)) goto fail;
        p.invert = jbool(o, "invert", false);
    } else if (!strcmp(ty, "Digits")) {
        p.kind = TK_PRE_DIGITS;
        p.individual_digits = jbool(o, "individual_digits", false);
    } else if (!strcmp(ty, "Metaspace")) {
        p.kind = TK_PRE_METASPACE;
        if (jchar(o, "replacement", 0x2581, &p.ch, "pre_tokenizer Metaspace", err)) return -1;
        if (jprepend(o, &p.prepend, "pre_tokenizer Metaspace", err)) return -1;
        p.split = jbool(o, "split", true);
    } else if (!strcmp(ty, "Whitespace")) {
        p.kind = TK_PRE_WHITESPACE;
        /* tokenizers' Whitespace is the Rust regex crate's \w+|[^\w\s]+ (not Oniguruma's):
         * its \w is Alphabetic, marks, Nd, Pc and ZWNJ/ZWJ, so U+00B2 or U+2460 (No) are not
         * word characters there and U+24B6 (So, Alphabetic) is */
        tk_buf re = {0};
        tk_buf_putc(&re, '[');
        tk_rust_word_items(&re);
        tk_buf_put(&re, "]+|[^", 5);
        tk_rust_word_items(&re);
        tk_buf_put(&re, "\\s]+", 4);
        int rc = tk_regex_compile(&p.re, re.p, re.n, false, err);
        free(re.p);
        if (rc) return -1;
    } else if (!strcmp(ty, "WhitespaceSplit")) {
        p.kind = TK_PRE_WHITESPACE_SPLIT;
    } else if (!strcmp(ty, "Punctuation")) {
        p.kind = TK_PRE_PUNCTUATION;
        if (jbehavior(o, TK_SPLIT_ISOLATED, &p.behavior, "pre_tokenizer Punctuation", err)) return -1;
    } else if (!strcmp(ty, "BertPreTokenizer")) {
        /* whitespace removed, then punctuation isolated */
        p.kind = TK_PRE_WHITESPACE_SPLIT;
        if (push_pre(t, &p, err)) return -1;
        p.kind = TK_PRE_PUNCTUATION;
        p.behavior = TK_SPLIT_ISOLATED;
    } else if (!strcmp(ty, "CharDelimiterSplit")) {
        p.kind = TK_PRE_CHAR_DELIM;
        if (jchar(o, "delimiter", -1, &p.ch, "pre_tokenizer CharDelimiterSplit", err)) return -1;
        if (p.ch < 0) return mx_fail(err, "pre_tokenizer CharDelimiterSplit.delimiter: missing");
    } else
        return mx_fail(err, "pre_tokenizer: type '%s' is not supported (supported: ByteLevel, Split, Digits, "
                            "Metaspace, Whitespace, WhitespaceSplit, Punctuation, BertPreTokenizer, "
                            "CharDelimiterSplit, Sequence)", ty);
    if (push_pre(t, &p, err)) goto fail;
    return 0;
fail:
    tk_regex_free(&p.re);
    return -1;
}

/* ==== Decoders ==== */

static int push_dec(tokenizer *t, const tk_dec *d) {
    t->decs = realloc(t->decs, (size_t)(t->n_decs + 1) * sizeof *t->decs);
    t->decs[t->n_decs++] = *d;
    return 0;
}

static int load_dec(tokenizer *t, const json_t *o, mx_error *err) {
    const char *ty;
    const int st = stage_open(t, o, "decoder", "decoders", load_dec, &ty, err);
    if (ty) t->has_decoder = true; /* any typed decoder, an (even empty) Sequence too */
    if (st) return st < 0 ? -1 : 0;
    tk_dec d = {0};
    if (!strcmp(ty, "ByteLevel")) d.kind = TK_DEC_BYTELEVEL;
    else if (!strcmp(ty, "ByteFallback")) d.kind = TK_DEC_BYTE_FALLBACK;
    else if (!strcmp(ty, "Fuse")) d.kind = TK_DEC_FUSE;
    else if (!strcmp(ty, "Metaspace")) {
        d.kind = TK_DEC_METASPACE;
        if (jchar(o, "replacement", 0x2581, &d.ch, "decoder Metaspace", err)) return -1;
        if (jprepend(o, &d.prepend, "decoder Metaspace", err)) return -1;
    } else if (!strcmp(ty, "Strip")) {
        d.kind = TK_DEC_STRIP;
        if (jchar(o, "content", ' ', &d.ch, "decoder Strip", err)) return -1;
        json_int_t a = json_integer_value(json_object_get(o, "start"));
        json_int_t b = json_integer_value(json_object_get(o, "stop"));
        if (a < 0 || b < 0) return mx_fail(err, "decoder Strip.start/stop: expected non-negative integers");
        d.start = (size_t)a;
        d.stop = (size_t)b;
    } else if (!strcmp(ty, "Replace")) {
        const json_t *p = json_object_get(json_object_get(o, "pattern"), "String");
        const json_t *c = json_object_get(o, "content");
        if (!json_is_string(p) || json_string_length(p) == 0)
            return mx_fail(err, "decoder Replace.pattern: only a non-empty {\"String\": ...} pattern is supported");
        if (!json_is_string(c)) return mx_fail(err, "decoder Replace.content: expected a string");
        d.kind = TK_DEC_REPLACE;
        d.pat_len = json_string_length(p);
        d.pat = xstrndup(json_string_value(p), d.pat_len);
        d.content_len = json_string_length(c);
        d.content = xstrndup(json_string_value(c), d.content_len);
    } else if (!strcmp(ty, "BPEDecoder")) {
        const char *s = jstr(o, "suffix");
        d.kind = TK_DEC_BPE_SUFFIX;
        d.pat = xstrndup(s ? s : "</w>", strlen(s ? s : "</w>"));
        d.pat_len = strlen(d.pat);
    } else
        return mx_fail(err, "decoder: type '%s' is not supported (supported: ByteLevel, Metaspace, ByteFallback, "
                            "Fuse, Strip, Replace, BPEDecoder, Sequence)", ty);
    return push_dec(t, &d);
}

/* ==== Post-processors ==== */

static int special_ids(tokenizer *t, const json_t *specials, const char *name, tk_ids *out, mx_error *err) {
    const json_t *sp = json_object_get(specials, name);
    const json_t *ids = json_object_get(sp, "ids");
    if (!json_is_array(ids)) {
        /* No special_tokens entry: the name is looked up in the vocabulary. */
        int32_t id = tok_piece_to_id(t, name);
        if (id < 0) return mx_fail(err, "post_processor: special token '%s' is not defined", name);
        tk_ids_push(out, id);
        return 0;
    }
    size_t i;
    const json_t *v;
    json_array_foreach(ids, i, v) {
        if (!json_is_integer(v)) return mx_fail(err, "post_processor.special_tokens.%s.ids: expected integers", name);
        tk_ids_push(out, (int32_t)json_integer_value(v));
    }
    return 0;
}

static int load_post(tokenizer *t, const json_t *o, mx_error *err) {
    const char *ty;
    const int st = stage_open(t, o, "post_processor", "processors", load_post, &ty, err);
    if (st) return st < 0 ? -1 : 0;
    if (!strcmp(ty, "ByteLevel")) return 0; /* offsets only */
    tk_ids pre = {0}, suf = {0};
    if (!strcmp(ty, "TemplateProcessing")) {
        const json_t *single = json_object_get(o, "single");
        if (!json_is_array(single)) return mx_fail(err, "post_processor TemplateProcessing.single: expected an array");
        int seen_a = 0;
        size_t i;
        const json_t *v;
        json_array_foreach(single, i, v) {
            const json_t *sp = json_object_get(v, "SpecialToken"), *sq = json_object_get(v, "Sequence");
            if (sq) {
                const char *id = jstr(sq, "id");
                if (!id || strcmp(id, "A") || seen_a++)
                    goto bad_template;
            } else if (sp) {
                const char *id = jstr(sp, "id");
                if (!id) goto bad_template;
                if (special_ids(t, json_object_get(o, "special_tokens"), id, seen_a ? &suf : &pre, err)) goto fail;
            } else
                goto bad_template;
        }
        if (!seen_a) goto bad_template;
    } else if (!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing")) {
        const json_t *cls = json_object_get(o, "cls"), *sep = json_object_get(o, "sep");
        if (!json_is_array(cls) || !json_is_array(sep) || !json_is_integer(json_array_get(cls, 1)) ||
            !json_is_integer(json_array_get(sep, 1)))
            return mx_fail(err, "post_processor %s.cls/sep: expected [token, id]", ty);
        tk_ids_push(&pre, (int32_t)json_integer_value(json_array_get(cls, 1)));
        tk_ids_push(&suf, (int32_t)json_integer_value(json_array_get(sep, 1)));
    } else
        return mx_fail(err, "post_processor: type '%s' is not supported (supported: TemplateProcessing, "
                            "ByteLevel, RobertaProcessing, BertProcessing, Sequence)", ty);
    /* Nesting: a later processor wraps the result of the earlier ones. */
    for (size_t i = 0; i < t->post_prefix.n; i++) tk_ids_push(&pre, t->post_prefix.p[i]);
    for (size_t i = 0; i < suf.n; i++) tk_ids_push(&t->post_suffix, suf.p[i]);
    free(t->post_prefix.p);
    t->post_prefix = pre;
    free(suf.p);
    return 0;
bad_template:
    mx_fail(err, "post_processor TemplateProcessing.single: expected SpecialToken items and exactly one "
                 "Sequence A");
fail:
    free(pre.p);
    free(suf.p);
    return -1;
}

/* ==== Model (BPE) ==== */

#define TK_MAX_ID (1 << 24) /* ids beyond this are refused: tables are indexed by id */

/* model.vocab and model.merges, streamed by the scanner (or taken from jansson). */
typedef struct tk_model_src {
    bool vocab_done;   /* b->vocab already filled */
    bool merges_done;  /* merges below already collected */
    tk_buf mtext;      /* left then right strings of every merge */
    tk_spans mspans;   /* per merge: a = start, b = end, m = length of the left part */
} tk_model_src;

static int add_merge_str(tk_model_src *src, const char *s, size_t n, size_t i, mx_error *err) {
    const char *sp = memchr(s, ' ', n);
    if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp - s) - 1))
        return mx_fail(err, "model.merges[%zu]: expected \"left right\" (one space), got \"%.*s\"", i,
                       (int)(n > 60 ? 60 : n), s);
    size_t a = src->mtext.n;
    tk_buf_put(&src->mtext, s, (size_t)(sp - s));
    tk_buf_put(&src->mtext, sp + 1, n - (size_t)(sp - s) - 1);
    tk_spans_push(&src->mspans, a, src->mtext.n, (int)(sp - s));
    return 0;
}

static int vocab_put(tk_bpe *b, const char *k, size_t n, int64_t id, mx_error *err) {
    if (id < 0 || id >= TK_MAX_ID)
        return mx_fail(err, "model.vocab[\"%.*s\"]: id %lld is out of range (0..%d)", (int)(n > 60 ? 60 : n), k,
                       (long long)id, TK_MAX_ID - 1);
    tk_map_put(&b->vocab, k, n, (int32_t)id, true);
    return 0;
}

static int load_model(tokenizer *t, const json_t *m, tk_model_src *src, mx_error *err) {
    tk_bpe *b = &t->bpe;
    if (!json_is_object(m)) return mx_fail(err, "model: expected an object");
    const char *ty = jstr(m, "type");
    if (ty && strcmp(ty, "BPE"))
        return mx_fail(err, "model.type: '%s' is not supported yet (only BPE; WordPiece, Unigram and "
                            "WordLevel are not implemented)", ty);
    const json_t *dp = json_object_get(m, "dropout");
    if (dp && !json_is_null(dp) && json_number_value(dp) != 0.0)
        return mx_fail(err, "model.dropout: BPE dropout is not supported (expected null)");
    if (!src->vocab_done) {
        const json_t *vocab = json_object_get(m, "vocab");
        if (!json_is_object(vocab)) return mx_fail(err, "model.vocab: expected an object {token: id}");
        tk_map_init(&b->vocab, json_object_size(vocab));
        const char *k;
        size_t kn;
        const json_t *v;
        json_object_keylen_foreach((json_t *)vocab, k, kn, v) { /* a key may hold U+0000 */
            if (!json_is_integer(v)) return mx_fail(err, "model.vocab[\"%.60s\"]: expected an integer id", k);
            if (vocab_put(b, k, kn, json_integer_value(v), err)) return -1;
        }
    }
    if (!src->merges_done) {
        const json_t *merges = json_object_get(m, "merges");
        if (merges && !json_is_array(merges)) return mx_fail(err, "model.merges: expected an array");
        size_t i;
        const json_t *e;
        json_array_foreach(merges, i, e) {
            if (json_is_string(e)) {
                if (add_merge_str(src, json_string_value(e), json_string_length(e), i, err)) return -1;
            } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
                       json_is_string(json_array_get(e, 1))) {
                size_t a = src->mtext.n, ll = json_string_length(json_array_get(e, 0));
                tk_buf_put(&src->mtext, json_string_value(json_array_get(e, 0)), ll);
                tk_buf_put(&src->mtext, json_string_value(json_array_get(e, 1)), json_string_length(json_array_get(e, 1)));
                tk_spans_push(&src->mspans, a, src->mtext.n, (int)ll);
            } else
                return mx_fail(err, "model.merges[%zu]: expected a \"a b\" string or an [a, b] pair", i);
        }
    }
    int32_t max_id = -1;
    for (size_t i = 0; i < b->vocab.cap; i++)
        if (b->vocab.slots[i].len != UINT32_MAX && b->vocab.slots[i].val > max_id) max_id = b->vocab.slots[i].val;
    b->n_pieces = max_id + 1;
    b->pieces = calloc((size_t)b->n_pieces + 1, sizeof *b->pieces);
    b->piece_lens = calloc((size_t)b->n_pieces + 1, sizeof *b->piece_lens);
    if (!b->pieces || !b->piece_lens) return mx_fail(err, "model.vocab: out of memory");
    for (size_t i = 0; i < b->vocab.cap; i++) {
        const tk_map_ent *e = &b->vocab.slots[i];
        if (e->len != UINT32_MAX) {
            b->pieces[e->val] = tk_map_key(&b->vocab, e);
            b->piece_lens[e->val] = e->len;
        }
    }
    b->byte_fallback = jbool(m, "byte_fallback", false);
    b->fuse_unk = jbool(m, "fuse_unk", false);
    b->ignore_merges = jbool(m, "ignore_merges", false);
    b->unk_id = -1;
    const char *unk = jstr(m, "unk_token");
    if (unk) {
        b->unk_id = tk_map_get(&b->vocab, unk, strlen(unk));
        if (b->unk_id < 0) return mx_fail(err, "model.unk_token: '%s' is not in the vocabulary", unk);
    }
    const char *pfx = jstr(m, "continuing_subword_prefix"), *sfx = jstr(m, "end_of_word_suffix");
    if (pfx && *pfx) b->prefix = xstrndup(pfx, b->prefix_len = strlen(pfx));
    if (sfx && *sfx) b->suffix = xstrndup(sfx, b->suffix_len = strlen(sfx));

    /* Merges: rank = position in the list. */
    size_t nm = src->mspans.n;
    b->merge_cap = 16;
    while (b->merge_cap < nm * 2) b->merge_cap *= 2;
    b->merges = malloc(b->merge_cap * sizeof *b->merges);
    if (!b->merges) return mx_fail(err, "model.merges: out of memory");
    for (size_t i = 0; i < b->merge_cap; i++) b->merges[i].key = UINT64_MAX;
    tk_buf tmp = {0};
    for (size_t i = 0; i < nm; i++) {
        const char *l = src->mtext.p + src->mspans.p[i].a;
        size_t ll = (size_t)src->mspans.p[i].m;
        const char *r = l + ll;
        size_t rl = src->mspans.p[i].b - src->mspans.p[i].a - ll;
        int32_t li = tk_map_get(&b->vocab, l, ll), ri = tk_map_get(&b->vocab, r, rl);
        /* The merged token drops the right part's continuing-subword prefix. */
        size_t skip = (b->prefix && rl >= b->prefix_len && !memcmp(r, b->prefix, b->prefix_len)) ? b->prefix_len : 0;
        tmp.n = 0;
        tk_buf_put(&tmp, l, ll);
        tk_buf_put(&tmp, r + skip, rl - skip);
        int32_t mi = tk_map_get(&b->vocab, tmp.p ? tmp.p : "", tmp.n);
        if (li < 0 || ri < 0 || mi < 0) {
            int bad_n = li < 0 ? (int)ll : ri < 0 ? (int)rl : (int)tmp.n;
            mx_fail(err, "model.merges[%zu]: token '%.*s' is not in the vocabulary", i, bad_n > 60 ? 60 : bad_n,
                    li < 0 ? l : ri < 0 ? r : tmp.p);
            free(tmp.p);
            return -1;
        }
        uint64_t key = ((uint64_t)(uint32_t)li << 32) | (uint32_t)ri;
        size_t j = (key * 0x9E3779B97F4A7C15ull) >> 20 & (b->merge_cap - 1);
        while (b->merges[j].key != UINT64_MAX && b->merges[j].key != key) j = (j + 1) & (b->merge_cap - 1);
        if (b->merges[j].key == key) continue; /* duplicate: the first (lowest rank) wins */
        b->merges[j] = (tk_merge_ent){key, (uint32_t)i, mi};
        b->n_merges++;
    }
    free(tmp.p);
    return tk_bpe_init_tables(b, err);
}

/* ==== Streaming the big parts of the file ==== */

/* Parses the value at s->p with jansson (small values only). */
static json_t *js_value(tk_jscan *s, mx_error *err) {
    tk_js_ws(s);
    const char *a = s->p;
    if (tk_js_skip(s)) return NULL;
    json_error_t je;
    json_t *v = json_loadb(a, (size_t)(s->p - a), JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!v) mx_fail(err, "invalid JSON value: %s", je.text);
    return v;
}

/* obj[key] = the JSON value at the scanner (key copied first: parsing reuses its buffer). */
static int set_member(json_t *obj, tk_jscan *s, const char *key) {
    char *k = strdup(key);
    if (!k) return mx_fail(s->err, "out of memory");
    json_t *v = js_value(s, s->err);
    if (v) json_object_set_new(obj, k, v);
    free(k);
    return v ? 0 : -1;
}

static int scan_vocab(tk_jscan *s, tk_bpe *b, tk_buf *key) {
    if (tk_js_expect(s, '{')) return -1;
    tk_map_init(&b->vocab, 1 << 15);
    bool first = true;
    int r;
    while ((r = tk_js_next_member(s, &first, key)) == 1) {
        int64_t id;
        if (tk_js_int(s, &id) || vocab_put(b, key->p ? key->p : "", key->n, id, s->err)) return -1;
    }
    return r;
}

static int scan_merges(tk_jscan *s, tk_model_src *src, tk_buf *key) {
    if (tk_js_expect(s, '[')) return -1;
    bool first = true;
    int r;
    for (size_t i = 0; (r = tk_js_next_elem(s, &first)) == 1; i++) {
        if (tk_js_peek(s) == '"') {
            if (tk_js_string(s, key) || add_merge_str(src, key->p ? key->p : "", key->n, i, s->err)) return -1;
            continue;
        }
        size_t a = src->mtext.n;
        if (tk_js_expect(s, '[') || tk_js_string(s, key)) return -1;
        size_t ll = key->n;
        tk_buf_put(&src->mtext, key->p, key->n);
        if (tk_js_expect(s, ',') || tk_js_string(s, key) || tk_js_expect(s, ']')) return -1;
        tk_buf_put(&src->mtext, key->p, key->n);
        tk_spans_push(&src->mspans, a, src->mtext.n, (int)ll);
    }
    return r;
}

/* Top level: model.vocab and model.merges are streamed; every other value goes to jansson. */
static json_t *scan_root(tokenizer *t, tk_jscan *s, tk_model_src *src) {
    json_t *root = json_object(), *model = NULL;
    tk_buf key = {0};
    bool first = true;
    int r;
    if (tk_js_expect(s, '{')) goto fail;
    while ((r = tk_js_next_member(s, &first, &key)) == 1) {
        tk_buf_putc(&key, '\0');
        if (!strcmp(key.p, "model") && tk_js_peek(s) == '{') {
            json_decref(model);
            model = json_object();
            s->p++;
            bool mfirst = true;
            int mr;
            while ((mr = tk_js_next_member(s, &mfirst, &key)) == 1) {
                tk_buf_putc(&key, '\0');
                if (!strcmp(key.p, "vocab") && tk_js_peek(s) == '{' && !src->vocab_done) {
                    if (scan_vocab(s, &t->bpe, &key)) goto fail;
                    src->vocab_done = true;
                } else if (!strcmp(key.p, "merges") && tk_js_peek(s) == '[' && !src->merges_done) {
                    if (scan_merges(s, src, &key)) goto fail;
                    src->merges_done = true;
                } else if (set_member(model, s, key.p)) {
                    goto fail;
                }
            }
            if (mr < 0) goto fail;
            json_object_set(root, "model", model);
        } else if (set_member(root, s, key.p)) {
            goto fail;
        }
    }
    if (r < 0) goto fail;
    tk_js_ws(s);
    if (s->p != s->end) {
        mx_fail(s->err, "trailing data after the top-level object");
        goto fail;
    }
    json_decref(model);
    free(key.p);
    return root;
fail:
    json_decref(model);
    json_decref(root);
    free(key.p);
    return NULL;
}

/* ==== Added tokens ==== */

static int load_added(tokenizer *t, const json_t *arr, mx_error *err) {
    if (!arr || json_is_null(arr)) return 0;
    if (!json_is_array(arr)) return mx_fail(err, "added_tokens: expected an array");
    t->added = calloc(json_array_size(arr) + 1, sizeof *t->added);
    size_t i;
    const json_t *v;
    json_array_foreach(arr, i, v) {
        const json_t *c = json_object_get(v, "content"), *id = json_object_get(v, "id");
        if (!json_is_string(c) || !json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) > (1 << 30))
            return mx_fail(err, "added_tokens[%zu]: expected {\"id\": int, \"content\": string, ...}", i);
        tk_added *a = &t->added[t->n_added++];
        a->len = json_string_length(c);
        a->content = xstrndup(json_string_value(c), a->len);
        a->match = a->content;
        a->match_len = a->len;
        a->id = (int32_t)json_integer_value(id);
        a->special = jbool(v, "special", false);
        a->normalized = jbool(v, "normalized", !a->special);
        a->lstrip = jbool(v, "lstrip", false);
        a->rstrip = jbool(v, "rstrip", false);
        a->single_word = jbool(v, "single_word", false);
        if (a->len == 0) return mx_fail(err, "added_tokens[%zu]: empty content", i);
    }
    return 0;
}

/* Groups the chosen added tokens by first byte, longest first (leftmost-longest matching). */
static int by_byte_then_len(const void *a, const void *b, void *arg) {
    const tokenizer *t = arg;
    const tk_added *x = &t->added[*(const int32_t *)a], *y = &t->added[*(const int32_t *)b];
    unsigned cx = (unsigned char)x->match[0], cy = (unsigned char)y->match[0];
    if (cx != cy) return cx < cy ? -1 : 1;
    if (x->match_len != y->match_len) return x->match_len > y->match_len ? -1 : 1;
    return 0;
}

static void build_matcher(tokenizer *t, tk_matcher *m, bool normalized) {
    m->order = malloc(((size_t)t->n_added + 1) * sizeof *m->order);
    m->n = 0;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == normalized && t->added[i].match_len) m->order[m->n++] = i;
    qsort_r(m->order, (size_t)m->n, sizeof *m->order, by_byte_then_len, t);
    int j = 0;
    for (int c = 0; c <= 256; c++) {
        while (j < m->n && (unsigned char)t->added[m->order[j]].match[0] < c) j++;
        m->first[c] = j;
    }
}

/* ==== Entry ==== */

int tk_load_json(tokenizer *t, const char *text, size_t len, const char *name, mx_error *err) {
    tk_model_src src = {0};
    tk_buf_reserve(&src.mtext, 64); /* never a NULL base, even for empty merge strings */
    tk_jscan s = {text, text, text + len, name, err};
    json_t *root = scan_root(t, &s, &src);
    if (!root) {
        free(src.mtext.p);
        free(src.mspans.p);
        return mx_wrap(err, "%s", name);
    }
    int rc = -1;
    if (!json_object_get(root, "model")) {
        mx_fail(err, "model: missing (expected {\"type\": \"BPE\", \"vocab\": ..., \"merges\": ...})");
        goto out;
    }
    if (load_model(t, json_object_get(root, "model"), &src, err)) goto out;
    if (load_added(t, json_object_get(root, "added_tokens"), err)) goto out;
    if (load_norm(t, json_object_get(root, "normalizer"), err)) goto out;
    if (load_pre(t, json_object_get(root, "pre_tokenizer"), err)) goto out;
    if (load_dec(t, json_object_get(root, "decoder"), err)) goto out;
    /* ids: vocabulary + added tokens */
    t->n_ids = t->bpe.n_pieces;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].id + 1 > t->n_ids) t->n_ids = t->added[i].id + 1;
    t->added_of_id = malloc((size_t)t->n_ids * sizeof *t->added_of_id + 1);
    for (int32_t i = 0; i < t->n_ids; i++) t->added_of_id[i] = -1;
    for (int i = 0; i < t->n_added; i++) t->added_of_id[t->added[i].id] = i;
    if (tk_added_normalize(t, err)) goto out;
    build_matcher(t, &t->match_raw, false);
    build_matcher(t, &t->match_norm, true);
    if (load_post(t, json_object_get(root, "post_processor"), err)) goto out;
    for (size_t i = 0; i < t->post_prefix.n + t->post_suffix.n; i++) {
        int32_t id = i < t->post_prefix.n ? t->post_prefix.p[i] : t->post_suffix.p[i - t->post_prefix.n];
        if (id < 0 || id >= t->n_ids) {
            mx_fail(err, "post_processor: special token id %d is outside the vocabulary", id);
            goto out;
        }
    }
    rc = 0;
out:
    if (rc) mx_wrap(err, "%s", name);
    json_decref(root);
    free(src.mtext.p);
    free(src.mspans.p);
    return rc;
}
