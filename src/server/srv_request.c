/* Parsing and validation of generation request bodies. Unknown fields are ignored (clients
 * send many); known fields with a wrong type or value are rejected naming the field; features
 * that are known but not implemented (echo, suffix) are rejected
 * rather than silently ignored. Every range lies inside what the sampler accepts
 * (sampling_params_validate), so a request the parser lets through never fails in the engine
 * (which the client would see as a 500). */
#include "server/srv_request.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_tools.h"

/* ==== Helpers ==== */
static int bad(srv_request *r, mx_error *err, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad(srv_request *r, mx_error *err, const char *field, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->bad_param, sizeof r->bad_param, "%s", field);
    return mx_fail(err, "%s: %s", field, msg);
}

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Present and not null. */
static json_t *field(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return v && !json_is_null(v) ? v : NULL;
}

static int get_num(srv_request *r, json_t *o, const char *k, double lo, double hi, float *out, mx_error *err) {
    json_t *v = field(o, k);
    if (!v) return 0;
    if (!json_is_number(v)) return bad(r, err, k, "expected a number, got %s", type_name(v));
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi) return bad(r, err, k, "expected a number in [%g, %g], got %g", lo, hi, x);
    *out = (float)x;
    return 0;
}

/* A number in (0, hi]: a divisor such as repeat_penalty, which the sampler refuses at 0. */
static int get_positive(srv_request *r, json_t *o, const char *k, double hi, float *out, mx_error *err) {
    json_t *v = field(o, k);
    if (!v) return 0;
    if (!json_is_number(v)) return bad(r, err, k, "expected a number, got %s", type_name(v));
    double x = json_number_value(v);
    if (!isfinite(x) || x <= 0 || x > hi) return bad(r, err, k, "expected a number in (0, %g], got %g", hi, x);
    *out = (float)x;
    return 0;
}

static int get_int(srv_request *r, json_t *o, const char *k, long long lo, long long hi, long long *out,
                   bool *present, mx_error *err) {
    json_t *v = field(o, k);
    if (present) *present = v != NULL;
    if (!v) return 0;
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15)
        x = (long long)json_real_value(v);
    else return bad(r, err, k, "expected an integer, got %s", type_name(v));
    if (x < lo || x > hi) return bad(r, err, k, "expected an integer in [%lld, %lld], got %lld", lo, hi, x);
    *out = x;
    return 0;
}

static int get_bool(srv_request *r, json_t *o, const char *k, bool *out, mx_error *err) {
    json_t *v = field(o, k);
    if (!v) return 0;
    if (!json_is_boolean(v)) return bad(r, err, k, "expected a boolean, got %s", type_name(v));
    *out = json_is_true(v);
    return 0;
}

/* seed on every route: -1 = a random seed per request (llama-server's seed is a uint32 whose
 * 0xFFFFFFFF, i.e. -1, means random), any other integer a fixed seed; absent = the server's
 * --seed (random when -1). */
static int get_seed(srv_request *r, json_t *o, mx_error *err) {
    long long x;
    bool has;
    if (get_int(r, o, "seed", INT64_MIN, INT64_MAX, &x, &has, err)) return -1;
    if (has) {
        r->sampling.has_seed = x != -1;
        r->sampling.seed = (uint64_t)x;
    }
    return 0;
}

/* ==== Prompt, stop, logit_bias ==== */
static int parse_id_array(srv_request *r, json_t *a, const char *k, int vocab, mx_error *err) {
    size_t n = json_array_size(a);
    r->prompt_ids = malloc((n ? n : 1) * sizeof *r->prompt_ids);
    if (!r->prompt_ids) return bad(r, err, k, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(a, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= vocab)
            return bad(r, err, k, "element %zu: expected a token id in [0, %d)", i, vocab);
        r->prompt_ids[i] = (int32_t)json_integer_value(e);
    }
    r->n_prompt_ids = n;
    return 0;
}

/* An array of ids and strings with at least one string: kept, checked and tokenized by
 * srv_request_mixed_prompt once a tokenizer is at hand. */
static int parse_mixed(srv_request *r, json_t *a) {
    r->prompt_mixed = json_incref(a);
    return 0;
}

/* Ids and strings only, at least one of each (llama-server's json_is_array_of_mixed_numbers_strings;
 * strings alone are a list of prompts). */
static bool is_mixed(json_t *a) {
    bool num = false, str = false;
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *e = json_array_get(a, i);
        if (json_is_string(e)) str = true;
        else if (json_is_number(e)) num = true;
        else return false;
    }
    return num && str;
}

/* A string, ids, ids mixed with strings, or a one-element list of any of these. */
static int parse_prompt(srv_request *r, json_t *o, int vocab, mx_error *err) {
    json_t *p = field(o, "prompt");
    if (!p) return bad(r, err, "prompt", "required");
    if (json_is_string(p)) {
        r->prompt_text = strdup(json_string_value(p));
        return r->prompt_text ? 0 : bad(r, err, "prompt", "out of memory");
    }
    if (!json_is_array(p)) return bad(r, err, "prompt", "expected a string or an array, got %s", type_name(p));
    if (json_array_size(p) == 0) return bad(r, err, "prompt", "empty array");
    if (is_mixed(p)) return parse_mixed(r, p);
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) return parse_id_array(r, p, "prompt", vocab, err);
    /* A list of prompts: /v1/completions answers each (choices in prompt order, n per prompt);
     * llama-server's /completion takes one. */
    if (json_array_size(p) != 1) {
        if (r->api != SRV_API_COMPLETIONS)
            return bad(r, err, "prompt", "a list of %zu prompts; only one prompt per request is supported here "
                       "(/v1/completions takes a list)", json_array_size(p));
        if (json_array_size(p) > SRV_MAX_CHOICES)
            return bad(r, err, "prompt", "a list of %zu prompts; at most %d", json_array_size(p), SRV_MAX_CHOICES);
        for (size_t i = 0; i < json_array_size(p); i++) {
            json_t *e = json_array_get(p, i);
            if (json_is_string(e) || (json_is_array(e) && is_mixed(e))) continue;
            bool ids = json_is_array(e) && json_array_size(e) > 0;
            for (size_t k = 0; ids && k < json_array_size(e); k++) {
                json_t *t = json_array_get(e, k);
                ids = json_is_integer(t) && json_integer_value(t) >= 0 && json_integer_value(t) < vocab;
            }
            if (!ids)
                return bad(r, err, "prompt", "element %zu of the list: expected a string or a non-empty array of "
                           "token ids in [0, %d) (or ids and strings)", i, vocab);
        }
        r->prompt_list = json_incref(p);
    }
    if (json_is_string(first)) {
        r->prompt_text = strdup(json_string_value(first));
        return r->prompt_text ? 0 : bad(r, err, "prompt", "out of memory");
    }
    if (json_is_array(first) && is_mixed(first)) return parse_mixed(r, first);
    if (json_is_array(first) && json_array_size(first) > 0) return parse_id_array(r, first, "prompt", vocab, err);
    return bad(r, err, "prompt", "expected a string, a token array (ids, or ids and strings) or a one-element list of either");
}

int srv_tokenize_mixed(json_t *a, bool add_special, srv_tokenize_fn tokenize, void *ctx, int vocab,
                       int32_t **ids_out, size_t *n_out, mx_error *err) {
    size_t n = 0, cap = json_array_size(a) + 16;
    int32_t *out = malloc(cap * sizeof *out);
    if (!out) return mx_fail(err, "out of memory");
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *e = json_array_get(a, i);
        int32_t one = (int32_t)json_integer_value(e), *ids = &one;
        size_t k = 1;
        if (json_is_string(e)) {
            if (tokenize(ctx, json_string_value(e), add_special && i == 0, &ids, &k, err)) goto fail;
        } else if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= vocab) {
            mx_fail(err, "element %zu: expected a token id in [0, %d) or a string", i, vocab);
            goto fail;
        }
        if (n + k > cap) {
            cap = 2 * (n + k);
            int32_t *grown = realloc(out, cap * sizeof *out);
            if (!grown) {
                mx_fail(err, "out of memory");
                if (ids != &one) free(ids);
                goto fail;
            }
            out = grown;
        }
        memcpy(out + n, ids, k * sizeof *ids);
        n += k;
        if (ids != &one) free(ids);
    }
    *ids_out = out, *n_out = n;
    return 0;
fail:
    free(out);
    return -1;
}

int srv_request_mixed_prompt(srv_request *r, srv_tokenize_fn tokenize, void *ctx, int vocab, mx_error *err) {
    if (!r->prompt_mixed) return 0;
    int32_t *ids;
    size_t n;
    if (srv_tokenize_mixed(r->prompt_mixed, true, tokenize, ctx, vocab, &ids, &n, err)) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return bad(r, err, "prompt", "%s", msg);
    }
    json_decref(r->prompt_mixed);
    r->prompt_mixed = NULL;
    free(r->prompt_ids);
    r->prompt_ids = ids, r->n_prompt_ids = n;
    return 0;
}

static int parse_stop(srv_request *r, json_t *o, int max_n, mx_error *err) {
    json_t *s = field(o, "stop");
    if (!s) return 0;
    if (json_is_string(s)) {
        if (*json_string_value(s)) r->stops[r->n_stops++] = strdup(json_string_value(s));
        return 0;
    }
    if (!json_is_array(s)) return bad(r, err, "stop", "expected a string or an array of strings, got %s", type_name(s));
    if ((int)json_array_size(s) > max_n) return bad(r, err, "stop", "at most %d stop sequences", max_n);
    for (size_t i = 0; i < json_array_size(s); i++) {
        json_t *e = json_array_get(s, i);
        if (!json_is_string(e)) return bad(r, err, "stop", "element %zu: expected a string, got %s", i, type_name(e));
        if (*json_string_value(e)) r->stops[r->n_stops++] = strdup(json_string_value(e));
    }
    return 0;
}

/* The sampler takes a float bias that is finite or -inf (false): 1e300 would become +inf in
 * the float and fail in the engine, so a bias must fit a float. */
static bool bias_fits(double b) { return b == -INFINITY || (isfinite(b) && fabs(b) <= FLT_MAX); }

static int add_bias(srv_request *r, long long id, double b, int vocab, mx_error *err) {
    if (id < 0 || id >= vocab) return bad(r, err, "logit_bias", "token id %lld outside [0, %d)", id, vocab);
    if (!bias_fits(b))
        return bad(r, err, "logit_bias", "token %lld: expected a bias within +-%g (or false to ban the token), got %g",
                   id, (double)FLT_MAX, b);
    srv_sampling *s = &r->sampling;
    srv_logit_bias *nb = realloc(s->logit_bias, (size_t)(s->n_logit_bias + 1) * sizeof *nb);
    if (!nb) return bad(r, err, "logit_bias", "out of memory");
    s->logit_bias = nb;
    nb[s->n_logit_bias++] = (srv_logit_bias){(int32_t)id, (float)b};
    return 0;
}

/* OpenAI: {"<id>": bias in [-100, 100]}. llama-server also takes [[id, bias|false], ...]. */
static int add_text_bias(srv_request *r, const char *text, double b, mx_error *err) {
    if (!bias_fits(b))
        return bad(r, err, "logit_bias", "'%.40s': expected a bias within +-%g (or false), got %g", text,
                   (double)FLT_MAX, b);
    char **t = realloc(r->bias_text, (size_t)(r->n_bias_text + 1) * sizeof *t);
    if (t) r->bias_text = t;
    double *v = realloc(r->bias_text_value, (size_t)(r->n_bias_text + 1) * sizeof *v);
    if (v) r->bias_text_value = v;
    char *copy = t && v ? strdup(text) : NULL;
    if (!copy) return bad(r, err, "logit_bias", "out of memory");
    r->bias_text[r->n_bias_text] = copy;
    r->bias_text_value[r->n_bias_text++] = b;
    return 0;
}

int srv_request_text_bias(srv_request *r, srv_tokenize_fn tokenize, void *ctx, int vocab, mx_error *err) {
    for (int i = 0; i < r->n_bias_text; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (tokenize(ctx, r->bias_text[i], false, &ids, &n, err)) {
            snprintf(r->bad_param, sizeof r->bad_param, "logit_bias");
            return -1;
        }
        int rc = 0;
        for (size_t k = 0; k < n && !rc; k++) rc = add_bias(r, ids[k], r->bias_text_value[i], vocab, err);
        free(ids);
        if (rc) return -1;
    }
    return 0;
}

static int parse_logit_bias(srv_request *r, json_t *o, int vocab, bool allow_array, mx_error *err) {
    json_t *lb = field(o, "logit_bias");
    if (!lb) return 0;
    if (json_is_object(lb)) {
        const char *key;
        json_t *v;
        json_object_foreach(lb, key, v) {
            char *end = NULL;
            long long id = strtoll(key, &end, 10);
            if (!*key || *end) return bad(r, err, "logit_bias", "key '%s' is not a token id", key);
            if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
                return bad(r, err, "logit_bias", "token %s: expected a bias in [-100, 100]", key);
            if (add_bias(r, id, json_number_value(v), vocab, err)) return -1;
        }
        return 0;
    }
    if (allow_array && json_is_array(lb)) {
        for (size_t i = 0; i < json_array_size(lb); i++) {
            json_t *e = json_array_get(lb, i);
            json_t *id = json_array_get(e, 0), *b = json_array_get(e, 1);
            if (!json_is_array(e) || json_array_size(e) != 2 ||
                !(json_is_integer(id) || json_is_string(id)) || !(json_is_number(b) || json_is_false(b)))
                return bad(r, err, "logit_bias", "element %zu: expected [token_id or string, bias or false]", i);
            double bv = json_is_false(b) ? -INFINITY : json_number_value(b);
            if (json_is_string(id)) { /* tokenized later (srv_request_text_bias) */
                if (add_text_bias(r, json_string_value(id), bv, err)) return -1;
                continue;
            }
            if (add_bias(r, json_integer_value(id), bv, vocab, err)) return -1;
        }
        return 0;
    }
    return bad(r, err, "logit_bias", "expected an object mapping token ids to biases, got %s", type_name(lb));
}

/* ==== Chat messages ==== */
static int parse_messages(srv_request *r, json_t *o, mx_error *err) {
    json_t *m = field(o, "messages");
    if (!m) return bad(r, err, "messages", "required");
    if (!json_is_array(m) || json_array_size(m) == 0)
        return bad(r, err, "messages", "expected a non-empty array, got %s", type_name(m));
    static const char *roles[] = {"system", "developer", "user", "assistant", "tool"};
    r->messages = json_array();
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *msg = json_array_get(m, i);
        char fld[64];
        snprintf(fld, sizeof fld, "messages[%zu]", i);
        if (!json_is_object(msg)) return bad(r, err, fld, "expected an object, got %s", type_name(msg));
        json_t *role = json_object_get(msg, "role");
        bool ok = false;
        for (int k = 0; k < 5 && json_is_string(role); k++) ok |= !strcmp(json_string_value(role), roles[k]);
        if (!ok) {
            snprintf(fld, sizeof fld, "messages[%zu].role", i);
            return bad(r, err, fld, "expected one of system, developer, user, assistant, tool");
        }
        json_t *out = json_deep_copy(msg);
        json_array_append_new(r->messages, out);
        json_t *content = json_object_get(msg, "content");
        snprintf(fld, sizeof fld, "messages[%zu].content", i);
        if (!content || json_is_null(content)) {
            if (strcmp(json_string_value(role), "assistant"))
                return bad(r, err, fld, "required for role %s", json_string_value(role));
            /* a call-only turn keeps null (DeepSeek's template renders calls only then) */
            json_object_set_new(out, "content", json_array_size(json_object_get(msg, "tool_calls")) ? json_null()
                                                                                                 : json_string(""));
        } else if (json_is_array(content)) {
            /* Text parts are concatenated; other modalities are not supported by this server. */
            size_t total = 0;
            for (size_t j = 0; j < json_array_size(content); j++) {
                json_t *part = json_array_get(content, j);
                json_t *ty = json_object_get(part, "type"), *tx = json_object_get(part, "text");
                if (!json_is_string(ty) || strcmp(json_string_value(ty), "text") || !json_is_string(tx))
                    return bad(r, err, fld, "part %zu: only {\"type\":\"text\",\"text\":...} parts are supported", j);
                total += json_string_length(tx);
            }
            char *buf = malloc(total + 1), *p = buf;
            if (!buf) return bad(r, err, fld, "out of memory");
            for (size_t j = 0; j < json_array_size(content); j++) {
                json_t *tx = json_object_get(json_array_get(content, j), "text");
                memcpy(p, json_string_value(tx), json_string_length(tx));
                p += json_string_length(tx);
            }
            *p = 0;
            json_object_set_new(out, "content", json_stringn(buf, total));
            free(buf);
        } else if (!json_is_string(content)) {
            return bad(r, err, fld, "expected a string or an array of text parts, got %s", type_name(content));
        }
    }
    /* llama-server's field: false renders the messages without the assistant header (e.g. to
     * continue the last message) */
    r->add_generation_prompt = true;
    if (get_bool(r, o, "add_generation_prompt", &r->add_generation_prompt, err)) return -1;
    json_t *tools = field(o, "tools"), *kw = field(o, "chat_template_kwargs");
    if (tools && !json_is_array(tools)) return bad(r, err, "tools", "expected an array, got %s", type_name(tools));
    if (kw && !json_is_object(kw)) return bad(r, err, "chat_template_kwargs", "expected an object, got %s", type_name(kw));
    if (tools || kw) {
        r->template_extra = kw ? json_deep_copy(kw) : json_object();
        if (tools) json_object_set(r->template_extra, "tools", tools);
    }
    return 0;
}

/* ==== Common OpenAI fields ==== */
static int parse_openai(srv_request *r, json_t *o, int vocab, mx_error *err) {
    long long x;
    bool has;
    if (get_int(r, o, "n", 1, SRV_MAX_CHOICES, &x, &has, err)) return -1;
    r->n_choices = has ? (int)x : 1;
    if (get_int(r, o, "max_tokens", 1, 1 << 24, &x, &has, err)) return -1;
    if (has) r->max_tokens = (int)x;
    if (get_int(r, o, "max_completion_tokens", 1, 1 << 24, &x, &has, err)) return -1;
    if (has) r->max_tokens = (int)x;
    if (get_num(r, o, "temperature", 0, 2, &r->sampling.temperature, err)) return -1;
    if (get_num(r, o, "top_p", 0, 1, &r->sampling.top_p, err)) return -1;
    if (get_num(r, o, "presence_penalty", -2, 2, &r->sampling.presence_penalty, err)) return -1;
    if (get_num(r, o, "frequency_penalty", -2, 2, &r->sampling.frequency_penalty, err)) return -1;
    /* llama-server extensions accepted on the OpenAI routes too. */
    if (get_int(r, o, "top_k", 0, 1 << 24, &x, &has, err)) return -1;
    if (has) r->sampling.top_k = (int)x;
    if (get_num(r, o, "min_p", 0, 1, &r->sampling.min_p, err)) return -1;
    if (get_positive(r, o, "repeat_penalty", 100, &r->sampling.repeat_penalty, err)) return -1;
    if (get_bool(r, o, "ignore_eos", &r->sampling.ignore_eos, err)) return -1;
    if (get_seed(r, o, err)) return -1;
    if (parse_stop(r, o, 4, err)) return -1;
    if (parse_logit_bias(r, o, vocab, false, err)) return -1;
    if (get_bool(r, o, "stream", &r->stream, err)) return -1;
    json_t *so = field(o, "stream_options");
    if (so) {
        if (!json_is_object(so)) return bad(r, err, "stream_options", "expected an object, got %s", type_name(so));
        if (!r->stream) return bad(r, err, "stream_options", "only allowed when stream is true");
        if (get_bool(r, so, "include_usage", &r->include_usage, err)) return -1;
    }
    json_t *u = field(o, "user");
    if (u && !json_is_string(u)) return bad(r, err, "user", "expected a string, got %s", type_name(u));
    if (u) snprintf(r->user, sizeof r->user, "%s", json_string_value(u));
    return 0;
}

/* ==== Entry ==== */
void srv_json_error_msg(const json_error_t *je, char *buf, size_t cap) {
    /* jansson's words for U+0000 name its own flag: a client needs to know what is refused */
    if (strstr(je->text, "\\u0000"))
        snprintf(buf, cap, "line %d column %d: a string holds U+0000 (\\u0000), which request strings cannot "
                 "hold", je->line, je->column);
    else
        snprintf(buf, cap, "invalid JSON at line %d column %d: %s", je->line, je->column, je->text);
}

int srv_request_parse(srv_request *r, srv_api api, const char *body, size_t len,
                      const srv_config *d, int vocab, mx_error *err) {
    memset(r, 0, sizeof *r);
    r->api = api;
    r->max_tokens = d->n_predict;
    r->completion_logprobs = -1;
    srv_sampling *s = &r->sampling;
    s->temperature = d->temperature;
    s->top_p = d->top_p;
    s->top_k = d->top_k;
    s->min_p = d->min_p;
    s->repeat_penalty = d->repeat_penalty;
    s->repeat_last_n = d->repeat_last_n;
    s->presence_penalty = d->presence_penalty;
    s->frequency_penalty = d->frequency_penalty;
    if (d->seed >= 0) { s->seed = (uint64_t)d->seed; s->has_seed = true; }

    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        char m[300];
        srv_json_error_msg(&je, m, sizeof m);
        return bad(r, err, "body", "%s", m);
    }
    int rc = -1;
    if (!json_is_object(o)) { bad(r, err, "body", "expected a JSON object, got %s", type_name(o)); goto out; }
    json_t *model = field(o, "model");
    if (model && !json_is_string(model)) { bad(r, err, "model", "expected a string, got %s", type_name(model)); goto out; }
    if (model) snprintf(r->model, sizeof r->model, "%s", json_string_value(model));

    long long x;
    bool has;
    if (api == SRV_API_CHAT) {
        if (parse_messages(r, o, err) || parse_openai(r, o, vocab, err) || srv_chat_parse_fields(r, o, err)) goto out;
        bool lp = false;
        if (get_bool(r, o, "logprobs", &lp, err)) goto out;
        if (get_int(r, o, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &x, &has, err)) goto out;
        if (has && !lp) { bad(r, err, "top_logprobs", "requires logprobs to be true"); goto out; }
        s->logprobs = lp;
        s->top_logprobs = has ? (int)x : 0;
    } else if (api == SRV_API_COMPLETIONS) {
        if (parse_prompt(r, o, vocab, err) || parse_openai(r, o, vocab, err)) goto out;
        if (get_int(r, o, "logprobs", 0, 5, &x, &has, err)) goto out;
        if (has) { r->completion_logprobs = (int)x; s->logprobs = true; s->top_logprobs = (int)x; }
        bool echo = false;
        if (get_bool(r, o, "echo", &echo, err)) goto out;
        if (echo) { bad(r, err, "echo", "echo = true is not supported"); goto out; }
        if (field(o, "suffix")) { bad(r, err, "suffix", "insertion (suffix) is not supported"); goto out; }
        if (get_int(r, o, "best_of", 1, SRV_MAX_CHOICES, &x, &has, err)) goto out;
        if (has && x != r->n_choices) {
            bad(r, err, "best_of", "best_of must equal n (%d): ranking candidates by log-probability is not "
                "supported", r->n_choices);
            goto out;
        }
        if (r->prompt_list && json_array_size(r->prompt_list) * (size_t)r->n_choices > SRV_MAX_CHOICES) {
            bad(r, err, "n", "%zu prompts x n = %d gives %zu choices; at most %d", json_array_size(r->prompt_list),
                r->n_choices, json_array_size(r->prompt_list) * (size_t)r->n_choices, SRV_MAX_CHOICES);
            goto out;
        }
    } else { /* llama-server /completion */
        if (parse_prompt(r, o, vocab, err)) goto out;
        if (get_int(r, o, "n_predict", -1, 1 << 24, &x, &has, err)) goto out;
        if (has) r->max_tokens = (int)x;
        if (get_num(r, o, "temperature", 0, 100, &s->temperature, err)) goto out;
        if (get_num(r, o, "top_p", 0, 1, &s->top_p, err)) goto out;
        if (get_int(r, o, "top_k", 0, 1 << 24, &x, &has, err)) goto out;
        if (has) s->top_k = (int)x;
        if (get_num(r, o, "min_p", 0, 1, &s->min_p, err)) goto out;
        if (get_num(r, o, "presence_penalty", -2, 2, &s->presence_penalty, err)) goto out;
        if (get_num(r, o, "frequency_penalty", -2, 2, &s->frequency_penalty, err)) goto out;
        if (get_positive(r, o, "repeat_penalty", 100, &s->repeat_penalty, err)) goto out;
        if (get_int(r, o, "repeat_last_n", -1, 1 << 24, &x, &has, err)) goto out;
        if (has) s->repeat_last_n = (int)x;
        if (get_seed(r, o, err)) goto out;
        if (get_int(r, o, "n_probs", 0, SRV_MAX_TOP_LOGPROBS, &x, &has, err)) goto out;
        if (has && x > 0) { s->logprobs = true; s->top_logprobs = (int)x; }
        if (get_bool(r, o, "ignore_eos", &s->ignore_eos, err)) goto out;
        if (get_bool(r, o, "stream", &r->stream, err)) goto out;
        if (parse_stop(r, o, SRV_MAX_STOPS, err)) goto out;
        if (parse_logit_bias(r, o, vocab, true, err)) goto out;
        bool cache_prompt = true; /* prefix reuse is automatic; the field is accepted as a hint */
        if (get_bool(r, o, "cache_prompt", &cache_prompt, err)) goto out;
    }
    /* response_format / json_schema / grammar on every route (srv_structured.c) */
    if (srv_request_parse_structured(r, o, err)) goto out;
    rc = 0;
out:
    json_decref(o);
    return rc;
}

int srv_request_copy_choice(srv_request *dst, const srv_request *src, mx_error *err) {
    *dst = *src;
    /* not a choice's own: its prompt comes as ids, and text biases are already resolved */
    dst->prompt_text = NULL, dst->prompt_ids = NULL, dst->n_prompt_ids = 0;
    dst->prompt_mixed = dst->prompt_list = dst->messages = dst->template_extra = NULL;
    dst->bias_text = NULL, dst->bias_text_value = NULL, dst->n_bias_text = 0;
    dst->n_stops = 0;
    dst->chat = srv_chat_opts_ref(src->chat);
    dst->sampling.logit_bias = NULL;
    grammar_retain(dst->grammar); /* each choice holds its reference */
    const int nb = src->sampling.n_logit_bias;
    if (nb > 0) {
        dst->sampling.logit_bias = malloc((size_t)nb * sizeof *dst->sampling.logit_bias);
        if (!dst->sampling.logit_bias) {
            dst->sampling.n_logit_bias = 0;
            return mx_fail(err, "out of memory");
        }
        memcpy(dst->sampling.logit_bias, src->sampling.logit_bias, (size_t)nb * sizeof *dst->sampling.logit_bias);
    }
    for (int i = 0; i < src->n_stops; i++) {
        if (!(dst->stops[i] = strdup(src->stops[i]))) return mx_fail(err, "out of memory");
        dst->n_stops = i + 1;
    }
    return 0;
}

void srv_request_free(srv_request *r) {
    free(r->prompt_text);
    free(r->prompt_ids);
    json_decref(r->prompt_mixed);
    json_decref(r->prompt_list);
    json_decref(r->messages);
    json_decref(r->template_extra);
    srv_chat_opts_unref(r->chat);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->sampling.logit_bias);
    for (int i = 0; i < r->n_bias_text; i++) free(r->bias_text[i]);
    free(r->bias_text);
    free(r->bias_text_value);
    grammar_release(r->grammar);
    memset(r, 0, sizeof *r);
}
