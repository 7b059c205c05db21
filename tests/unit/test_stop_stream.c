/* Stop strings while streaming, on a real tokenizer and model (models/wordnet-chat-16m: its
 * own trained BPE tokenizer.json): the engine generates greedily, each token goes through
 * the streaming detokenizer (tok_stream, what `generate` and the server stream through), and
 * the token callback ends the sequence when the stream reports a stop. Stop strings are cut
 * out of the model's own greedy text so that they split across token pieces: one made of the
 * end of one piece and the start of the next, one spanning three pieces (a whole piece in the
 * middle). For each: finish `stop_string`, the stream's text is the whole text up to the
 * stop's first occurrence (nothing of the stop or after it leaks, even in pieces emitted
 * before the stop was complete), generation stopped at the token that completed the stop,
 * and the stream names the stop that matched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "text/tokenizer.h"

#define N_GEN 32

typedef struct srun {
    tok_stream *ts;
    char text[8192];
    size_t len;
    int n_tok;
    int32_t toks[N_GEN];
    size_t end[N_GEN]; /* bytes of text final after each token (no stops set) */
    engine_finish why;
} srun;

static int on_tok(void *u, int64_t id, int32_t t, float lp) {
    (void)id, (void)lp;
    srun *r = u;
    const char *out;
    size_t n;
    const int stop = tok_stream_push(r->ts, t, &out, &n);
    assert_true(r->len + n < sizeof r->text);
    memcpy(r->text + r->len, out, n);
    r->len += n;
    r->text[r->len] = '\0';
    if (r->n_tok < N_GEN) r->end[r->n_tok] = r->len, r->toks[r->n_tok] = t;
    r->n_tok++;
    return stop;
}

static void on_fin(void *u, int64_t id, engine_finish why, const engine_seq_stats *st) {
    (void)id, (void)st;
    ((srun *)u)->why = why;
}

static void gen(model *m, const tokenizer *t, const int32_t *prompt, int np, const char *const *stops,
                int n_stops, srun *r) {
    memset(r, 0, sizeof *r);
    r->ts = tok_stream_new(t, true);
    tok_stream_set_stops(r->ts, stops, n_stops);
    engine_params p;
    engine_params_default(&p, model_spec_of(m));
    p.ctx_size = 128;
    engine *e = NULL;
    mx_error err;
    assert_int_equal(engine_new(&e, m, &p, &err), 0);
    engine_request q = {.prompt = prompt, .n_prompt = np, .max_tokens = N_GEN, .ignore_eos = true,
                        .on_token = on_tok, .on_finish = on_fin, .user = r};
    sampling_params_default(&q.sampling);
    assert_true(engine_submit(e, &q, &err) >= 0);
    assert_int_equal(engine_run(e, &err), 0);
    engine_free(e);
    if (r->why != ENGINE_FINISH_STOP) { /* the rest held back for a possible stop */
        const char *out;
        size_t n;
        tok_stream_flush(r->ts, &out, &n);
        memcpy(r->text + r->len, out, n);
        r->len += n;
        r->text[r->len] = '\0';
    }
}

/* The text of token k alone: bytes [end[k-1], end[k]) of a run without stops (each token
 * of this ASCII-heavy text becomes final when pushed). */
static size_t piece_start(const srun *r, int k) { return k ? r->end[k - 1] : 0; }

static void check_stop(model *m, const tokenizer *t, const int32_t *prompt, int np, const srun *base,
                       const char *stop, int want_tokens) {
    const char *stops[] = {"never-in-this-text-zq", stop};
    srun r;
    gen(m, t, prompt, np, stops, 2, &r);
    const char *at = strstr(base->text, stop);
    assert_non_null(at);
    const size_t cut = (size_t)(at - base->text);
    fprintf(stderr, "stop \"%s\": %d tokens, text \"%s\"\n", stop, r.n_tok, r.text);
    assert_int_equal(r.why, ENGINE_FINISH_STOP);
    assert_int_equal(r.n_tok, want_tokens);                 /* stopped at the completing token */
    assert_int_equal(r.len, cut);                           /* everything before the stop */
    assert_memory_equal(r.text, base->text, cut);
    assert_non_null(tok_stream_stop_word(r.ts));
    assert_string_equal(tok_stream_stop_word(r.ts), stop);
    tok_stream_free(r.ts);
}

static bool printable(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f) return false;
    return true;
}

static void test_stop_across_pieces(void **st) {
    (void)st;
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    if (!src) fail_msg("MLXCEL_SOURCE_DIR unset: run through ctest");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/wordnet-chat-16m", src);
    model *m = NULL;
    tokenizer *t = NULL;
    mx_error err;
    if (model_load(&m, dir, backend_cpu(), &err)) fail_msg("%s: %s", dir, err.msg);
    if (tok_load_dir(&t, dir, &err)) fail_msg("%s: %s", dir, err.msg);
    const char *prompt_text = "The word \"harbor\" means";
    int32_t *prompt;
    size_t np;
    assert_int_equal(tok_encode(t, prompt_text, strlen(prompt_text), true, &prompt, &np, &err), 0);
    srun base;
    gen(m, t, prompt, (int)np, NULL, 0, &base);
    fprintf(stderr, "greedy text: \"%s\"\n", base.text);
    assert_int_equal(base.n_tok, N_GEN);
    /* two-piece stop: the last 2 bytes of piece k and the first 2 of piece k + 1; three-piece:
     * the last byte of piece k, all of piece k + 1, the first byte of piece k + 2. The first
     * k (from 3) whose stop occurs first right there and is printable. */
    int done2 = 0, done3 = 0;
    for (int k = 3; k + 2 < N_GEN && !(done2 && done3); k++) {
        const size_t a0 = piece_start(&base, k), a1 = base.end[k], b1 = base.end[k + 1],
                     c1 = base.end[k + 2];
        char stop[64];
        if (!done2 && a1 - a0 >= 2 && b1 - a1 >= 2) {
            memcpy(stop, base.text + a1 - 2, 4);
            stop[4] = '\0';
            const char *first = strstr(base.text, stop);
            if (printable(stop, 4) && first == base.text + a1 - 2) {
                check_stop(m, t, prompt, (int)np, &base, stop, k + 2);
                done2 = 1;
                continue;
            }
        }
        if (!done3 && a1 - a0 >= 1 && b1 - a1 >= 1 && c1 - b1 >= 1 && b1 - a1 + 2 < sizeof stop) {
            const size_t n = b1 - a1 + 2;
            memcpy(stop, base.text + a1 - 1, n);
            stop[n] = '\0';
            const char *first = strstr(base.text, stop);
            if (printable(stop, n) && first == base.text + a1 - 1) {
                check_stop(m, t, prompt, (int)np, &base, stop, k + 3);
                done3 = 1;
            }
        }
    }
    assert_true(done2 && done3); /* both kinds were found and checked */
    tok_stream_free(base.ts);
    free(prompt);
    tok_free(t);
    model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_stop_across_pieces)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
