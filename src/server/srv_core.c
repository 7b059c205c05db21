/* The engine thread: the only thread that touches the engine. HTTP threads enqueue jobs and
 * flag cancellations; this thread submits, cancels, polls client sockets for hang-ups (so a
 * disconnected client's sequence is cancelled, and its KV blocks freed, before the next step)
 * and steps the engine while it has work.
 *
 * The engine thread is the device's critical path: between two forward passes the device
 * idles. So engine callbacks only stage tokens and finishes; after each step the batch goes to
 * the output thread (one lock, one wake-up), which detokenizes, matches stop strings, appends
 * to the job and wakes its connection thread while the next step runs. Waking 256 connection
 * threads from the engine thread cost ~145 us per token on a loaded 2-core machine (the woken
 * reader contended for the job lock its waker held). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "engine/engine.h"
#include "runtime/runtime.h"
#include "server/srv_api.h"
#include "server/srv_internal.h"
#include "server/srv_tools.h"

const char *srv_finish_name(srv_finish f) {
    switch (f) {
    case SRV_FINISH_EOS: case SRV_FINISH_STOP: return "stop";
    case SRV_FINISH_LENGTH: return "length";
    case SRV_FINISH_CANCELLED: return "cancelled";
    case SRV_FINISH_ERROR: return "error";
    default: return "none";
    }
}

/* A hang-up seen by the poll includes a client that only half-closed (shutdown(SHUT_WR) after
 * its request): POLLRDHUP cannot tell it from a closed socket, and cpp-httplib (llama-server)
 * also takes a readable socket with recv() == 0 for a closed one. Such a client still reads, so
 * its answer names the real cause: 499 (nginx's "client closed request"; a retry made the same
 * way fails the same way), not 503 "shutting down". */
const char *srv_cancel_reason(const srv_job *j, int *status) {
    switch (j->cancel_by) {
    case SRV_CANCEL_BY_CLIENT:
        *status = 499;
        return "the request was cancelled: the client disconnected (it closed or half-closed its "
               "connection, which reads as a hang-up)";
    case SRV_CANCEL_BY_SHUTDOWN:
        *status = 503;
        return "the request was cancelled (the server is shutting down)";
    default:
        *status = 503;
        return "the request was cancelled by the server (out of memory)";
    }
}

/* The first cause wins: a client that hangs up during a shutdown was cancelled by the shutdown
 * if that came first. */
static void set_cancel_by(srv_job *j, srv_cancel_by why) {
    pthread_mutex_lock(&j->mu);
    if (j->cancel_by == SRV_CANCEL_BY_SERVER) j->cancel_by = why;
    pthread_mutex_unlock(&j->mu);
}

/* ==== Queue gauges ====
 * Running = held by the engine after its last step, waiting = the rest of the outstanding
 * requests. Both counts change on two threads (the engine thread steps, the output thread
 * lowers the outstanding count when it delivers a finish), so the gauges are recomputed, under
 * the server lock, by whichever changed last: when idle they read 0. */
static void publish_queue_locked(srv_server *s) {
    const int out = s->n_outstanding;
    const int running = s->last.n_running < out ? s->last.n_running : out;
    srv_metrics_set(s->metrics, SM_REQUESTS_PROCESSING, NULL, running);
    srv_metrics_set(s->metrics, SM_REQUESTS_RUNNING, NULL, running);
    srv_metrics_set(s->metrics, SM_REQUESTS_DEFERRED, NULL, out - running);
    srv_metrics_set(s->metrics, SM_QUEUE_DEPTH, NULL, out - running);
}

#define SRV_POLL_MAX 1024 /* jobs examined per poll of the clients' sockets */

/* Marks an outstanding job whose client left (server lock held): it no longer counts as
 * waiting, and the engine thread cancels it at its next step. */
static void mark_gone_locked(srv_server *s, srv_job *j) {
    if (!j->outstanding || j->gone) return;
    j->gone = true;
    s->n_gone++;
}

/* Before a full-looking queue refuses a request (server lock held): the sockets of the queued
 * and running jobs are polled once (no wait) for clients that hung up since the engine's last
 * step looked. An engine step can take seconds (the first one captures graphs; a long prefill);
 * a client that abandons its request and asks again must not find its own abandoned request
 * holding the place. Hang-up as process_cancels reads it (a half-close counts). */
static void reap_gone_locked(srv_server *s) {
    struct pollfd pf[SRV_POLL_MAX];
    srv_job *pj[SRV_POLL_MAX];
    int np = 0;
    for (int pass = 0; pass < 2; pass++)
        for (srv_job *j = pass ? s->active : s->inbox; j && np < SRV_POLL_MAX; j = j->next) {
            if (!j->outstanding || j->gone) continue;
            pthread_mutex_lock(&j->mu);
            const int fd = j->done || j->cancel_req ? -1 : j->fd;
            pthread_mutex_unlock(&j->mu);
            if (fd < 0) continue;
            pf[np] = (struct pollfd){.fd = fd, .events = POLLRDHUP};
            pj[np++] = j;
        }
    if (!np || poll(pf, (nfds_t)np, 0) <= 0) return;
    for (int i = 0; i < np; i++) {
        if (!(pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) continue;
        pthread_mutex_lock(&pj[i]->mu);
        pj[i]->cancel_req = true;
        if (pj[i]->cancel_by == SRV_CANCEL_BY_SERVER) pj[i]->cancel_by = SRV_CANCEL_BY_CLIENT;
        pthread_mutex_unlock(&pj[i]->mu);
        mark_gone_locked(s, pj[i]);
    }
}

/* Requests waiting for a place, as admission counts them: outstanding requests whose client is
 * still there, less those the engine ran at its last step. A client that hangs up and asks
 * again (a third of a soak's clients do) would otherwise find its own abandoned request still
 * queued until the engine's next step cancels it: at a burst (the first step, graphs being
 * captured) 256 clients on 256 slots saw "the queue is full". */
static int waiting_locked(const srv_server *s) {
    const int live = s->n_outstanding - s->n_gone;
    const int running = s->last.n_running < live ? s->last.n_running : live;
    return live - running;
}

int srv_core_retry_after(srv_server *s) {
    pthread_mutex_lock(&s->mu);
    const int waiting = waiting_locked(s);
    const double avg = s->job_seconds_avg;
    pthread_mutex_unlock(&s->mu);
    const int slots = s->cfg.max_batch_size > 0 ? s->cfg.max_batch_size : 1;
    const double t = avg * (double)(waiting + slots) / (double)slots; /* the queue drains a batch per request time */
    return t < 1 ? 1 : t > 60 ? 60 : (int)(t + 0.999);
}

/* ==== Jobs ==== */
srv_job *srv_job_new(srv_server *s) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->srv = s;
    j->refs = 1;
    j->fd = -1;
    j->t_arrival = mx_now();
    j->created = (long)time(NULL);
    return j;
}

static void group_release(srv_group *g) {
    pthread_mutex_lock(&g->mu);
    const int left = --g->refs;
    pthread_mutex_unlock(&g->mu);
    if (left) return;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

int srv_job_group(srv_job *const *jobs, int n) {
    srv_group *g = calloc(1, sizeof *g);
    if (!g) return -1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->refs = n;
    for (int i = 0; i < n; i++) jobs[i]->grp = g;
    return 0;
}

/* After a delivery to j (its lock released): the group's readers wake. */
static void group_bump(srv_job *j) {
    srv_group *g = j->grp;
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->seq++;
    pthread_mutex_unlock(&g->mu);
    pthread_cond_broadcast(&g->cv);
}

static uint64_t lone_progress(const srv_job *j) { return (uint64_t)j->n_toks * 2 + (j->done ? 1 : 0); }

uint64_t srv_job_progress(srv_job *j) {
    pthread_mutex_t *mu = j->grp ? &j->grp->mu : &j->mu;
    pthread_mutex_lock(mu);
    uint64_t v = j->grp ? j->grp->seq : lone_progress(j);
    pthread_mutex_unlock(mu);
    return v;
}

void srv_job_wait(srv_job *j, uint64_t seq, double timeout_s) {
    pthread_mutex_t *mu = j->grp ? &j->grp->mu : &j->mu;
    pthread_cond_t *cv = j->grp ? &j->grp->cv : &j->cv;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + (long)(timeout_s * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_mutex_lock(mu);
    if ((j->grp ? j->grp->seq : lone_progress(j)) == seq) pthread_cond_timedwait(cv, mu, &ts);
    pthread_mutex_unlock(mu);
}

void srv_job_release_kids(srv_job *j) {
    for (int i = 0; i < j->n_kids; i++) {
        srv_job_detach(j->kids[i]);
        srv_job_release(j->kids[i]);
    }
    free(j->kids);
    j->kids = NULL;
    j->n_kids = 0;
}

static void job_free(srv_job *j) {
    srv_backend *be = j->srv->be;
    srv_job_release_kids(j); /* left only if the connection never completed */
    if (j->lead) srv_job_release(j->lead);
    if (j->grp) group_release(j->grp);
    if (j->ts) be->text_ops->stream_free(j->ts);
    srv_cp_free(j->cp);
    srv_api_job_free(j->api);
    srv_request_free(&j->req);
    free(j->prompt);
    free(j->embd);
    free(j->text);
    free(j->stop_word);
    free(j->toks);
    free(j->tok_end);
    free(j->ttft);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void srv_job_log_ttft(srv_job *j, double t_out) {
    pthread_mutex_lock(&j->mu);
    engine_seq_stats *st = j->ttft;
    j->ttft = NULL;
    pthread_mutex_unlock(&j->mu);
    if (!st) return; /* off, not yet, or logged already */
    /* the server's own queue counts as queue: the engine thread submits what was enqueued */
    const double prep = j->t_enqueued - j->t_arrival;
    st->t_submit = j->t_enqueued;
    char line[1024];
    runtime_ttft_line(line, sizeof line, j->id, prep, st, t_out);
    LOG_INFO("%s", line);
    free(st);
}

void srv_job_release(srv_job *j) {
    srv_server *s = j->srv;
    pthread_mutex_lock(&s->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&s->mu);
    if (left == 0) job_free(j);
}

void srv_job_detach(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->fd = -1;
    bool running = !j->done;
    if (running) {
        j->cancel_req = true;
        if (j->cancel_by == SRV_CANCEL_BY_SERVER) j->cancel_by = SRV_CANCEL_BY_CLIENT;
    }
    pthread_mutex_unlock(&j->mu);
    if (running) {
        srv_server *s = j->srv;
        pthread_mutex_lock(&s->mu);
        mark_gone_locked(s, j); /* under s->mu: a finish cannot slip between */
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

/* ==== Delivery (output thread) ====
 * What used to run inside the engine's callbacks: detokenize (stop strings), append, wake the
 * connection thread, metrics, and at the finish the active-list removal and the engine's
 * reference. One thread replays every job's events in order, so a job's finish follows its
 * tokens. The wake-up is issued after the job lock is released: a woken reader never blocks
 * on a lock its waker still holds. */
static void out_append(srv_job *j, const char *t, size_t n) {
    if (!n) return;
    srv_buf_append(&j->text, &j->text_len, &j->text_cap, t, n);
}

static void deliver_token(srv_job *j, const srv_token *tok) {
    srv_server *s = j->srv;
    pthread_mutex_lock(&j->mu);
    if (tok->ttft) { /* the engine's statistics at the first token: logged when its bytes are out */
        free(j->ttft);
        j->ttft = tok->ttft;
    }
    if (j->stop_hit || j->done) { pthread_mutex_unlock(&j->mu); return; }
    if (j->n_toks == j->cap_toks) {
        int nc = j->cap_toks ? j->cap_toks * 2 : 64;
        srv_token *nt = realloc(j->toks, (size_t)nc * sizeof *nt);
        size_t *ne = nt ? realloc(j->tok_end, (size_t)nc * sizeof *ne) : NULL;
        if (nt) j->toks = nt;
        if (!ne) { j->cancel_req = true; pthread_mutex_unlock(&j->mu); return; }
        j->tok_end = ne;
        j->cap_toks = nc;
    }
    const char *t = NULL;
    size_t n = 0;
    int stopped = s->be->text_ops->stream_push(j->ts, tok->id, &t, &n);
    out_append(j, t, n);
    j->toks[j->n_toks] = *tok;
    j->tok_end[j->n_toks] = j->text_len;
    j->n_toks++;
    const bool first = j->n_toks == 1;
    if (first) j->t_first = mx_now();
    if (stopped) {
        const char *w = s->be->text_ops->stream_stop_word(j->ts);
        j->stop_hit = true;
        j->stop_word = strdup(w ? w : ""); /* NULL on exhaustion: reported as "" */
        /* acted on before the engine's next step (one more token may be generated and dropped) */
        j->cancel_req = true;
    }
    pthread_mutex_unlock(&j->mu);
    pthread_cond_broadcast(&j->cv); /* the engine's reference keeps j alive until its finish */
    group_bump(j);
    if (first) srv_metrics_observe(s->metrics, SM_TTFT_SECONDS, j->t_first - j->t_arrival);
}

static void deliver_finish(srv_job *j, srv_finish why, int n_cached) {
    srv_server *s = j->srv;
    pthread_mutex_lock(&j->mu);
    if (j->stop_hit) why = SRV_FINISH_STOP;
    if (j->ts && !j->stop_hit && why != SRV_FINISH_CANCELLED && why != SRV_FINISH_ERROR) {
        const char *t = NULL;
        size_t n = 0;
        s->be->text_ops->stream_flush(j->ts, &t, &n);
        out_append(j, t, n);
        if (j->n_toks) j->tok_end[j->n_toks - 1] = j->text_len;
    }
    j->finish = why;
    j->n_cached = n_cached;
    j->done = true;
    j->t_done = mx_now();
    const double dt = j->t_done - j->t_first;
    const int n_toks = j->n_toks;
    pthread_mutex_unlock(&j->mu);
    pthread_cond_broadcast(&j->cv);
    group_bump(j);
    if (n_toks > 1 && dt > 0) srv_metrics_observe(s->metrics, SM_DECODE_TOKENS_PER_SECOND, (n_toks - 1) / dt);
    srv_metrics_add(s->metrics, SM_REQUESTS_FINISHED_TOTAL, srv_finish_name(why), 1);

    /* Off the active list; the engine's reference goes. */
    pthread_mutex_lock(&s->mu);
    for (srv_job **pp = &s->active; *pp; pp = &(*pp)->next)
        if (*pp == j) { *pp = j->next; break; }
    s->n_outstanding--;
    j->outstanding = false;
    if (j->gone) {
        s->n_gone--;
        j->gone = false;
    }
    const double took = j->t_done - j->t_arrival;
    s->job_seconds_avg = s->job_seconds_avg > 0 ? 0.9 * s->job_seconds_avg + 0.1 * took : took;
    publish_queue_locked(s);
    int left = --j->refs;
    pthread_mutex_unlock(&s->mu);
    if (left == 0) job_free(j);
}

static void *output_main(void *arg) {
    srv_server *s = arg;
    srv_event *work = NULL;
    int cap_work = 0;
    for (;;) {
        pthread_mutex_lock(&s->omu);
        while (!s->n_outq && !s->ofin_head && !s->out_stop) pthread_cond_wait(&s->ocv, &s->omu);
        if (!s->n_outq && !s->ofin_head) { /* stopping and drained */
            pthread_mutex_unlock(&s->omu);
            break;
        }
        srv_event *q = s->outq; /* take the batch; hand back the drained buffer */
        const int n = s->n_outq, cap = s->cap_outq;
        s->outq = work;
        s->cap_outq = cap_work;
        s->n_outq = 0;
        work = q;
        cap_work = cap;
        srv_job *fin = s->ofin_head;
        s->ofin_head = NULL;
        s->ofin_tail = &s->ofin_head;
        pthread_mutex_unlock(&s->omu);
        for (int i = 0; i < n; i++) deliver_token(work[i].job, &work[i].tok);
        while (fin) {
            srv_job *next = fin->fin_next; /* read first: the finish may free the job */
            deliver_finish(fin, fin->fin_why, fin->fin_cached);
            fin = next;
        }
    }
    free(work);
    return NULL;
}

/* ==== Engine callbacks (engine thread): stage only ==== */
static void on_token(void *user, const srv_token *tok) {
    srv_job *j = user;
    srv_server *s = j->srv;
    if (s->n_stage == s->cap_stage) {
        const int cap = s->cap_stage ? 2 * s->cap_stage : 256;
        srv_event *st = realloc(s->stage, (size_t)cap * sizeof *st);
        if (!st) { /* out of memory: the token is lost, so the request ends (cancelled) */
            free(tok->ttft);
            pthread_mutex_lock(&j->mu);
            j->cancel_req = true;
            pthread_mutex_unlock(&j->mu);
            return;
        }
        s->stage = st;
        s->cap_stage = cap;
    }
    s->stage[s->n_stage++] = (srv_event){.job = j, .tok = *tok};
}

/* Exactly once per job (the engine's contract, and finish_staged for jobs never submitted). */
static void on_finish(void *user, srv_finish why, int n_cached) {
    srv_job *j = user;
    srv_server *s = j->srv;
    j->finish_staged = true;
    j->fin_why = why;
    j->fin_cached = n_cached;
    j->fin_next = NULL;
    *s->fin_tail = j;
    s->fin_tail = &j->fin_next;
}

/* An embedding's vector(s): copied into the job before its finish is staged (the finish's
 * hand-over to the output thread, then the job lock, publish them to the connection thread). */
static void on_embed(void *user, const float *embd, int n_vec, int dim) {
    srv_job *j = user;
    const size_t n = (size_t)n_vec * (size_t)dim;
    float *v = malloc(n * sizeof *v);
    if (!v) { /* the request then fails (no vector): answered 500 by srv_embed.c */
        LOG_WARN("server: out of memory for an embedding of %d x %d values", n_vec, dim);
        return;
    }
    memcpy(v, embd, n * sizeof *v);
    free(j->embd);
    j->embd = v;
    j->n_embd_vec = n_vec;
    j->embd_dim = dim;
}

/* Hands this step's tokens and finishes to the output thread: one lock and one wake-up per
 * step on the engine thread. Tokens and finishes go together or not at all (a finish must not
 * overtake its tokens); when the queue cannot grow, they wait for the next call. */
static void hand_over(srv_server *s) {
    if (!s->n_stage && !s->fin_head) return;
    pthread_mutex_lock(&s->omu);
    if (s->n_outq == 0) { /* swap buffers: no copy */
        srv_event *t = s->outq;
        const int c = s->cap_outq;
        s->outq = s->stage;
        s->cap_outq = s->cap_stage;
        s->stage = t;
        s->cap_stage = c;
        s->n_outq = s->n_stage;
    } else {
        if (s->n_outq + s->n_stage > s->cap_outq) {
            const int cap = 2 * (s->n_outq + s->n_stage);
            srv_event *q = realloc(s->outq, (size_t)cap * sizeof *q);
            if (!q) {
                pthread_mutex_unlock(&s->omu);
                return;
            }
            s->outq = q;
            s->cap_outq = cap;
        }
        memcpy(s->outq + s->n_outq, s->stage, (size_t)s->n_stage * sizeof *s->stage);
        s->n_outq += s->n_stage;
    }
    s->n_stage = 0;
    if (s->fin_head) {
        *s->ofin_tail = s->fin_head;
        s->ofin_tail = s->fin_tail;
        s->fin_head = NULL;
        s->fin_tail = &s->fin_head;
    }
    pthread_cond_signal(&s->ocv);
    pthread_mutex_unlock(&s->omu);
}

/* ==== Enqueue (HTTP threads) ==== */
int srv_core_enqueue(srv_server *s, srv_job *const *jobs, int n, int *status, mx_error *err) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping || s->engine_failed) {
        pthread_mutex_unlock(&s->mu);
        *status = 503;
        return mx_fail(err, "the server is shutting down or its engine failed");
    }
    int waiting = waiting_locked(s);
    if (s->cfg.max_queue_depth > 0 && waiting + n > s->cfg.max_queue_depth) {
        reap_gone_locked(s);
        waiting = waiting_locked(s);
    }
    if (s->cfg.max_queue_depth > 0 && waiting + n > s->cfg.max_queue_depth) {
        pthread_mutex_unlock(&s->mu);
        *status = 503;
        if (n > 1)
            return mx_fail(err, "the request queue cannot take this request's %d sequences (%d waiting, "
                           "--max-queue-depth %d); retry later", n, waiting, s->cfg.max_queue_depth);
        return mx_fail(err, "the request queue is full (%d waiting, --max-queue-depth %d); retry later",
                       waiting, s->cfg.max_queue_depth);
    }
    const double now = mx_now();
    for (int i = 0; i < n; i++) {
        srv_job *j = jobs[i];
        j->t_enqueued = now;
        j->refs++;
        s->n_outstanding++;
        j->outstanding = true;
        j->next = NULL;
        *s->inbox_tail = j;
        s->inbox_tail = &j->next;
    }
    publish_queue_locked(s);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void srv_core_snapshot(srv_server *s, srv_engine_stats *st, int *outstanding) {
    pthread_mutex_lock(&s->mu);
    *st = s->last;
    *outstanding = s->n_outstanding;
    pthread_mutex_unlock(&s->mu);
}

/* ==== Engine thread ==== */
static void submit_job(srv_server *s, srv_job *j) {
    const srv_engine_ops *eo = s->be->eng_ops;
    if (j->embed) { /* no text: the vector(s) come through on_embed */
        srv_gen g = {.prompt = j->prompt, .n_prompt = j->n_prompt, .on_finish = on_finish, .user = j,
                     .embed = true, .pooling = j->pooling, .on_embed = on_embed};
        mx_error err = {{0}};
        pthread_mutex_lock(&s->mu);
        j->next = s->active;
        s->active = j;
        pthread_mutex_unlock(&s->mu);
        if (eo->submit(s->be->eng, &g, &j->eng_id, &err)) {
            LOG_WARN("server: embedding submit failed: %s", err.msg);
            on_finish(j, SRV_FINISH_ERROR, 0);
            return;
        }
        j->submitted = true;
        return;
    }
    j->ts = s->be->text_ops->stream_new(s->be->text, (const char *const *)j->req.stops, j->req.n_stops);
    if (j->ts && s->be->text_ops->stream_keep && srv_chat_parses(j->req.chat)) {
        /* the parser must see the markers even where they are special tokens */
        const char *keep[16];
        s->be->text_ops->stream_keep(j->ts, keep, srv_chat_keep_pieces(j->req.chat, keep, 16));
    }
    srv_gen g = {
        .prompt = j->prompt, .n_prompt = j->n_prompt, .max_tokens = j->max_tokens,
        .sampling = j->req.sampling, .on_token = on_token, .on_finish = on_finish, .user = j,
        .grammar = j->req.grammar, .grammar_vocab = j->req.grammar_vocab,
        .grammar_trigger = j->req.grammar_trigger[0] ? j->req.grammar_trigger : NULL,
    };
    mx_error err = {{0}};
    pthread_mutex_lock(&s->mu);
    j->next = s->active;
    s->active = j;
    pthread_mutex_unlock(&s->mu);
    if (!j->ts || eo->submit(s->be->eng, &g, &j->eng_id, &err)) {
        LOG_WARN("server: submit failed: %s", j->ts ? err.msg : "out of memory");
        on_finish(j, SRV_FINISH_ERROR, 0);
        return;
    }
    j->submitted = true;
}

/* Cancels jobs whose client is gone or that hit a stop string. Polling the sockets with
 * POLLRDHUP catches a closed connection even while no byte is being written to it. */
static void process_cancels(srv_server *s) {
    uint64_t ids[SRV_POLL_MAX];
    int n = 0;
    struct pollfd pf[SRV_POLL_MAX];
    srv_job *pj[SRV_POLL_MAX];
    int np = 0;
    pthread_mutex_lock(&s->mu);
    for (srv_job *j = s->active; j; j = j->next) {
        if (!j->submitted || j->cancel_sent || j->finish_staged) continue;
        pthread_mutex_lock(&j->mu);
        if (j->cancel_req && n < SRV_POLL_MAX) {
            ids[n++] = j->eng_id;
            j->cancel_sent = true;
        } else if (j->fd >= 0 && np < SRV_POLL_MAX) {
            pf[np] = (struct pollfd){.fd = j->fd, .events = POLLRDHUP};
            pj[np++] = j;
        }
        pthread_mutex_unlock(&j->mu);
    }
    if (np && poll(pf, (nfds_t)np, 0) > 0) {
        for (int i = 0; i < np; i++)
            if ((pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) && n < SRV_POLL_MAX) {
                ids[n++] = pj[i]->eng_id;
                pj[i]->cancel_sent = true;
                set_cancel_by(pj[i], SRV_CANCEL_BY_CLIENT);
                mark_gone_locked(s, pj[i]);
            }
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++) s->be->eng_ops->cancel(s->be->eng, ids[i]);
}

/* A choice waiting for its lead: ready once the lead has a token or is done (a lead that
 * failed or was cancelled releases its choices to run on their own). */
static bool lead_ready(srv_job *j) {
    srv_job *l = j->lead;
    pthread_mutex_lock(&l->mu);
    const bool r = l->n_toks > 0 || l->done;
    pthread_mutex_unlock(&l->mu);
    return r;
}

static bool cancel_requested(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    const bool c = j->cancel_req;
    pthread_mutex_unlock(&j->mu);
    return c;
}

/* Finishes a job the engine never saw (shutdown, or its client gone while it was held). */
static void finish_unsubmitted(srv_server *s, srv_job *j, srv_cancel_by why) {
    pthread_mutex_lock(&s->mu);
    j->next = s->active;
    s->active = j;
    pthread_mutex_unlock(&s->mu);
    set_cancel_by(j, why);
    on_finish(j, SRV_FINISH_CANCELLED, 0);
}

/* Held choices: submitted once their lead is ready, finished if their client went away. */
static void release_held(srv_server *s, bool stopping) {
    srv_job **pp = &s->held;
    while (*pp) {
        srv_job *j = *pp;
        if (!stopping && !cancel_requested(j) && !lead_ready(j)) {
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        if (stopping) finish_unsubmitted(s, j, SRV_CANCEL_BY_SHUTDOWN);
        else if (cancel_requested(j)) finish_unsubmitted(s, j, SRV_CANCEL_BY_CLIENT);
        else submit_job(s, j);
    }
}

static void *engine_main(void *arg) {
    srv_server *s = arg;
    const srv_engine_ops *eo = s->be->eng_ops;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stopping && !s->inbox && !eo->has_work(s->be->eng)) {
            /* Idle: a short timed wait still notices cancel flags set without a signal (and,
             * within a millisecond, a held choice whose lead's token the output thread just
             * delivered). */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += (s->held ? 1 : 100) * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
            if (s->held) break; /* look at the held choices each millisecond */
        }
        const double t_iter = mx_now(); /* work to do from here (or stopping) */
        bool stopping = s->stopping;
        srv_job *in = s->inbox;
        s->inbox = NULL;
        s->inbox_tail = &s->inbox;
        pthread_mutex_unlock(&s->mu);

        while (in) {
            srv_job *next = in->next;
            if (stopping) {
                finish_unsubmitted(s, in, SRV_CANCEL_BY_SHUTDOWN);
            } else if (in->lead) {
                in->next = s->held;
                s->held = in;
            } else {
                submit_job(s, in);
            }
            in = next;
        }
        release_held(s, stopping);
        if (stopping) {
            /* Cancel everything still running (each cancel stages its finish; the callbacks
             * take no server lock, so the list can be walked under it), hand the finishes
             * over, leave: srv_core_stop then lets the output thread drain. */
            pthread_mutex_lock(&s->mu);
            for (srv_job *j = s->active; j; j = j->next)
                if (j->submitted && !j->finish_staged) {
                    set_cancel_by(j, SRV_CANCEL_BY_SHUTDOWN);
                    eo->cancel(s->be->eng, j->eng_id);
                }
            pthread_mutex_unlock(&s->mu);
            hand_over(s);
            break;
        }
        process_cancels(s);
        bool stepped = false;
        if (eo->has_work(s->be->eng)) {
            mx_error err = {{0}};
            stepped = true;
            if (eo->step(s->be->eng, &err)) {
                LOG_ERR("server: engine step failed: %s", err.msg);
            }
        }
        hand_over(s); /* the step's tokens go out while the next step runs */
        srv_engine_stats st;
        eo->stats(s->be->eng, &st);
        srv_metrics_from_engine(s->metrics, &st);
        pthread_mutex_lock(&s->mu);
        s->last = st;
        publish_queue_locked(s);
        pthread_mutex_unlock(&s->mu);
        if (st.last_batch_rows > 0) srv_metrics_observe(s->metrics, SM_STEP_ROWS, st.last_batch_rows);
        /* Busy time minus forward time = host time between forward passes (the device idles
         * then): what HTTP, tokenization and scheduling cost the engine. */
        if (stepped) srv_metrics_add(s->metrics, SM_ENGINE_BUSY_SECONDS_TOTAL, NULL, mx_now() - t_iter);
    }
    return NULL;
}

static void stop_output(srv_server *s) {
    if (!s->out_started) return;
    pthread_mutex_lock(&s->omu);
    s->out_stop = true;
    pthread_cond_signal(&s->ocv);
    pthread_mutex_unlock(&s->omu);
    pthread_join(s->out_thread, NULL); /* it drains every event handed over first */
    s->out_started = false;
    free(s->stage);
    free(s->outq);
    s->stage = s->outq = NULL;
    s->cap_stage = s->cap_outq = 0;
}

int srv_core_start(srv_server *s, mx_error *err) {
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->omu, NULL);
    pthread_cond_init(&s->ocv, NULL);
    s->inbox = NULL;
    s->inbox_tail = &s->inbox;
    s->fin_head = s->ofin_head = NULL;
    s->fin_tail = &s->fin_head;
    s->ofin_tail = &s->ofin_head;
    s->be->eng_ops->stats(s->be->eng, &s->last);
    srv_metrics_from_engine(s->metrics, &s->last);
    srv_metrics_set(s->metrics, SM_QUEUE_DEPTH_LIMIT, NULL, s->cfg.max_queue_depth);
    int rc = pthread_create(&s->out_thread, NULL, output_main, s);
    if (rc) return mx_fail(err, "server: cannot start the output thread: %s", strerror(rc));
    s->out_started = true;
    rc = pthread_create(&s->thread, NULL, engine_main, s);
    if (rc) {
        stop_output(s);
        return mx_fail(err, "server: cannot start the engine thread: %s", strerror(rc));
    }
    s->thread_started = true;
    return 0;
}

void srv_core_stop(srv_server *s) {
    if (!s->thread_started) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->thread_started = false;
    stop_output(s);
}
