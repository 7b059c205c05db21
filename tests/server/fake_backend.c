/* A deterministic stand-in for the model, used only by the server tests: it lets the whole HTTP
 * layer (routes, SSE, cancellation, queueing, metrics) be tested without weights.
 *
 * Text: byte-level vocabulary (ids 0..255 are bytes, 256 = BOS, 257 = EOS); the chat template
 * renders "<|role|>\ncontent\n" per message plus "<|assistant|>\n", or is a real Jinja
 * template (--chat-template-file, for the tool-call tests).
 * Scripted replies (--fake-script): a prompt containing an entry's `when` is answered with its
 * `reply` byte by byte, then EOS, so a test can make the "model" call tools or think.
 * Engine: continuous batching over --parallel slots with chunked prefill and a KV block pool
 * (16 tokens per block). The next token is a function of an FNV-1a hash of every token of the
 * sequence so far (prompt and output), of the seed when temperature > 0, and of logit_bias, so
 * a request's output does not depend on what else is in the batch.
 *
 * Echo mode (--fake-echo): the reply is the prompt's last user message, byte for byte, then
 * EOS. The web UI's browser test uses it to make "the model" answer with HTML and markdown that
 * no trained model can be made to write on demand; it goes through the same SSE path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_backend.h"
#include "text/chat_template.h"

#define FAKE_BOS 256
#define FAKE_EOS 257
#define FAKE_VOCAB 258
#define BLOCK 16

/* ==== Text ==== */
typedef struct fake_text {
    chat_template *ct; /* NULL: the built-in template */
} fake_text;

static int fk_tokenize(void *t, const char *text, size_t len, bool add_special, int32_t **ids, size_t *n, mx_error *err) {
    (void)t;
    int32_t *v = malloc((len + 2) * sizeof *v);
    if (!v) return mx_fail(err, "out of memory");
    size_t k = 0;
    if (add_special) v[k++] = FAKE_BOS;
    for (size_t i = 0; i < len; i++) v[k++] = (unsigned char)text[i];
    *ids = v;
    *n = k;
    return 0;
}

static int fk_detokenize(void *t, const int32_t *ids, size_t n, bool skip_special, char **out, size_t *out_len,
                         mx_error *err) {
    (void)t;
    char *s = malloc(n * 4 + 1), *p = s;
    if (!s) return mx_fail(err, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 256) *p++ = (char)ids[i];
        else if (!skip_special) { const char *sp = ids[i] == FAKE_BOS ? "<s>" : "</s>"; memcpy(p, sp, strlen(sp)); p += strlen(sp); }
    }
    *p = 0;
    *out = s;
    *out_len = (size_t)(p - s);
    return 0;
}

/* Byte-level: a token's bytes are its text (ids >= 256 are special). */
static int fk_token_bytes(void *t, int32_t id, char **out, size_t *out_len, mx_error *err) {
    return fk_detokenize(t, &id, 1, false, out, out_len, err);
}

static int fk_template(void *t, const json_t *messages, const json_t *extra, bool add_gen, char **out, mx_error *err) {
    if (((fake_text *)t)->ct) return chat_template_apply(((fake_text *)t)->ct, messages, extra, add_gen, out, err);
    size_t cap = 64, len = 0;
    char *s = malloc(cap);
    if (!s) return mx_fail(err, "out of memory");
    for (size_t i = 0; i < json_array_size(messages); i++) {
        json_t *m = json_array_get(messages, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        if (!content) content = ""; /* a call-only assistant turn */
        size_t need = strlen(role) + strlen(content) + 8;
        if (len + need + 32 > cap) { cap = (len + need + 32) * 2; s = realloc(s, cap); if (!s) return mx_fail(err, "oom"); }
        len += (size_t)sprintf(s + len, "<|%s|>\n%s\n", role, content);
    }
    if (add_gen) { if (len + 32 > cap) s = realloc(s, cap = len + 32); len += (size_t)sprintf(s + len, "<|assistant|>\n"); }
    *out = s;
    return 0;
}

struct srv_text_stream {
    char *stops[16];
    int n_stops;
    int hit;        /* index of the stop string that matched, -1 while none */
    char pend[256]; /* text that could still become a stop string */
    size_t n_pend;
    char out[512];
};

static srv_text_stream *fk_stream_new(void *t, const char *const *stops, int n) {
    (void)t;
    srv_text_stream *s = calloc(1, sizeof *s);
    for (int i = 0; s && i < n && i < 16; i++) s->stops[s->n_stops++] = strdup(stops[i]);
    if (s) s->hit = -1;
    return s;
}

/* Longest suffix of pend that is a proper prefix of some stop string. */
static size_t hold_len(const srv_text_stream *s) {
    size_t best = 0;
    for (int k = 0; k < s->n_stops; k++) {
        size_t sl = strlen(s->stops[k]);
        for (size_t l = sl - 1; l > best && l > 0; l--)
            if (l <= s->n_pend && !memcmp(s->pend + s->n_pend - l, s->stops[k], l)) { best = l; break; }
    }
    return best;
}

static int fk_stream_push(srv_text_stream *s, int32_t id, const char **out, size_t *len) {
    *out = s->out;
    *len = 0;
    if (id >= 256) return 0;
    if (s->n_pend + 1 >= sizeof s->pend) { /* cannot happen with stops < 256 bytes; flush defensively */
        memcpy(s->out, s->pend, s->n_pend); *len = s->n_pend; s->n_pend = 0;
    }
    s->pend[s->n_pend++] = (char)id;
    for (int k = 0; k < s->n_stops; k++) {
        size_t sl = strlen(s->stops[k]);
        for (size_t at = 0; at + sl <= s->n_pend; at++)
            if (!memcmp(s->pend + at, s->stops[k], sl)) {
                memcpy(s->out + *len, s->pend, at);
                *len += at;
                s->n_pend = 0;
                s->hit = k;
                return 1;
            }
    }
    size_t keep = hold_len(s);
    /* whole UTF-8 characters only (a scripted reply's bytes arrive one token each) */
    size_t cut = s->n_pend - keep, k = 0;
    while (cut > 0 && k < 3 && ((unsigned char)s->pend[cut - 1] & 0xC0) == 0x80) cut--, k++;
    if (cut > 0) {
        const unsigned char lead = (unsigned char)s->pend[cut - 1];
        const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        if (lead >= 0xC0 && k + 1 < need) keep = s->n_pend - (cut - 1);
    }
    size_t emit = s->n_pend - keep;
    memcpy(s->out + *len, s->pend, emit);
    *len += emit;
    memmove(s->pend, s->pend + emit, keep);
    s->n_pend = keep;
    return 0;
}

static const char *fk_stream_stop_word(srv_text_stream *s) { return s->hit >= 0 ? s->stops[s->hit] : NULL; }

static void fk_stream_flush(srv_text_stream *s, const char **out, size_t *len) {
    memcpy(s->out, s->pend, s->n_pend);
    *out = s->out;
    *len = s->n_pend;
    s->n_pend = 0;
}

static void fk_stream_free(srv_text_stream *s) {
    if (!s) return;
    for (int i = 0; i < s->n_stops; i++) free(s->stops[i]);
    free(s);
}

static int fk_vocab(void *t) { (void)t; return FAKE_VOCAB; }

static const srv_text_ops k_fake_text = {
    .tokenize = fk_tokenize, .detokenize = fk_detokenize, .token_bytes = fk_token_bytes,
    .apply_template = fk_template, .stream_new = fk_stream_new, .stream_push = fk_stream_push,
    .stream_stop_word = fk_stream_stop_word, .stream_flush = fk_stream_flush, .stream_free = fk_stream_free, .vocab_size = fk_vocab,
    .has_template = true};

/* ==== Engine ==== */
typedef struct fseq {
    uint64_t id;
    int32_t *prompt;
    int n_prompt, n_done_prompt; /* prefill progress */
    int n_gen, max_tokens;
    uint64_t h;                  /* FNV-1a over every token so far */
    srv_sampling sp;
    srv_logit_bias *bias;
    const char *reply;           /* scripted reply (owned by the script), NULL: hash tokens */
    size_t reply_n, reply_pos;
    srv_gen g;
    int blocks;
    bool running;
    int echo_from, echo_len;     /* echo mode: the reply is prompt[echo_from, +echo_len) */
    bool echo;
    struct fseq *next;
} fseq;

typedef struct fake_engine {
    fake_opts o;
    fseq *seqs; /* FIFO: running first, waiting after, by admission order */
    uint64_t next_id;
    srv_engine_stats st;
    json_t *script;
} fake_engine;

/* The scripted reply of a prompt: the first entry whose `when` occurs in its text. */
static void script_reply(const fake_engine *fe, fseq *q) {
    if (!fe->script) return;
    char *text = malloc((size_t)q->n_prompt + 1);
    if (!text) return;
    size_t n = 0;
    for (int i = 0; i < q->n_prompt; i++)
        if (q->prompt[i] < 256 && q->prompt[i] > 0) text[n++] = (char)q->prompt[i];
    text[n] = 0;
    size_t i;
    json_t *e;
    json_array_foreach(fe->script, i, e) {
        const char *when = json_string_value(json_object_get(e, "when"));
        if (when && strstr(text, when)) {
            q->reply = json_string_value(json_object_get(e, "reply"));
            q->reply_n = json_string_length(json_object_get(e, "reply"));
            break;
        }
    }
    free(text);
}

static uint64_t fnv(uint64_t h, int32_t t) {
    for (int i = 0; i < 4; i++) { h ^= (uint64_t)((t >> (8 * i)) & 0xff); h *= 1099511628211ull; }
    return h;
}

/* Echo mode: the bytes after the last "<|user|>\n" of the prompt, up to the "\n" that ends the
 * message (fk_template's rendering). */
static void echo_span(fseq *q) {
    static const char tag[] = "<|user|>\n", tail[] = "\n<|assistant|>\n";
    int nt = (int)sizeof tag - 1, nl = (int)sizeof tail - 1;
    int from = -1;
    for (int k = q->n_prompt - nt; k >= 0 && from < 0; k--) {
        int m = 0;
        while (m < nt && q->prompt[k + m] == (unsigned char)tag[m]) m++;
        if (m == nt) from = k + nt;
    }
    int to = q->n_prompt;
    bool ends = to - nl >= 0;
    for (int m = 0; ends && m < nl; m++) ends = q->prompt[to - nl + m] == (unsigned char)tail[m];
    if (ends) to -= nl;
    q->echo = true;
    q->echo_from = from < 0 ? to : from;
    q->echo_len = to > q->echo_from ? to - q->echo_from : 0;
}

static int fe_submit(void *e, const srv_gen *g, uint64_t *id, mx_error *err) {
    fake_engine *fe = e;
    if (g->embed) return mx_fail(err, "fake engine: no embeddings (they are tested on the real engine)");
    if (g->n_prompt <= 0 || g->max_tokens <= 0) return mx_fail(err, "fake engine: empty prompt or max_tokens");
    fseq *q = calloc(1, sizeof *q);
    if (!q) return mx_fail(err, "out of memory");
    q->prompt = malloc((size_t)g->n_prompt * sizeof *q->prompt);
    q->bias = g->sampling.n_logit_bias ? malloc((size_t)g->sampling.n_logit_bias * sizeof *q->bias) : NULL;
    memcpy(q->prompt, g->prompt, (size_t)g->n_prompt * sizeof *q->prompt);
    if (q->bias) memcpy(q->bias, g->sampling.logit_bias, (size_t)g->sampling.n_logit_bias * sizeof *q->bias);
    q->id = ++fe->next_id;
    q->n_prompt = g->n_prompt;
    q->max_tokens = g->max_tokens;
    q->sp = g->sampling;
    q->sp.logit_bias = q->bias;
    q->g = *g;
    q->h = 1469598103934665603ull;
    if (fe->o.echo) echo_span(q);
    else script_reply(fe, q);
    fseq **pp = &fe->seqs;
    while (*pp) pp = &(*pp)->next;
    *pp = q;
    *id = q->id;
    return 0;
}

static void seq_end(fake_engine *fe, fseq *q, srv_finish why) {
    for (fseq **pp = &fe->seqs; *pp; pp = &(*pp)->next)
        if (*pp == q) { *pp = q->next; break; }
    fe->st.kv_blocks_used -= q->blocks;
    q->g.on_finish(q->g.user, why, 0);
    free(q->prompt);
    free(q->bias);
    free(q);
}

static void fe_cancel(void *e, uint64_t id) {
    fake_engine *fe = e;
    for (fseq *q = fe->seqs; q; q = q->next)
        if (q->id == id) { seq_end(fe, q, SRV_FINISH_CANCELLED); return; }
}

static int blocks_for(int tokens) { return (tokens + BLOCK - 1) / BLOCK; }

/* Fake logits: letter 'a' + (h >> 7) % 26, a space every ~6 tokens, EOS with prob ~1/40. */
static void next_token(fseq *q, srv_token *tk, bool *eos) {
    uint64_t h = q->h;
    if (q->reply) { /* the script's bytes, then EOS */
        *eos = q->reply_pos >= q->reply_n;
        tk->id = *eos ? ' ' : (unsigned char)q->reply[q->reply_pos++];
        tk->logprob = -0.25f;
        tk->n_top = q->sp.top_logprobs > 0 ? 1 : 0;
        tk->top_ids[0] = tk->id;
        tk->top_logprobs[0] = tk->logprob;
        return;
    }
    if (q->sp.temperature > 0) h = fnv(h ^ (q->sp.has_seed ? q->sp.seed : 0x9e3779b97f4a7c15ull), q->n_gen);
    int32_t cand[6];
    int nc = 0;
    cand[nc++] = (h % 6 == 0) ? ' ' : (int32_t)('a' + (h >> 7) % 26);
    for (int k = 1; k < 6; k++) cand[nc++] = (int32_t)('a' + ((h >> 7) + (uint64_t)k * 7) % 26);
    *eos = !q->sp.ignore_eos && q->n_gen > 0 && (h >> 20) % 40 == 0;
    /* logit_bias: a bias >= 50 forces the token; <= -50 bans it (falls to the next candidate). */
    int32_t pick = cand[0];
    for (int b = 0; b < q->sp.n_logit_bias; b++) if (q->bias[b].bias >= 50) { pick = q->bias[b].id; *eos = false; }
    for (int k = 0; k < nc; k++) {
        bool banned = false;
        for (int b = 0; b < q->sp.n_logit_bias; b++) banned |= q->bias[b].id == cand[k] && q->bias[b].bias <= -50;
        if (!banned) { if (pick == cand[0]) pick = cand[k]; break; }
    }
    if (q->echo) { /* the message's next byte; EOS after its last */
        *eos = q->n_gen >= q->echo_len;
        if (!*eos) pick = q->prompt[q->echo_from + q->n_gen];
    }
    tk->id = pick;
    tk->logprob = -0.05f * (float)(1 + h % 10);
    tk->n_top = q->sp.top_logprobs < nc ? q->sp.top_logprobs : nc;
    for (int k = 0; k < tk->n_top; k++) {
        tk->top_ids[k] = k == 0 ? pick : cand[k];
        tk->top_logprobs[k] = tk->logprob - 1.0f * (float)k;
    }
}

static int fe_step(void *e, mx_error *err) {
    (void)err;
    fake_engine *fe = e;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* Admit in FIFO order while a slot and the prompt's blocks are free. */
    int running = 0;
    for (fseq *q = fe->seqs; q; q = q->next) running += q->running;
    for (fseq *q = fe->seqs; q && running < fe->o.n_parallel; q = q->next) {
        if (q->running) continue;
        int need = blocks_for(q->n_prompt + 1);
        if (fe->st.kv_blocks_used + need > fe->st.kv_blocks_total) break;
        q->running = true;
        q->blocks = need;
        fe->st.kv_blocks_used += need;
        fe->st.prefix_misses_total++;
        running++;
    }
    int rows = 0, tokens = 0, budget = fe->o.batch_size, prefill_tok = 0;
    fseq *q = fe->seqs;
    while (q && rows < fe->o.max_batch_size) {
        fseq *next = q->next;
        if (!q->running) { q = next; continue; }
        rows++;
        if (q->n_done_prompt < q->n_prompt) {
            int n = q->n_prompt - q->n_done_prompt;
            if (n > fe->o.chunk) n = fe->o.chunk;
            if (n > budget - (fe->o.max_batch_size - rows)) n = budget - (fe->o.max_batch_size - rows);
            if (n < 1) n = 1;
            for (int i = 0; i < n; i++) q->h = fnv(q->h, q->prompt[q->n_done_prompt + i]);
            q->n_done_prompt += n;
            budget -= n;
            tokens += n;
            prefill_tok += n;
            fe->st.prefill_chunks_total++;
            fe->st.prompt_tokens_total += (uint64_t)n;
            if (q->n_done_prompt < q->n_prompt) { q = next; continue; }
        } else {
            budget--;
            tokens++;
            fe->st.decode_rows_total++;
        }
        /* The row that finished its prompt, or a decode row, samples one token. */
        srv_token tk = {0};
        bool eos;
        next_token(q, &tk, &eos);
        if (eos) { seq_end(fe, q, SRV_FINISH_EOS); q = next; continue; }
        q->h = fnv(q->h, tk.id);
        q->n_gen++;
        fe->st.decode_tokens_total++;
        int need = blocks_for(q->n_prompt + q->n_gen + 1);
        if (need > q->blocks) { fe->st.kv_blocks_used += need - q->blocks; q->blocks = need; }
        q->g.on_token(q->g.user, &tk);
        if (q->n_gen >= q->max_tokens) seq_end(fe, q, SRV_FINISH_LENGTH);
        q = next;
    }
    if (fe->o.step_ms > 0) {
        struct timespec ts = {fe->o.step_ms / 1000, (long)(fe->o.step_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    double pf = tokens ? (double)prefill_tok / tokens : 0;
    fe->st.prefill_seconds_total += dt * pf;
    fe->st.decode_seconds_total += dt * (1 - pf);
    fe->st.steps_total++;
    fe->st.last_batch_rows = rows;
    fe->st.last_batch_tokens = tokens;
    return 0;
}

static bool fe_has_work(void *e) { return ((fake_engine *)e)->seqs != NULL; }

static void fe_stats(void *e, srv_engine_stats *out) {
    fake_engine *fe = e;
    fe->st.n_running = fe->st.n_waiting = 0;
    for (fseq *q = fe->seqs; q; q = q->next) {
        if (q->running) fe->st.n_running++;
        else fe->st.n_waiting++;
    }
    *out = fe->st;
}

static const srv_engine_ops k_fake_engine = {fe_submit, fe_cancel, fe_step, fe_has_work, fe_stats};

/* ==== Backend ==== */
int fake_backend_init(srv_backend *be, const fake_opts *o, mx_error *err) {
    memset(be, 0, sizeof *be);
    fake_engine *fe = calloc(1, sizeof *fe);
    if (!fe) return mx_fail(err, "out of memory");
    fe->o = *o;
    fe->st.kv_block_tokens = BLOCK;
    fe->st.kv_blocks_total = (int64_t)o->n_parallel * blocks_for(o->n_ctx + 1);
    be->eng_ops = &k_fake_engine;
    be->eng = fe;
    be->text_ops = &k_fake_text;
    fake_text *ft = calloc(1, sizeof *ft);
    if (!ft) return mx_fail(err, "out of memory");
    be->text = ft;
    if (o->template_file[0] && chat_template_load(&ft->ct, NULL, o->template_file, err)) return -1;
    if (o->script_file[0]) {
        json_error_t je;
        fe->script = json_load_file(o->script_file, 0, &je);
        if (!json_is_array(fe->script))
            return mx_fail(err, "--fake-script %s: expected a JSON array (%s)", o->script_file, je.text);
    }
    srv_model_info *m = &be->info;
    snprintf(m->name, sizeof m->name, "%s", o->name);
    snprintf(m->path, sizeof m->path, "(fake)");
    snprintf(m->family, sizeof m->family, "fake");
    m->n_params = 0;
    snprintf(m->dtype, sizeof m->dtype, "none");
    m->kv_bytes_per_token = 0;
    m->n_ctx = m->n_ctx_train = o->n_ctx;
    snprintf(m->storage, sizeof m->storage, "paged");
    snprintf(m->storage_reason, sizeof m->storage_reason, "fake test engine: block pool of %lld blocks",
             (long long)fe->st.kv_blocks_total);
    snprintf(m->chat_template, sizeof m->chat_template, "fake");
    /* what fk_template renders, written as the Jinja it would be */
    m->chat_template_text = "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}"
                            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}";
    if (ft->ct) {
        m->chat_template_text = chat_template_source(ft->ct);
        snprintf(m->chat_template, sizeof m->chat_template, "--chat-template-file");
    }
    return 0;
}

void fake_backend_free(srv_backend *be) {
    fake_engine *fe = be->eng;
    while (fe && fe->seqs) seq_end(fe, fe->seqs, SRV_FINISH_CANCELLED);
    if (fe) json_decref(fe->script);
    free(fe);
    fake_text *ft = be->text;
    if (ft) chat_template_free(ft->ct);
    free(ft);
}
