/* The engine thread: the only thread that touches the engine. HTTP threads enqueue jobs and
 * flag cancellations; this thread submits, cancels, polls client sockets for hang-ups (so a
 * disconnected client's sequence is cancelled, and its KV blocks freed, before the next step)
 * and steps the engine while it has work. Engine callbacks append tokens to the job and wake
 * the connection thread waiting on it. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "server/srv_internal.h"

const char *srv_finish_name(srv_finish f) {
    switch (f) {
    case SRV_FINISH_EOS: case SRV_FINISH_STOP: return "stop";
    case SRV_FINISH_LENGTH: return "length";
    case SRV_FINISH_CANCELLED: return "cancelled";
    case SRV_FINISH_ERROR: return "error";
    default: return "none";
    }
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

static void job_free(srv_job *j) {
    srv_backend *be = j->srv->be;
    if (j->ts) be->text_ops->stream_free(j->ts);
    srv_request_free(&j->req);
    free(j->prompt);
    free(j->text);
    free(j->toks);
    free(j->tok_end);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
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
    if (running) j->cancel_req = true;
    pthread_mutex_unlock(&j->mu);
    if (running) {
        pthread_mutex_lock(&j->srv->mu);
        pthread_cond_signal(&j->srv->cv);
        pthread_mutex_unlock(&j->srv->mu);
    }
}

/* ==== Engine callbacks (engine thread) ==== */
static void out_append(srv_job *j, const char *t, size_t n) {
    if (!n) return;
    srv_buf_append(&j->text, &j->text_len, &j->text_cap, t, n);
}

static void on_token(void *user, const srv_token *tok) {
    srv_job *j = user;
    srv_server *s = j->srv;
    pthread_mutex_lock(&j->mu);
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
    if (j->n_toks == 1) {
        j->t_first = mx_now();
        srv_metrics_observe(s->metrics, SM_TTFT_SECONDS, j->t_first - j->t_arrival);
    }
    if (stopped) {
        j->stop_hit = true;
        j->cancel_req = true; /* acted on after this step: the engine is mid-step now */
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void on_finish(void *user, srv_finish why, int n_cached) {
    srv_job *j = user;
    srv_server *s = j->srv;
    pthread_mutex_lock(&j->mu);
    if (j->stop_hit) why = SRV_FINISH_STOP;
    if (!j->stop_hit && why != SRV_FINISH_CANCELLED && why != SRV_FINISH_ERROR) {
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
    double dt = j->t_done - j->t_first;
    if (j->n_toks > 1 && dt > 0)
        srv_metrics_observe(s->metrics, SM_DECODE_TOKENS_PER_SECOND, (j->n_toks - 1) / dt);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    srv_metrics_add(s->metrics, SM_REQUESTS_FINISHED_TOTAL, srv_finish_name(why), 1);

    /* Off the active list; the engine's reference goes. */
    pthread_mutex_lock(&s->mu);
    for (srv_job **pp = &s->active; *pp; pp = &(*pp)->next)
        if (*pp == j) { *pp = j->next; break; }
    s->n_outstanding--;
    int left = --j->refs;
    pthread_mutex_unlock(&s->mu);
    if (left == 0) job_free(j);
}

/* ==== Enqueue (HTTP threads) ==== */
int srv_core_enqueue(srv_server *s, srv_job *j, int *status, mx_error *err) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping || s->engine_failed) {
        pthread_mutex_unlock(&s->mu);
        *status = 503;
        return mx_fail(err, "the server is shutting down or its engine failed");
    }
    int running = s->last.n_running < s->n_outstanding ? s->last.n_running : s->n_outstanding;
    int waiting = s->n_outstanding - running;
    if (s->cfg.max_queue_depth > 0 && waiting >= s->cfg.max_queue_depth) {
        pthread_mutex_unlock(&s->mu);
        *status = 503;
        return mx_fail(err, "the request queue is full (%d waiting, --max-queue-depth %d); retry later",
                       waiting, s->cfg.max_queue_depth);
    }
    j->refs++;
    s->n_outstanding++;
    j->next = NULL;
    *s->inbox_tail = j;
    s->inbox_tail = &j->next;
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
    j->ts = s->be->text_ops->stream_new(s->be->text, (const char *const *)j->req.stops, j->req.n_stops);
    srv_gen g = {
        .prompt = j->prompt, .n_prompt = j->n_prompt, .max_tokens = j->max_tokens,
        .sampling = j->req.sampling, .on_token = on_token, .on_finish = on_finish, .user = j,
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
    uint64_t ids[256];
    int n = 0;
    struct pollfd pf[256];
    srv_job *pj[256];
    int np = 0;
    pthread_mutex_lock(&s->mu);
    for (srv_job *j = s->active; j; j = j->next) {
        if (!j->submitted || j->cancel_sent) continue;
        pthread_mutex_lock(&j->mu);
        if (j->cancel_req && n < 256) {
            ids[n++] = j->eng_id;
            j->cancel_sent = true;
        } else if (j->fd >= 0 && np < 256) {
            pf[np] = (struct pollfd){.fd = j->fd, .events = POLLRDHUP};
            pj[np++] = j;
        }
        pthread_mutex_unlock(&j->mu);
    }
    if (np && poll(pf, (nfds_t)np, 0) > 0) {
        for (int i = 0; i < np; i++)
            if ((pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) && n < 256) {
                ids[n++] = pj[i]->eng_id;
                pj[i]->cancel_sent = true;
            }
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++) s->be->eng_ops->cancel(s->be->eng, ids[i]);
}

static void *engine_main(void *arg) {
    srv_server *s = arg;
    const srv_engine_ops *eo = s->be->eng_ops;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stopping && !s->inbox && !eo->has_work(s->be->eng)) {
            /* Idle: a short timed wait still notices cancel flags set without a signal. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
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
                pthread_mutex_lock(&s->mu);
                in->next = s->active;
                s->active = in;
                pthread_mutex_unlock(&s->mu);
                on_finish(in, SRV_FINISH_CANCELLED, 0);
            } else {
                submit_job(s, in);
            }
            in = next;
        }
        if (stopping) {
            /* Cancel everything still running, then leave (bounded: each cancel finishes one). */
            for (int guard = 0; guard < 1000000; guard++) {
                pthread_mutex_lock(&s->mu);
                srv_job *j = s->active;
                uint64_t id = j ? j->eng_id : 0;
                bool sub = j && j->submitted;
                pthread_mutex_unlock(&s->mu);
                if (!j) break;
                if (sub) eo->cancel(s->be->eng, id);
                else on_finish(j, SRV_FINISH_CANCELLED, 0);
            }
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
        srv_engine_stats st;
        eo->stats(s->be->eng, &st);
        srv_metrics_from_engine(s->metrics, &st);
        pthread_mutex_lock(&s->mu);
        s->last = st;
        int out = s->n_outstanding;
        pthread_mutex_unlock(&s->mu);
        if (st.last_batch_rows > 0) srv_metrics_observe(s->metrics, SM_STEP_ROWS, st.last_batch_rows);
        int running = st.n_running < out ? st.n_running : out;
        srv_metrics_set(s->metrics, SM_REQUESTS_PROCESSING, NULL, running);
        srv_metrics_set(s->metrics, SM_REQUESTS_RUNNING, NULL, running);
        srv_metrics_set(s->metrics, SM_REQUESTS_DEFERRED, NULL, out - running);
        srv_metrics_set(s->metrics, SM_QUEUE_DEPTH, NULL, out - running);
        /* Busy time minus forward time = host time between forward passes (the device idles
         * then): what HTTP, tokenization and scheduling cost the engine. */
        if (stepped) srv_metrics_add(s->metrics, SM_ENGINE_BUSY_SECONDS_TOTAL, NULL, mx_now() - t_iter);
    }
    return NULL;
}

int srv_core_start(srv_server *s, mx_error *err) {
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->inbox = NULL;
    s->inbox_tail = &s->inbox;
    s->be->eng_ops->stats(s->be->eng, &s->last);
    srv_metrics_from_engine(s->metrics, &s->last);
    srv_metrics_set(s->metrics, SM_QUEUE_DEPTH_LIMIT, NULL, s->cfg.max_queue_depth);
    int rc = pthread_create(&s->thread, NULL, engine_main, s);
    if (rc) return mx_fail(err, "server: cannot start the engine thread: %s", strerror(rc));
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
}
