/* Server internals shared by srv_core.c (engine thread, jobs), srv_http.c (libmicrohttpd glue,
 * routes) and srv_response.c (JSON shapes). Not a public API. */
#ifndef MLXCEL_SERVER_SRV_INTERNAL_H
#define MLXCEL_SERVER_SRV_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/srv_config.h"
#include "server/srv_engine.h"
#include "server/srv_metrics.h"
#include "server/srv_request.h"
#include "server/srv_toolparse.h"

typedef struct srv_server srv_server;

/* The jobs of one response with several choices (OpenAI `n`, or a list of prompts) share one
 * of these for wake-ups: every delivery to any of them bumps `seq` under `mu` and broadcasts
 * `cv`, so a reader that took `seq` before looking at the jobs never sleeps through progress.
 * Each job holds a reference (refs under mu). */
typedef struct srv_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t seq;
    int refs;
} srv_group;

/* Who cancelled a job, for the message its client gets (the first cause set wins). */
typedef enum srv_cancel_by {
    SRV_CANCEL_BY_SERVER = 0, /* allocation failure while delivering its tokens */
    SRV_CANCEL_BY_CLIENT,     /* hang-up or half-close seen by the poll, or the HTTP side gone */
    SRV_CANCEL_BY_SHUTDOWN,   /* the server is stopping */
} srv_cancel_by;

/* ==== Job: one generation request, shared by its HTTP connection and the engine thread ====
 * Lifetime: two references, the HTTP side's and the engine side's (taken at enqueue, dropped
 * after on_finish). Output fields are guarded by `mu`; `cv` signals progress. */
typedef struct srv_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                 /* guarded by the server lock */
    srv_server *srv;
    struct srv_job *next;     /* inbox / active list link (server lock) */

    srv_request req;
    int32_t *prompt;          /* [n_prompt] */
    int n_prompt;
    int max_tokens;           /* resolved: >= 1, <= n_ctx - n_prompt (0: n_predict 0, never enqueued) */
    char id[48];              /* "chatcmpl-..." / "cmpl-..." */
    long created;             /* unix seconds */
    /* Several choices: the connection's job is choice 0 and holds the HTTP-side references
     * of the others (kids, released when the connection completes); all share grp. */
    int choice;               /* the response's choices[].index */
    bool counts_prompt;       /* usage counts this job's prompt (the first choice of a prompt) */
    struct srv_job **kids;    /* [n_kids]: choices 1.. (choice 0 only) */
    int n_kids;
    srv_group *grp;           /* NULL for a lone job */
    /* The first choice of this job's prompt (a reference), for choices after it: the engine
     * thread submits this job only once the lead has a token, so the lead's prompt blocks are
     * in the prefix cache and this choice computes only what they do not cover. NULL: none. */
    struct srv_job *lead;
    /* An embedding (srv_embed.c) instead of a generation: no text stream, no token; the engine
     * thread stores the pooled vector(s) before its finish is staged. */
    bool embed;
    srv_pooling pooling;
    float *embd;              /* [n_embd_vec, embd_dim], malloc'd (engine thread, then read-only) */
    int n_embd_vec, embd_dim;

    /* engine side (engine thread only) */
    uint64_t eng_id;
    bool submitted;
    bool cancel_sent;
    bool finish_staged;       /* its finish is staged: never finish it again */
    srv_finish fin_why;       /* the staged finish (no allocation: the job links itself) */
    int fin_cached;
    struct srv_job *fin_next;
    srv_text_stream *ts;      /* created by the engine thread, then used by the output thread */
    srv_cp *cp;               /* chat stream: the reply parser (connection thread, under mu) */
    struct srv_api_job *api;  /* /v1/responses, /v1/messages: their state and answers (srv_api.h); else NULL */

    /* output (mu) */
    char *text;               /* all final text so far */
    size_t text_len, text_cap;
    srv_token *toks;          /* [n_toks] generated tokens (with logprobs when requested) */
    size_t *tok_end;          /* [n_toks] text_len after each token */
    int n_toks, cap_toks;
    bool stop_hit;            /* a stop string matched: later tokens are dropped */
    char *stop_word;          /* that stop string (llama-server's stopping_word), else NULL */
    bool done;
    srv_finish finish;
    int n_cached;
    double t_arrival, t_first, t_done;
    double t_enqueued;        /* handed to the engine thread (srv_core_enqueue) */
    struct engine_seq_stats *ttft; /* MLXCEL_PROFILE_TTFT: the first token's engine statistics
                                      (mu), logged once the first bytes are out */

    /* control (mu) */
    bool cancel_req;          /* HTTP side gone or stop string: engine thread cancels */
    srv_cancel_by cancel_by;  /* why it was cancelled, when it was */
    int fd;                   /* client socket for hang-up polling; -1 when detached */

    /* admission (the server's mu) */
    bool outstanding;         /* counted in n_outstanding: enqueued, not finished */
    bool gone;                /* counted in n_gone: its client left while it was outstanding */
} srv_job;

/* A token from an engine callback, replayed by the output thread in order (srv_core.c). */
typedef struct srv_event {
    srv_job *job;
    srv_token tok;
} srv_event;

struct srv_server {
    srv_config cfg;
    srv_backend *be;
    srv_metrics *metrics;
    double t_start;
    struct srv_conns *conns;  /* connection admission (srv_conn.c) */
    bool keyless_loopback;    /* Host / Origin policy (srv_guard.c) */

    pthread_mutex_t mu;       /* inbox, active, counts, refs, last stats */
    pthread_cond_t cv;        /* wakes the engine thread */
    srv_job *inbox;           /* new jobs, FIFO via tail */
    srv_job *held;            /* engine thread only: choices waiting for their lead's first token */
    srv_job **inbox_tail;
    srv_job *active;          /* submitted to the engine, not finished */
    int n_outstanding;        /* enqueued and not finished */
    int n_gone;               /* of those, jobs whose client left: cancelled at the engine's next
                                 step, so they hold no place in the queue's admission count */
    int n_http_jobs;          /* connections holding a job, until their answer is sent */
    double job_seconds_avg;   /* moving average of a request's arrival-to-finish time (Retry-After) */
    srv_engine_stats last;    /* engine stats after the last step */
    bool stopping;
    bool engine_failed;
    pthread_t thread;
    bool thread_started;

    /* Engine thread -> output thread. Engine callbacks only stage events (no lock, no wake-up);
     * after each step the batch is handed over, and the output thread does the per-token work
     * (detokenize, stop strings, append, wake the connection) while the next step runs. */
    srv_event *stage;         /* engine thread only: tokens of this step */
    int n_stage, cap_stage;
    srv_job *fin_head, **fin_tail; /* engine thread only: finishes of this step */
    pthread_mutex_t omu;
    pthread_cond_t ocv;
    srv_event *outq;          /* handed over, not yet delivered (omu) */
    int n_outq, cap_outq;
    srv_job *ofin_head, **ofin_tail; /* (omu) delivered after the tokens handed over with them */
    bool out_stop;            /* omu: drain, then exit */
    pthread_t out_thread;
    bool out_started;
    uint64_t id_counter;
    struct srv_chat_caps *chat_caps; /* what the chat template can do (srv_tools.c), set at start */
    struct srv_resp_store *resp_store; /* /v1/responses kept for previous_response_id (srv_resp_store.c) */
};

/* ==== Core (srv_core.c) ==== */
int srv_core_start(srv_server *s, mx_error *err);
void srv_core_stop(srv_server *s);
/* Queues jobs[0..n) together (a response's choices), or none: -1 with *status = 503 when the
 * queue cannot take all of them (err filled). */
int srv_core_enqueue(srv_server *s, srv_job *const *jobs, int n, int *status, mx_error *err);
srv_job *srv_job_new(srv_server *s);
void srv_job_release(srv_job *job);
/* MLXCEL_PROFILE_TTFT: logs where the job's time to first token went (runtime_ttft_line) once
 * its first bytes are out at t_out; a no-op without the statistics, and after the first call. */
void srv_job_log_ttft(srv_job *job, double t_out);
/* HTTP side is gone (response finished or client aborted): cancel if still running. */
void srv_job_detach(srv_job *job);
/* Puts jobs[0..n) in one wake-up group (n >= 2). 0, or -1 out of memory. */
int srv_job_group(srv_job *const *jobs, int n);
/* The group's (or the lone job's) wake-up count, and a wait of at most timeout_s for it to
 * move past `seq`; a lone job counts its tokens and finish (job->mu is taken inside). */
uint64_t srv_job_progress(srv_job *job);
void srv_job_wait(srv_job *job, uint64_t seq, double timeout_s);
/* Choice 0's other choices: detached and their HTTP-side references released. */
void srv_job_release_kids(srv_job *job);
void srv_core_snapshot(srv_server *s, srv_engine_stats *st, int *outstanding);
/* Seconds a client refused with 503 (queue full) should wait: the time the waiting requests
 * take to get a slot at the recent pace, 1 to 60. */
int srv_core_retry_after(srv_server *s);
const char *srv_finish_name(srv_finish f); /* OpenAI finish_reason */
/* A cancelled job's message for its client and the HTTP status to answer (job->mu held or
 * the job done). */
const char *srv_cancel_reason(const srv_job *job, int *status);

/* ==== Responses (srv_response.c) ==== */
char *srv_resp_error(int status, const char *message, const char *param);
/* s made one line of valid UTF-8 in place (control characters and broken sequences -> '?'). */
void srv_one_line_utf8(char *s);
const char *srv_error_type(int status);
/* Whole responses (non-stream), from finished jobs (a response's choices in order). */
char *srv_resp_final(srv_server *s, srv_job *const *jobs, int n);
/* Streaming: appends SSE events for tokens [from, to) of job to *buf (malloc'd, grows). */
int srv_sse_tokens(srv_server *s, srv_job *job, int from, int to, bool first, size_t *sent_bytes,
                   char **buf, size_t *len, size_t *cap);
/* Streaming: a finished job's last text and its finish chunk (llama-server: its final object). */
int srv_sse_finish(srv_server *s, srv_job *job, size_t *sent_bytes, char **buf, size_t *len, size_t *cap);
/* Streaming, after every choice's finish: the usage chunk when asked for, then [DONE]. */
void srv_sse_end(srv_server *s, srv_job *const *jobs, int n, char **buf, size_t *len, size_t *cap);
void srv_buf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n);
/* Pieces of the chat shapes, for srv_chat_out.c: a chat.completion.chunk (delta, lp and finish
 * stolen; NULL = null), one SSE event (o stolen), a token's logprobs entry. */
json_t *srv_resp_chat_chunk(srv_server *s, srv_job *j, json_t *delta, json_t *lp, json_t *finish);
void srv_resp_sse_event(char **buf, size_t *len, size_t *cap, json_t *o);
json_t *srv_resp_chat_logprob(srv_server *s, const srv_token *tk);

/* ==== HTTP (srv_http.c) ==== */
int srv_http_run(srv_server *s, mx_error *err);
/* srv_tokenize_fn over the backend's tokenizer (ctx: the srv_backend) */
int srv_tokenize_text(void *ctx, const char *text, bool add_special, int32_t **ids, size_t *n, mx_error *err);

#endif
