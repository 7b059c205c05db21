/* Engine: the token masks of constrained sequences (grammar/grammar.h), computed beside the
 * forward on a worker thread or after it. See engine.h and engine_internal.h. */
#include <pthread.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/log.h"
#include "engine/engine_internal.h"

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

