/* Response bodies in the exact shapes of OpenAI (chat.completion, chat.completion.chunk,
 * text_completion) and llama-server (/completion), plus the error object. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "server/srv_api.h"
#include "server/srv_chat_out.h"
#include "server/srv_internal.h"

void srv_buf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t nc = (*len + n + 1) * 2;
        if (nc < 256) nc = 256;
        char *nb = realloc(*buf, nc);
        if (!nb) return; /* the caller sees a shorter body; memory exhaustion is not recoverable here */
        *buf = nb;
        *cap = nc;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
}

/* ==== Errors ==== */
const char *srv_error_type(int status) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";      /* Host / Origin refused (srv_guard.c) */
    case 404: return "not_found_error";
    case 405: return "invalid_request_error";
    case 413: return "invalid_request_error";
    case 499: return "invalid_request_error"; /* the client disconnected */
    case 501: return "not_supported_error";   /* llama-server's type for a disabled endpoint */
    case 503: return "unavailable_error";
    default: return "server_error";
    }
}

/* A message as a client and a log read it: one line of valid UTF-8. Messages quote request
 * bytes (jansson's "near '...'", a field's or a template's text): a control character becomes
 * '?', and so does each byte of an invalid UTF-8 sequence, which json_pack refuses (the reply
 * would have no body at all). In place: the text only shrinks. */
void srv_one_line_utf8(char *s) {
    const size_t n = strlen(s);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        const utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (l <= 0 || cp < 0x20 || cp == 0x7f) {
            s[k++] = '?';
            i += l > 0 ? (size_t)l : 1;
            continue;
        }
        memmove(s + k, s + i, (size_t)l);
        k += (size_t)l;
        i += (size_t)l;
    }
    s[k] = '\0';
}

char *srv_resp_error(int status, const char *message, const char *param) {
    /* /v1/responses and /v1/messages answer in their own shapes (srv_api_common.c) */
    if (srv_api_dialect_current() != SRV_DIALECT_NATIVE)
        return srv_api_error_body(srv_api_dialect_current(), status, message, param);
    char *clean = strdup(message ? message : "");
    if (clean) srv_one_line_utf8(clean);
    json_t *e = json_pack("{s:s, s:s, s:i}", "message", clean ? clean : "out of memory", "type",
                          srv_error_type(status), "code", status);
    free(clean);
    if (param && *param) json_object_set_new(e, "param", json_string(param));
    json_t *o = json_pack("{s:o}", "error", e);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* ==== Pieces ==== */
static json_t *bytes_json(const char *p, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

/* The token's own bytes (token_bytes: 0xC3 stays 0xC3); *raw malloc'd, never NULL. */
static void token_raw(srv_server *s, int32_t id, char **raw, size_t *n) {
    mx_error err;
    *raw = NULL;
    *n = 0;
    if (s->be->text_ops->token_bytes(s->be->text, id, raw, n, &err) || !*raw) {
        free(*raw);
        *raw = strdup("");
        *n = 0;
    }
}

/* The token's text: its bytes when they are valid UTF-8 alone, else the tokenizer's lossy text
 * (U+FFFD for a partial character); `bytes` always has the token's own bytes. */
static json_t *token_text_json(srv_server *s, int32_t id, json_t **bytes) {
    char *raw;
    size_t n;
    token_raw(s, id, &raw, &n);
    if (bytes) *bytes = bytes_json(raw ? raw : "", raw ? n : 0);
    json_t *out = raw ? json_stringn(raw, n) : NULL;
    free(raw);
    if (out) return out;
    char *t = NULL;
    mx_error err;
    if (s->be->text_ops->detokenize(s->be->text, &id, 1, false, &t, &n, &err)) t = NULL, n = 0;
    out = t ? json_stringn(t, n) : NULL;
    free(t);
    return out ? out : json_string("");
}

/* Legacy completions key each position's alternatives by token text (a dict), so tokens with
 * the same text would collide and one would be lost. The key is the text when the token's
 * bytes are valid UTF-8 alone; else "bytes:\xNN..." (its bytes escaped, the form OpenAI gives
 * such tokens), which differs for different bytes. A key already taken at the position (two ids
 * with the same bytes) becomes "token_id:N" (vLLM's form). Clients read any string key. */
static void legacy_key(srv_server *s, int32_t id, const json_t *taken, char *key, size_t cap) {
    char *raw;
    size_t n;
    token_raw(s, id, &raw, &n);
    json_t *text = raw && memchr(raw, 0, n) == NULL ? json_stringn(raw, n) : NULL;
    if (text) {
        snprintf(key, cap, "%s", raw);
    } else {
        size_t k = (size_t)snprintf(key, cap, "bytes:");
        for (size_t i = 0; raw && i < n && k + 5 <= cap; i++)
            k += (size_t)snprintf(key + k, cap - k, "\\x%02x", (unsigned char)raw[i]);
    }
    json_decref(text);
    free(raw);
    if (taken && json_object_get(taken, key)) snprintf(key, cap, "token_id:%d", (int)id);
}

/* OpenAI chat logprobs entry for token i. */
static json_t *chat_logprob(srv_server *s, const srv_token *tk) {
    json_t *bytes;
    json_t *tok = token_text_json(s, tk->id, &bytes);
    json_t *top = json_array();
    for (int k = 0; k < tk->n_top; k++) {
        json_t *b2;
        json_t *t2 = token_text_json(s, tk->top_ids[k], &b2);
        json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", t2, "logprob", (double)tk->top_logprobs[k], "bytes", b2));
    }
    return json_pack("{s:o, s:f, s:o, s:o}", "token", tok, "logprob", (double)tk->logprob, "bytes", bytes, "top_logprobs", top);
}

/* The response's `model`: the name the request asked for when it is one of the served aliases
 * (`-a a,b`: a client that asked for "b" is answered as "b"), else the first alias (or the
 * model directory's name). */
static const char *resp_model(const srv_server *s, const srv_job *j) {
    for (int i = 0; i < s->cfg.n_aliases; i++)
        if (!strcmp(j->req.model, s->cfg.aliases[i])) return s->cfg.aliases[i];
    return s->be->info.name;
}

/* Each prompt once (OpenAI counts a prompt sampled n times once), every choice's tokens. */
static json_t *usage_json(srv_job *const *js, int n) {
    long long p = 0, c = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || js[i]->counts_prompt) p += js[i]->n_prompt;
        c += js[i]->n_toks;
    }
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)p, "completion_tokens", (json_int_t)c,
                     "total_tokens", (json_int_t)(p + c));
}

static json_t *text_slice(srv_job *j, int from, int to) {
    size_t a = from > 0 ? j->tok_end[from - 1] : 0;
    size_t b = to > 0 ? j->tok_end[to - 1] : 0;
    /* no text at all (n_predict 0): nothing to slice, and NULL + 0 is undefined in C */
    json_t *v = j->text ? json_stringn(j->text + a, b - a) : NULL;
    return v ? v : json_string("");
}

/* Legacy completions logprobs: {tokens, token_logprobs, top_logprobs, text_offset}. */
static json_t *completion_logprobs(srv_server *s, srv_job *j, int from, int to) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    char key[512], chosen[512];
    for (int i = from; i < to; i++) {
        const srv_token *tk = &j->toks[i];
        json_t *top = json_object();
        chosen[0] = 0;
        for (int k = 0; k < tk->n_top; k++) {
            legacy_key(s, tk->top_ids[k], top, key, sizeof key);
            json_object_set_new(top, key, json_real(tk->top_logprobs[k]));
            if (tk->top_ids[k] == tk->id) snprintf(chosen, sizeof chosen, "%s", key);
        }
        /* the chosen token under the same key as among the alternatives: top[tokens[i]] works */
        if (!chosen[0]) legacy_key(s, tk->id, NULL, chosen, sizeof chosen);
        json_array_append_new(toks, json_string(chosen));
        json_array_append_new(lps, json_real(tk->logprob));
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer(i > 0 ? (json_int_t)j->tok_end[i - 1] : 0));
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

static json_t *llama_probs(srv_server *s, srv_job *j, int from, int to) {
    json_t *arr = json_array();
    for (int i = from; i < to; i++) {
        const srv_token *tk = &j->toks[i];
        json_t *bytes;
        json_t *tok = token_text_json(s, tk->id, &bytes);
        json_t *top = json_array();
        for (int k = 0; k < tk->n_top; k++) {
            json_t *b2;
            json_t *t2 = token_text_json(s, tk->top_ids[k], &b2);
            json_array_append_new(top, json_pack("{s:i, s:o, s:f, s:o}", "id", tk->top_ids[k], "token", t2,
                                                 "logprob", (double)tk->top_logprobs[k], "bytes", b2));
        }
        json_array_append_new(arr, json_pack("{s:i, s:o, s:f, s:o, s:o}", "id", tk->id, "token", tok, "logprob",
                                             (double)tk->logprob, "bytes", bytes, "top_logprobs", top));
    }
    return arr;
}

static const char *llama_stop_type(srv_finish f) {
    switch (f) {
    case SRV_FINISH_EOS: return "eos";
    case SRV_FINISH_STOP: return "word";
    case SRV_FINISH_LENGTH: return "limit";
    default: return "none";
    }
}

static json_t *llama_timings(srv_job *j) {
    double prompt_ms = (j->t_first > 0 ? j->t_first - j->t_arrival : 0) * 1e3;
    double pred_ms = (j->t_done > j->t_first && j->t_first > 0 ? j->t_done - j->t_first : 0) * 1e3;
    int pn = j->n_prompt, gn = j->n_toks;
    return json_pack("{s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}", "prompt_n", pn, "prompt_ms", prompt_ms,
                     "prompt_per_token_ms", pn ? prompt_ms / pn : 0.0, "prompt_per_second",
                     prompt_ms > 0 ? pn * 1e3 / prompt_ms : 0.0, "predicted_n", gn, "predicted_ms", pred_ms,
                     "predicted_per_token_ms", gn ? pred_ms / gn : 0.0, "predicted_per_second",
                     pred_ms > 0 ? gn * 1e3 / pred_ms : 0.0);
}

static json_t *llama_final_fields(srv_server *s, srv_job *j, json_t *o) {
    const srv_sampling *sp = &j->req.sampling;
    json_object_set_new(o, "stop", json_true());
    json_object_set_new(o, "model", json_string(resp_model(s, j)));
    json_object_set_new(o, "tokens_predicted", json_integer(j->n_toks));
    json_object_set_new(o, "tokens_evaluated", json_integer(j->n_prompt));
    json_object_set_new(o, "tokens_cached", json_integer(j->n_cached));
    json_object_set_new(o, "stop_type", json_string(llama_stop_type(j->finish)));
    json_t *word = j->stop_word ? json_string(j->stop_word) : NULL;
    json_object_set_new(o, "stopping_word", word ? word : json_string(""));
    json_object_set_new(o, "truncated", json_false());
    json_object_set_new(o, "generation_settings",
                        json_pack("{s:i, s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:i, s:b}", "n_predict", j->max_tokens,
                                  "temperature", (double)sp->temperature, "top_p", (double)sp->top_p, "top_k",
                                  sp->top_k, "min_p", (double)sp->min_p, "presence_penalty",
                                  (double)sp->presence_penalty, "frequency_penalty", (double)sp->frequency_penalty,
                                  "repeat_penalty", (double)sp->repeat_penalty, "n_probs", sp->top_logprobs,
                                  "ignore_eos", sp->ignore_eos));
    json_object_set_new(o, "timings", llama_timings(j));
    return o;
}

/* ==== Non-stream ==== */
/* One OpenAI choice object of job j (its index is j->choice). */
static json_t *choice_json(srv_server *s, srv_job *j) {
    if (srv_chat_out_active(j)) return srv_chat_choice(s, j); /* tools / reasoning */
    const char *fr = srv_finish_name(j->finish);
    json_t *text = text_slice(j, 0, j->n_toks);
    if (j->req.api == SRV_API_CHAT) {
        json_t *lp = json_null();
        if (j->req.sampling.logprobs) {
            json_t *content = json_array();
            for (int i = 0; i < j->n_toks; i++) json_array_append_new(content, chat_logprob(s, &j->toks[i]));
            lp = json_pack("{s:o}", "content", content);
        }
        return json_pack("{s:i, s:{s:s, s:o}, s:o, s:s}", "index", j->choice, "message", "role", "assistant",
                         "content", text, "logprobs", lp, "finish_reason", fr);
    }
    json_t *lp = j->req.completion_logprobs >= 0 ? completion_logprobs(s, j, 0, j->n_toks) : json_null();
    return json_pack("{s:o, s:i, s:o, s:s}", "text", text, "index", j->choice, "logprobs", lp, "finish_reason", fr);
}

char *srv_resp_final(srv_server *s, srv_job *const *js, int n) {
    srv_job *j = js[0];
    if (j->api) return srv_api_final(s, j); /* Responses / Messages: one choice */
    json_t *o;
    if (j->req.api == SRV_API_LLAMA_COMPLETION) {
        o = json_pack("{s:o, s:i}", "content", text_slice(j, 0, j->n_toks), "id_slot", 0);
        json_t *ids = json_array();
        for (int i = 0; i < j->n_toks; i++) json_array_append_new(ids, json_integer(j->toks[i].id));
        json_object_set_new(o, "tokens", ids);
        if (j->req.sampling.logprobs) json_object_set_new(o, "completion_probabilities", llama_probs(s, j, 0, j->n_toks));
        llama_final_fields(s, j, o);
    } else {
        json_t *choices = json_array();
        for (int i = 0; i < n; i++) json_array_append_new(choices, choice_json(s, js[i]));
        o = json_pack("{s:s, s:s, s:i, s:s, s:o, s:o}", "id", j->id, "object",
                      j->req.api == SRV_API_CHAT ? "chat.completion" : "text_completion", "created",
                      (json_int_t)j->created, "model", resp_model(s, j), "choices", choices, "usage",
                      usage_json(js, n));
    }
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return out;
}

/* ==== SSE ==== */
static void sse_event(char **buf, size_t *len, size_t *cap, json_t *o) {
    char *d = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!d) return;
    srv_buf_append(buf, len, cap, "data: ", 6);
    srv_buf_append(buf, len, cap, d, strlen(d));
    srv_buf_append(buf, len, cap, "\n\n", 2);
    free(d);
}

static json_t *chat_chunk(srv_server *s, srv_job *j, json_t *delta, json_t *lp, json_t *finish) {
    json_t *choice = json_pack("{s:i, s:o, s:o, s:o}", "index", j->choice, "delta", delta, "logprobs", lp ? lp : json_null(),
                               "finish_reason", finish ? finish : json_null());
    json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:[o]}", "id", j->id, "object", "chat.completion.chunk", "created",
                          (json_int_t)j->created, "model", resp_model(s, j), "choices", choice);
    if (j->req.include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

static json_t *cmpl_chunk(srv_server *s, srv_job *j, json_t *text, json_t *lp, json_t *finish) {
    json_t *choice = json_pack("{s:o, s:i, s:o, s:o}", "text", text, "index", j->choice, "logprobs", lp ? lp : json_null(),
                               "finish_reason", finish ? finish : json_null());
    json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:[o]}", "id", j->id, "object", "text_completion", "created",
                          (json_int_t)j->created, "model", resp_model(s, j), "choices", choice);
    if (j->req.include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

static void sse_text(srv_server *s, srv_job *j, json_t *text, json_t *lp_chat, json_t *lp_cmpl, json_t *lp_llama,
                     int tok_index, char **buf, size_t *len, size_t *cap) {
    if (j->req.api == SRV_API_CHAT) {
        sse_event(buf, len, cap, chat_chunk(s, j, json_pack("{s:o}", "content", text), lp_chat, NULL));
    } else if (j->req.api == SRV_API_COMPLETIONS) {
        sse_event(buf, len, cap, cmpl_chunk(s, j, text, lp_cmpl, NULL));
    } else {
        json_t *o = json_pack("{s:o, s:b, s:i, s:i}", "content", text, "stop", 0, "id_slot", 0, "tokens_predicted",
                              tok_index + 1);
        json_object_set_new(o, "tokens", tok_index >= 0 ? json_pack("[i]", j->toks[tok_index].id) : json_array());
        if (lp_llama) json_object_set_new(o, "completion_probabilities", lp_llama);
        sse_event(buf, len, cap, o);
    }
}

int srv_sse_tokens(srv_server *s, srv_job *j, int from, int to, bool first, size_t *sent_bytes, char **buf,
                   size_t *len, size_t *cap) {
    if (j->api) { /* Responses / Messages events */
        srv_api_sse_tokens(s, j, from, to, sent_bytes, buf, len, cap);
        return 0;
    }
    if (first && j->req.api == SRV_API_CHAT)
        sse_event(buf, len, cap, chat_chunk(s, j, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, NULL));
    if (srv_chat_out_active(j)) { /* tools / reasoning */
        srv_chat_sse_tokens(s, j, from, to, sent_bytes, buf, len, cap);
        return 0;
    }
    for (int i = from; i < to; i++) {
        size_t end = j->tok_end[i];
        bool lp = j->req.sampling.logprobs;
        if (end <= *sent_bytes && !lp) continue; /* held back by the detokenizer: comes later */
        json_t *text = json_stringn(j->text ? j->text + *sent_bytes : "", end > *sent_bytes ? end - *sent_bytes : 0);
        if (!text) text = json_string("");
        if (end > *sent_bytes) *sent_bytes = end;
        json_t *lc = NULL, *lo = NULL, *ll = NULL;
        if (lp && j->req.api == SRV_API_CHAT) lc = json_pack("{s:[o]}", "content", chat_logprob(s, &j->toks[i]));
        if (lp && j->req.api == SRV_API_COMPLETIONS && j->req.completion_logprobs >= 0)
            lo = completion_logprobs(s, j, i, i + 1);
        if (lp && j->req.api == SRV_API_LLAMA_COMPLETION) ll = llama_probs(s, j, i, i + 1);
        sse_text(s, j, text, lc, lo, ll, i, buf, len, cap);
    }
    return 0;
}

int srv_sse_finish(srv_server *s, srv_job *j, size_t *sent_bytes, char **buf, size_t *len, size_t *cap) {
    if (j->api) {
        srv_api_sse_finish(s, j, sent_bytes, buf, len, cap);
        return 0;
    }
    if (srv_chat_out_active(j)) { /* tools / reasoning */
        srv_chat_sse_finish(s, j, sent_bytes, buf, len, cap);
        return 0;
    }
    /* Text released by the final flush (held-back bytes) goes out before the finish chunk. */
    if (j->text_len > *sent_bytes) {
        json_t *text = json_stringn(j->text + *sent_bytes, j->text_len - *sent_bytes);
        *sent_bytes = j->text_len;
        if (text) sse_text(s, j, text, NULL, NULL, NULL, j->n_toks - 1, buf, len, cap);
    }
    if (j->req.api == SRV_API_CHAT) {
        sse_event(buf, len, cap, chat_chunk(s, j, json_object(), NULL, json_string(srv_finish_name(j->finish))));
    } else if (j->req.api == SRV_API_COMPLETIONS) {
        sse_event(buf, len, cap, cmpl_chunk(s, j, json_string(""), NULL, json_string(srv_finish_name(j->finish))));
    } else {
        json_t *o = json_pack("{s:s, s:i}", "content", "", "id_slot", 0);
        sse_event(buf, len, cap, llama_final_fields(s, j, o));
    }
    return 0;
}

void srv_sse_end(srv_server *s, srv_job *const *js, int n, char **buf, size_t *len, size_t *cap) {
    srv_job *j = js[0];
    if (j->req.api == SRV_API_LLAMA_COMPLETION) return; /* llama-server's /completion stream has no [DONE] */
    if (j->api) return;                                 /* nor do the Responses and Messages streams */
    if (j->req.include_usage) {
        const char *obj = j->req.api == SRV_API_CHAT ? "chat.completion.chunk" : "text_completion";
        sse_event(buf, len, cap, json_pack("{s:s, s:s, s:i, s:s, s:[], s:o}", "id", j->id, "object", obj, "created",
                                           (json_int_t)j->created, "model", resp_model(s, j), "choices", "usage",
                                           usage_json(js, n)));
    }
    srv_buf_append(buf, len, cap, "data: [DONE]\n\n", 14);
}

/* ==== For srv_chat_out.c ==== */
json_t *srv_resp_chat_chunk(srv_server *s, srv_job *j, json_t *delta, json_t *lp, json_t *finish) {
    return chat_chunk(s, j, delta, lp, finish);
}

void srv_resp_sse_event(char **buf, size_t *len, size_t *cap, json_t *o) { sse_event(buf, len, cap, o); }

json_t *srv_resp_chat_logprob(srv_server *s, const srv_token *tk) { return chat_logprob(s, tk); }
