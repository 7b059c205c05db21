/* Engine: the token masks of constrained sequences (grammar/grammar.h), computed beside the
 * forward on a worker thread or after it. See engine.h and engine_internal.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "engine/engine_internal.h"

/* ==== Lazy grammars ====
 * The output is free text until the trigger (the start of every sentence of the grammar, e.g.
 * "<tool_call>") first appears in it; then a matcher starts at the trigger, is fed the output
 * from there (the rest of the token that completed the trigger too) and constrains every
 * later token. The trigger is found in the bytes the vocabulary gives each token (kept special
 * markers included), over token boundaries: the last trigger_len - 1 bytes are kept. */
typedef struct seq_lazy {
    grammar *g;
    grammar_vocab *v;
    char *trigger;
    int trigger_len;
    char *buf;     /* [trigger_len - 1 + the longest token] the tail, then the new token */
    size_t tail, cap;
} seq_lazy;

int engine_lazy_new(seq *s, const engine_request *r, mx_error *err) {
    if (r->grammar_trigger_len <= 0) return mx_fail(err, "a lazy grammar needs a non-empty trigger");
    seq_lazy *l = calloc(1, sizeof *l);
    if (!l || !(l->trigger = malloc((size_t)r->grammar_trigger_len))) {
        free(l);
        return mx_fail(err, "out of memory");
    }
    memcpy(l->trigger, r->grammar_trigger, (size_t)r->grammar_trigger_len);
    l->trigger_len = r->grammar_trigger_len;
    l->g = grammar_retain(r->grammar);
    l->v = grammar_vocab_retain(r->grammar_vocab);
    s->lazy = l;
    return 0;
}

void engine_lazy_free(seq *s) {
    seq_lazy *l = s->lazy;
    if (!l) return;
    grammar_release(l->g);
    grammar_vocab_release(l->v);
    free(l->trigger);
    free(l->buf);
    free(l);
    s->lazy = NULL;
}

void engine_lazy_feed(seq *s, int32_t t) {
    seq_lazy *l = s->lazy;
    size_t n = 0;
    const char *b = grammar_vocab_bytes(l->v, t, &n);
    if (!n) return;
    if (l->tail + n > l->cap) {
        const size_t cap = (l->tail + n) * 2;
        char *nb = realloc(l->buf, cap);
        if (!nb) return; /* out of memory: this token is not searched */
        l->buf = nb, l->cap = cap;
    }
    memcpy(l->buf + l->tail, b, n);
    const size_t len = l->tail + n;
    const char *hit = memmem(l->buf, len, l->trigger, (size_t)l->trigger_len);
    if (!hit) { /* keep what could still begin the trigger */
        const size_t keep = len < (size_t)l->trigger_len - 1 ? len : (size_t)l->trigger_len - 1;
        memmove(l->buf, l->buf + len - keep, keep);
        l->tail = keep;
        return;
    }
    mx_error gerr = {{0}};
    grammar_matcher *gm = grammar_matcher_new(l->g, l->v, &gerr);
    if (gm && !grammar_matcher_accept_bytes(gm, hit, (size_t)(l->buf + len - hit), &gerr)) {
        s->gm = gm;
    } else {
        /* the token that completed the trigger went on with what the grammar refuses: nothing
         * already sampled can be taken back, so the rest of the output stays free */
        LOG_WARN("engine: sequence %lld: the output after its grammar's trigger does not fit the grammar (%s); "
                 "left unconstrained", (long long)s->id, gm ? gerr.msg : "no matcher");
        grammar_matcher_free(gm);
    }
    engine_lazy_free(s);
}

/* ==== Constrained rows ====
 * The token masks of this step's constrained sequences (cons[k], sampled at logits row
 * cons_row[k]) depend only on their matchers, i.e. on the tokens of earlier steps. With the
 * overlap worker (MLXCEL_GRAMMAR_OVERLAP; device backends by default, whose forward leaves the
 * host idle) they are computed on a worker thread while the forward runs; otherwise after it,
 * in parallel over the rows (each row has its own matcher; rows of one grammar share its tables
 * under its lock). Either way they are applied after the forward: to the row at once, or in
 * sample_and_check after on_logits, which must see the raw row. */
void engine_cons_collect(engine *e, seq **ss, int n) {
    e->n_cons = 0;
    for (int j = 0, o = 0; j < n; j++) {
        const bool sampled = ss[j]->kv.n_tokens + ss[j]->rows == ss[j]->n_tokens;
        if (sampled && ss[j]->gm) e->cons_row[e->n_cons] = o, e->cons[e->n_cons++] = ss[j];
        if (sampled) o++;
    }
}

static void cons_mask(engine *e, int k) {
    seq *s = e->cons[k];
    mx_error gerr;
    s->mask = grammar_matcher_mask(s->gm, e->spec->vocab_size, &gerr);
    if (!s->mask) LOG_ERR("engine: sequence %lld: %s", (long long)s->id, gerr.msg);
}

static void *gworker_main(void *arg) {
    engine *e = arg;
    pthread_mutex_lock(&e->gw_mu);
    while (1) {
        while (!e->gw_work && !e->gw_stop) pthread_cond_wait(&e->gw_cv, &e->gw_mu);
        if (e->gw_stop) break;
        pthread_mutex_unlock(&e->gw_mu);
        const double t0 = mx_now();
        for (int k = 0; k < e->n_cons; k++) cons_mask(e, k);
        const double dt = mx_now() - t0;
        pthread_mutex_lock(&e->gw_mu);
        e->gw_busy = dt;
        e->gw_work = false;
        pthread_cond_broadcast(&e->gw_cv);
    }
    pthread_mutex_unlock(&e->gw_mu);
    return NULL;
}

/* Hands this step's constrained rows to the worker (started on first use); false when it
 * cannot run (the step then computes them itself). */
bool engine_gworker_start(engine *e) {
    if (!e->gw_started) {
        if (pthread_create(&e->gw_thread, NULL, gworker_main, e)) {
            LOG_WARN("engine: no mask worker thread; token masks are computed after each forward");
            e->overlap = false;
            return false;
        }
        e->gw_started = true;
    }
    pthread_mutex_lock(&e->gw_mu);
    e->gw_work = true;
    pthread_cond_broadcast(&e->gw_cv);
    pthread_mutex_unlock(&e->gw_mu);
    return true;
}

void engine_gworker_wait(engine *e) {
    pthread_mutex_lock(&e->gw_mu);
    while (e->gw_work) pthread_cond_wait(&e->gw_cv, &e->gw_mu);
    pthread_mutex_unlock(&e->gw_mu);
}

void engine_gworker_stop(engine *e) {
    if (!e->gw_started) return;
    pthread_mutex_lock(&e->gw_mu);
    e->gw_stop = true;
    pthread_cond_broadcast(&e->gw_cv);
    pthread_mutex_unlock(&e->gw_mu);
    pthread_join(e->gw_thread, NULL);
    e->gw_started = false;
}

/* After the forward: the masks (waiting for the worker, or computing them now) applied. */
void engine_cons_finish(engine *e, bool on_worker) {
    const double t0 = mx_now();
    const int V = e->spec->vocab_size, nc = e->n_cons;
    if (on_worker) engine_gworker_wait(e);
#pragma omp parallel for schedule(dynamic, 1) if (nc > 1)
    for (int k = 0; k < nc; k++) {
        seq *s = e->cons[k];
        if (!on_worker) cons_mask(e, k);
        if (s->mask && !s->on_logits) grammar_mask_apply(s->mask, e->logits + (size_t)e->cons_row[k] * (size_t)V, V);
    }
    const double waited = mx_now() - t0;
    e->stats.grammar_masks += (uint64_t)nc;
    e->stats.grammar_wait_seconds += waited;
    e->stats.grammar_seconds += on_worker ? e->gw_busy : waited;
}

