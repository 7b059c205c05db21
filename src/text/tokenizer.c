/* Tokenizer: loading from a file or checkpoint dir, the encode pipeline (added tokens ->
 * normalizer -> pre-tokenizer -> BPE -> post-processor), accessors. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"

/* ==== Loading ==== */

static int read_file(const char *path, char **out, size_t *n, mx_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return mx_fail(err, "%s: cannot open", path);
    tk_buf b = {0};
    char chunk[65536];
    size_t r;
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) tk_buf_put(&b, chunk, r);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b.p);
        return mx_fail(err, "%s: read error", path);
    }
    tk_buf_putc(&b, '\0');
    *out = b.p;
    *n = b.n - 1;
    return 0;
}

int tok_load_json_text(tokenizer **out, const char *json, size_t len, const char *name, mx_error *err) {
    *out = NULL;
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return mx_fail(err, "%s: out of memory", name);
    if (tk_load_json(t, json, len, name, err)) {
        tok_free(t);
        return -1;
    }
    static _Atomic uint64_t next_serial = 1;
    t->serial = next_serial++;
    *out = t;
    return 0;
}

int tok_load_file(tokenizer **out, const char *path, mx_error *err) {
    char *text;
    size_t n;
    *out = NULL;
    if (read_file(path, &text, &n, err)) return -1;
    int rc = tok_load_json_text(out, text, n, path, err);
    free(text);
    return rc;
}

/* bos_token / eos_token are either a string or {"content": string, ...}. */
static char *config_token(const json_t *cfg, const char *key) {
    const json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

static void ensure_edge(tk_ids *v, int32_t id, bool front) {
    if (v->n && v->p[front ? 0 : v->n - 1] == id) return;
    tk_ids_push(v, id);
    if (front) {
        memmove(v->p + 1, v->p, (v->n - 1) * sizeof *v->p);
        v->p[0] = id;
    }
}

int tok_load_dir(tokenizer **out, const char *dir, mx_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (tok_load_file(out, path, err)) return -1;
    tokenizer *t = *out;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return 0; /* optional */
    fclose(f);
    json_error_t je;
    json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je); /* model_max_length can be 1e30 */
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        tok_free(t);
        *out = NULL;
        return mx_fail(err, "%s: invalid JSON at line %d: %s", path, je.line, je.text);
    }
    t->bos = config_token(cfg, "bos_token");
    t->eos = config_token(cfg, "eos_token");
    /* add_bos_token / add_eos_token: true makes sure the post-processor adds them (what
     * transformers' Llama-style tokenizers do); false or absent keeps tokenizer.json as is. */
    int32_t bos = t->bos ? tok_piece_to_id(t, t->bos) : -1, eos = t->eos ? tok_piece_to_id(t, t->eos) : -1;
    if (json_is_true(json_object_get(cfg, "add_bos_token")) && bos >= 0) ensure_edge(&t->post_prefix, bos, true);
    if (json_is_true(json_object_get(cfg, "add_eos_token")) && eos >= 0) ensure_edge(&t->post_suffix, eos, false);
    json_decref(cfg);
    return 0;
}

void tok_free(tokenizer *t) {
    if (!t) return;
    tk_bpe_free(&t->bpe);
    for (int i = 0; i < t->n_norms; i++) tk_norm_free(&t->norms[i]);
    for (int i = 0; i < t->n_pres; i++) tk_pre_free(&t->pres[i]);
    for (int i = 0; i < t->n_decs; i++) tk_dec_free(&t->decs[i]);
    for (int i = 0; i < t->n_added; i++) {
        if (t->added[i].match != t->added[i].content) free(t->added[i].match);
        free(t->added[i].content);
    }
    free(t->norms);
    free(t->pres);
    free(t->decs);
    free(t->added);
    free(t->match_raw.order);
    free(t->match_norm.order);
    free(t->added_of_id);
    free(t->post_prefix.p);
    free(t->post_suffix.p);
    free(t->bos);
    free(t->eos);
    free(t);
}

/* ==== Added tokens (tokenizers' AddedVocabulary::find_matches) ==== */


static int32_t char_before(const char *s, size_t i) {
    if (i == 0) return -1;
    size_t k = i - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    int32_t cp;
    tk_utf8_next(s + k, i - k, &cp);
    return cp;
}

/* Spans of s: m = 0 for text, m = 1 + index into t->added for an added token. */
static void find_added(const tokenizer *t, const tk_matcher *mt, const char *s, size_t n, bool special_as_text,
                       tk_spans *out) {
    out->n = 0;
    size_t start_off = 0, pos = 0;
    while (mt->n && pos < n) {
        /* leftmost position where some token matches; longest token there */
        size_t i = pos;
        int hit = -1;
        for (; i < n; i++) {
            unsigned char c0 = (unsigned char)s[i];
            for (int j = mt->first[c0]; j < mt->first[c0 + 1]; j++) {
                const tk_added *a = &t->added[mt->order[j]];
                if (a->match_len <= n - i && !memcmp(s + i, a->match, a->match_len)) {
                    hit = mt->order[j];
                    break;
                }
            }
            if (hit >= 0) break;
        }
        if (hit < 0) break;
        const tk_added *a = &t->added[hit];
        size_t start = i, stop = i + a->match_len;
        pos = stop;
        if (special_as_text && a->special) continue; /* stays text, as in tokenizers */
        if (a->single_word) {
            int32_t before = char_before(s, start), after = -1;
            if (stop < n) tk_utf8_next(s + stop, n - stop, &after);
            if ((before >= 0 && tk_is_rust_word(before)) || (after >= 0 && tk_is_rust_word(after))) continue;
        }
        if (a->lstrip) {
            size_t k = start;
            int32_t cp;
            while (k > 0 && (cp = char_before(s, k)) >= 0 && tk_is_whitespace(cp)) {
                char tmp[4];
                k -= (size_t)tk_utf8_put(tmp, cp);
            }
            start = k > start_off ? k : start_off;
        }
        if (a->rstrip) {
            while (stop < n) {
                int32_t cp;
                int l = tk_utf8_next(s + stop, n - stop, &cp);
                if (!tk_is_whitespace(cp)) break;
                stop += (size_t)l;
            }
        }
        /* the next match is searched from this one's own end, not from the end rstrip extended
         * it to: tokenizers finds all matches first, so " world world" with an rstrip " world"
         * gives the token twice (the second one's span then starts inside the first's) */
        if (start_off < start) tk_spans_push(out, start_off, start, 0);
        tk_spans_push(out, start, stop, 1 + hit);
        start_off = stop;
    }
    if (start_off < n) tk_spans_push(out, start_off, n, 0);
}

/* A normalized added token is looked for in normalized text as its own content normalized
 * (tokenizers' AddedVocabulary::refresh_added_tokens): with a Lowercase normalizer "Hello"
 * matches "HELLO", with Replace("a", "X") "ab" matches "ab" (both "Xb"). */
int tk_added_normalize(tokenizer *t, mx_error *err) {
    if (!t->n_norms) return 0;
    tk_ctx c;
    memset(&c, 0, sizeof c);
    c.t = t;
    c.err = err;
    int rc = 0;
    for (int i = 0; i < t->n_added && rc == 0; i++) {
        tk_added *a = &t->added[i];
        const char *s;
        size_t n;
        if (!a->normalized) continue;
        if ((rc = tk_normalize_str(&c, a->content, a->len, &s, &n))) break;
        a->match = malloc(n + 1);
        if (!a->match) {
            a->match = a->content;
            rc = mx_fail(err, "added tokens: out of memory");
            break;
        }
        memcpy(a->match, s, n);
        a->match[n] = '\0';
        a->match_len = n;
    }
    tk_ctx_free(&c);
    return rc;
}

/* ==== Encode ==== */

static void ctx_init(tk_ctx *c, const tokenizer *t, tk_ids *out, mx_error *err) {
    memset(c, 0, sizeof *c);
    c->t = t;
    c->out = out;
    c->err = err;
}

void tk_ctx_free(tk_ctx *c) {
    for (int i = 0; i < TK_MAX_STAGES; i++) {
        free(c->stage_buf[i].p);
        free(c->stage_buf2[i].p);
        free(c->stage_spans[i].p);
    }
    for (int i = 0; i <= TK_MAX_STAGES; i++) tk_rx_state_free(&c->rx[i]);
    free(c->norm_a.p);
    free(c->norm_b.p);
    free(c->added_raw.p);
    free(c->added_norm.p);
    free(c->syms);
    free(c->heap);
    free(c->word.p);
}

static void push_added(tk_ctx *c, int idx) {
    const tk_added *a = &c->t->added[idx];
    if (!c->collect) {
        tk_ids_push(c->out, a->id);
        return;
    }
    if (c->collect->n) tk_buf_putc(c->collect, '|');
    tk_buf_put(c->collect, a->content, a->len);
}

/* One piece of text that is not an added token: normalize, split out normalized added
 * tokens, pre-tokenize, BPE. */
static int encode_piece(tk_ctx *c, const char *s, size_t n, bool at_start) {
    const tokenizer *t = c->t;
    const char *ns;
    size_t nn;
    if (tk_normalize_str(c, s, n, &ns, &nn)) return -1;
    if (!t->match_norm.n) return tk_pretokenize(c, ns, nn, at_start);
    find_added(t, &t->match_norm, ns, nn, c->special_as_text, &c->added_norm);
    for (size_t i = 0; i < c->added_norm.n; i++) {
        tk_span p = c->added_norm.p[i];
        if (p.m) push_added(c, p.m - 1);
        else if (tk_pretokenize(c, ns + p.a, p.b - p.a, at_start && p.a == 0)) return -1;
    }
    return 0;
}

static int encode_impl(const tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                       size_t *n_ids, tk_buf *collect, mx_error *err) {
    bool add_special = flags & TOK_ENC_ADD_SPECIAL;
    *ids = NULL;
    *n_ids = 0;
    tk_ids out = {0};
    tk_buf clean = {0};
    /* Arbitrary bytes are accepted: invalid UTF-8 becomes U+FFFD (as a Rust String would). */
    if (!tk_utf8_valid(text, len)) {
        tk_utf8_lossy(&clean, text, len);
        text = clean.p;
        len = clean.n;
    }
    tk_ctx c;
    ctx_init(&c, t, &out, err);
    c.collect = collect;
    c.special_as_text = flags & TOK_ENC_SPECIAL_AS_TEXT;
    if (add_special)
        for (size_t i = 0; i < t->post_prefix.n; i++) tk_ids_push(&out, t->post_prefix.p[i]);
    int rc = 0;
    find_added(t, &t->match_raw, text, len, c.special_as_text, &c.added_raw);
    for (size_t i = 0; i < c.added_raw.n && rc == 0; i++) {
        tk_span p = c.added_raw.p[i];
        if (p.m) push_added(&c, p.m - 1);
        else rc = encode_piece(&c, text + p.a, p.b - p.a, p.a == 0);
    }
    if (add_special)
        for (size_t i = 0; i < t->post_suffix.n; i++) tk_ids_push(&out, t->post_suffix.p[i]);
    tk_ctx_free(&c);
    free(clean.p);
    if (rc) {
        free(out.p);
        return -1;
    }
    if (!out.p) tk_ids_push(&out, 0), out.n = 0; /* never hand back NULL on success */
    *ids = out.p;
    *n_ids = out.n;
    return 0;
}

int tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids,
               size_t *n_ids, mx_error *err) {
    return encode_impl(t, text, len, add_special ? TOK_ENC_ADD_SPECIAL : 0, ids, n_ids, NULL, err);
}

int tok_encode_ex(const tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                  size_t *n_ids, mx_error *err) {
    return encode_impl(t, text, len, flags, ids, n_ids, NULL, err);
}

int tk_debug_pieces(const tokenizer *t, const char *text, size_t len, char **out, mx_error *err) {
    tk_buf b = {0};
    int32_t *ids;
    size_t n;
    int rc = encode_impl(t, text, len, 0, &ids, &n, &b, err);
    if (rc == 0) free(ids);
    tk_buf_putc(&b, '\0');
    *out = b.p;
    return rc;
}

/* ==== Accessors ==== */

int tok_vocab_size(const tokenizer *t) { return t->n_ids; }

const char *tok_id_to_piece(const tokenizer *t, int32_t id) {
    size_t n;
    return tok_id_to_piece_n(t, id, &n);
}

const char *tok_id_to_piece_n(const tokenizer *t, int32_t id, size_t *len) {
    *len = 0;
    if (id < 0 || id >= t->n_ids) return NULL;
    if (t->added_of_id[id] >= 0) { /* a normalized token decodes as its normalized content, as in tokenizers */
        const tk_added *a = &t->added[t->added_of_id[id]];
        *len = a->match_len;
        return a->match;
    }
    if (id >= t->bpe.n_pieces || !t->bpe.pieces[id]) return NULL;
    *len = t->bpe.piece_lens[id];
    return t->bpe.pieces[id];
}

int32_t tok_piece_to_id(const tokenizer *t, const char *piece) {
    size_t n = strlen(piece);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && !memcmp(t->added[i].content, piece, n)) return t->added[i].id;
    return tk_map_get(&t->bpe.vocab, piece, n);
}

bool tk_skip_special(const tokenizer *t, int32_t id) {
    /* tokenizers skips by the decoded string, which for a normalized token is its normalized
     * content: one the normalizers change is not recognised as special and stays */
    if (!tok_is_special(t, id)) return false;
    const tk_added *a = &t->added[t->added_of_id[id]];
    return a->match_len == a->len && !memcmp(a->match, a->content, a->len);
}

bool tok_is_special(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids && t->added_of_id[id] >= 0 && t->added[t->added_of_id[id]].special;
}

const char *tok_bos_token(const tokenizer *t) { return t->bos; }
const char *tok_eos_token(const tokenizer *t) { return t->eos; }
